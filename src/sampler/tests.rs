//! Sampler behaviour under paused tokio time (and, for the watchdog on its
//! own thread, real time), against a fake source whose
//! calls can be made to hang.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::history::{HistoryStore, Sizing};
use crate::model::{
    DeviceInfo, ErrorKind, FastReading, MemoryInfo, ProcessInfo, SlowReading, Tier, Timestamp,
};
use crate::source::{DeviceSource, SourceError};
use crate::telemetry::Telemetry;

/// Every device but `hung_index` (1 unless set) always answers; that one
/// answers only while `hang` is false, otherwise its calls block until
/// `hang` is cleared (bounded, so a broken test cannot hang the suite).
struct FakeSource {
    devices: u32,
    available: AtomicBool,
    hang: AtomicBool,
    lost: AtomicBool,
    fast_calls: [AtomicU64; 3],
    processes: usize,
    hung_index: u32,
    /// The slow tier's readings end at once, as a trace with no slow
    /// records does: no slow tier is left in the watchdog's care.
    slow_ended: bool,
}

impl FakeSource {
    fn new(devices: u32) -> Self {
        Self {
            devices,
            available: AtomicBool::new(true),
            hang: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            fast_calls: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            processes: 3,
            hung_index: 1,
            slow_ended: false,
        }
    }

    fn wait_while_hung(&self, index: u32) {
        if index != self.hung_index {
            return;
        }
        for _ in 0..10_000 {
            if !self.hang.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl DeviceSource for FakeSource {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        if !self.available.load(Ordering::SeqCst) {
            return Err(SourceError::Unavailable { reason: "no driver".into() });
        }
        Ok((0..self.devices)
            .map(|index| DeviceInfo {
                index,
                uuid: format!("GPU-{index}"),
                name: "Fake".into(),
                pci_bus_id: None,
                driver_version: None,
                mig: None,
            })
            .collect())
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        let calls = self.fast_calls.get(index as usize).map(|c| c.fetch_add(1, Ordering::SeqCst));
        self.wait_while_hung(index);
        if index == 1 && self.lost.load(Ordering::SeqCst) {
            return Err(SourceError::DeviceLost { index, reason: "fell off the bus".into() });
        }
        let at = Timestamp::from_unix_millis(calls.unwrap_or(0) as i64 * 250);
        Ok(FastReading {
            at,
            memory: Some(MemoryInfo {
                total_bytes: 100,
                reserved_bytes: Some(1),
                used_bytes: 9,
                free_bytes: 90,
            }),
            gpu_utilization: Some(0.5),
            memory_bandwidth_utilization: None,
        })
    }

    fn read_slow(&self, index: u32, _: usize) -> Result<SlowReading, SourceError> {
        if self.slow_ended {
            return Err(SourceError::TraceEnded { index, tier: crate::source::Tier::Slow });
        }
        self.wait_while_hung(index);
        let processes = (0..self.processes)
            .map(|i| ProcessInfo {
                pid: 100 + i as u32,
                name: Some("python3".into()),
                used_bytes: Some(i as u64),
                allocator: None,
                details: Default::default(),
            })
            .collect();
        Ok(SlowReading {
            allocations: None,
            at: Timestamp::from_unix_millis(0),
            processes: Some(processes),
            temperature_celsius: None,
            power_usage_watts: None,
            power_limit_watts: None,
            details: Default::default(),
            processes_left_out: 0,
        })
    }
}

fn settings() -> SamplerSettings {
    SamplerSettings {
        config: crate::sampler::SamplerConfig {
            fast_interval: Duration::from_millis(250),
            slow_interval: Duration::from_secs(1),
            call_timeout: Duration::from_millis(100),
            max_processes_per_device: crate::setting::non_zero(2),
            max_devices: crate::setting::non_zero(64),
            discovery_retry_max: Duration::from_secs(8),
            ..Default::default()
        },
        discovery_timeout: Duration::from_millis(100),
        speed: 1.0,
        runtime_ticks: true,
    }
}

struct Harness {
    source: Arc<FakeSource>,
    store: Arc<HistoryStore>,
    telemetry: Arc<Telemetry>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    fleet: Arc<crew::Fleet>,
}

fn start(source: FakeSource, settings: SamplerSettings) -> Harness {
    let source = Arc::new(source);
    let store = Arc::new(HistoryStore::new(Sizing {
        fast_capacity: 1_000,
        slow_capacity: 100,
        peak_window: Duration::from_secs(60),
        oom_events: 64,
    }));
    let telemetry = Arc::new(Telemetry::new("fake").unwrap());
    let cancel = CancellationToken::new();
    // `run`, keeping the fleet to count its threads.
    let context = Arc::new(Context {
        source: source.clone(),
        store: store.clone(),
        telemetry: telemetry.clone(),
        settings,
        cancel: cancel.clone(),
        origin: tokio::time::Instant::now(),
    });
    let fleet = crew::Fleet::start(&context);
    let task = tokio::spawn(sample(context, fleet.clone()));
    Harness { source, store, telemetry, cancel, task, fleet }
}

/// Lets spawned tasks and finished blocking calls make progress without
/// moving the paused clock.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_micros(500));
    }
}

