//! Everything kept about one device: its facts, its two rings, and the
//! latest readings with their health, as the sampler last left them.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use std::collections::VecDeque;

use crate::model::{DeviceInfo, ErrorKind, FastReading, OomEvent, SlowReading, Timestamp};

use super::columnar::{FigureSample, ProcessFigure, SlowRing, SlowSnapshot};
use super::peak::PeakTracker;
use super::points::{FastPoint, ProcessPoint, SlowPoint};
use super::probe::ProbeState;
use super::progress::SamplingProgress;
use super::query::{self, QueryError, WindowAnswer, WindowQuery};
use super::ring::{OutOfOrder, Ring, Snapshot};

/// How many samples each ring of a device keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    pub fast_capacity: usize,
    pub slow_capacity: usize,
    pub peak_window: Duration,
    /// Allocator OOM events kept per device (`ingest.max_oom_events`).
    pub oom_events: usize,
}

impl Sizing {
    /// Capacities that cover `retention` at the given intervals.
    pub fn for_retention(
        retention: Duration,
        fast_interval: Duration,
        slow_interval: Duration,
        peak_window: Duration,
    ) -> Self {
        Self {
            fast_capacity: samples_in(retention, fast_interval),
            slow_capacity: samples_in(retention, slow_interval),
            peak_window,
            oom_events: DEFAULT_OOM_EVENTS,
        }
    }

    /// Keeps the slow tier only as far back as `needed` when that is less
    /// than it covers now. Its points are process lists, most of the
    /// history's memory, and only the alert rules read them, over their
    /// own windows.
    pub fn with_slow_retention(mut self, needed: Duration, slow_interval: Duration) -> Self {
        self.slow_capacity = self.slow_capacity.min(samples_in(needed, slow_interval));
        self
    }
}

/// OOM events kept per device unless the wiring says otherwise.
pub const DEFAULT_OOM_EVENTS: usize = 64;

fn samples_in(retention: Duration, interval: Duration) -> usize {
    let interval_ns = interval.as_nanos().max(1);
    let count = retention.as_nanos().div_ceil(interval_ns).saturating_add(1);
    usize::try_from(count).unwrap_or(usize::MAX)
}

/// Why the latest read of a tier produced nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadFailure {
    /// The `kind` label it was counted under.
    pub kind: ErrorKind,
    pub message: String,
    /// Failures in a row, reset by the next success.
    pub consecutive: u32,
}

/// The newest state of a device. A tier whose latest read failed has no
/// reading here: its values are absent, never stale values shown as current.
#[derive(Clone, Debug, Default)]
pub struct LiveState {
    pub fast: Option<FastReading>,
    pub slow: Option<Arc<SlowReading>>,
    /// Processes the per-device cap left out of the latest slow reading.
    pub processes_dropped: usize,
    /// Largest `used` within the peak window, from sample timestamps.
    pub peak_used_bytes: Option<u64>,
    pub fast_failure: Option<ReadFailure>,
    pub slow_failure: Option<ReadFailure>,
    pub fast_samples: u64,
    pub slow_samples: u64,
}

impl LiveState {
    /// The device answered its latest fast-tier read.
    pub fn is_up(&self) -> bool {
        self.fast.is_some()
    }

    /// The device's latest fast-tier read failed. A device not read yet
    /// (just discovered, or its first call still within its deadline) is
    /// neither up nor lost: `device_lost` must not fire at every start on
    /// a host whose first sample comes after the first evaluation.
    pub fn is_lost(&self) -> bool {
        self.fast.is_none() && self.fast_failure.is_some()
    }

    /// The timestamp of the newest reading of either tier.
    pub fn newest_at(&self) -> Option<Timestamp> {
        let fast = self.fast.as_ref().map(|reading| reading.at);
        let slow = self.slow.as_ref().map(|reading| reading.at);
        fast.max(slow)
    }
}

pub struct DeviceHistory {
    info: DeviceInfo,
    fast: Ring<FastPoint>,
    slow: SlowRing,
    /// The process list stored last, shared by the next point when equal.
    last_processes: Mutex<Option<Arc<[ProcessPoint]>>>,
    live: Mutex<LiveState>,
    peak: Mutex<PeakTracker>,
    probe: Mutex<ProbeState>,
    progress: SamplingProgress,
    /// The newest OOM events, oldest first, at most `oom_capacity`, and how
    /// many were ever stored (the counter `/metrics` shows).
    ooms: Mutex<(VecDeque<Arc<OomEvent>>, u64)>,
    oom_capacity: usize,
}

