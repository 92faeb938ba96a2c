//! Wiring: the one module that knows the concrete types. Builds the device
//! source the configuration names, the history, the sampler and the HTTP
//! server, runs them until shutdown, and stops them within the grace time.
//!
//! Depends on every other module; nothing depends on it but `main`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::alerts::AlertState;
use crate::alerts::board::AlertBoard;
use crate::alerts::notify;
use crate::alerts::runner::{self, Boards, RunnerSettings};
use crate::analysis::analyzer::AnalysisSettings;
use crate::analysis::leak::LeakParams;
use crate::analysis::pressure::PressureThresholds;
use crate::analysis::snapshot::AnalysisBoard;
use crate::analyze::AnalyzeSettings;
use crate::api::reports::OomHook;
use crate::api::{self, AppState, Limits};
use crate::clock::{ScaledClock, wall_now};
use crate::config::{AlertsConfig, Config, LoadOptions, SourceSelection};
use crate::history::{HistoryStore, Sizing};
use crate::ingest::{ReportLimits, ReportStore, StoreLimits};
use crate::kubernetes::{self, AttributionBoard, KubernetesSettings};
use crate::logging::LevelControl;
use crate::model::{DeviceInfo, OomEvent, RuleId, SlowReading};
use crate::reload::steps::{LogLevelStep, PipelineStep};
use crate::reload::{Change, Commit, ReloadStep, Reloader};
use crate::sampler::probe::{ProbeGate, ProbeSettings};
use crate::sampler::{self, SamplerSettings};
use crate::server::{self, ServeSettings, WebConfigHandle};
use crate::signals::Hangups;
use crate::source::DeviceSource;
use crate::source::cuda::ChildProber;
use crate::source::nvml::{NvmlSettings, NvmlSource};
use crate::source::probe::{ProbeRequest, Prober};
use crate::source::simulator::{Simulator, SimulatorError, SimulatorSpec};
use crate::source::trace::{RecordHealth, RecordOptions, Recorder, Replay, TraceError};
use crate::telemetry::{Telemetry, TelemetryError};

/// Why the daemon could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("serving HTTP failed: {0}")]
    Serve(std::io::Error),
    #[error("replay: {0}")]
    Replay(TraceError),
    #[error("record: {0}")]
    Record(TraceError),
    #[error("simulator: {0}")]
    Simulator(#[from] SimulatorError),
    #[error("self metrics: {0}")]
    Telemetry(#[from] TelemetryError),
    #[error("start-up task failed: {0}")]
    Startup(String),
    #[error("ingest.token_file: {reason}")]
    Token { reason: String },
    #[error("ingest.snapshot_dir: {0}")]
    Snapshots(crate::ingest::SnapshotError),
    #[error("notifier: {0}")]
    Notify(crate::alerts::notify::NotifyError),
    #[error("server.web_config: {0}")]
    WebConfig(crate::server::WebConfigError),
    #[error("a GPU is required (nvml.require_gpu) but none can be used: {reason}")]
    GpuRequired { reason: String },
}

impl AppError {
    /// Process exit status: 2 for bad input named by the user (an invalid
    /// trace file, a recording that would destroy one, an unusable token
    /// file), 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            AppError::Replay(_) => 2,
            // A recording that would destroy a trace is refused like bad input.
            AppError::Record(TraceError::Exists { .. } | TraceError::SameFile { .. }) => 2,
            // An unusable `ingest.token_file` is a configuration error; `run`
            // reads it before building the source or binding.
            AppError::Token { .. } => 2,
            // Like the token file: read before anything binds.
            AppError::WebConfig(_) => 2,
            AppError::Snapshots(_) => 2,
            _ => 1,
        }
    }
}

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
    /// A replayed trace's OOM events (device index, event), in file order.
    pub replayed_ooms: Vec<(u32, OomEvent)>,
}

