//! The machinery that lets each configuration key be written once.
//!
//! Owns: the `section!` and `alerts!` macros and the units their entries
//! are written in. An entry is one field with its doc comment (the key's
//! summary) and one line: `field "key": Type = default, bounds [=> note];`.
//! From it a section macro makes a serde struct (`deny_unknown_fields`;
//! serde reads and writes every field through the field type's
//! [`Setting`](super::field::Setting)), its `Default` (what
//! `config/vramd.toml` documents), its catalogue entries and the check of
//! each value against its bounds, the bounds being what the error messages
//! and the docs tests read. `sections` and `rules` hold the entries.
//! Depends on nothing; the macros expand in `sections` and `rules`.

use std::num::NonZeroUsize;
use std::time::Duration;

use super::error::ConfigError;
use super::field::Setting;
use super::keys::Accepts;
use super::walk::Values;

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

/// `key`'s value within its bounds, or the error naming it.
pub(super) fn within<T: Setting>(
    key: &str,
    value: &T,
    accepts: Accepts,
    values: &Values,
) -> Result<(), ConfigError> {
    value.within(accepts).map_err(|reason| values.invalid(key, value.show(), reason))
}

/// A section: per key, its summary as a doc comment, then
/// `field "key": Type = default, bounds [=> note];`.
macro_rules! section {
    ($(#[$doc:meta])* $vis:vis struct $name:ident $section:literal {
        $($(#[doc = $summary:literal])+
        $field:ident $key:literal: $ty:ty = $default:expr, $accepts:expr $(=> $note:literal)?;)*
    }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
        #[serde(deny_unknown_fields, default)]
        $vis struct $name {
            $($(#[doc = $summary])+
            #[serde(rename = $key, deserialize_with = "de", serialize_with = "ser")]
            pub $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $($field: $default,)* }
            }
        }

        impl $name {
            pub(super) const KEYS: &'static [KeySpec] = &[$(KeySpec {
                key: concat!($section, ".", $key),
                summary: concat!($($summary),+),
                accepts: $accepts,
                note: concat!("" $(, $note)?),
            },)*];

            pub(super) fn check(&self, values: &Values) -> Result<(), ConfigError> {
                $(within(concat!($section, ".", $key), &self.$field, $accepts, values)?;)*
                Ok(())
            }
        }
    };
}