impl DeviceHistory {
    pub fn new(info: DeviceInfo, sizing: Sizing) -> Self {
        Self {
            info,
            fast: Ring::new(sizing.fast_capacity),
            slow: SlowRing::new(sizing.slow_capacity),
            last_processes: Mutex::new(None),
            live: Mutex::new(LiveState::default()),
            peak: Mutex::new(PeakTracker::new(sizing.peak_window)),
            probe: Mutex::new(ProbeState::default()),
            progress: SamplingProgress::default(),
            ooms: Mutex::new((VecDeque::new(), 0)),
            oom_capacity: sizing.oom_events.max(1),
        }
    }

    /// Keeps an OOM event, dropping the oldest beyond the bound.
    pub fn record_oom(&self, event: OomEvent) -> Arc<OomEvent> {
        let event = Arc::new(event);
        let mut ooms = self.ooms.lock();
        while ooms.0.len() >= self.oom_capacity {
            ooms.0.pop_front();
        }
        ooms.0.push_back(event.clone());
        ooms.1 = ooms.1.saturating_add(1);
        event
    }

    /// The OOM events held, oldest first.
    pub fn oom_events(&self) -> Vec<Arc<OomEvent>> {
        self.ooms.lock().0.iter().cloned().collect()
    }

    /// The OOM events that arrived (source time) within `from..=to`.
    pub fn oom_events_between(&self, from: Timestamp, to: Timestamp) -> Vec<Arc<OomEvent>> {
        let ooms = self.ooms.lock();
        ooms.0
            .iter()
            .filter(|event| event.received_at >= from && event.received_at <= to)
            .cloned()
            .collect()
    }

    /// OOM events ever stored for this device.
    pub fn oom_total(&self) -> u64 {
        self.ooms.lock().1
    }

