//! `[alerts]`: how long alerts are kept, and one table per rule,
//! `[alerts.<rule>]`, with what every rule has (`model::RuleSettings`:
//! defaults from the rule table) and the rule's own keys. Depends on
//! `setting` and `model`.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{Direction, RuleId, RuleSettings, RuleUnit};
use crate::setting::{ByteSize, Form, GIB, Keys, TIB, days, hours, mins, non_zero, secs};

/// `[alerts]`. Not `deny_unknown_fields`, which serde cannot combine with
/// the rules' `flatten`: the loader refuses unknown keys before serde reads.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
pub struct AlertsConfig {
    /// how long a resolved alert stays visible
    pub resolved_retention: Duration,
    /// most alerts kept (pending, firing, resolved); the oldest resolved go first
    pub max_alerts: NonZeroUsize,
    #[serde(flatten)]
    pub rules: RulesConfig,
}

/// Every rule's table; a rule's own keys sit beside its common ones.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
pub struct RulesConfig {
    pub memory_high: RuleSettings,
    pub exhaustion_forecast: ForecastRule,
    pub leak_suspected: WindowRule,
    /// judged on `leak_suspected.window`, by the same detector
    pub reserved_growth: RuleSettings,
    pub allocator_fragmentation_high: FragmentationRule,
    pub allocator_retries: WindowRule,
    pub allocator_oom: WindowRule,
    pub device_lost: RuleSettings,
    pub xid_error: WindowRule,
    pub probe_free_mismatch: RuleSettings,
    pub probe_headroom_low: RuleSettings,
}

/// A rule that counts or measures over a window of its own.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
pub struct WindowRule {
    #[serde(flatten)]
    pub rule: RuleSettings,
    /// window the rule's value is measured or counted over
    pub window: Duration,
}

/// `exhaustion_forecast`: how good a growth trend must be to forecast.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
pub struct ForecastRule {
    #[serde(flatten)]
    pub rule: RuleSettings,
    /// least goodness of fit of the growth trend for a forecast to count
    pub min_fit: f64,
}

/// `allocator_fragmentation_high`: which processes are big enough to judge.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
pub struct FragmentationRule {
    #[serde(flatten)]
    pub rule: RuleSettings,
    /// only processes whose allocator reserves at least this much are checked
    pub min_reserved: ByteSize,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        let of = RuleSettings::of;
        let window = |id, window| WindowRule { rule: of(id), window };
        Self {
            resolved_retention: mins(15),
            max_alerts: non_zero(1000),
            rules: RulesConfig {
                memory_high: of(RuleId::MemoryHigh),
                exhaustion_forecast: ForecastRule {
                    rule: of(RuleId::ExhaustionForecast),
                    min_fit: 0.8,
                },
                leak_suspected: window(RuleId::LeakSuspected, mins(30)),
                reserved_growth: of(RuleId::ReservedGrowth),
                allocator_fragmentation_high: FragmentationRule {
                    rule: of(RuleId::AllocatorFragmentationHigh),
                    min_reserved: ByteSize(2 * GIB),
                },
                allocator_retries: window(RuleId::AllocatorRetries, mins(5)),
                allocator_oom: window(RuleId::AllocatorOom, mins(15)),
                device_lost: of(RuleId::DeviceLost),
                xid_error: window(RuleId::XidError, mins(15)),
                probe_free_mismatch: of(RuleId::ProbeFreeMismatch),
                probe_headroom_low: of(RuleId::ProbeHeadroomLow),
            },
        }
    }
}

impl AlertsConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.duration("resolved_retention", self.resolved_retention, Duration::ZERO, days(7));
        keys.count("max_alerts", self.max_alerts.get() as u64, 1, 100_000);
        let rules = &self.rules;
        let window = |keys: &mut Keys, rule: &WindowRule, what: &str| {
            keys.duration("window", rule.window, secs(1), hours(24))
                .summary(format!("window the {what} are counted in"));
        };
        keys.table("memory_high", |keys| check_rule(keys, RuleId::MemoryHigh, &rules.memory_high));
        keys.table("exhaustion_forecast", |keys| {
            check_rule(keys, RuleId::ExhaustionForecast, &rules.exhaustion_forecast.rule);
            let fit = rules.exhaustion_forecast.min_fit;
            let valid = if (0.0..=1.0).contains(&fit) {
                Ok(())
            } else {
                Err("must be a number from 0 to 1".to_owned())
            };
            keys.number("min_fit", false, fit, "number, from 0 to 1", valid);
        });
        keys.table("leak_suspected", |keys| {
            check_rule(keys, RuleId::LeakSuspected, &rules.leak_suspected.rule);
            keys.duration("window", rules.leak_suspected.window, mins(1), hours(24))
                .summary("window the growth of a process is measured over".to_owned());
        });
        keys.table("reserved_growth", |keys| {
            check_rule(keys, RuleId::ReservedGrowth, &rules.reserved_growth);
        });
        keys.table("allocator_fragmentation_high", |keys| {
            let rule = &rules.allocator_fragmentation_high;
            check_rule(keys, RuleId::AllocatorFragmentationHigh, &rule.rule);
            keys.size("min_reserved", rule.min_reserved, 0, TIB);
        });
        keys.table("allocator_retries", |keys| {
            check_rule(keys, RuleId::AllocatorRetries, &rules.allocator_retries.rule);
            window(keys, &rules.allocator_retries, "retries");
        });
        keys.table("allocator_oom", |keys| {
            check_rule(keys, RuleId::AllocatorOom, &rules.allocator_oom.rule);
            window(keys, &rules.allocator_oom, "out-of-memory errors");
        });
        keys.table("device_lost", |keys| check_rule(keys, RuleId::DeviceLost, &rules.device_lost));
        keys.table("xid_error", |keys| {
            check_rule(keys, RuleId::XidError, &rules.xid_error.rule);
            window(keys, &rules.xid_error, "Xid errors");
        });
        keys.table("probe_free_mismatch", |keys| {
            check_rule(keys, RuleId::ProbeFreeMismatch, &rules.probe_free_mismatch);
        });
        keys.table("probe_headroom_low", |keys| {
            check_rule(keys, RuleId::ProbeHeadroomLow, &rules.probe_headroom_low);
        });
    }
}

