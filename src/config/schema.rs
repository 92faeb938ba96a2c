//! The machinery that lets each configuration key be written once.
//!
//! Owns: the `section!` and `rules!` macros and the units their entries
//! are written in. From one entry per key (field, key name, type, kind,
//! default, accepted bounds, summary) a section macro generates the typed
//! struct, its `Default`, its entries in the key catalogue, its reading and
//! its rendering, each value through its [`Kind`](super::field::Kind).
//! `sections` holds the entries. Depends on nothing; the macros expand in
//! `sections`.

use std::num::NonZeroUsize;
use std::time::Duration;

pub(super) const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
pub(super) const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
pub(super) const fn mins(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}
pub(super) const fn hours(n: u64) -> Duration {
    Duration::from_secs(n * 3600)
}
pub(super) const fn days(n: u64) -> Duration {
    Duration::from_secs(n * 86_400)
}
pub(super) const KIB: u64 = 1 << 10;
pub(super) const MIB: u64 = 1 << 20;
pub(super) const GIB: u64 = 1 << 30;
pub(super) const TIB: u64 = 1 << 40;

pub(super) const fn non_zero(value: usize) -> NonZeroUsize {
    match NonZeroUsize::new(value) {
        Some(value) => value,
        None => NonZeroUsize::MIN,
    }
}

/// A section: `$field "key": Type as Kind = default, accepts [=> note], "summary";`
/// per key, then optionally `+ field: Type` for a nested table read and
/// rendered by that type.
macro_rules! section {
    ($(#[$doc:meta])* $vis:vis $name:ident $section:literal {
        $($field:ident $key:literal: $ty:ty as $kind:ty = $default:expr, $accepts:expr
            $(=> $note:literal)?, $summary:literal;)*
        $(+ $nested:ident: $nested_ty:ident)?
    }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        $vis struct $name {
            $(#[doc = $summary] pub $field: $ty,)*
            $(pub $nested: $nested_ty,)?
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $($field: $default,)* $($nested: $nested_ty::default(),)? }
            }
        }

        impl $name {
            pub(super) const KEYS: &'static [KeySpec] = &[$(KeySpec {
                key: concat!($section, ".", $key),
                summary: $summary,
                accepts: $accepts,
                note: concat!("" $(, $note)?),
            },)*];

            pub(super) fn read(values: &Values) -> Result<Self, ConfigError> {
                Ok(Self {
                    $($field: <$kind as Kind>::read(concat!($section, ".", $key), values)?,)*
                    $($nested: $nested_ty::read(values)?,)?
                })
            }

            pub(super) fn entries(&self) -> Vec<(&'static str, Option<TomlValue>)> {
                [
                    vec![$((concat!($section, ".", $key), <$kind as Kind>::show(&self.$field)),)*],
                    $(self.$nested.entries(),)?
                ]
                .concat()
            }
        }
    };
}

/// The rule tables: per rule its field, its [`RuleId`](crate::model::RuleId),
/// the summaries of `enabled`, `threshold` (with its range), `clear` (with its
/// range) and `for`, then its own keys as in `section!`. Defaults come from
/// the rule table in `model`.
macro_rules! rules {
    ($($rule:ident $id:ident {
        $enabled:literal, $threshold:literal ($t_range:literal),
        $clear:literal ($c_range:literal), $for:literal;
        $($field:ident $key:literal: $ty:ty as $kind:ty = $default:expr, $accepts:expr,
            $summary:literal;)*
    })*) => {
        /// The built-in rules and their settings, `[alerts.<rule>]`.
        #[derive(Clone, Debug, PartialEq)]
        pub struct RulesConfig {
            $(pub $rule: RuleConfig, $(#[doc = $summary] pub $field: $ty,)*)*
            /// Not a key: twice `probe.interval`. A probe reading older than
            /// this (its device skipped or failing since) is not judged by the
            /// probe rules, so their alerts resolve instead of firing on stale
            /// numbers.
            pub probe_stale_after: Duration,
        }

        impl Default for RulesConfig {
            fn default() -> Self {
                Self {
                    $($rule: RuleConfig::of(RuleId::$id), $($field: $default,)*)*
                    probe_stale_after: ProbeConfig::default().interval.saturating_mul(2),
                }
            }
        }

        impl RulesConfig {
            pub(super) const KEYS: &'static [KeySpec] = &[$(
                rule_key!($rule, "enabled", $enabled, Words("true or false")),
                rule_key!($rule, "threshold", $threshold, Words($t_range)),
                rule_key!($rule, "clear", $clear, Words($c_range)),
                rule_key!($rule, "for", $for, Time(Duration::ZERO, hours(24))),
                rule_key!($rule, "severity", "severity of the alert", Words(SEVERITIES)),
                $(rule_key!($rule, $key, $summary, $accepts),)*
            )*];

            pub(super) fn read(values: &Values) -> Result<Self, ConfigError> {
                Ok(Self {
                    $($rule: RuleConfig::read(RuleId::$id, values)?,
                    $($field: <$kind as Kind>::read(
                        concat!("alerts.", stringify!($rule), ".", $key), values)?,)*)*
                    // Set from probe.interval by `validate`.
                    probe_stale_after: Duration::ZERO,
                })
            }

            pub(super) fn entries(&self) -> Vec<(&'static str, Option<TomlValue>)> {
                let float = |value: f64| Some(TomlValue::Float(value));
                vec![$(
                    (concat!("alerts.", stringify!($rule), ".enabled"),
                        <Bool as Kind>::show(&self.$rule.enabled)),
                    (concat!("alerts.", stringify!($rule), ".threshold"), float(self.$rule.threshold)),
                    (concat!("alerts.", stringify!($rule), ".clear"), float(self.$rule.clear)),
                    (concat!("alerts.", stringify!($rule), ".for"),
                        <Dur as Kind>::show(&self.$rule.for_duration)),
                    (concat!("alerts.", stringify!($rule), ".severity"),
                        <Sev as Kind>::show(&self.$rule.severity)),
                    $((concat!("alerts.", stringify!($rule), ".", $key),
                        <$kind as Kind>::show(&self.$field)),)*
                )*]
            }
        }
    };
}

macro_rules! rule_key {
    ($rule:ident, $key:literal, $summary:expr, $accepts:expr) => {
        KeySpec {
            key: concat!("alerts.", stringify!($rule), ".", $key),
            summary: $summary,
            accepts: $accepts,
            note: "",
        }
    };
}

pub(super) use {rule_key, rules, section};
