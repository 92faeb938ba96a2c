//! The two tiers, fast and slow: everything that differs between them,
//! decided once, when a device's tier task starts ([`Fast`] or [`Slow`]),
//! so the rest of sampling (`tier`, `worker`, `crew`) is one code path for
//! both.
//!
//! Owns: each tier's interval and jitter, which source call it makes, and
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
