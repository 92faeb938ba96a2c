//! The probe scheduler against a fake prober, under paused tokio time:
//! the test moves the clock on in small steps and lets the blocking probe
//! calls finish between steps, so deadlines and backoff are exact and no
//! test waits for them in real time. Every wait is bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::history::{HistoryStore, ProbeAttempt, Sizing};
use crate::model::{DeviceInfo, FastReading, MemoryInfo, SlowDetails, SlowReading, Timestamp};

const GIB: u64 = 1 << 30;

/// Answers every probe at once, counting calls and the most that ever ran
/// at once; fails when `fail` is set; while `hang` is set, a probe does not
/// return (for at most 10 s of real time, so a broken test cannot hang the
/// suite).
#[derive(Default)]
struct FakeProber {
    calls: AtomicU64,
    running: AtomicU32,
    most_at_once: AtomicU32,
    fail: AtomicBool,
    hang: AtomicBool,
    probed: Mutex<Vec<String>>,
}

impl Prober for FakeProber {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn probe(
        &self,
        device: &DeviceInfo,
        _request: &ProbeRequest,
    ) -> Result<ProbeReading, ProbeFailure> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(running, Ordering::SeqCst);
        self.probed.lock().push(device.uuid.clone());
        for _ in 0..10_000 {
            if !self.hang.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(ProbeFailure::new(ProbeFailureKind::InitFailed, "cuInit failed: 100"));
        }
        Ok(ProbeReading {
            at: Timestamp::from_unix_millis(1_000),
            cuda_free_bytes: 10 * GIB,
            cuda_total_bytes: 80 * GIB,
            nvml_free_bytes: Some(10 * GIB),
            context_create_seconds: 0.2,
            context_bytes: Some(500 << 20),
            alloc_block_bytes: 64 << 20,
            alloc_latency_seconds: Some(1e-4),
            free_latency_seconds: Some(5e-5),
            alloc_samples: 5,
            headroom: None,
            duration_seconds: 0.3,
        })
    }
}

struct Gate(AtomicBool);

