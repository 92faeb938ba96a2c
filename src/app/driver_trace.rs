//! Wiring, the driver trace: decides from `driver_trace.mode` and the
//! daemon's privileges whether it runs (before the source is built, so its
//! join is part of the one slow join), starts it off the runtime, and
//! exports its health whatever the decision.
//!
//! Part of `app`, the one module that knows the concrete types.

use std::sync::Arc;

use tracing::{info, warn};

use super::{AppError, Config};
use crate::driver_trace::{self, Decision, DriverBoard, DropReason, TraceHandle, TraceMode};
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
    let started = tokio::task::spawn_blocking(move || driver_trace::start(&settings, board))
        .await
        .map_err(|error| AppError::Startup(error.to_string()))?;
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