/// Builds the device source the configuration selects, wrapped in a
/// recorder when `source.record` is set. Reads files: call off the runtime.
/// `reports`, when given, is joined onto slow readings before they are
/// recorded (see [`Recorder::joining`]).
pub fn build_source(
    config: &Config,
    reports: Option<Arc<ReportStore>>,
) -> Result<BuiltSource, AppError> {
    let BuiltSource { source, reporting_simulator, prober, replayed_ooms, .. } =
        match &config.source.selection {
            SourceSelection::Driver => BuiltSource {
                source: Arc::new(NvmlSource::new(NvmlSettings {
                    library_path: config.nvml.library_path.clone(),
                    pcie_throughput: config.nvml.pcie_throughput,
                    max_cmdline_bytes: config.nvml.max_cmdline_bytes.as_usize(),
                    xid_events: config.nvml.xid_events,
                    max_processes: config.sampler.max_processes_per_device.get(),
                    ..NvmlSettings::default()
                })),
                reporting_simulator: None,
                prober: Some(Arc::new(ChildProber::current_binary())),
                record_health: None,
                oom_recorder: None,
                replayed_ooms: Vec::new(),
            },
            SourceSelection::Simulate(simulator) => {
                let clock = ScaledClock::starting_at(wall_now(), config.source.speed);
                let origin = clock.origin();
                let spec = SimulatorSpec {
                    scenario: simulator.scenario,
                    gpus: simulator.gpus,
                    seed: simulator.seed,
                };
                let container_ids = simulator.container_ids;
                let mut simulator =
                    Simulator::with_origin(spec, clock, origin)?.reporting_allocator();
                if container_ids {
                    simulator = simulator.with_container_ids();
                }
                BuiltSource {
                    source: Arc::new(simulator.clone()),
                    prober: Some(Arc::new(simulator.clone())),
                    reporting_simulator: Some(simulator),
                    record_health: None,
                    oom_recorder: None,
                    replayed_ooms: Vec::new(),
                }
            }
            SourceSelection::Replay { path } => {
                let replay = Arc::new(
                    Replay::open_bounded(
                        path,
                        config.source.max_trace_line_bytes.as_usize(),
                        config.source.max_trace_bytes.get(),
                    )
                    .map_err(AppError::Replay)?,
                );
                // A trace recorded with the probe on answers it again.
                let prober = replay.has_probe_records().then(|| replay.clone() as Arc<dyn Prober>);
                BuiltSource {
                    replayed_ooms: replay.oom_events(),
                    source: replay,
                    reporting_simulator: None,
                    prober,
                    record_health: None,
                    oom_recorder: None,
                }
            }
        };
    let prober = prober.filter(|_| config.probe.enabled);
    let Some(path) = &config.source.record else {
        return Ok(BuiltSource {
            source,
            reporting_simulator,
            prober,
            record_health: None,
            oom_recorder: None,
            replayed_ooms,
        });
    };
    let options = RecordOptions {
        mode: config.source.record_mode,
        keep: config.source.record_keep.get(),
        protect: match &config.source.selection {
            SourceSelection::Replay { path } => Some(path.clone()),
            _ => None,
        },
    };
    let mut recorder = Recorder::create(source, path, &options).map_err(AppError::Record)?;
    if let Some(reports) = reports {
        // Joined before recording, so the trace keeps the allocator evidence
        // the analysis judged; `run` then leaves the sampler's join out.
        recorder = recorder.joining(Box::new(move |uuid, reading| reports.attach(uuid, reading)));
    }
    let record_health = Some(recorder.health());
    // The recorder also answers the probe, through the prober, so that each
    // outcome is written to the trace.
    let (source, prober, oom_recorder): (Arc<dyn DeviceSource>, Option<Arc<dyn Prober>>, OomHook) =
        match prober {
            Some(prober) => {
                let recorder = Arc::new(recorder.with_prober(prober));
                let writer = recorder.clone();
                let oom: OomHook = Arc::new(move |device, event| writer.record_oom(device, event));
                (recorder.clone(), Some(recorder), oom)
            }
            None => {
                let recorder = Arc::new(recorder);
                let writer = recorder.clone();
                let oom: OomHook = Arc::new(move |device, event| writer.record_oom(device, event));
                (recorder, None, oom)
            }
        };
    Ok(BuiltSource {
        source,
        reporting_simulator,
        prober,
        record_health,
        oom_recorder: Some(oom_recorder),
        replayed_ooms,
    })
}

