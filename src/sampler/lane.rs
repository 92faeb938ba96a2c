//! The two tiers, fast and slow: everything that differs between them,
//! decided once, when a device's tier task starts ([`Fast`] or [`Slow`]),
//! so the rest of sampling (`tier`, `worker`, `crew`) is one code path for
//! both.
//!
//! Owns: each tier's interval and jitter (in real time too), which source
//! call it makes, and
//! how a reading or a failure of it goes into history (the slow tier
//! applies the process cap). Both run on their squad's shared thread
//! (`crew`).
//!
//! Must not depend on telemetry: timing, counting and logging a call stay
//! with `tier`.

use std::time::Duration;

use tokio::time::Instant;

use crate::history::DeviceHistory;
use crate::model::{ErrorKind, SlowReading, Tier};
use crate::source::DeviceSource;

use super::SamplerSettings;
use super::tier::TierShared;

/// One tier's ways; a unit value, shared by every device.
pub(crate) trait Lane: Sync {
    fn tier(&self) -> Tier;

    /// Source time between the tier's ticks.
    fn interval(&self, settings: &SamplerSettings) -> Duration;

    /// Real time between the tier's ticks.
    fn period(&self, settings: &SamplerSettings) -> Duration {
        settings.real(self.interval(settings))
    }

    /// Real time a tick may start after its grid point, at random: none
    /// unless the tier asks for it, and never more than one period.
    fn jitter(&self, settings: &SamplerSettings) -> Duration {
        match self.jitter_interval(settings) {
            // Not `real`'s floor: `0s` reads on the tick.
            jitter if jitter.is_zero() => Duration::ZERO,
            jitter => settings.real(jitter).min(self.period(settings)),
        }
    }

    /// Source time the tier's ticks are jittered by.
    fn jitter_interval(&self, _settings: &SamplerSettings) -> Duration {
        Duration::ZERO
    }

    /// One call, announced by `TierShared::call_started` at `started`:
    /// reads this tier from the source and hands the answer to the tier to
    /// store. True when the tier has nothing more to read (a replayed
    /// trace ended).
    fn sample(&self, shared: &TierShared, started: Instant) -> bool;

    /// Marks this tier of `device` as failed: its live reading is gone.
    fn record_failure(&self, device: &DeviceHistory, kind: ErrorKind, message: String);
}

/// Memory and utilization, read often: every device's fast tier shares
/// the fleet's fast thread.
pub(crate) struct Fast;

/// Processes and health, read seldom: every device's slow tier shares the
/// fleet's slow thread, read back to back at a tick jittered by
/// `sampler.slow_jitter`.
pub(crate) struct Slow;

impl Lane for Fast {
    fn tier(&self) -> Tier {
        Tier::Fast
    }

    fn interval(&self, settings: &SamplerSettings) -> Duration {
        settings.fast_interval
    }

    fn sample(&self, shared: &TierShared, started: Instant) -> bool {
        shared.read_and_store(
            started,
            |source: &dyn DeviceSource, index| source.read_fast(index),
            DeviceHistory::record_fast,
        )
    }

    fn record_failure(&self, device: &DeviceHistory, kind: ErrorKind, message: String) {
        device.record_fast_failure(kind, message);
    }
}

impl Lane for Slow {
    fn tier(&self) -> Tier {
        Tier::Slow
    }

    fn interval(&self, settings: &SamplerSettings) -> Duration {
        settings.slow_interval
    }

    fn jitter_interval(&self, settings: &SamplerSettings) -> Duration {
        settings.slow_jitter
    }

    fn sample(&self, shared: &TierShared, started: Instant) -> bool {
        let cap = shared.context.settings.max_processes_per_device.get();
        shared.read_and_store(
            started,
            |source: &dyn DeviceSource, index| source.read_slow(index, cap),
            |device, mut reading: SlowReading| {
                // The source has cut already; a source that did not is cut
                // here (an O(1) check otherwise).
                reading.cap_processes(cap);
                let left_out = reading.processes_left_out;
                device.record_slow(reading, left_out)
            },
        )
    }

    fn record_failure(&self, device: &DeviceHistory, kind: ErrorKind, message: String) {
        device.record_slow_failure(kind, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(slow_jitter: Duration) -> SamplerSettings {
        SamplerSettings {
            config: crate::sampler::SamplerConfig {
                slow_interval: Duration::from_secs(1),
                slow_jitter,
                ..Default::default()
            },
            discovery_timeout: Duration::from_millis(100),
            speed: 1.0,
            runtime_ticks: false,
        }
    }

    #[test]
    fn slow_ticks_are_jittered_up_to_one_period_and_not_at_all_at_zero() {
        assert_eq!(Slow.jitter(&settings(Duration::ZERO)), Duration::ZERO, "0s reads on the tick");
        let half = Duration::from_millis(500);
        assert_eq!(Slow.jitter(&settings(half)), half);
        assert_eq!(Slow.jitter(&settings(Duration::from_secs(5))), Duration::from_secs(1));
        assert_eq!(Fast.jitter(&settings(half)), Duration::ZERO, "the fast tier keeps its grid");
    }
}
