//! The alert rules' settings: `[alerts.<rule>]` for each rule of
//! `model`'s rule table.
//!
//! Owns: [`RuleConfig`] (what every rule has, with its defaults from the
//! rule table), [`RulesConfig`] (every rule's table, written once in the
//! `rules!` entries below, with each rule's own keys) and the check that a
//! rule's `clear` is on the side of `threshold` the value returns to.
//! Depends only on the config schema machinery and `model`.

use std::time::Duration;

use super::error::ConfigError;
use super::field::{Bool, Bytes, Dur, Field, Fraction, Kind, Sev};
use super::keys::Accepts::{Size, Time, Words};
use super::keys::KeySpec;
use super::render::TomlValue;
use super::schema::{GIB, TIB, hours, mins, rule_key, rules, secs};
use super::sections::ProbeConfig;
use super::walk::Values;
use crate::model::{Direction, RuleId, Severity};

/// Range of every rule's `severity`.
const SEVERITIES: &str = "\"info\", \"warning\" or \"critical\"";

/// What every rule has: `[alerts.<rule>]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleConfig {
    pub enabled: bool,
    /// Fires when the value crosses it (unit per rule).
    pub threshold: f64,
    /// Resolves only when the value is back past this (hysteresis).
    pub clear: f64,
    /// `for`: how long the condition must hold before firing.
    pub for_duration: Duration,
    pub severity: Severity,
}

impl RuleConfig {
    /// A rule with its defaults from the rule table, enabled.
    fn of(id: RuleId) -> Self {
        let spec = id.spec();
        let (threshold, clear) = (spec.threshold, spec.clear);
        Self {
            enabled: true,
            threshold,
            clear,
            for_duration: spec.for_duration,
            severity: spec.severity,
        }
    }
}

rules! {
    memory_high MemoryHigh {
        "evaluate the memory_high rule",
        "fires when used / total memory is above this for `for`" ("ratio, above 0, at most 1"),
        "resolves only when used / total memory is back at or below this"
            ("ratio, above 0, at most threshold"),
        "how long memory must stay above threshold";
    }
    exhaustion_forecast ExhaustionForecast {
        "evaluate the exhaustion_forecast rule",
        "fires when memory is forecast to run out in less than this many seconds"
            ("seconds, above 0"),
        "resolves only when the forecast is back at or above this many seconds"
            ("seconds, at least threshold"),
        "how long the forecast must stay below threshold";
        exhaustion_min_fit "min_fit": f64 as Fraction = 0.8, Words("0 to 1"),
            "least goodness of fit of the growth trend for a forecast to count";
    }
    leak_suspected LeakSuspected {
        "evaluate the leak_suspected rule",
        "fires when a process grows steadily faster than this" ("bytes per second, at least 0"),
        "resolves only when its growth is back at or below this"
            ("bytes per second, at least 0, at most threshold"),
        "how long the growth must stay above threshold";
        leak_window "window": Duration as Dur = mins(30), Time(mins(1), hours(24)),
            "window the growth of a process is measured over";
    }
    allocator_fragmentation_high AllocatorFragmentationHigh {
        "evaluate the allocator_fragmentation_high rule",
        "fires when a process's inactive split / reserved memory is above this"
            ("ratio, above 0, at most 1"),
        "resolves only when the ratio is back at or below this"
            ("ratio, above 0, at most threshold"),
        "how long the ratio must stay above threshold";
        fragmentation_min_reserved_bytes "min_reserved": u64 as Bytes = 2 * GIB, Size(0, TIB),
            "only processes whose allocator reserves at least this much are checked";
    }
    allocator_retries AllocatorRetries {
        "evaluate the allocator_retries rule",
        "fires when a process's allocator retries within `window` reach this"
            ("count, at least 0"),
        "resolves only when the retries within `window` are back at or below this"
            ("count, at least 0, at most threshold"),
        "how long the retries must stay at threshold";
        retries_window "window": Duration as Dur = mins(5), Time(secs(1), hours(24)),
            "window the retries are counted in";
    }
    allocator_oom AllocatorOom {
        "evaluate the allocator_oom rule",
        "fires when a process's allocator out-of-memory errors within `window` reach this"
            ("count, at least 0"),
        "resolves only when the errors within `window` are back at or below this"
            ("count, at least 0, at most threshold"),
        "how long the errors must stay at threshold";
        oom_window "window": Duration as Dur = mins(15), Time(secs(1), hours(24)),
            "window the out-of-memory errors are counted in";
    }
    device_lost DeviceLost {
        "evaluate the device_lost rule",
        "fires when a device stops answering or NVML is down (value 1, else 0)"
            ("count, at least 0"),
        "resolves only when the value is back at or below this"
            ("count, at least 0, at most threshold"),
        "how long the device must stay lost";
    }
    xid_error XidError {
        "evaluate the xid_error rule",
        "fires when a device's Xid errors within `window` reach this" ("count, at least 0"),
        "resolves only when the errors within `window` are back at or below this"
            ("count, at least 0, at most threshold"),
        "how long the errors must stay at threshold";
        xid_window "window": Duration as Dur = mins(15), Time(secs(1), hours(24)),
            "window the Xid errors are counted in";
    }
    probe_free_mismatch ProbeFreeMismatch {
        "evaluate the probe_free_mismatch rule",
        "fires when NVML and CUDA free memory differ by at least this many bytes"
            ("bytes or a size, at least 0"),
        "resolves only when the difference is back at or below this"
            ("bytes or a size, at least 0, at most threshold"),
        "how long the difference must stay at threshold (in source time)";
    }
    probe_headroom_low ProbeHeadroomLow {
        "evaluate the probe_headroom_low rule (needs probe.headroom)",
        "the job size: fires when the largest allocatable block is at or below this"
            ("bytes or a size, at least 0"),
        "resolves only when the largest allocatable block is back at or above this"
            ("bytes or a size, at least threshold"),
        "how long headroom must stay at threshold";
    }
}

