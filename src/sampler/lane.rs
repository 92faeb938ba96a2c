//! The two tiers, fast and slow: everything that differs between them,
//! decided once, when a device's tier task starts ([`Fast`] or [`Slow`]),
//! so the rest of sampling (`tier`, `worker`, `crew`) is one code path for
//! both.
//!
//! Owns: each tier's interval, where its calls run (the fleet's shared fast
//! thread, or a thread of the slow tier's own with its deadline in the
//! watchdog's care), which source call it makes, and how a reading or a
//! failure of it goes into history (the slow tier applies the process cap).
//!
//! Must not depend on telemetry: timing, counting and logging a call stay
//! with `tier`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::history::DeviceHistory;
use crate::model::{ErrorKind, SlowReading, Tier};
use crate::source::DeviceSource;

use super::SamplerSettings;
use super::crew::{Fleet, WatchedDeadline};
use super::tier::TierShared;
use super::worker;

/// One tier's ways; a unit value, shared by every device.
pub(crate) trait Lane: Sync {
    fn tier(&self) -> Tier;

    /// Source time between the tier's ticks.
    fn interval(&self, settings: &SamplerSettings) -> Duration;

    /// Source time a tick may start after its grid point, at random (a
    /// tier on a thread of its own; a crew's shared thread keeps its grid).
    fn jitter(&self, _settings: &SamplerSettings) -> Duration {
        Duration::ZERO
    }

    /// Starts sampling `shared`'s device on this tier's thread.
    fn start<'a>(&self, shared: &'a Arc<TierShared>, fleet: &'a Arc<Fleet>) -> Started<'a>;

    /// One call, announced by `TierShared::call_started` at `started`:
    /// reads this tier from the source and hands the answer to the tier to
    /// store. True when the tier has nothing more to read (a replayed
    /// trace ended).
    fn sample(&self, shared: &TierShared, started: Instant) -> bool;

    /// Marks this tier of `device` as failed: its live reading is gone.
    fn record_failure(&self, device: &DeviceHistory, kind: ErrorKind, message: String);
}

/// A tier's thread, started.
pub(crate) struct Started<'a> {
    /// Resolves when the tier leaves its thread (its device stopped, or
    /// its trace ended).
    pub(crate) ended: oneshot::Receiver<()>,
    /// Keeps a slow tier's deadlines in the watchdog's care while it lives
    /// (a fast tier's call in flight is found through its crew).
    _watched: Option<WatchedDeadline<'a>>,
}

/// Memory and utilization, read often: every device's fast tier shares
/// the fleet's fast thread.
pub(crate) struct Fast;

/// Processes and health, read seldom: each device's slow tier on a thread
/// of its own.
pub(crate) struct Slow;

impl Lane for Fast {
    fn tier(&self) -> Tier {
        Tier::Fast
    }

    fn interval(&self, settings: &SamplerSettings) -> Duration {
        settings.fast_interval
    }

    fn start<'a>(&self, shared: &'a Arc<TierShared>, fleet: &'a Arc<Fleet>) -> Started<'a> {
        Started { ended: fleet.join(shared.clone()), _watched: None }
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

    fn jitter(&self, settings: &SamplerSettings) -> Duration {
        settings.slow_jitter
    }

    fn start<'a>(&self, shared: &'a Arc<TierShared>, fleet: &'a Arc<Fleet>) -> Started<'a> {
        // In the watchdog's care before its first call can start.
        let watched = fleet.watch_deadline(shared);
        Started { ended: worker::start(shared.clone()), _watched: Some(watched) }
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
