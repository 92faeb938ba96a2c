//! How close a device is to running out of memory, as one level with the
//! reasons behind it.
//!
//! Owns: the pressure levels, their thresholds and the rules below.
//! Depends on nothing else in the crate: callers gather the evidence
//! (memory reading, `trend::exhaustion::seconds_to_full`, the analyzer's
//! counts of allocator retries and OOMs) into a [`PressureInput`]. Pure; no
//! I/O.
//!
//! The level is the most severe rule that fires (defaults shown):
//!
//! | level    | any of                                                         |
//! |----------|----------------------------------------------------------------|
//! | critical | an allocator OOM in the window; free < 2 % of total; time to exhaustion < 5 min |
//! | high     | an allocator retry in the window; free < 5 % of total; time to exhaustion < 30 min |
//! | elevated | used > 85 % of total; time to exhaustion < 2 h                 |
//! | ok       | none of the above                                              |
//!
//! Comparisons are strict (exactly 5 % free is not "below 5 %"). Unknown
//! evidence (`None`) fires no rule: an absent retry count is not zero
//! retries, but it is not a retry either. A total of 0 bytes makes the ratio
//! rules unanswerable, so only the other rules apply.

use std::time::Duration;

use serde::Serialize;

/// Pressure levels; the numeric value is `vramd_memory_pressure_level`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum PressureLevel {
    Ok = 0,
    Elevated = 1,
    High = 2,
    Critical = 3,
}

impl PressureLevel {
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The evidence about one device over one analysis window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PressureInput {
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// From a growing trend with a good fit; `None` when there is none.
    pub time_to_exhaustion_seconds: Option<f64>,
    /// Allocator retries across the device's processes in the window;
    /// `None` when no process reports allocator statistics.
    pub retries_in_window: Option<u64>,
    /// Allocator OOMs in the window; `None` as for retries.
    pub ooms_in_window: Option<u64>,
}

/// Where the levels start. Ratios are fractions of total memory.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PressureThresholds {
    /// Critical when free is below this share of total (default 0.02).
    pub critical_free_ratio: f64,
    /// High when free is below this share of total (default 0.05).
    pub high_free_ratio: f64,
    /// Elevated when used is above this share of total (default 0.85).
    pub elevated_used_ratio: f64,
    /// Critical when memory runs out sooner than this (default 5 min).
    pub critical_time_to_exhaustion: Duration,
    /// High when memory runs out sooner than this (default 30 min).
    pub high_time_to_exhaustion: Duration,
    /// Elevated when memory runs out sooner than this (default 2 h).
    pub elevated_time_to_exhaustion: Duration,
}

impl Default for PressureThresholds {
    fn default() -> Self {
        Self {
            critical_free_ratio: 0.02,
            high_free_ratio: 0.05,
            elevated_used_ratio: 0.85,
            critical_time_to_exhaustion: Duration::from_secs(5 * 60),
            high_time_to_exhaustion: Duration::from_secs(30 * 60),
            elevated_time_to_exhaustion: Duration::from_secs(2 * 3600),
        }
    }
}

/// The reasons a rule can give, stable so alerts and dashboards can match
/// on them. They name the threshold, not its value, since values are
/// configurable.
pub mod reason {
    pub const OOM_IN_WINDOW: &str = "allocator OOM in window";
    pub const FREE_BELOW_CRITICAL: &str = "free below critical share of total (default 2%)";
    pub const EXHAUSTION_BELOW_CRITICAL: &str =
        "time to exhaustion below critical horizon (default 5 min)";
    pub const RETRIES_IN_WINDOW: &str = "allocator retries in window (cache flushed to allocate)";
    pub const FREE_BELOW_HIGH: &str = "free below high share of total (default 5%)";
    pub const EXHAUSTION_BELOW_HIGH: &str =
        "time to exhaustion below high horizon (default 30 min)";
    pub const USED_ABOVE_ELEVATED: &str = "used above elevated share of total (default 85%)";
    pub const EXHAUSTION_BELOW_ELEVATED: &str =
        "time to exhaustion below elevated horizon (default 2 h)";
}

/// The verdict for one device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pressure {
    pub level: PressureLevel,
    /// Every rule that fired, most severe first; empty when `Ok`.
    pub reasons: Vec<&'static str>,
}

/// Applies the rules in the module table.
pub fn pressure(input: &PressureInput, thresholds: &PressureThresholds) -> Pressure {
    let total = input.total_bytes as f64;
    let free = input.free_bytes as f64;
    let known_total = input.total_bytes > 0;
    let free_below = |ratio: f64| known_total && free < ratio * total;
    let exhausts_within = |horizon: Duration| {
        input
            .time_to_exhaustion_seconds
            .is_some_and(|seconds| seconds.is_finite() && seconds < horizon.as_secs_f64())
    };
    let used_ratio = known_total.then(|| input.used_bytes as f64 / total);

    let rules: [(bool, PressureLevel, &'static str); 8] = [
        (
            input.ooms_in_window.is_some_and(|count| count > 0),
            PressureLevel::Critical,
            reason::OOM_IN_WINDOW,
        ),
        (
            free_below(thresholds.critical_free_ratio),
            PressureLevel::Critical,
            reason::FREE_BELOW_CRITICAL,
        ),
        (
            exhausts_within(thresholds.critical_time_to_exhaustion),
            PressureLevel::Critical,
            reason::EXHAUSTION_BELOW_CRITICAL,
        ),
        (
            input.retries_in_window.is_some_and(|count| count > 0),
            PressureLevel::High,
            reason::RETRIES_IN_WINDOW,
        ),
        (free_below(thresholds.high_free_ratio), PressureLevel::High, reason::FREE_BELOW_HIGH),
        (
            exhausts_within(thresholds.high_time_to_exhaustion),
            PressureLevel::High,
            reason::EXHAUSTION_BELOW_HIGH,
        ),
        (
            used_ratio.is_some_and(|ratio| ratio > thresholds.elevated_used_ratio),
            PressureLevel::Elevated,
            reason::USED_ABOVE_ELEVATED,
        ),
        (
            exhausts_within(thresholds.elevated_time_to_exhaustion),
            PressureLevel::Elevated,
            reason::EXHAUSTION_BELOW_ELEVATED,
        ),
    ];
    let mut level = PressureLevel::Ok;
    let mut reasons = Vec::new();
    // The table is ordered most severe first, so reasons come out that way.
    for (fired, rule_level, why) in rules {
        if fired {
            level = level.max(rule_level);
            reasons.push(why);
        }
    }
    Pressure { level, reasons }
}

#[cfg(test)]
mod tests;