/// `[alerts]`: its own keys as in `section!`, then per rule its field, its
/// [`RuleId`](crate::model::RuleId), the summaries of `enabled`,
/// `threshold` (with its range), `clear` (with its range) and `for`, then
/// the rule's own keys as in `section!`. Defaults come from the rule table
/// in `model`. A rule's table is `[alerts.<rule>]`; serde reads the file's
/// shape (`AlertsFile`, one struct per rule table) and converts it to
/// [`AlertsConfig`] with the rules' settings in [`RulesConfig`].
macro_rules! alerts {
    (keys {
        $($(#[doc = $a_summary:literal])+
        $a_field:ident $a_key:literal: $a_ty:ty = $a_default:expr, $a_accepts:expr;)*
    }
    rules {$($rule:ident $id:ident {
        $enabled:literal, $threshold:literal ($t_range:literal),
        $clear:literal ($c_range:literal), $for:literal;
        $($(#[doc = $summary:literal])+
        $field:ident $key:literal: $ty:ty = $default:expr, $accepts:expr;)*
    })*}) => {
        /// `[alerts]`: evaluation and the rule set.
        #[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
        #[serde(from = "AlertsFile", into = "AlertsFile")]
        pub struct AlertsConfig {
            $($(#[doc = $a_summary])+ pub $a_field: $a_ty,)*
            pub rules: RulesConfig,
        }

        /// The built-in rules and their settings, `[alerts.<rule>]`.
        #[derive(Clone, Debug, PartialEq)]
        pub struct RulesConfig {
            $(pub $rule: RuleSettings, $($(#[doc = $summary])+ pub $field: $ty,)*)*
            /// Not a key: twice `probe.interval`. A probe reading older than
            /// this (its device skipped or failing since) is not judged by the
            /// probe rules, so their alerts resolve instead of firing on stale
            /// numbers.
            pub probe_stale_after: Duration,
        }

        /// `[alerts]` as the file has it.
        #[derive(Clone, serde::Deserialize, serde::Serialize)]
        #[serde(deny_unknown_fields, default)]
        struct AlertsFile {
            $(#[serde(rename = $a_key, deserialize_with = "de", serialize_with = "ser")]
            $a_field: $a_ty,)*
            $($rule: table::$id,)*
        }

        /// One struct per rule table: the keys every rule has, then its own.
        #[allow(non_snake_case)]
        mod table {
            use super::*;
            $(
            #[derive(Clone, serde::Deserialize, serde::Serialize)]
            #[serde(deny_unknown_fields, default)]
            pub(super) struct $id {
                #[serde(deserialize_with = "de", serialize_with = "ser")]
                pub enabled: bool,
                #[serde(deserialize_with = "de_threshold", serialize_with = "ser")]
                pub threshold: f64,
                #[serde(deserialize_with = "de_threshold", serialize_with = "ser")]
                pub clear: f64,
                #[serde(rename = "for", deserialize_with = "de", serialize_with = "ser")]
                pub for_duration: Duration,
                #[serde(deserialize_with = "de", serialize_with = "ser")]
                pub severity: Severity,
                $(#[serde(rename = $key, deserialize_with = "de", serialize_with = "ser")]
                pub $field: $ty,)*
            }

            impl Default for $id {
                fn default() -> Self {
                    let RuleSettings { enabled, threshold, clear, for_duration, severity } =
                        RuleSettings::of(RuleId::$id);
                    Self { enabled, threshold, clear, for_duration, severity, $($field: $default,)* }
                }
            }
            )*
        }

        impl From<AlertsFile> for AlertsConfig {
            fn from(file: AlertsFile) -> Self {
                let rules = RulesConfig {
                    $($rule: RuleSettings {
                        enabled: file.$rule.enabled,
                        threshold: file.$rule.threshold,
                        clear: file.$rule.clear,
                        for_duration: file.$rule.for_duration,
                        severity: file.$rule.severity,
                    },
                    $($field: file.$rule.$field,)*)*
                    // Set from probe.interval by `validate`.
                    probe_stale_after: ProbeConfig::default().interval.saturating_mul(2),
                };
                Self { $($a_field: file.$a_field,)* rules }
            }
        }

        impl From<AlertsConfig> for AlertsFile {
            fn from(config: AlertsConfig) -> Self {
                let rules = config.rules;
                Self {
                    $($a_field: config.$a_field,)*
                    $($rule: table::$id {
                        enabled: rules.$rule.enabled,
                        threshold: rules.$rule.threshold,
                        clear: rules.$rule.clear,
                        for_duration: rules.$rule.for_duration,
                        severity: rules.$rule.severity,
                        $($field: rules.$field,)*
                    },)*
                }
            }
        }

        impl Default for AlertsFile {
            fn default() -> Self {
                Self { $($a_field: $a_default,)* $($rule: table::$id::default(),)* }
            }
        }

        impl Default for AlertsConfig {
            fn default() -> Self {
                AlertsFile::default().into()
            }
        }

        impl AlertsConfig {
            pub(super) const KEYS: &'static [KeySpec] = &[
                $(KeySpec {
                    key: concat!("alerts.", $a_key),
                    summary: concat!($($a_summary),+),
                    accepts: $a_accepts,
                    note: "",
                },)*
                $(
                rule_key!($rule, "enabled", $enabled, Words("true or false")),
                rule_key!($rule, "threshold", $threshold, Words($t_range)),
                rule_key!($rule, "clear", $clear, Words($c_range)),
                rule_key!($rule, "for", $for, RULE_FOR),
                rule_key!($rule, "severity", "severity of the alert", Words(SEVERITIES)),
                $(rule_key!($rule, $key, concat!($($summary),+), $accepts),)*
                )*
            ];

            pub(super) fn check(&self, values: &Values) -> Result<(), ConfigError> {
                $(within(concat!("alerts.", $a_key), &self.$a_field, $a_accepts, values)?;)*
                let rules = &self.rules;
                $(
                rules.$rule.check(RuleId::$id, values)?;
                $(within(concat!("alerts.", stringify!($rule), ".", $key), &rules.$field,
                    $accepts, values)?;)*
                )*
                Ok(())
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

pub(super) use {alerts, rule_key, section};