/// Stores a replayed trace's OOM events as the replay reaches them: each
/// once its device's replayed samples are as new as the time the event was
/// judged by when recorded, so the analysis sees it when the recording did.
async fn replay_oom_events(
    store: Arc<HistoryStore>,
    events: Vec<(u32, OomEvent)>,
    period: std::time::Duration,
    cancel: CancellationToken,
) {
    let mut pending = std::collections::VecDeque::from(events);
    let mut ticker = tokio::time::interval(period.max(std::time::Duration::from_millis(10)));
    while !pending.is_empty() {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        while let Some((index, event)) = pending.front() {
            let devices = store.devices();
            let Some(device) = devices.iter().find(|device| device.info().index == *index) else {
                // Not listed (yet): the sampler lists the trace's devices
                // first, so this waits for discovery.
                break;
            };
            if device.newest_at().is_none_or(|newest| newest < event.received_at) {
                break;
            }
            device.record_oom(event.clone());
            pending.pop_front();
        }
    }
}

/// Posts the simulated processes' allocator reports through the same
/// validation and store as real ones, about once per slow-tier interval of
/// source time (at most 5 per real second, within the default rate limit).
fn post_simulated_reports(simulator: &Simulator, reports: &ReportStore, limits: &ReportLimits) {
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

async fn simulated_reports(
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
async fn require_devices(
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

/// The ingest bearer token, trimmed: reads `ingest.token_file`, refusing a
/// missing, unreadable, empty or oversized one. Blocking: `run` calls it off
/// the runtime before anything is built or bound; `check-config` calls it
/// too.
pub fn read_token_file(config: &Config) -> Result<Option<String>, AppError> {
    /// A bearer token is a line; anything larger is not one.
    const MAX_TOKEN_FILE_BYTES: u64 = 4 * 1024;
    let Some(path) = &config.ingest.token_file else { return Ok(None) };
    let failed =
        |reason: String| AppError::Token { reason: format!("{}: {reason}", path.display()) };
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| {
            std::io::Read::read_to_string(
                &mut std::io::Read::take(file, MAX_TOKEN_FILE_BYTES + 1),
                &mut text,
            )
        })
        .map_err(|error| failed(error.to_string()))?;
    if text.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(failed(format!("larger than {MAX_TOKEN_FILE_BYTES} bytes; not a token")));
    }
    match text.trim() {
        "" => Err(failed("the token file is empty".into())),
        token => Ok(Some(token.to_owned())),
    }
}

async fn read_token(config: &Config) -> Result<Option<String>, AppError> {
    let config = config.clone();
    tokio::task::spawn_blocking(move || read_token_file(&config))
        .await
        .map_err(|error| AppError::Startup(error.to_string()))?
}

/// The sampler settings the configuration implies.
pub fn sampler_settings(config: &Config) -> SamplerSettings {
    SamplerSettings {
        fast_interval: config.sampler.fast_interval,
        slow_interval: config.sampler.slow_interval,
        call_timeout: config.sampler.call_timeout,
        discovery_timeout: match config.source.selection {
            SourceSelection::Driver => config.nvml.init_timeout,
            _ => config.sampler.call_timeout,
        },
        max_processes_per_device: config.sampler.max_processes_per_device.get(),
        max_devices: config.sampler.max_devices.get(),
        discovery_retry_max: config.sampler.discovery_retry_max,
        speed: match config.source.selection {
            SourceSelection::Driver => 1.0,
            _ => config.source.speed,
        },
    }
}

/// The probe scheduler's settings the configuration implies.
pub fn probe_settings(config: &Config) -> ProbeSettings {
    let probe = &config.probe;
    ProbeSettings {
        interval: probe.interval,
        max_backoff: probe.max_backoff,
        speed: sampler_settings(config).speed,
        min_free_bytes: probe.min_free_bytes.get(),
        request: ProbeRequest {
            block_bytes: probe.block_bytes.get(),
            samples: probe.samples,
            margin_bytes: probe.margin_bytes.get(),
            headroom_time_budget: probe.headroom.then_some(probe.headroom_time_budget),
            timeout: probe.timeout,
            cuda_library: probe.cuda_library.clone(),
            nvml_library: config.nvml.library_path.clone(),
        },
    }
}

/// Probing is unsafe while the workload on a device is already short of
/// memory: its allocator is raising OOMs or flushing its cache to retry.
struct AlertGate(Arc<AlertBoard>);

impl ProbeGate for AlertGate {
    fn unsafe_alert_firing(&self, uuid: &str) -> bool {
        self.0.alerts().iter().any(|alert| {
            alert.state == AlertState::Firing
                && alert.key.uuid == uuid
                && matches!(
                    RuleId::from_name(&alert.key.rule),
                    Some(RuleId::AllocatorOom | RuleId::AllocatorRetries)
                )
        })
    }
}

/// Ring sizes: the fast tier covers `history.retention`; the slow tier
/// (process lists) only what the alert rules read, when that is shorter.
pub fn history_sizing(config: &Config) -> Sizing {
    let sizing = Sizing::for_retention(
        config.history.retention,
        config.sampler.fast_interval,
        config.sampler.slow_interval,
        config.metrics.peak_window,
    )
    .with_slow_retention(config.alerts.rules.slow_history_needed(), config.sampler.slow_interval);
    Sizing { oom_events: config.ingest.max_oom_events.get(), ..sizing }
}

/// The analysis windows and thresholds: those the alert rules judge with.
pub fn analysis_settings(alerts: &AlertsConfig) -> AnalysisSettings {
    let rules = &alerts.rules;
    let leak = rules.leak_suspected.enabled.then(|| {
        let params = LeakParams {
            min_slope_bytes_per_second: rules.leak_suspected.threshold,
            hold_slope_bytes_per_second: rules.leak_suspected.clear,
            shortest_window: alerts.leak_shortest_window.min(rules.leak_window),
            warmup: alerts.leak_warmup,
            ..LeakParams::for_window(rules.leak_window)
        };
        (rules.leak_window, params)
    });
    AnalysisSettings {
        trend_window: alerts.trend_window,
        exhaustion_min_fit: rules.exhaustion_min_fit,
        retries_window: rules.retries_window,
        oom_window: rules.oom_window,
        xid_window: rules.xid_window,
        leak,
        probe_stale_after: rules.probe_stale_after,
        pressure: PressureThresholds::default(),
        forecast: crate::analysis::trend::ForecastParams {
            min_span: alerts.forecast_min_span,
            ..Default::default()
        },
        leak_check_interval: alerts.leak_check_interval,
        trend_check_interval: alerts.trend_check_interval,
        max_xid_history: alerts.max_xid_history.get(),
    }
}

/// `vramd analyze`'s settings: the daemon's history sizing, sampling
/// intervals, analysis and rules, so the timeline is the daemon's.
pub fn analyze_settings(config: &Config) -> AnalyzeSettings {
    AnalyzeSettings {
        sizing: history_sizing(config),
        fast_interval: config.sampler.fast_interval,
        slow_interval: config.sampler.slow_interval,
        analysis: analysis_settings(&config.alerts),
        alerts: config.alerts.clone(),
    }
}

/// `[kubernetes]` as the attribution poller reads it.
pub fn kubernetes_settings(config: &Config) -> KubernetesSettings {
    let kubernetes = &config.kubernetes;
    KubernetesSettings {
        pod_resources_socket: kubernetes.pod_resources_socket.clone(),
        runtime_socket: kubernetes.runtime_socket.clone(),
        refresh_interval: kubernetes.refresh_interval,
        call_timeout: kubernetes.call_timeout,
        max_containers: kubernetes.max_containers.get(),
    }
}

/// Starts the Kubernetes attribution poller when `kubernetes.enabled`, and
/// returns the join the sampler applies to every slow reading.
fn start_kubernetes(
    config: &Config,
    telemetry: &Arc<Telemetry>,
    cancel: &CancellationToken,
) -> Result<Option<sampler::Attribute>, AppError> {
    if !config.kubernetes.enabled {
        return Ok(None);
    }
    telemetry.watch_kubernetes(&[kubernetes::API_POD_RESOURCES, kubernetes::API_RUNTIME])?;
    let board = Arc::new(AttributionBoard::default());
    tokio::spawn(kubernetes::run(
        kubernetes_settings(config),
        board.clone(),
        telemetry.clone(),
        cancel.clone(),
    ));
    Ok(Some(Arc::new(move |info: &DeviceInfo, reading: &mut SlowReading| {
        board.join(info, reading)
    })))
}

/// The allocator report intake: its store, document bounds and token.
pub fn report_intake(config: &Config, token: Option<String>) -> api::reports::Ingest {
    let ingest = &config.ingest;
    api::reports::Ingest {
        store: Arc::new(ReportStore::new(StoreLimits {
            ttl: ingest.ttl,
            rate_limit_per_second: ingest.rate_limit_per_second.get(),
            max_reporters: ingest.max_reporters.get(),
        })),
        limits: ReportLimits {
            max_devices: ingest.max_devices.get(),
            max_stats: ingest.max_stats.get(),
        },
        oom: crate::ingest::OomIntake::new(
            ingest.rate_limit_per_second.get(),
            ingest.max_reporters.get(),
        ),
        oom_hook: None,
        snapshots: None,
        token,
    }
}

/// The OOM snapshot directory, when `ingest.snapshot_dir` is set; opening
/// it lists and clears files, so off the async workers.
async fn open_snapshots(
    config: &Config,
) -> Result<Option<Arc<crate::ingest::SnapshotStore>>, AppError> {
    let Some(dir) = config.ingest.snapshot_dir.clone() else { return Ok(None) };
    let limits = crate::ingest::SnapshotLimits {
        max_total_bytes: config.ingest.max_snapshot_bytes.0,
        max_upload_bytes: config.ingest.max_snapshot_upload.0,
        max_files: config
            .ingest
            .max_oom_events
            .get()
            .saturating_mul(config.sampler.max_devices.get()),
    };
    let store =
        tokio::task::spawn_blocking(move || crate::ingest::SnapshotStore::open(&dir, limits))
            .await
            .map_err(|error| AppError::Startup(error.to_string()))?
            .map_err(AppError::Snapshots)?;
    Ok(Some(Arc::new(store)))
}

/// What a configuration reload needs from `main`.
pub struct Reload {
    /// The SIGHUPs to reload on.
    pub hangups: Hangups,
    /// The layers the daemon started with, read again on each reload.
    pub options: LoadOptions,
    /// The live log filter; `None` leaves `log.level` as it started.
    pub log_level: Option<LevelControl>,
}

/// `ingest.token_file` is read at start only, but a file whose token file
/// is unusable is refused as `check-config` refuses it.
struct TokenFileCheck;

impl ReloadStep for TokenFileCheck {
    fn name(&self) -> &'static str {
        "ingest"
    }

    fn prepare(&self, change: &Change<'_>) -> Result<Option<Commit>, String> {
        read_token_file(change.loaded).map(|_| None).map_err(|error| error.to_string())
    }
}

