//! The built-in alert rules as data: their identities, what each measures,
//! on which side of its threshold it fires, and its default settings;
//! and [`Severity`], how urgent an alert is.
//!
//! One table ([`RuleId::spec`]) that configuration (defaults and
//! validation), the alert rules and the scenario suite's expectations
//! all read, so a rule's name, unit and direction are written once.
//! Depends on nothing else in the crate.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr};

/// How urgent an alert is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, IntoStaticStr, EnumString)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_severity)]
#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

fn unknown_severity(other: &str) -> String {
    format!("unknown severity `{other}`; expected info, warning or critical")
}

/// A built-in alert rule. Serialized as its name (`memory_high`), the
/// `rule` of its alerts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, strum::VariantArray)]
pub enum RuleId {
    MemoryHigh,
    ExhaustionForecast,
    LeakSuspected,
    ReservedGrowth,
    AllocatorFragmentationHigh,
    AllocatorRetries,
    AllocatorOom,
    DeviceLost,
    XidError,
    ProbeFreeMismatch,
    ProbeHeadroomLow,
}

/// What a rule's value, `threshold` and `clear` measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum RuleUnit {
    /// A fraction, above 0 and at most 1.
    Ratio,
    /// Seconds, above 0.
    Seconds,
    /// Bytes per second, at least 0.
    BytesPerSecond,
    /// Events (or 1 for "down"), at least 0.
    Count,
    /// Bytes, at least 0.
    Bytes,
}

/// Which side of `threshold` a rule fires on; `clear` is on the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Above,
    Below,
}

/// A rule's fixed facts and its default settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RuleSpec {
    /// What the rule's value is, for the summaries of its keys: "used /
    /// total memory".
    pub measures: &'static str,
    /// The rule's name: its configuration table (`alerts.<name>`) and the
    /// `rule` of its alerts.
    pub name: &'static str,
    pub unit: RuleUnit,
    pub direction: Direction,
    /// Default `threshold`, in `unit`.
    pub threshold: f64,
    /// Default `clear`, in `unit`.
    pub clear: f64,
    /// Default `for`.
    pub for_duration: Duration,
    /// Default `keep_firing_for`.
    pub keep_firing_for: Duration,
    /// Default `severity`.
    pub severity: Severity,
}

/// What every rule has, `[alerts.<rule>]`: the settings the alert rules
/// judge with. The doc comments are the keys' summaries, except where
/// `alerts` gives a rule's own (what its threshold measures).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RuleSettings {
    /// evaluate the rule
    pub enabled: bool,
    /// fires when the value crosses this (unit per rule)
    pub threshold: f64,
    /// resolves only when the value is back past this (hysteresis)
    pub clear: f64,
    /// how long the condition must hold before firing
    #[serde(rename = "for")]
    pub for_duration: Duration,
    /// how long a firing alert stays firing after its condition clears, in case it returns
    pub keep_firing_for: Duration,
    /// severity of the alert
    #[schemars(with = "String")]
    pub severity: Severity,
}

