//! Sampler behaviour under paused tokio time (and, for the watchdog on its
//! own thread, real time), against a fake source whose calls can be made
//! to hang: the harness here, hangs and hand-offs in `hand_off`, what a
//! reading does (cap, source down, speed, a lost device) in `reading`.

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

mod hand_off;
mod reading;

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
        Ok(SlowReading::listing(Timestamp::from_unix_millis(0), Some(processes)))
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