/// The web configuration file (and the certificates, keys and users it
/// names) read again on SIGHUP, as the poll would on a change; a file that
/// does not load refuses the whole reload. Which file it is
/// (`server.web_config`) needs a restart.
struct WebConfigStep(WebConfigHandle);

impl ReloadStep for WebConfigStep {
    fn name(&self) -> &'static str {
        "server.web_config"
    }

    fn prepare(&self, change: &Change<'_>) -> Result<Option<Commit>, String> {
        if change.loaded.server.web_config.as_deref() != Some(self.0.path()) {
            return Ok(None);
        }
        let prepared = self.0.prepare_reload().map_err(|error| error.to_string())?;
        let handle = self.0.clone();
        Ok(Some(Box::new(move || handle.install(prepared))))
    }
}

/// Everything a configuration reload (SIGHUP) checks and applies, in order.
/// Each step prepares (and may refuse the reload) before any commits; a
/// part that becomes live, such as the web configuration, adds its step
/// here and its keys to `reload::keys`.
fn reload_steps(
    log_level: Option<LevelControl>,
    pipeline: PipelineStep,
    web: Option<WebConfigHandle>,
) -> Vec<Box<dyn ReloadStep>> {
    let mut steps: Vec<Box<dyn ReloadStep>> = vec![Box::new(TokenFileCheck)];
    if let Some(handle) = web {
        steps.push(Box::new(WebConfigStep(handle)));
    }
    if let Some(control) = log_level {
        steps.push(Box::new(LogLevelStep(control)));
    }
    steps.push(Box::new(pipeline));
    steps
}

