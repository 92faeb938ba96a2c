//! `[analysis]`: the analysis loop's interval and the windows and
//! re-estimation intervals of its costlier steps. Depends only on
//! `setting`.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setting::{Keys, hours, mins, ms, non_zero, secs};

/// `[analysis]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnalysisConfig {
    /// how often the analysis runs and the alert rules judge it, in source time
    pub evaluation_interval: Duration,
    /// window of the per-device memory growth estimate
    pub trend_window: Duration,
    /// least span of samples before a device's growth can count as sustained
    pub forecast_min_span: Duration,
    // 30 s: the shortest leak window is minutes long, so 30 s changes
    // little, and it keeps a fast leak's alert within the 5-minute target.
    /// how often every process is re-assessed for leaks, in source time
    pub leak_check_interval: Duration,
    // A 10-minute window moves little in 15 s, and this is the costliest
    // per-pass step.
    /// how often each device's memory growth trend is re-estimated, in source time
    pub trend_check_interval: Duration,
    /// Xid error totals remembered per device for the xid_error window; the oldest go first
    pub max_xid_history: NonZeroUsize,
    /// shortest window a leak is judged on; longer ones double up to alerts.leak_suspected.window
    pub leak_shortest_window: Duration,
    /// grace after a process's first sample before it is judged for leaks
    pub leak_warmup: Duration,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        Self {
            evaluation_interval: secs(5),
            trend_window: mins(10),
            forecast_min_span: secs(90),
            leak_check_interval: secs(30),
            trend_check_interval: secs(15),
            max_xid_history: non_zero(1_024),
            leak_shortest_window: mins(2),
            leak_warmup: mins(3),
        }
    }
}

impl AnalysisConfig {
    /// The keys that were `[alerts]` keys before `[analysis]` existed: the
    /// loader still reads them there, with a deprecation warning.
    pub const MOVED_FROM_ALERTS: [&'static str; 8] = [
        "evaluation_interval",
        "trend_window",
        "forecast_min_span",
        "leak_check_interval",
        "trend_check_interval",
        "max_xid_history",
        "leak_shortest_window",
        "leak_warmup",
    ];

    pub fn check(&self, keys: &mut Keys) {
        keys.duration("evaluation_interval", self.evaluation_interval, ms(100), mins(10));
        keys.duration("trend_window", self.trend_window, secs(10), hours(24));
        keys.duration("forecast_min_span", self.forecast_min_span, Duration::ZERO, hours(1));
        keys.duration("leak_check_interval", self.leak_check_interval, secs(1), mins(10));
        keys.duration("trend_check_interval", self.trend_check_interval, secs(1), mins(10));
        keys.count("max_xid_history", self.max_xid_history.get() as u64, 16, 65_536);
        keys.duration("leak_shortest_window", self.leak_shortest_window, secs(30), hours(24));
        keys.duration("leak_warmup", self.leak_warmup, Duration::ZERO, hours(1));
    }
}
