//! Wiring, the driver trace: decides from `driver_trace.mode` and the
//! daemon's privileges whether it runs (before the source is built, so its
//! join is part of the one slow join), starts it off the runtime, and
//! exports its health whatever the decision.
//!
//! Part of `app`, the one module that knows the concrete types.

use std::sync::Arc;

use tracing::{info, warn};

use super::{AppError, Config};
use crate::api::reports::OomHook;
use crate::clock::wall_now;
use crate::driver_trace::{
    self, Decision, DriverBoard, DriverOom, DropReason, OomSink, TraceHandle, TraceMode,
};
use crate::history::HistoryStore;
use crate::ingest::OomIntake;
use crate::model::{DriverOomEvidence, OomEvent, ProcessHolding};
use crate::source::SourceSelection;
use crate::telemetry::{DriverTraceReading, Telemetry};

/// The board the slow join reads, when the trace is to run; `mode = "on"`
/// without the privilege fails start-up, naming what is missing.
/// With `auto`, a simulated or replayed host has no libcuda of its own to
/// trace, so the trace stays off there (`on` runs it whatever the source).
pub(super) fn prepare(config: &Config) -> Result<Option<Arc<DriverBoard>>, AppError> {
    let real_driver = config.selection() == SourceSelection::Driver;
    if config.driver_trace.mode == TraceMode::Auto && !real_driver {
        return Ok(None);
    }
    let privileges = ::driver_trace::privileges();
    match driver_trace::decide(config.driver_trace.mode, &privileges)? {
        Decision::Run => {
            Ok(Some(Arc::new(DriverBoard::new(config.driver_trace.max_processes.get()))))
        }
        Decision::Skip(reason) => {
            if let Some(reason) = reason {
                info!("{reason}");
            }
            Ok(None)
        }
    }
}

/// Loads the BPF programs and starts the trace's thread (off the runtime),
/// and exports `vramd_driver_trace_*`. A load that fails is fatal only with
/// `mode = "on"`; with `auto` the trace stays down (`vramd_driver_trace_up 0`).
pub(super) async fn start(
    config: &Config,
    board: Option<Arc<DriverBoard>>,
    telemetry: &Telemetry,
    ooms: OomTarget,
) -> Result<Option<TraceHandle>, AppError> {
    let reading = board.clone();
    telemetry.watch_driver_trace(Box::new(move || match &reading {
        None => DriverTraceReading::default(),
        Some(board) => DriverTraceReading {
            up: board.health.up(),
            libraries: board.health.libraries(),
            events: board.health.events(),
            dropped: DropReason::ALL
                .iter()
                .map(|reason| (reason.as_str(), board.health.dropped(*reason)))
                .collect(),
        },
    }))?;
    let Some(board) = board else { return Ok(None) };
    let settings = config.driver_trace.clone();
    let sink = ooms.sink(board.clone());
    // Loading BPF programs is kernel work that should take milliseconds; a
    // kernel that does not answer must not hold start-up (and sampling)
    // back for ever: past the deadline the trace is treated as failing to
    // start, its thread left to finish or not.
    let loading = tokio::task::spawn_blocking(move || driver_trace::start(&settings, board, sink));
    let started = match tokio::time::timeout(START_DEADLINE, loading).await {
        Ok(joined) => joined.map_err(|error| AppError::Startup(error.to_string()))?,
        Err(_) => Err(driver_trace::StartError::TimedOut { after: START_DEADLINE }),
    };
    match started {
        Ok(handle) => {
            info!("driver trace on: probing libcuda in the processes NVML lists");
            Ok(Some(handle))
        }
        Err(error) if config.driver_trace.mode == TraceMode::On => Err(error.into()),
        Err(error) => {
            warn!(error = %error, "driver trace off (driver_trace.mode = \"auto\")");
            Ok(None)
        }
    }
}

/// Longest the tracer's start (loading and attaching its BPF programs) may
/// take before vramd goes on without it.
const START_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Where an out-of-memory failure the process did not retry goes: an OOM
/// event on the device the process is attributed to, numbered with the
/// events workloads post, so `allocator_oom` fires for it like for theirs.
pub(super) struct OomTarget {
    pub store: Arc<HistoryStore>,
    pub ids: Arc<OomIntake>,
    /// Writes the event into the recording, when `source.record` is set.
    pub recorder: Option<OomHook>,
}

/// The `hostname` of an OOM event the driver trace raised (no reporter
/// sent it).
pub const DRIVER_TRACE_REPORTER: &str = "driver-trace";

impl OomTarget {
    fn sink(self, board: Arc<DriverBoard>) -> OomSink {
        Box::new(move |oom: DriverOom| {
            let Some(index) = board.device_of(oom.pid, oom.device) else { return };
            let devices = self.store.devices();
            let Some(device) = devices.iter().find(|device| device.info().index == index) else {
                return;
            };
            let live = device.live();
            let processes = live.slow.as_deref().and_then(|slow| slow.processes.as_deref());
            // A process whose reporter speaks posts its own, richer event.
            let reported = processes
                .into_iter()
                .flatten()
                .any(|process| process.pid == oom.pid && process.allocator.is_some());
            if reported {
                return;
            }
            let others = processes
                .into_iter()
                .flatten()
                .filter(|process| process.pid != oom.pid)
                .map(|process| ProcessHolding {
                    pid: process.pid,
                    used_bytes: process.used_bytes,
                    driver_held_bytes: process.details.driver.as_ref().map(|d| d.allocated_bytes),
                })
                .collect();
            let at = wall_now();
            let event = OomEvent {
                id: self.ids.next_id(),
                uuid: device.info().uuid.to_string(),
                index,
                reporter_pid: oom.pid,
                hostname: DRIVER_TRACE_REPORTER.to_owned(),
                pid: Some(oom.pid),
                at,
                received_at: live.newest_at().unwrap_or(at),
                requested_bytes: oom.requested_bytes,
                device_free_bytes: live
                    .fast
                    .as_ref()
                    .and_then(|fast| fast.memory)
                    .map(|memory| memory.free_bytes),
                largest_free_block_bytes: None,
                stats: None,
                snapshot: None,
                snapshot_path: None,
                driver: Some(DriverOomEvidence { held_bytes: oom.held_bytes, others }),
            };
            info!(
                pid = oom.pid,
                requested_bytes = oom.requested_bytes,
                held_bytes = oom.held_bytes,
                "driver trace: an allocation ran out of memory and was not retried"
            );
            let stored = device.record_oom(event);
            if let Some(recorder) = &self.recorder {
                recorder(index, &stored);
            }
        })
    }
}