/// Reads and checks `server.web_config` and every file it names
/// (blocking; `vramd check-config` and the start of [`run`]).
pub fn load_web_config(config: &Config) -> Result<Option<WebConfigHandle>, AppError> {
    config
        .server
        .web_config
        .as_deref()
        .map(|path| WebConfigHandle::load(path, config.server.auth_cache_size.get()))
        .transpose()
        .map_err(AppError::WebConfig)
}

/// Runs the daemon until `shutdown` completes, then stops serving and
/// sampling, giving in-flight requests `server.shutdown_timeout` to finish.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()>,
    reload: Reload,
) -> Result<(), AppError> {
    let mut intake = report_intake(&config, read_token(&config).await?);
    intake.snapshots = open_snapshots(&config).await?;
    let web = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || load_web_config(&config))
            .await
            .map_err(|error| AppError::Startup(error.to_string()))??
    };
    let source = {
        let config = config.clone();
        let reports = intake.store.clone();
        tokio::task::spawn_blocking(move || build_source(&config, Some(reports)))
            .await
            .map_err(|error| AppError::Startup(error.to_string()))??
    };
    let BuiltSource {
        source,
        reporting_simulator,
        prober,
        record_health,
        oom_recorder,
        replayed_ooms,
    } = source;
    // A recording joins the reports onto slow readings before writing them
    // (so its trace keeps the evidence); the sampler then need not join
    // them again. Exactly one of the two does.
    let sampler_joins_reports = record_health.is_none();
    let sampler_settings = sampler_settings(&config);
    let speed = sampler_settings.speed;
    if config.nvml.require_gpu && config.source.selection == SourceSelection::Driver {
        require_devices(&source, config.nvml.init_timeout).await?;
    }
    let telemetry = Arc::new(Telemetry::new(source.name())?);
    telemetry.record_config_load(true, false, wall_now());
    if let Some(health) = record_health {
        telemetry.watch_recording(Box::new(move || (health.errors(), health.failing())))?;
    }
    let store = Arc::new(HistoryStore::new(history_sizing(&config)));
    let listener = TcpListener::bind(config.server.listen)
        .await
        .map_err(|source| AppError::Bind { addr: config.server.listen, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| AppError::Bind { addr: config.server.listen, source })?;
    info!(addr = %local, source = source.name(), "listening");

    let (reports, report_limits) = (intake.store.clone(), intake.limits);
    let cancel = CancellationToken::new();
    if let Some(simulator) = reporting_simulator {
        // One round before sampling starts, so the first slow sample joins.
        post_simulated_reports(&simulator, &reports, &report_limits);
        let period = crate::clock::real_interval(config.sampler.slow_interval, speed)
            .max(std::time::Duration::from_millis(200));
        tokio::spawn(simulated_reports(
            simulator,
            reports.clone(),
            report_limits,
            period,
            cancel.clone(),
        ));
    }
    let attribution = start_kubernetes(&config, &telemetry, &cancel)?;
    let sampler = tokio::spawn(sampler::run(
        source,
        store.clone(),
        telemetry.clone(),
        sampler_settings,
        sampler_joins_reports.then(|| reports.clone()),
        attribution,
        cancel.clone(),
    ));
    let board = Arc::new(AlertBoard::new(config.api.max_stream_backlog.get()));
    if let Some(prober) = prober {
        tokio::spawn(crate::sampler::probe::run(
            prober,
            store.clone(),
            Arc::new(AlertGate(board.clone())),
            probe_settings(&config),
            cancel.clone(),
        ));
    }
    let scheme =
        if web.as_ref().is_some_and(|web| web.current().tls.is_some()) { "https" } else { "http" };
    let external_url = format!("{scheme}://{local}");
    let notifiers =
        notify::notifiers_from_config(&config.notify, &external_url).map_err(AppError::Notify)?;
    // Its own token, so a reload can stop these notifiers and start others.
    let notifiers_stop = cancel.child_token();
    let dispatch = (!notifiers.is_empty()).then(|| {
        notify::spawn(notifiers, &config.notify, telemetry.clone(), notifiers_stop.clone())
    });
    let analyses = Arc::new(AnalysisBoard::default());
    let (runner_settings, runner_watch) = tokio::sync::watch::channel(Arc::new(RunnerSettings {
        analysis: analysis_settings(&config.alerts),
        alerts: config.alerts.clone(),
        resend_interval: config.notify.resend_interval,
        dispatch,
        notifiers_generation: 0,
    }));
    let evaluation = tokio::spawn(runner::run(
        store.clone(),
        telemetry.clone(),
        Boards { analyses: analyses.clone(), alerts: board.clone() },
        runner_watch,
        speed,
        cancel.clone(),
    ));
    let pipeline = PipelineStep::new(
        runner_settings,
        analysis_settings,
        notifiers_stop,
        cancel.clone(),
        telemetry.clone(),
        external_url,
    );
    let reloader = Reloader::new(
        reload.options,
        config.clone(),
        reload_steps(reload.log_level, pipeline, web.clone()),
        telemetry.clone(),
    );
    tokio::spawn(reloader.run(reload.hangups, cancel.clone()));
    intake.oom_hook = oom_recorder;
    if !replayed_ooms.is_empty() {
        let period = crate::clock::real_interval(config.sampler.fast_interval, speed);
        tokio::spawn(replay_oom_events(store.clone(), replayed_ooms, period, cancel.clone()));
    }
    let state = AppState::new(
        store,
        telemetry.clone(),
        analyses,
        board,
        Limits {
            request_timeout: config.server.request_timeout,
            max_request_body_bytes: config.server.max_request_body_bytes.as_usize(),
            max_concurrent_requests: config.server.max_concurrent_requests.get(),
            max_concurrent_scrapes: config.server.max_concurrent_scrapes.get(),
            max_history_points: config.api.max_history_points.get(),
            retention: config.history.retention,
            max_event_streams: config.api.max_event_streams.get(),
        },
        intake,
    );
    let ingest_token = state.ingest.token.is_some();
    let app = match web.clone() {
        None => api::router(state),
        Some(handle) => {
            let guard =
                server::Guard { handle, ingest_token, deadline: config.server.request_timeout };
            api::router_guarded(state, |routes| {
                routes.layer(axum::middleware::from_fn_with_state(guard, server::guard))
            })
        }
    };
    if let Some(handle) = &web {
        handle.watch_with(telemetry.web_config_series()?);
        tokio::spawn(handle.clone().watch(config.server.web_config_poll_interval, cancel.clone()));
    }
    let settings = ServeSettings {
        header_read_timeout: config.server.header_read_timeout,
        idle_timeout: config.server.idle_timeout,
        max_connections: config.server.max_connections.get(),
    };
    let server =
        server::serve(listener, app, web, settings, telemetry.http_series()?, cancel.clone());
    let mut server = tokio::spawn(server);

    tokio::select! {
        () = shutdown => {}
        result = &mut server => {
            cancel.cancel();
            return result.map_err(|error| AppError::Startup(error.to_string()));
        }
    }
    cancel.cancel();
    match tokio::time::timeout(config.server.shutdown_timeout, &mut server).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return Err(AppError::Startup(error.to_string())),
        Err(_) => {
            warn!(grace = ?config.server.shutdown_timeout, "requests still in flight at the end of the shutdown grace time; closing them");
            server.abort();
        }
    }
    // Sampling tasks stop at their next await; a call stuck in the driver is
    // left behind (main does not wait for blocking threads).
    if tokio::time::timeout(config.server.shutdown_timeout, sampler).await.is_err() {
        warn!("sampler did not stop within the shutdown grace time");
    }
    if tokio::time::timeout(config.server.shutdown_timeout, evaluation).await.is_err() {
        warn!("alert evaluation did not stop within the shutdown grace time");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::default_alerts;

    #[test]
    fn detection_keys_reach_the_analysis() {
        let mut alerts = default_alerts();
        alerts.leak_check_interval = Duration::from_secs(7);
        alerts.leak_shortest_window = Duration::from_secs(120);
        alerts.leak_warmup = Duration::from_secs(11);
        alerts.forecast_min_span = Duration::from_secs(13);
        let settings = super::analysis_settings(&alerts);
        assert_eq!(settings.leak_check_interval, Duration::from_secs(7));
        assert_eq!(settings.forecast.min_span, Duration::from_secs(13));
        let (_, leak) = settings.leak.unwrap();
        assert_eq!(leak.shortest_window, Duration::from_secs(120));
        assert_eq!(leak.warmup, Duration::from_secs(11));
        // A shortest window longer than the window is the window.
        alerts.leak_shortest_window = Duration::from_secs(24 * 3600);
        let (window, leak) = super::analysis_settings(&alerts).leak.unwrap();
        assert_eq!(leak.shortest_window, window);
    }
}