async fn advance(by: Duration, times: usize) {
    for _ in 0..times {
        tokio::time::advance(by).await;
        settle().await;
    }
}

/// Starts the sampler on `source` with its hang switched on, and lets 5 s
/// of paused time pass (20 fast ticks at 4 Hz).
async fn start_hung_for_five_seconds(source: FakeSource) -> Harness {
    source.hang.store(true, Ordering::SeqCst);
    let harness = start(source, settings());
    settle().await;
    advance(Duration::from_millis(250), 20).await;
    harness
}

impl Harness {
    /// Cancels the sampler and checks that its task ends.
    async fn stop(&self) {
        self.cancel.cancel();
        settle().await;
        assert!(self.task.is_finished());
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_device_does_not_delay_another_and_its_call_is_not_repeated() {
    let harness = start_hung_for_five_seconds(FakeSource::new(2)).await;

    let devices = harness.store.devices();
    assert_eq!(devices.len(), 2);
    let healthy = devices[0].live();
    assert!(healthy.is_up());
    assert!(healthy.fast_samples >= 20, "device 0 sampled {} times", healthy.fast_samples);

    let hung = devices[1].live();
    assert!(!hung.is_up(), "a device whose call hangs has no current values");
    assert_eq!(hung.fast_failure.as_ref().map(|f| f.kind), Some(ErrorKind::StillRunning));
    assert_eq!(
        harness.source.fast_calls[1].load(Ordering::SeqCst),
        1,
        "the stuck call must not be started again while it runs"
    );
    assert!(harness.telemetry.error_count(ErrorKind::Timeout) >= 2, "fast and slow both timed out");
    assert!(harness.telemetry.error_count(ErrorKind::StillRunning) >= 18);
    assert_eq!(harness.telemetry.calls_stuck(), 2);
    assert!(harness.store.cycle_completed());

    harness.source.hang.store(false, Ordering::SeqCst);
    settle().await;
    advance(Duration::from_millis(250), 4).await;
    let recovered = devices[1].live();
    assert!(recovered.is_up(), "the device recovers once its driver answers");
    assert!(recovered.fast_failure.is_none());
    assert_eq!(harness.telemetry.calls_stuck(), 0);

    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn every_device_is_read_by_one_fast_and_one_slow_thread_at_each_tiers_rate() {
    let harness = start(FakeSource::new(3), settings());
    settle().await;
    advance(Duration::from_millis(250), 20).await;
    for device in harness.store.devices() {
        let live = device.live();
        assert!(live.fast_samples >= 20, "{} fast samples in 21 ticks", live.fast_samples);
        assert!(
            (5..=6).contains(&live.slow_samples),
            "{} slow samples in 6 ticks",
            live.slow_samples
        );
    }
    assert_eq!(harness.fleet.threads(Tier::Fast), 1);
    assert_eq!(harness.fleet.threads(Tier::Slow), 1, "three slow tiers, one thread");
    harness.stop().await;
    assert_eq!(harness.fleet.threads(Tier::Slow), 0);
}

#[tokio::test(start_paused = true)]
async fn a_hang_ahead_of_others_on_a_shared_thread_hands_them_off_within_an_interval() {
    // Device 0 is sampled first on the shared fast thread and on the
    // shared slow thread: its hang would hold up devices 1 and 2 on both
    // if they were not moved to fresh threads.
    let mut source = FakeSource::new(3);
    source.hung_index = 0;
    // 5 s at 4 Hz: 21 ticks, of which a hand-off after one interval costs
    // at most one.
    let harness = start_hung_for_five_seconds(source).await;

    let devices = harness.store.devices();
    for other in &devices[1..] {
        let live = other.live();
        assert!(live.is_up());
        assert!(live.fast_samples >= 19, "device sampled {} times in 21 ticks", live.fast_samples);
        // Slow ticks at 0 to 5 s: the first is held up for one hand-off
        // limit (a fast interval), none is lost.
        assert!(live.slow_samples >= 5, "{} slow samples in 6 ticks", live.slow_samples);
    }
    let hung = devices[0].live();
    assert!(!hung.is_up(), "stale at its deadline");
    assert_eq!(hung.fast_failure.as_ref().map(|f| f.kind), Some(ErrorKind::StillRunning));
    assert_eq!(harness.source.fast_calls[0].load(Ordering::SeqCst), 1, "never started twice");
    assert_eq!(harness.telemetry.calls_stuck(), 2, "its fast and slow calls are counted stuck");
    assert_eq!(harness.fleet.threads(Tier::Fast), 2, "one hand-off, not one per look");
    assert_eq!(harness.fleet.threads(Tier::Slow), 2, "the same on the slow thread");

    harness.source.hang.store(false, Ordering::SeqCst);
    settle().await;
    let before = [1, 2].map(|i| harness.source.fast_calls[i].load(Ordering::SeqCst));
    advance(Duration::from_millis(250), 4).await;
    let recovered = devices[0].live();
    assert!(recovered.is_up(), "the device resumes once its call returns");
    assert!(recovered.fast_failure.is_none());
    assert!(harness.source.fast_calls[0].load(Ordering::SeqCst) >= 4, "sampled at its rate again");
    for (i, calls) in [1, 2].into_iter().zip(before) {
        let now = harness.source.fast_calls[i].load(Ordering::SeqCst);
        assert!(now >= calls + 4, "device {i} keeps its rate after the recovery");
    }
    assert_eq!(harness.telemetry.calls_stuck(), 0);
    advance(Duration::from_millis(250), 4).await;
    assert_eq!(harness.fleet.threads(Tier::Slow), 1, "the slow reads share one thread again");
    assert!(devices[0].live().slow_failure.is_none(), "and device 0's slow tier reads again");

    harness.stop().await;
    assert_eq!(harness.fleet.threads(Tier::Slow), 0, "every slow thread ends at cancel");
}

#[tokio::test(start_paused = true)]
async fn a_stuck_call_is_counted_once_per_period_however_often_the_watchdog_looks() {
    // The watchdog looks every fast interval (250 ms) for the shared
    // thread; the stuck slow call (1 s period) must not be counted at each.
    let harness = start_hung_for_five_seconds(FakeSource::new(3)).await;

    let hung = harness.store.devices()[1].live();
    let count = |failure: Option<&crate::history::ReadFailure>| {
        failure.map(|failure| (failure.kind, failure.consecutive))
    };
    // Timed out at 0.1 s, then once a period: 1.1, 2.1, 3.1, 4.1 s.
    let slow = count(hung.slow_failure.as_ref());
    assert!(
        matches!(slow, Some((ErrorKind::StillRunning, 4..=6))),
        "slow tier counted {slow:?} in 5 s"
    );
    // 0.1 s, then every 250 ms: at most one a tick.
    let fast = count(hung.fast_failure.as_ref());
    assert!(matches!(fast, Some((ErrorKind::StillRunning, 17..=21))), "fast tier counted {fast:?}");

    harness.source.hang.store(false, Ordering::SeqCst);
    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_fast_call_is_stale_at_its_deadline_though_the_hand_off_limit_is_longer() {
    // The hand-off limit is one fast interval (1 s), ten call timeouts; no
    // slow tier is in the watchdog's care (their readings ended), so only
    // the fast side can bring its next look forward. A call that starts
    // just after a look with nothing in flight must still be judged at its
    // own deadline, not at the next hand-off look a second later.
    let mut source = FakeSource::new(2);
    source.hung_index = 0;
    source.slow_ended = true;
    let mut settings = settings();
    settings.config.fast_interval = Duration::from_secs(1);
    settings.config.slow_interval = Duration::from_secs(1);
    let settings = SamplerSettings { ..settings };
    let harness = start(source, settings);
    settle().await;
    // 0.5 s: the first tick answered and the slow tiers have ended.
    advance(Duration::from_millis(500), 1).await;
    let devices = harness.store.devices();
    assert!(devices[0].live().is_up());
    harness.source.hang.store(true, Ordering::SeqCst);
    // 1.0 s: device 0's second call hangs; its deadline is 1.1 s.
    advance(Duration::from_millis(500), 1).await;
    advance(Duration::from_millis(50), 3).await;
    let hung = devices[0].live();
    assert!(!hung.is_up(), "stale 150 ms into a call with a 100 ms deadline");
    assert!(hung.fast_failure.is_some());
    assert_eq!(harness.source.fast_calls[0].load(Ordering::SeqCst), 2, "never started twice");

    harness.source.hang.store(false, Ordering::SeqCst);
    harness.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_handed_off_device_rejoins_the_shared_thread_once_its_call_returns() {
    // Device 0 is sampled first on the shared fast thread; its call hangs
    // for 2 s, then returns (a driver stall, or a thread descheduled on a
    // busy host). Devices 1 and 2 move to a fresh thread meanwhile.
    let mut source = FakeSource::new(3);
    source.hung_index = 0;
    source.hang.store(true, Ordering::SeqCst);
    let harness = start(source, settings());
    settle().await;
    advance(Duration::from_millis(250), 8).await;
    assert_eq!(
        harness.fleet.threads(Tier::Fast),
        2,
        "the stuck call keeps its thread, the others share one"
    );

    harness.source.hang.store(false, Ordering::SeqCst);
    settle().await;
    advance(Duration::from_millis(250), 2).await;
    assert_eq!(
        harness.fleet.threads(Tier::Fast),
        1,
        "the device whose call returned is back on the shared thread"
    );

    let before = [0, 1, 2].map(|i| harness.source.fast_calls[i].load(Ordering::SeqCst));
    advance(Duration::from_millis(250), 8).await;
    for (i, calls) in [0, 1, 2].into_iter().zip(before) {
        let now = harness.source.fast_calls[i].load(Ordering::SeqCst);
        assert!(now >= calls + 7, "device {i}: {} calls in 8 ticks after the rejoin", now - calls);
    }
    let devices = harness.store.devices();
    assert!(devices.iter().all(|device| device.live().is_up()), "every device reads again");
    assert_eq!(harness.fleet.threads(Tier::Fast), 1);
    assert_eq!(harness.telemetry.calls_stuck(), 0);

    // A second hang after the rejoin is handed off again, and rejoins again.
    harness.source.hang.store(true, Ordering::SeqCst);
    advance(Duration::from_millis(250), 4).await;
    assert_eq!(harness.fleet.threads(Tier::Fast), 2);
    harness.source.hang.store(false, Ordering::SeqCst);
    settle().await;
    advance(Duration::from_millis(250), 2).await;
    assert_eq!(harness.fleet.threads(Tier::Fast), 1);

    harness.stop().await;
    assert_eq!(harness.fleet.threads(Tier::Fast), 0, "every fast thread ends at cancel");
}

#[tokio::test(start_paused = true)]
async fn processes_beyond_the_cap_are_counted_and_the_largest_kept() {
    let mut source = FakeSource::new(1);
    source.processes = 5;
    let harness = start(source, settings());
    settle().await;
    advance(Duration::from_millis(250), 1).await;
    let live = harness.store.devices()[0].live();
    let slow = live.slow.expect("a slow reading");
    let kept: Vec<u32> = slow.processes.iter().flatten().map(|p| p.pid).collect();
    assert_eq!(kept, vec![104, 103], "the two largest users are kept");
    assert_eq!(live.processes_dropped, 3);
    harness.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn an_unavailable_source_serves_ready_with_no_devices_then_recovers() {
    let source = FakeSource::new(1);
    source.available.store(false, Ordering::SeqCst);
    let harness = start(source, settings());
    settle().await;
    assert!(harness.store.cycle_completed(), "ready: the daemon can say the source is down");
    assert!(!harness.telemetry.source_up());
    assert!(harness.store.devices().is_empty());
    assert_eq!(harness.telemetry.error_count(ErrorKind::Unavailable), 1);

    harness.source.available.store(true, Ordering::SeqCst);
    advance(Duration::from_secs(1), 1).await;
    assert!(harness.telemetry.source_up());
    assert_eq!(harness.store.devices().len(), 1);
    harness.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn speed_scales_the_real_interval_but_not_the_sample_spacing() {
    let harness = start(FakeSource::new(1), SamplerSettings { speed: 10.0, ..settings() });
    settle().await;
    advance(Duration::from_millis(25), 40).await;
    let samples = harness.store.devices()[0].live().fast_samples;
    assert!(samples >= 40, "at 10x, one real second holds 40 fast samples, got {samples}");
    harness.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_lost_device_is_retried_with_backoff_and_recovers() {
    let source = FakeSource::new(2);
    source.lost.store(true, Ordering::SeqCst);
    let harness = start(source, settings());
    settle().await;
    // 10 s of 4 Hz ticks: without backoff, 41 calls.
    advance(Duration::from_millis(250), 40).await;
    let calls = harness.source.fast_calls[1].load(Ordering::SeqCst);
    assert!((3..=5).contains(&calls), "retries at 0, 1, 3, 7 s; got {calls} calls");
    let devices = harness.store.devices();
    assert!(!devices[1].live().is_up());
    assert_eq!(devices[1].live().fast_failure.map(|f| f.kind), Some(ErrorKind::DeviceLost));
    assert!(devices[0].live().fast_samples >= 40, "the healthy device is unaffected");

    harness.source.lost.store(false, Ordering::SeqCst);
    // The next retry is at most 8 s away.
    advance(Duration::from_millis(250), 36).await;
    assert!(devices[1].live().is_up(), "the device is read again once it answers");
    harness.cancel.cancel();
}

#[test]
fn cap_keeps_unknown_usage_last() {
    let mut reading = SlowReading {
        allocations: None,
        at: Timestamp::from_unix_millis(0),
        processes: Some(vec![
            ProcessInfo {
                pid: 1,
                name: None,
                used_bytes: None,
                allocator: None,
                details: Default::default(),
            },
            ProcessInfo {
                pid: 2,
                name: None,
                used_bytes: Some(5),
                allocator: None,
                details: Default::default(),
            },
            ProcessInfo {
                pid: 3,
                name: None,
                used_bytes: Some(7),
                allocator: None,
                details: Default::default(),
            },
        ]),
        temperature_celsius: None,
        power_usage_watts: None,
        power_limit_watts: None,
        details: Default::default(),
        processes_left_out: 0,
    };
    assert_eq!(reading.cap_processes(2), 1);
    let pids: Vec<u32> = reading.processes.iter().flatten().map(|p| p.pid).collect();
    assert_eq!(pids, vec![3, 2]);
}

/// Polls `done` every 5 ms of real time, at most `limit`; whether it held.
async fn real_wait(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = tokio::time::Instant::now();
    while started.elapsed() < limit {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_its_own_thread_the_watchdog_hands_off_at_the_limit_and_marks_stale_at_the_deadline() {
    // Real time, threads sleeping to their own ticks: the daemon's set-up.
    // Device 0 hangs first on the shared thread at 100 Hz; the hand-off
    // limit (50 ms) comes long before the deadline (3 s).
    let mut source = FakeSource::new(3);
    source.hung_index = 0;
    source.hang.store(true, Ordering::SeqCst);
    let mut settings = SamplerSettings { runtime_ticks: false, ..settings() };
    settings.config.fast_interval = Duration::from_millis(10);
    settings.config.call_timeout = Duration::from_secs(3);
    let harness = start(source, settings);
    let limit = Duration::from_secs(10);
    assert!(real_wait(limit, || harness.store.devices().len() == 3).await);
    let devices = harness.store.devices();
    assert!(
        real_wait(limit, || harness.fleet.threads(Tier::Fast) == 2).await,
        "the others are handed off"
    );
    let hung = devices[0].live();
    assert!(hung.fast_failure.is_none(), "handed off at the limit, before the call's deadline");
    let before = [1, 2].map(|i| harness.source.fast_calls[i].load(Ordering::SeqCst));
    assert!(
        real_wait(limit, || {
            [1, 2]
                .into_iter()
                .zip(before)
                .all(|(i, calls)| harness.source.fast_calls[i].load(Ordering::SeqCst) >= calls + 20)
        })
        .await,
        "devices 1 and 2 keep sampling while device 0's call hangs"
    );
    assert!(
        real_wait(limit, || devices[0].live().fast_failure.is_some()).await,
        "the watchdog marks the hung fast tier stale at its deadline"
    );
    assert_eq!(harness.source.fast_calls[0].load(Ordering::SeqCst), 1, "never started twice");
    assert!(harness.telemetry.error_count(ErrorKind::Timeout) >= 1);

    harness.source.hang.store(false, Ordering::SeqCst);
    assert!(
        real_wait(limit, || harness.fleet.threads(Tier::Fast) == 1 && devices[0].live().is_up())
            .await,
        "the call returned: its device is back on the shared thread and reads again"
    );
    harness.cancel.cancel();
    assert!(
        real_wait(limit, || harness.fleet.threads(Tier::Fast) == 0).await,
        "every fast thread ends"
    );
    assert!(real_wait(limit, || harness.task.is_finished()).await);
}