impl RulesConfig {
    /// How far back the rules read the slow tier (process lists and their
    /// allocator counters): the longest of the leak, retries and OOM
    /// windows, plus a minute so the oldest sample of a window is kept.
    pub fn slow_history_needed(&self) -> Duration {
        self.leak_window
            .max(self.retries_window)
            .max(self.oom_window)
            .saturating_add(Duration::from_secs(60))
    }
}

impl RuleConfig {
    /// The keys every rule has, in `[alerts.<name>]`. `clear` must be on
    /// the side of `threshold` the value returns to when the condition ends.
    pub(super) fn read(id: RuleId, values: &Values) -> Result<Self, ConfigError> {
        let spec = id.spec();
        let key = |key: &str| format!("alerts.{}.{key}", spec.name);
        let enabled = Bool::read(&key("enabled"), values)?;
        let threshold = Field::required(&key("threshold"), values)?.threshold(spec.unit)?;
        let clear_key = key("clear");
        let clear_field = Field::required(&clear_key, values)?;
        let clear = clear_field.threshold(spec.unit)?;
        match spec.direction {
            Direction::Above if clear > threshold => {
                return Err(clear_field.invalid(format!(
                    "must not exceed threshold {threshold} for a rule that fires above it"
                )));
            }
            Direction::Below if clear < threshold => {
                return Err(clear_field.invalid(format!(
                    "must not be below threshold {threshold} for a rule that fires below it"
                )));
            }
            _ => {}
        }
        Ok(RuleConfig {
            enabled,
            threshold,
            clear,
            for_duration: Dur::read(&key("for"), values)?,
            severity: Sev::read(&key("severity"), values)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::keys::is_table;

    #[test]
    fn every_rule_of_the_rule_table_has_its_configuration_table() {
        for id in RuleId::ALL {
            assert!(is_table(&format!("alerts.{}", id.spec().name)), "{id:?}");
        }
        assert_eq!(RulesConfig::default().memory_high, RuleConfig::of(RuleId::MemoryHigh));
    }
}