impl ProbeGate for Gate {
    fn unsafe_alert_firing(&self, _uuid: &str) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

fn settings() -> ProbeSettings {
    ProbeSettings {
        // 60 s of source time at 600× is 100 ms of real time.
        interval: Duration::from_secs(60),
        max_backoff: Duration::from_secs(3600),
        speed: 600.0,
        min_free_bytes: 2 * GIB,
        request: ProbeRequest {
            block_bytes: 64 << 20,
            samples: 5,
            margin_bytes: GIB,
            headroom_time_budget: None,
            timeout: Duration::from_millis(200),
            cuda_library: None,
            nvml_library: None,
        },
    }
}

/// A store with `free` bytes free on each device (in GiB) and, when given,
/// that compute mode.
fn store(free_gib: &[u64], mode: Option<ComputeMode>) -> Arc<HistoryStore> {
    let sizing = Sizing::for_retention(
        Duration::from_secs(60),
        Duration::from_secs(1),
        Duration::from_secs(1),
        Duration::from_secs(10),
    );
    let store = Arc::new(HistoryStore::new(sizing));
    let infos = (0..free_gib.len())
        .map(|index| DeviceInfo {
            index: index as u32,
            uuid: format!("GPU-{index}"),
            name: "fake".into(),
            pci_bus_id: None,
            driver_version: None,
            mig: None,
        })
        .collect();
    for (device, free) in store.set_devices(infos).iter().zip(free_gib) {
        let at = Timestamp::from_unix_millis(1_000);
        let memory = MemoryInfo {
            total_bytes: 80 * GIB,
            reserved_bytes: Some(0),
            used_bytes: (80 - free) * GIB,
            free_bytes: free * GIB,
        };
        let fast = FastReading {
            at,
            memory: Some(memory),
            gpu_utilization: None,
            memory_bandwidth_utilization: None,
        };
        device.record_fast(fast).unwrap();
        let details = SlowDetails { compute_mode: mode, ..SlowDetails::default() };
        let slow = SlowReading {
            allocations: None,
            at,
            processes: Some(Vec::new()),
            temperature_celsius: None,
            power_usage_watts: None,
            power_limit_watts: None,
            details,
            processes_left_out: 0,
        };
        device.record_slow(slow, 0).unwrap();
    }
    store.mark_cycle_completed();
    store
}

/// How far the paused clock moves per step: a tenth of a probe interval.
const STEP: Duration = Duration::from_millis(10);

/// Lets spawned tasks and finished blocking calls make progress without
/// moving the paused clock.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Runs the scheduler, moving the paused clock on by [`STEP`], until `done`
/// holds (at most 60 s of paused time), then stops it; returns the paused
/// time that took.
async fn run_until(
    prober: Arc<FakeProber>,
    store: Arc<HistoryStore>,
    gate: Arc<Gate>,
    settings: ProbeSettings,
    done: impl Fn() -> bool,
) -> Duration {
    let started = tokio::time::Instant::now();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(run(prober, store, gate, settings, cancel.clone()));
    settle().await;
    for _ in 0..6_000 {
        if done() {
            break;
        }
        tokio::time::advance(STEP).await;
        settle().await;
    }
    let took = started.elapsed();
    cancel.cancel();
    settle().await;
    assert!(task.is_finished(), "the scheduler did not stop when cancelled");
    assert!(done(), "the condition did not hold within 60 s of paused time");
    took
}

fn gate(firing: bool) -> Arc<Gate> {
    Arc::new(Gate(AtomicBool::new(firing)))
}

#[tokio::test(start_paused = true)]
async fn probe_scheduler_probes_every_device_one_at_a_time_and_records_readings() {
    let store = store(&[40, 40, 40], None);
    let prober = Arc::new(FakeProber::default());
    let watched = store.clone();
    run_until(prober.clone(), store.clone(), gate(false), settings(), move || {
        watched.devices().iter().all(|device| device.probe().runs >= 2)
    })
    .await;
    assert_eq!(prober.most_at_once.load(Ordering::SeqCst), 1, "two probes overlapped");
    for device in store.devices() {
        let state = device.probe();
        assert_eq!(state.latest.as_ref().map(|reading| reading.cuda_free_bytes), Some(10 * GIB));
        assert!(matches!(state.last_attempt, Some((_, ProbeAttempt::Succeeded))));
        assert_eq!(state.failures, [0; ProbeFailureKind::ALL.len()]);
    }
    let probed = prober.probed.lock().clone();
    assert_eq!(&probed[..3], ["GPU-0", "GPU-1", "GPU-2"]);
}

#[tokio::test(start_paused = true)]
async fn probe_scheduler_skips_devices_that_a_probe_could_hurt() {
    let prober = Arc::new(FakeProber::default());
    // Device 0 is short of free memory; device 1 has plenty.
    let low = store(&[1, 40], None);
    let watched = low.clone();
    run_until(prober.clone(), low.clone(), gate(false), settings(), move || {
        watched.devices()[1].probe().runs >= 1
            && watched.devices()[0].probe().skipped_for(ProbeSkipReason::LowFree) >= 1
    })
    .await;
    assert_eq!(low.devices()[0].probe().runs, 0);
    assert!(prober.probed.lock().iter().all(|uuid| uuid == "GPU-1"));

    for (mode, firing, reason) in [
        (Some(ComputeMode::ExclusiveProcess), false, ProbeSkipReason::ExclusiveProcess),
        (Some(ComputeMode::Prohibited), false, ProbeSkipReason::ExclusiveProcess),
        (Some(ComputeMode::Default), true, ProbeSkipReason::AlertFiring),
    ] {
        let prober = Arc::new(FakeProber::default());
        let guarded = store(&[40], mode);
        let watched = guarded.clone();
        run_until(prober.clone(), guarded.clone(), gate(firing), settings(), move || {
            watched.devices()[0].probe().skipped_for(reason) >= 2
        })
        .await;
        assert_eq!(prober.calls.load(Ordering::SeqCst), 0, "{reason:?}");
        let state = guarded.devices()[0].probe();
        assert_eq!(
            state.last_attempt.map(|(_, attempt)| attempt),
            Some(ProbeAttempt::Skipped { reason })
        );
    }
}

#[tokio::test(start_paused = true)]
async fn probe_scheduler_records_failures_by_kind_and_backs_off() {
    let store = store(&[40], None);
    let prober = Arc::new(FakeProber::default());
    prober.fail.store(true, Ordering::SeqCst);
    let watched = store.clone();
    let took = run_until(prober.clone(), store.clone(), gate(false), settings(), move || {
        watched.devices()[0].probe().runs >= 3
    })
    .await;
    let state = store.devices()[0].probe();
    assert_eq!(state.failures_of(ProbeFailureKind::InitFailed), state.runs);
    assert_eq!(u64::from(state.consecutive_failures), state.runs);
    assert!(state.latest.is_none());
    // Backing off: the second try waits 2 intervals, the third 4 more, so
    // three failures take 600 ms at 100 ms per interval (without backoff
    // they would take 200 ms).
    assert!(took >= Duration::from_millis(600), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn probe_scheduler_gives_up_on_a_hung_probe_and_never_starts_a_second() {
    let store = store(&[40, 40], None);
    let prober = Arc::new(FakeProber::default());
    prober.hang.store(true, Ordering::SeqCst);
    let watched = store.clone();
    // Given up on at the 200 ms timeout plus the 5 s reaping grace; then
    // two more seconds with the call still hung.
    let until = tokio::time::Instant::now() + Duration::from_millis(7_200);
    run_until(prober.clone(), store.clone(), gate(false), settings(), move || {
        watched.devices()[0].probe().failures_of(ProbeFailureKind::Timeout) == 1
            && tokio::time::Instant::now() >= until
    })
    .await;
    // While the hung call runs, device 1 is not probed.
    assert_eq!(prober.calls.load(Ordering::SeqCst), 1);
    assert_eq!(store.devices()[1].probe().runs, 0);
    prober.hang.store(false, Ordering::SeqCst);
}

#[tokio::test(start_paused = true)]
async fn probe_scheduler_probes_a_mig_gpu_through_its_mig_devices_only() {
    let store = store(&[40, 40], None);
    // Rebuild the list so device 1 is a MIG device of device 0.
    let mut infos: Vec<DeviceInfo> = store.devices().iter().map(|d| d.info().clone()).collect();
    infos[1].mig = Some(crate::model::MigInfo {
        parent_index: 0,
        parent_uuid: infos[0].uuid.clone(),
        slot: 0,
        profile: Some("3g.40gb".into()),
        gpu_instance_id: Some(1),
        compute_instance_id: Some(0),
    });
    let fresh = self::store(&[40, 40], None);
    let devices = fresh.set_devices(infos);
    for (device, old) in devices.iter().zip(store.devices()) {
        device.record_fast(old.live().fast.unwrap()).unwrap();
    }
    fresh.mark_cycle_completed();
    let prober = Arc::new(FakeProber::default());
    let watched = fresh.clone();
    run_until(prober.clone(), fresh.clone(), gate(false), settings(), move || {
        watched.devices()[1].probe().runs >= 2
    })
    .await;
    assert!(prober.probed.lock().iter().all(|uuid| uuid == "GPU-1"), "{:?}", prober.probed.lock());
    let parent = fresh.devices()[0].probe();
    assert!(!parent.scheduled && parent.runs == 0);
}

#[test]
fn probe_retry_delay_doubles_per_failure_up_to_the_ceiling() {
    let settings = settings();
    let minutes = |n: u64| Duration::from_secs(60 * n);
    assert_eq!(settings.retry_delay(0), minutes(1));
    assert_eq!(settings.retry_delay(1), minutes(2));
    assert_eq!(settings.retry_delay(3), minutes(8));
    assert_eq!(settings.retry_delay(6), minutes(60));
    assert_eq!(settings.retry_delay(u32::MAX), minutes(60));
    let quarter = ProbeSettings { interval: minutes(20), ..settings.clone() };
    assert_eq!(quarter.skip_delay(), minutes(5));
    assert_eq!(settings.skip_delay(), minutes(1));
}
