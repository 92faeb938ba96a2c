//! Wiring, the device source: builds the source the configuration names
//! (driver, simulator or replayed trace, optionally recorded) with what
//! comes with it: the one join of allocator reports and pods onto slow
//! readings, simulated allocator reports and replayed OOM events.
//!
//! Part of `app`, the one module that knows the concrete types.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::AppError;
use super::Config;
use crate::api::reports::OomHook;
use crate::clock::{ScaledClock, wall_now};
use crate::driver_trace::DriverBoard;
use crate::history::HistoryStore;
use crate::ingest::{ReportLimits, ReportStore};
use crate::kubernetes::AttributionBoard;
use crate::source::DeviceSource;
use crate::source::SourceSelection;
use crate::source::cuda::ChildProber;
use crate::source::join::{Joiner, SlowJoin};
use crate::source::nvml::{NvmlSettings, NvmlSource};
use crate::source::probe::Prober;
use crate::source::simulator::{Simulator, SimulatorSpec};
use crate::source::trace::{
    NextOom, OomFeed, RecordHealth, RecordOptions, Recorder, ReplayOptions, StreamedReplay,
};

/// A device source, and for a simulated host the simulator whose PyTorch
/// processes report their allocator statistics like real workloads.
pub struct BuiltSource {
    pub source: Arc<dyn DeviceSource>,
    pub reporting_simulator: Option<Simulator>,
    /// What answers the CUDA probe: a child process for the real driver,
    /// the simulator for a simulated host, nothing for a replayed trace.
    pub prober: Option<Arc<dyn Prober>>,
    /// How the recording goes, when `source.record` is set.
    pub record_health: Option<Arc<RecordHealth>>,
    /// Writes an OOM event into the recording, when `source.record` is set.
    pub oom_recorder: Option<OomHook>,
    /// A replayed trace's OOM events, in file order as its reading reaches
    /// them; `None` when it has none.
    pub replayed_ooms: Option<OomFeed>,
}

/// Builds the device source the configuration selects, wrapped in a
/// joiner that joins `join` onto every slow reading and, when
/// `source.record` is set, in a recorder around that, so the trace keeps
/// what the sampler reads. Reads files: call off the runtime.
pub fn build_source(config: &Config, join: SlowJoin) -> Result<BuiltSource, AppError> {
    let (source, reporting_simulator, prober, replayed_ooms): (
        Arc<dyn DeviceSource>,
        _,
        Option<Arc<dyn Prober>>,
        _,
    ) = match &config.selection() {
        SourceSelection::Driver => {
            let nvml = NvmlSource::new(NvmlSettings {
                library_path: config.nvml.library_path.clone(),
                pcie_throughput: config.nvml.pcie_throughput,
                max_cmdline_bytes: config.nvml.max_cmdline_bytes.as_usize(),
                xid_events: config.nvml.xid_events,
                ..NvmlSettings::default()
            });
            (Arc::new(nvml), None, Some(Arc::new(ChildProber::current_binary())), None)
        }
        SourceSelection::Simulate(simulator) => {
            let clock = ScaledClock::starting_at(wall_now(), config.source.speed);
            let origin = clock.origin();
            let spec = SimulatorSpec {
                scenario: simulator.scenario,
                gpus: simulator.simulator.gpus,
                seed: simulator.simulator.seed,
            };
            let mut built = Simulator::with_origin(spec, clock, origin)?.reporting_allocator();
            if simulator.simulator.container_ids {
                built = built.with_container_ids();
            }
            let prober = Arc::new(built.clone());
            (Arc::new(built.clone()), Some(built), Some(prober), None)
        }
        SourceSelection::Replay { path } => {
            let options = ReplayOptions {
                max_line_bytes: config.source.max_trace_line_bytes.as_usize(),
                max_file_bytes: config.source.max_trace_bytes.get(),
                queue_records: config.source.replay_queue_records.get(),
                answer_probes: config.probe.enabled,
                max_devices: config.sampler.max_devices.get(),
            };
            let replay = Arc::new(StreamedReplay::open(path, options).map_err(AppError::Replay)?);
            // A trace recorded with the probe on answers it again.
            let prober = replay.has_probe_records().then(|| replay.clone() as Arc<dyn Prober>);
            let ooms = replay.oom_feed();
            (replay, None, prober, ooms)
        }
    };
    let mut built = BuiltSource {
        source: Arc::new(Joiner::new(source, join)),
        reporting_simulator,
        prober: prober.filter(|_| config.probe.enabled),
        record_health: None,
        oom_recorder: None,
        replayed_ooms,
    };
    let Some(path) = &config.source.record else { return Ok(built) };
    let options = RecordOptions {
        mode: config.source.record_mode,
        keep: config.source.record_keep.get(),
        protect: match &config.selection() {
            SourceSelection::Replay { path } => Some(path.clone()),
            _ => None,
        },
    };
    let recorder = Recorder::create(built.source, path, &options).map_err(AppError::Record)?;
    built.record_health = Some(recorder.health());
    // The recorder also answers the probe, through the prober, so that each
    // outcome is written to the trace.
    let probing = built.prober.is_some();
    let recorder = Arc::new(match built.prober.take() {
        Some(prober) => recorder.with_prober(prober),
        None => recorder,
    });
    let writer = recorder.clone();
    built.oom_recorder = Some(Arc::new(move |device, event| writer.record_oom(device, event)));
    built.prober = probing.then(|| recorder.clone() as Arc<dyn Prober>);
    built.source = recorder;
    Ok(built)
}

