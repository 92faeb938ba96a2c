//! The alert rules' settings: `[alerts.<rule>]` for each rule of
//! `model`'s rule table.
//!
//! Owns: the check of each rule's [`RuleSettings`] (`model`'s: what every
//! rule has, with its defaults from the rule table), [`RulesConfig`] (every rule's table, written once in the
//! `rules!` entries below, with each rule's own keys) and the check that a
//! rule's `clear` is on the side of `threshold` the value returns to.
//! Depends only on the config schema machinery and `model`.

use std::time::Duration;

use super::error::ConfigError;
use super::field::{ByteSize, de, de_threshold, ser};
use super::keys::Accepts::{self, Int, Size, Time, Words};
use super::keys::KeySpec;
use super::schema::{GIB, TIB, alerts, days, hours, mins, ms, non_zero, rule_key, secs, within};
use super::sections::ProbeConfig;
use super::units::parse_size;
use super::walk::{Scalar, Values};
use crate::model::{Direction, RuleId, RuleSettings, RuleUnit, Severity};
use std::num::NonZeroUsize;

/// Range of every rule's `severity`.
const SEVERITIES: &str = "\"info\", \"warning\" or \"critical\"";
/// Range of every rule's `for`.
const RULE_FOR: Accepts = Time(Duration::ZERO, hours(24));

impl RuleSettings {
    /// `threshold` and `clear` in the rule's unit, and `clear` on the side
    /// of `threshold` the value returns to when the condition ends.
    fn check(&self, id: RuleId, values: &Values) -> Result<(), ConfigError> {
        let spec = id.spec();
        let key = |name: &str| format!("alerts.{}.{name}", spec.name);
        let invalid = |name: &str, value: f64, reason: String| {
            values.invalid(&key(name), Some(Scalar::Float(value)), reason)
        };
        for (name, value) in [("threshold", self.threshold), ("clear", self.clear)] {
            if let Err(reason) = in_unit(spec.unit, value, values.get(&key(name))) {
                return Err(invalid(name, value, reason));
            }
        }
        let (threshold, clear) = (self.threshold, self.clear);
        match spec.direction {
            Direction::Above if clear > threshold => Err(invalid(
                "clear",
                clear,
                format!("must not exceed threshold {threshold} for a rule that fires above it"),
            )),
            Direction::Below if clear < threshold => Err(invalid(
                "clear",
                clear,
                format!("must not be below threshold {threshold} for a rule that fires below it"),
            )),
            _ => within(&key("for"), &self.for_duration, RULE_FOR, values),
        }
    }
}

/// A rule's number in its unit; only a bytes rule takes a size (`"4GiB"`).
fn in_unit(unit: RuleUnit, value: f64, written: Option<&Scalar>) -> Result<(), String> {
    if let Some(Scalar::Str(text)) = written
        && text.trim().parse::<f64>().is_err()
    {
        match unit {
            RuleUnit::Bytes => parse_size(text).map_err(|error| error.to_string())?,
            _ => return Err("expected a number".to_owned()),
        };
    }
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

alerts! {
    keys {
        /// how often the alert rules are evaluated, in source time
        evaluation_interval "evaluation_interval": Duration = secs(5), Time(ms(100), mins(10));
        /// how long a resolved alert stays visible
        resolved_retention "resolved_retention": Duration = mins(15), Time(Duration::ZERO, days(7));
        /// most alerts kept (pending, firing, resolved); the oldest resolved go first
        max_alerts "max_alerts": NonZeroUsize = non_zero(1000), Int(1, 100_000);
        /// window of the per-device memory growth estimate
        trend_window "trend_window": Duration = mins(10), Time(secs(10), hours(24));
        /// least span of samples before a device's growth can count as sustained
        forecast_min_span "forecast_min_span": Duration = secs(90), Time(Duration::ZERO, hours(1));
        /// how often every process is re-assessed for leaks, in source time
        leak_check_interval "leak_check_interval": Duration = secs(30), Time(secs(1), mins(10));
        /// how often each device's memory growth trend is re-estimated, in source time
        trend_check_interval "trend_check_interval": Duration = secs(15), Time(secs(1), mins(10));
        /// Xid error totals remembered per device for the xid_error window; the oldest go first
        max_xid_history "max_xid_history": NonZeroUsize = non_zero(1_024), Int(16, 65_536);
        /// shortest window a leak is judged on; longer ones double up to leak_suspected.window
        leak_shortest_window "leak_shortest_window": Duration = mins(2), Time(secs(30), hours(24));
        /// grace after a process's first sample before it is judged for leaks
        leak_warmup "leak_warmup": Duration = mins(3), Time(Duration::ZERO, hours(1));
    }
    rules {
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
        /// least goodness of fit of the growth trend for a forecast to count
        exhaustion_min_fit "min_fit": f64 = 0.8, Words("0 to 1");
    }
    leak_suspected LeakSuspected {
        "evaluate the leak_suspected rule",
        "fires when a process grows steadily faster than this" ("bytes per second, at least 0"),
        "resolves only when its growth is back at or below this"
            ("bytes per second, at least 0, at most threshold"),
        "how long the growth must stay above threshold";
        /// window the growth of a process is measured over
        leak_window "window": Duration = mins(30), Time(mins(1), hours(24));
    }
    allocator_fragmentation_high AllocatorFragmentationHigh {
        "evaluate the allocator_fragmentation_high rule",
        "fires when a process's inactive split / reserved memory is above this"
            ("ratio, above 0, at most 1"),
        "resolves only when the ratio is back at or below this"
            ("ratio, above 0, at most threshold"),
        "how long the ratio must stay above threshold";
        /// only processes whose allocator reserves at least this much are checked
        fragmentation_min_reserved_bytes "min_reserved": ByteSize = ByteSize(2 * GIB), Size(0, TIB);
    }
    allocator_retries AllocatorRetries {
        "evaluate the allocator_retries rule",
        "fires when a process's allocator retries within `window` reach this"
            ("count, at least 0"),
        "resolves only when the retries within `window` are back at or below this"
            ("count, at least 0, at most threshold"),
        "how long the retries must stay at threshold";
        /// window the retries are counted in
        retries_window "window": Duration = mins(5), Time(secs(1), hours(24));
    }
    allocator_oom AllocatorOom {
        "evaluate the allocator_oom rule",
        "fires when a process's allocator out-of-memory errors within `window` reach this"
            ("count, at least 0"),
        "resolves only when the errors within `window` are back at or below this"
            ("count, at least 0, at most threshold"),
        "how long the errors must stay at threshold";
        /// window the out-of-memory errors are counted in
        oom_window "window": Duration = mins(15), Time(secs(1), hours(24));
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
        /// window the Xid errors are counted in
        xid_window "window": Duration = mins(15), Time(secs(1), hours(24));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::keys::is_table;

    #[test]
    fn every_rule_of_the_rule_table_has_its_configuration_table() {
        for id in RuleId::ALL {
            assert!(is_table(&format!("alerts.{}", id.spec().name)), "{id:?}");
        }
        assert_eq!(AlertsConfig::default().rules.memory_high, RuleSettings::of(RuleId::MemoryHigh));
    }
}