impl RuleSettings {
    /// A rule with its defaults from the rule table, enabled.
    pub fn of(id: RuleId) -> Self {
        let spec = id.spec();
        Self {
            enabled: true,
            threshold: spec.threshold,
            clear: spec.clear,
            for_duration: spec.for_duration,
            keep_firing_for: spec.keep_firing_for,
            severity: spec.severity,
        }
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// How long a firing leak alert (`leak_suspected`, `reserved_growth`)
/// outlives a lapse of its evidence. A leaking job that pauses to evaluate,
/// checkpoint or empty its cache frees memory for a few minutes; the leak
/// detector leaves such dips out, but the windows that judged the growth
/// can lose it until they see the floor rise again after the dip. Without
/// this every such dip is a resolved notification and then a new page for
/// the same leak. A leak that really stopped resolves this much later; a
/// process that exits resolves at once (its alert is no longer observed).
const LEAK_KEEP_FIRING_FOR: Duration = Duration::from_secs(600);

impl RuleSpec {
    /// The spec with `keep_firing_for` set.
    const fn keeping(self, keep_firing_for: Duration) -> Self {
        Self { keep_firing_for, ..self }
    }
}

const fn spec(
    (name, measures): (&'static str, &'static str),
    unit: RuleUnit,
    direction: Direction,
    (threshold, clear): (f64, f64),
    for_secs: u64,
    severity: Severity,
) -> RuleSpec {
    RuleSpec {
        name,
        measures,
        unit,
        direction,
        threshold,
        clear,
        for_duration: Duration::from_secs(for_secs),
        keep_firing_for: Duration::ZERO,
        severity,
    }
}

impl RuleId {
    /// Every rule, in configuration order (the declaration's).
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;

    /// The rule table.
    pub const fn spec(self) -> RuleSpec {
        use Direction::{Above, Below};
        use RuleUnit::{Bytes, BytesPerSecond, Count, Ratio, Seconds};
        use Severity::{Critical, Info, Warning};
        match self {
            RuleId::MemoryHigh => spec(
                ("memory_high", "used / total memory"),
                Ratio,
                Above,
                (0.92, 0.88),
                60,
                Warning,
            ),
            RuleId::ExhaustionForecast => spec(
                ("exhaustion_forecast", "the time until memory runs out, in seconds"),
                Seconds,
                Below,
                (1800.0, 2700.0),
                120,
                Warning,
            ),
            // 128 KiB/s (half the slowest leak of the corpus, so its slope
            // estimates clear it), cleared below 64 KiB/s; 1 min: the floor
            // test already demands minutes of evidence (docs/alerts.md).
            RuleId::LeakSuspected => spec(
                ("leak_suspected", "a process's steady growth, in bytes per second"),
                BytesPerSecond,
                Above,
                (131_072.0, 65_536.0),
                60,
                Warning,
            )
            .keeping(LEAK_KEEP_FIRING_FOR),
            // The leak detector's growth where no allocator statistics
            // speak and NVML's usage rose in a few large steps: a cache
            // following the largest batch so far looks the same, so it is
            // not called a leak. The leak's thresholds, one severity lower.
            RuleId::ReservedGrowth => spec(
                (
                    "reserved_growth",
                    "a process's growth in a few large steps with no allocator statistics, in bytes per second",
                ),
                BytesPerSecond,
                Above,
                (131_072.0, 65_536.0),
                60,
                Info,
            )
            .keeping(LEAK_KEEP_FIRING_FOR),
            RuleId::AllocatorFragmentationHigh => spec(
                ("allocator_fragmentation_high", "a process's inactive split / reserved memory"),
                Ratio,
                Above,
                (0.25, 0.15),
                300,
                Warning,
            ),
            // Counts within their window: any one fires at once.
            RuleId::AllocatorRetries => spec(
                ("allocator_retries", "a process's allocator retries within `window`"),
                Count,
                Above,
                (1.0, 0.0),
                0,
                Warning,
            ),
            RuleId::AllocatorOom => spec(
                ("allocator_oom", "a process's allocator out-of-memory errors within `window`"),
                Count,
                Above,
                (1.0, 0.0),
                0,
                Critical,
            ),
            // 1 while a device (or NVML) is down.
            RuleId::DeviceLost => spec(
                ("device_lost", "1 while a device stops answering or NVML is down, else 0"),
                Count,
                Above,
                (1.0, 0.0),
                0,
                Critical,
            ),
            RuleId::XidError => spec(
                ("xid_error", "a device's Xid errors within `window`"),
                Count,
                Above,
                (1.0, 0.0),
                0,
                Critical,
            ),
            // |NVML free − CUDA free|: 1 GiB, cleared at 512 MiB.
            RuleId::ProbeFreeMismatch => spec(
                ("probe_free_mismatch", "the difference of NVML and CUDA free memory, in bytes"),
                Bytes,
                Above,
                (GIB, GIB / 2.0),
                0,
                Warning,
            ),
            // Largest allocatable block, fires at or below the job size
            // (4 GiB), cleared at 5 GiB.
            RuleId::ProbeHeadroomLow => spec(
                ("probe_headroom_low", "the largest allocatable block, in bytes"),
                Bytes,
                Below,
                (4.0 * GIB, 5.0 * GIB),
                0,
                Warning,
            ),
        }
    }

    /// The rule that says the same of the same subject more strongly, if
    /// any: growth said as `reserved_growth` ("cache growth or a leak") is
    /// upgraded to `leak_suspected` once it reads as a leak. A firing alert
    /// of this rule is handed over, not dropped: it stays firing while its
    /// upgrade is pending and resolves in the evaluation the upgrade fires
    /// (`alerts::engine`), so the process never goes without an alert in
    /// between, nor has two at once.
    pub const fn upgraded_to(self) -> Option<RuleId> {
        match self {
            RuleId::ReservedGrowth => Some(RuleId::LeakSuspected),
            _ => None,
        }
    }

    /// The rule's name, as in [`RuleSpec::name`].
    pub const fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// The rule called `name`, if any.
    pub fn from_name(name: &str) -> Option<RuleId> {
        RuleId::ALL.iter().copied().find(|rule| rule.as_str() == name)
    }
}

impl std::fmt::Display for RuleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`: a width or alignment (`{:<30}`) applies to the name.
        f.pad(self.as_str())
    }
}

impl Serialize for RuleId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RuleId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        RuleId::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown rule `{name}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        for (index, &rule) in RuleId::ALL.iter().enumerate() {
            assert_eq!(RuleId::from_name(rule.as_str()), Some(rule));
            assert!(!RuleId::ALL[..index].iter().any(|other| other.as_str() == rule.as_str()));
        }
        assert_eq!(RuleId::from_name("memory_hgh"), None);
    }

    #[test]
    fn serializes_as_its_name() {
        for &rule in RuleId::ALL {
            let json = serde_json::to_string(&rule).expect("serializes");
            assert_eq!(json, format!("\"{}\"", rule.as_str()));
            assert_eq!(serde_json::from_str::<RuleId>(&json).expect("deserializes"), rule);
        }
        let error = serde_json::from_str::<RuleId>("\"memory_hgh\"").expect_err("unknown");
        assert!(error.to_string().contains("unknown rule `memory_hgh`"), "{error}");
        assert_eq!(format!("{:<13}|", RuleId::XidError), "xid_error    |");
    }

    #[test]
    fn default_clear_is_on_the_quiet_side_of_threshold() {
        for rule in RuleId::ALL {
            let spec = rule.spec();
            match spec.direction {
                Direction::Above => assert!(spec.clear <= spec.threshold, "{rule}"),
                Direction::Below => assert!(spec.clear >= spec.threshold, "{rule}"),
            }
        }
    }
}