    /// Whether the sampler is keeping up with this device, in wall time.
    pub fn progress(&self) -> &SamplingProgress {
        &self.progress
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Stores a fast-tier reading. A reading older than the newest stored
    /// one is refused (the sampler counts it) and changes nothing.
    pub fn record_fast(&self, reading: FastReading) -> Result<(), OutOfOrder> {
        self.fast.push(FastPoint::from(&reading))?;
        let peak = {
            let mut tracker = self.peak.lock();
            match reading.memory {
                Some(memory) => tracker.observe(reading.at, memory.used_bytes),
                None => tracker.expire(reading.at),
            }
            tracker.peak()
        };
        let mut live = self.live.lock();
        live.fast = Some(reading);
        live.peak_used_bytes = peak;
        live.fast_failure = None;
        live.fast_samples = live.fast_samples.saturating_add(1);
        Ok(())
    }

    /// Stores a slow-tier reading whose process list was already capped;
    /// `processes_dropped` is how many the cap left out.
    pub fn record_slow(
        &self,
        reading: SlowReading,
        processes_dropped: usize,
    ) -> Result<(), OutOfOrder> {
        let point = {
            let mut last = self.last_processes.lock();
            let point = SlowPoint::sharing(&reading, last.as_ref(), processes_dropped > 0);
            last.clone_from(&point.shared_processes().cloned());
            point
        };
        self.slow.push(point)?;
        let mut live = self.live.lock();
        live.slow = Some(Arc::new(reading));
        live.processes_dropped = processes_dropped;
        live.slow_failure = None;
        live.slow_samples = live.slow_samples.saturating_add(1);
        Ok(())
    }

    /// The fast-tier read failed: its values become absent until the next
    /// success, and so does the peak (it would describe a device that no
    /// longer answers).
    pub fn record_fast_failure(&self, kind: ErrorKind, message: String) {
        self.peak.lock().clear();
        let mut live = self.live.lock();
        live.fast = None;
        live.peak_used_bytes = None;
        live.fast_failure = Some(next_failure(live.fast_failure.as_ref(), kind, message));
    }

    pub fn record_slow_failure(&self, kind: ErrorKind, message: String) {
        let mut live = self.live.lock();
        live.slow = None;
        live.processes_dropped = 0;
        live.slow_failure = Some(next_failure(live.slow_failure.as_ref(), kind, message));
    }

    /// Changes the device's probe state (the probe scheduler's only write)
    /// and returns what `change` does.
    pub fn update_probe<R>(&self, change: impl FnOnce(&mut ProbeState) -> R) -> R {
        change(&mut self.probe.lock())
    }

    /// A copy of the device's probe state.
    pub fn probe(&self) -> ProbeState {
        self.probe.lock().clone()
    }

    /// Reads part of the probe state without copying the rest (its
    /// messages and counters), for the per-pass readers.
    pub fn read_probe<R>(&self, read: impl FnOnce(&ProbeState) -> R) -> R {
        read(&self.probe.lock())
    }

    /// A copy of the live state; cheap (the process list is shared).
    pub fn live(&self) -> LiveState {
        self.live.lock().clone()
    }

    /// [`LiveState::newest_at`] without copying the live state.
    pub fn newest_at(&self) -> Option<Timestamp> {
        self.live.lock().newest_at()
    }

    pub fn fast_snapshot(&self) -> Snapshot<FastPoint> {
        self.fast.snapshot()
    }

    pub fn slow_snapshot(&self) -> SlowSnapshot {
        self.slow.snapshot()
    }

    /// Visits the slow-tier samples with `from <= at <= to`. The newest
    /// (not yet sealed into a chunk) are visited under the ring's lock,
    /// which holds the sampler's writes back meanwhile: the visitor must
    /// only copy out what it needs.
    pub fn visit_recent_slow(&self, from: Timestamp, to: Timestamp, visit: impl FnMut(&SlowPoint)) {
        self.slow.visit_recent(from, to, visit);
    }

    /// [`DeviceHistory::visit_recent_slow`] reading only `figures` of each
    /// process: what a reader of a long window that follows one or two
    /// figures uses, as the rest of a sealed chunk is skipped undecoded.
    pub fn visit_recent_slow_figures<const N: usize>(
        &self,
        from: Timestamp,
        to: Timestamp,
        figures: [ProcessFigure; N],
        visit: impl FnMut(&FigureSample<'_, N>),
    ) {
        self.slow.visit_recent_figures(from, to, figures, visit);
    }

    pub fn fast_len(&self) -> usize {
        self.fast.len()
    }

    pub fn slow_len(&self) -> usize {
        self.slow.len()
    }

    /// Runs a window query over the fast tier without blocking the sampler.
    pub fn query(&self, query: &WindowQuery) -> Result<WindowAnswer, QueryError> {
        query::run(self.fast.snapshot(), query)
    }
}

fn next_failure(previous: Option<&ReadFailure>, kind: ErrorKind, message: String) -> ReadFailure {
    let consecutive = previous.map_or(1, |failure| failure.consecutive.saturating_add(1));
    ReadFailure { kind, message, consecutive }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MemoryInfo;

    fn info() -> DeviceInfo {
        DeviceInfo {
            index: 0,
            uuid: "GPU-test".into(),
            name: "Test GPU".into(),
            pci_bus_id: None,
            driver_version: None,
            mig: None,
        }
    }

    fn reading(millis: i64, used: u64) -> FastReading {
        FastReading {
            at: Timestamp::from_unix_millis(millis),
            memory: Some(MemoryInfo {
                total_bytes: 1_000,
                reserved_bytes: Some(0),
                used_bytes: used,
                free_bytes: 1_000 - used,
            }),
            gpu_utilization: None,
            memory_bandwidth_utilization: None,
        }
    }

    fn sizing() -> Sizing {
        Sizing {
            fast_capacity: 100,
            slow_capacity: 10,
            peak_window: Duration::from_secs(10),
            oom_events: 4,
        }
    }

    /// What the daemon keeps of two consecutive samples of the same
    /// processes, one of which grew: a new stored list (the figures
    /// changed), but the names and identities are the previous sample's
    /// strings, not copies.
    #[test]
    fn consecutive_lists_differing_in_one_size_share_their_strings() {
        use crate::clock::ScaledClock;
        use crate::model::{ScenarioKind, SharedStr};
        use crate::source::simulator::{Simulator, SimulatorSpec};

        let origin = Timestamp::from_unix_millis(1_700_000_000_000);
        let spec = SimulatorSpec { scenario: ScenarioKind::SteadyInference, gpus: 2, seed: 3 };
        let simulator =
            Simulator::with_origin(spec, ScaledClock::starting_at(origin, 1.0), origin).unwrap();
        let history = DeviceHistory::new(info(), sizing());
        let first = simulator.slow_at(1, origin).unwrap();
        let mut second =
            simulator.slow_at(1, origin.saturating_add(Duration::from_secs(1))).unwrap();
        let grown = &mut second.processes.as_mut().unwrap()[0];
        grown.used_bytes = grown.used_bytes.map(|used| used + (1 << 20));

        history.record_slow(first, 0).unwrap();
        let stored_first = history.last_processes.lock().clone().unwrap();
        let live_first = history.live().slow.unwrap();
        history.record_slow(second, 0).unwrap();
        let stored_second = history.last_processes.lock().clone().unwrap();
        let live_second = history.live().slow.unwrap();

        assert!(!Arc::ptr_eq(&stored_first, &stored_second), "a size changed: a new list");
        let (before, after) =
            (live_first.processes.as_deref().unwrap(), live_second.processes.as_deref().unwrap());
        assert_eq!(before.len(), 2, "python3 and tritonserver");
        for (a, b) in before.iter().zip(after) {
            let (Some(x), Some(y)) = (&a.name, &b.name) else { panic!("{a:?} has a name") };
            assert_eq!(x, y);
            assert!(SharedStr::ptr_eq(x, y), "{x} stored twice");
        }
    }

    #[test]
    fn slow_retention_only_ever_shortens_the_slow_ring() {
        let hour = Sizing::for_retention(
            Duration::from_secs(3600),
            Duration::from_millis(250),
            Duration::from_secs(1),
            Duration::from_secs(10),
        );
        let shorter = hour.with_slow_retention(Duration::from_secs(1800), Duration::from_secs(1));
        assert_eq!((shorter.fast_capacity, shorter.slow_capacity), (hour.fast_capacity, 1_801));
        let longer = hour.with_slow_retention(Duration::from_secs(7200), Duration::from_secs(1));
        assert_eq!(longer, hour);
    }

    #[test]
    fn capacity_covers_the_retention() {
        let sizing = Sizing::for_retention(
            Duration::from_secs(3_600),
            Duration::from_millis(250),
            Duration::from_secs(1),
            Duration::from_secs(60),
        );
        assert_eq!(sizing.fast_capacity, 14_401);
        assert_eq!(sizing.slow_capacity, 3_601);
    }

    #[test]
    fn a_device_not_read_yet_is_not_lost_and_one_that_fails_is() {
        let device = DeviceHistory::new(info(), sizing());
        let live = device.live();
        assert!(!live.is_up() && !live.is_lost(), "neither before the first read");
        device.record_fast_failure(ErrorKind::Timeout, "late".into());
        assert!(device.live().is_lost());
        device.record_fast(reading(0, 500)).unwrap();
        assert!(!device.live().is_lost());
    }

    #[test]
    fn a_failure_makes_values_absent_and_counts_consecutive_failures() {
        let device = DeviceHistory::new(info(), sizing());
        device.record_fast(reading(0, 500)).unwrap();
        assert!(device.live().is_up());
        assert_eq!(device.live().peak_used_bytes, Some(500));

        device.record_fast_failure(ErrorKind::Timeout, "late".into());
        device.record_fast_failure(ErrorKind::Timeout, "late".into());
        let live = device.live();
        assert!(!live.is_up());
        assert_eq!(live.peak_used_bytes, None);
        assert_eq!(live.fast_failure.map(|f| f.consecutive), Some(2));
        assert_eq!(device.fast_len(), 1, "history keeps what was read");

        device.record_fast(reading(1_000, 100)).unwrap();
        let live = device.live();
        assert!(live.fast_failure.is_none());
        assert_eq!(live.peak_used_bytes, Some(100), "the peak restarts after an outage");
    }

    #[test]
    fn peak_covers_spikes_between_latest_readings() {
        let device = DeviceHistory::new(info(), sizing());
        device.record_fast(reading(0, 100)).unwrap();
        device.record_fast(reading(100, 900)).unwrap();
        device.record_fast(reading(200, 100)).unwrap();
        let live = device.live();
        assert_eq!(live.fast.and_then(|r| r.memory).map(|m| m.used_bytes), Some(100));
        assert_eq!(live.peak_used_bytes, Some(900));
    }

    #[test]
    fn out_of_order_reading_changes_nothing() {
        let device = DeviceHistory::new(info(), sizing());
        device.record_fast(reading(1_000, 100)).unwrap();
        assert!(device.record_fast(reading(500, 700)).is_err());
        let live = device.live();
        assert_eq!(live.fast.map(|r| r.at.unix_millis()), Some(1_000));
        assert_eq!(live.peak_used_bytes, Some(100));
    }
}