impl RulesConfig {
    /// How far back the rules read the slow tier (process lists and their
    /// allocator counters): the longest of the leak, retries and OOM
    /// windows, plus a minute so the oldest sample of a window is kept.
    pub fn slow_history_needed(&self) -> Duration {
        self.leak_suspected
            .window
            .max(self.allocator_retries.window)
            .max(self.allocator_oom.window)
            .saturating_add(Duration::from_secs(60))
    }
}

/// The keys every rule has: `threshold` and `clear` in the rule's unit,
/// `clear` on the side of `threshold` the value returns to.
fn check_rule(keys: &mut Keys, id: RuleId, rule: &RuleSettings) {
    let spec = id.spec();
    let (fires, returns) = match spec.direction {
        Direction::Above => ("above", "below"),
        Direction::Below => ("below", "above"),
    };
    let what = spec.measures;
    keys.flag("enabled").summary(format!("evaluate the {} rule", spec.name));
    let (threshold, clear) = (rule.threshold, rule.clear);
    let (range, clear_range) = ranges(spec.unit, spec.direction);
    let sizes = spec.unit == RuleUnit::Bytes;
    keys.number("threshold", sizes, threshold, range, in_unit(spec.unit, threshold))
        .summary(format!("fires when {what} is {fires} this for `for`"));
    let side = match spec.direction {
        Direction::Above if clear > threshold => {
            Err(format!("must not exceed threshold {threshold} for a rule that fires above it"))
        }
        Direction::Below if clear < threshold => {
            Err(format!("must not be below threshold {threshold} for a rule that fires below it"))
        }
        _ => Ok(()),
    };
    keys.number("clear", sizes, clear, clear_range, in_unit(spec.unit, clear).and(side))
        .summary(format!("resolves only when {what} is back at or {returns} this"));
    keys.duration("for", rule.for_duration, Duration::ZERO, hours(24))
        .summary(format!("how long the {} condition must hold before firing", spec.name));
    keys.duration("keep_firing_for", rule.keep_firing_for, Duration::ZERO, hours(24)).summary(
        format!(
            "how long a firing {} alert stays firing after its condition clears, so a lapse \
             shorter than this is one alert, not a resolve and a new page",
            spec.name
        ),
    );
    keys.words("severity", Form::Choice(vec!["info", "warning", "critical"]), SEVERITIES);
}

/// Range of every rule's `severity`.
const SEVERITIES: &str = "\"info\", \"warning\" or \"critical\"";

/// The range texts of `threshold` and `clear`.
fn ranges(unit: RuleUnit, direction: Direction) -> (&'static str, &'static str) {
    let above = direction == Direction::Above;
    match unit {
        RuleUnit::Ratio => ("ratio, above 0, at most 1", "ratio, above 0, at most threshold"),
        RuleUnit::Seconds => ("seconds, above 0", "seconds, at least threshold"),
        RuleUnit::BytesPerSecond => {
            ("bytes per second, at least 0", "bytes per second, at least 0, at most threshold")
        }
        RuleUnit::Count => ("count, at least 0", "count, at least 0, at most threshold"),
        RuleUnit::Bytes if above => {
            ("bytes or a size, at least 0", "bytes or a size, at least 0, at most threshold")
        }
        RuleUnit::Bytes => ("bytes or a size, at least 0", "bytes or a size, at least threshold"),
    }
}

/// A rule's number in its unit.
fn in_unit(unit: RuleUnit, value: f64) -> Result<(), String> {
    if !value.is_finite() {
        return Err("must be a finite number".to_owned());
    }
    let (valid, range) = match unit {
        RuleUnit::Ratio => (value > 0.0 && value <= 1.0, "a ratio above 0 and at most 1"),
        RuleUnit::Seconds => (value > 0.0, "a number of seconds above 0"),
        RuleUnit::BytesPerSecond => (value >= 0.0, "a number of bytes per second, at least 0"),
        RuleUnit::Count => (value >= 0.0, "a count, at least 0"),
        RuleUnit::Bytes => {
            (value >= 0.0, "a number of bytes (or a size such as \"4GiB\"), at least 0")
        }
    };
    if valid { Ok(()) } else { Err(format!("must be {range}")) }
}