/// The one join onto slow readings, in its one order: allocator reports
/// onto their processes (by device UUID), the driver trace's statistics
/// (by PID), then Kubernetes pods and allocations. The sampler's process
/// cap comes after all; none changes what it keeps processes by (memory,
/// PID).
pub(super) fn slow_join(
    reports: Arc<ReportStore>,
    pods: Option<Arc<AttributionBoard>>,
    driver: Option<Arc<DriverBoard>>,
) -> SlowJoin {
    Box::new(move |info, reading| {
        reports.attach(&info.uuid, reading);
        if let Some(driver) = &driver {
            driver.join(info, reading);
        }
        if let Some(pods) = &pods {
            pods.join(info, reading);
        }
    })
}

/// Stores a replayed trace's OOM events as the replay reaches them: each
/// once its device's replayed samples are as new as the time the event was
/// judged by when recorded, so the analysis sees it when the recording did.
/// Takes them from `feed` without waiting, one at a time, so at most one is
/// held here.
pub(super) async fn replay_oom_events(
    store: Arc<HistoryStore>,
    feed: OomFeed,
    period: std::time::Duration,
    cancel: CancellationToken,
) {
    let mut pending = None;
    let mut ticker = tokio::time::interval(period.max(std::time::Duration::from_millis(10)));
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        loop {
            let (index, event) = match pending.take() {
                Some(head) => head,
                None => match feed.try_next() {
                    NextOom::Event(index, event) => (index, event),
                    NextOom::NotYet => break,
                    NextOom::Ended => return,
                },
            };
            let devices = store.devices();
            let due = devices.iter().find(|device| device.info().index == index).filter(|device| {
                device.newest_at().is_some_and(|newest| newest >= event.received_at)
            });
            let Some(device) = due else {
                // Not listed yet (the sampler lists the trace's devices
                // first) or not replayed that far: kept for the next tick.
                pending = Some((index, event));
                break;
            };
            store.record_oom(device, *event);
        }
    }
}

/// Posts the simulated processes' allocator reports through the same
/// validation and store as real ones, about once per slow-tier interval of
/// source time (at most 5 per real second, within the default rate limit).
pub(super) fn post_simulated_reports(
    simulator: &Simulator,
    reports: &ReportStore,
    limits: &ReportLimits,
) {
    for document in simulator.report_documents() {
        let body = document.to_string();
        match crate::ingest::report::parse(body.as_bytes(), limits) {
            Ok(report) => {
                // Over the rate limit only means the previous one stays.
                let _ = reports.accept(report, tokio::time::Instant::now());
            }
            Err(error) => warn!(error = %error, "a simulated allocator report was refused"),
        }
    }
}

pub(super) async fn simulated_reports(
    simulator: Simulator,
    reports: Arc<ReportStore>,
    limits: ReportLimits,
    period: std::time::Duration,
    cancel: CancellationToken,
) {
    let mut ticker = tokio::time::interval(period);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticker.tick() => post_simulated_reports(&simulator, &reports, &limits),
        }
    }
}

/// Fails unless the source lists at least one device within `deadline`.
pub(super) async fn require_devices(
    source: &Arc<dyn DeviceSource>,
    deadline: std::time::Duration,
) -> Result<(), AppError> {
    let probe = source.clone();
    let listing = tokio::task::spawn_blocking(move || probe.devices());
    let reason = match tokio::time::timeout(deadline, listing).await {
        Ok(Ok(Ok(devices))) if !devices.is_empty() => return Ok(()),
        Ok(Ok(Ok(_))) => "NVML lists no GPUs".to_owned(),
        Ok(Ok(Err(error))) => error.to_string(),
        Ok(Err(error)) => format!("listing devices failed: {error}"),
        Err(_) => format!("NVML did not answer within nvml.init_timeout ({deadline:?})"),
    };
    Err(AppError::GpuRequired { reason })
}
