//! Wiring: the one module that knows the concrete types. Builds the device
//! source the configuration names (`sources`), each component's settings
//! (`settings`), the history, the sampler and the HTTP server, runs them
//! until shutdown, and stops them within the grace time; `reload` lists
//! what a SIGHUP checks and applies.
//!
//! Depends on every other module; nothing depends on it but `main`.

mod config;
mod driver_trace;
mod memory;
pub mod reload;
mod settings;
mod sources;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use self::config::{
    Config, MAX_SAMPLES_PER_DEVICE, MIN_LEAK_WINDOW_SAMPLES, SLOWEST_SNAPSHOT_UPLOAD_RATE, load,
};
use self::reload::Reloader;
use self::reload::reload_steps;
use self::reload::steps::{Pipeline, PipelineStep};
pub use self::reload::{Reload, load_web_config};
use self::settings::{AlertGate, open_snapshots, start_kubernetes};
pub use self::settings::{
    analysis_settings, analyze_settings, history_sizing, probe_settings, read_token_file,
    report_intake, sampler_settings,
};
pub use self::sources::{BuiltSource, build_source};
use self::sources::{
    post_simulated_reports, replay_oom_events, require_devices, simulated_reports, slow_join,
};
use crate::alerts::board::AlertBoard;
use crate::alerts::notify;
use crate::alerts::runner::{self, RunnerSettings};
use crate::analysis::snapshot::AnalysisBoard;
use crate::api::{self, AppState, Limits};
use crate::clock::wall_now;
use crate::history::HistoryStore;
use crate::kubernetes::AttributionBoard;
use crate::sampler;
use crate::server::{self, ServeSettings};
use crate::source::SourceSelection;
use crate::source::simulator::SimulatorError;
use crate::source::trace::TraceError;
use crate::systemd_notify;
use crate::telemetry::{Telemetry, TelemetryError};

/// Why the daemon could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
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
    #[error("{0}")]
    DriverTrace(#[from] crate::driver_trace::StartError),
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
            // An unusable `ingest.token_file`, web configuration or snapshot
            // directory is a configuration error; `run` reads them before
            // building the source or binding.
            AppError::Token { .. } | AppError::WebConfig(_) | AppError::Snapshots(_) => 2,
            _ => 1,
        }
    }
}

/// Runs the daemon until `shutdown` completes, then stops serving and
/// sampling, giving in-flight requests `server.shutdown_timeout` to finish.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()>,
    reload: Reload,
) -> Result<(), AppError> {
    let token = {
        let config = config.clone();
        off_runtime(move || read_token_file(&config)).await??
    };
    let mut intake = report_intake(&config, token);
    intake.snapshots = open_snapshots(&config).await?;
    let web = {
        let config = config.clone();
        off_runtime(move || load_web_config(&config)).await??
    };
    let board =
        config.kubernetes.enabled.then(|| Arc::new(AttributionBoard::new(&config.kubernetes)));
    let driver_board = driver_trace::prepare(&config)?;
    let source = {
        let config = config.clone();
        let join = slow_join(intake.store.clone(), board.clone(), driver_board.clone());
        off_runtime(move || build_source(&config, join)).await??
    };
    let BuiltSource {
        source,
        reporting_simulator,
        prober,
        record_health,
        oom_recorder,
        replayed_ooms,
    } = source;
    let sampler_settings = sampler_settings(&config);
    let speed = sampler_settings.speed;
    if config.nvml.require_gpu && config.selection() == SourceSelection::Driver {
        require_devices(&source, config.nvml.init_timeout).await?;
    }
    let telemetry = Arc::new(Telemetry::new(source.name())?);
    telemetry.record_config_load(true, false, wall_now());
    if let Some(health) = record_health {
        telemetry.watch_recording(Box::new(move || (health.errors(), health.failing())))?;
    }
    let store = Arc::new(HistoryStore::new(history_sizing(&config)));
    let oom_target = driver_trace::OomTarget {
        store: store.clone(),
        ids: intake.oom.clone(),
        recorder: oom_recorder.clone(),
    };
    // Held until `run` returns: dropping it stops the trace's thread.
    let _driver_trace = driver_trace::start(&config, driver_board, &telemetry, oom_target).await?;
    let bind_failed = |source| AppError::Bind { addr: config.server.listen, source };
    let listener = TcpListener::bind(config.server.listen).await.map_err(bind_failed)?;
    let local = listener.local_addr().map_err(bind_failed)?;
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
    if let Some(board) = board {
        start_kubernetes(&config, board, &telemetry, &cancel)?;
    }
    let sampler = tokio::spawn(sampler::run(
        source,
        store.clone(),
        telemetry.clone(),
        sampler_settings,
        cancel.clone(),
    ));
    let systemd = notify_systemd(&store, &cancel);
    // The start time in milliseconds: two runs never share it, so a stream
    // reader's Last-Event-ID from the previous run is recognised as such.
    let stream_epoch = u64::try_from(crate::clock::wall_now().unix_millis()).unwrap_or(0);
    let board = Arc::new(AlertBoard::new(config.api.max_stream_backlog.get(), stream_epoch));
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
    let notify = config.notify.clone();
    let notifiers = notify::build_notifiers(&notify, &external_url).map_err(AppError::Notify)?;
    // Its own token, so a reload can stop these notifiers and start others.
    let notifiers_stop = cancel.child_token();
    let dispatch = (!notifiers.is_empty())
        .then(|| notify::spawn(notifiers, &notify, telemetry.clone(), notifiers_stop.clone()));
    let analyses = Arc::new(AnalysisBoard::default());
    let (analysis_sender, analysis_watch) = tokio::sync::watch::channel(analysis_settings(&config));
    let (passes, passes_watch) = tokio::sync::watch::channel(None);
    let source_up = {
        let telemetry = telemetry.clone();
        Box::new(move || telemetry.source_up())
    };
    let analysis = tokio::spawn(crate::analysis::runner::run(
        store.clone(),
        analyses.clone(),
        analysis_watch,
        source_up,
        passes,
        speed,
        cancel.clone(),
    ));
    let (runner_settings, runner_watch) = tokio::sync::watch::channel(Arc::new(RunnerSettings {
        alerts: config.alerts.clone(),
        resend_interval: config.notify.resend_interval,
        dispatch,
        notifiers_generation: 0,
    }));
    let evaluation = tokio::spawn(runner::run(
        telemetry.clone(),
        board.clone(),
        passes_watch,
        runner_watch,
        cancel.clone(),
    ));
    let pipeline = PipelineStep(Arc::new(Pipeline {
        settings: runner_settings,
        analysis_settings: analysis_sender,
        analysis: analysis_settings,
        notifiers: notifiers_stop.into(),
        shutdown: cancel.clone(),
        telemetry: telemetry.clone(),
        default_external_url: external_url,
    }));
    let reloader = Reloader::new(
        reload.options,
        config.clone(),
        reload_steps(reload.log_level, pipeline, web.clone()),
        telemetry.clone(),
    )
    .with_systemd(systemd.clone());
    tokio::spawn(reloader.run(reload.hangups, cancel.clone()));
    intake.oom_hook = oom_recorder;
    if let Some(feed) = replayed_ooms {
        let period = crate::clock::real_interval(config.sampler.fast_interval, speed);
        tokio::spawn(replay_oom_events(store.clone(), feed, period, cancel.clone()));
    }
    let state = AppState::new(
        store,
        telemetry.clone(),
        analyses,
        board,
        Limits {
            request_timeout: config.server.request_timeout,
            snapshot_upload_timeout: config.ingest.snapshot_upload_timeout,
            max_request_body_bytes: config.server.max_request_body_bytes.as_usize(),
            max_concurrent_requests: config.server.max_concurrent_requests.get(),
            max_concurrent_scrapes: config.server.max_concurrent_scrapes.get(),
            max_history_points: config.api.max_history_points.get(),
            retention: config.history.retention,
            max_event_streams: config.api.max_event_streams.get(),
        },
        intake,
    )
    .with_metrics(config.metrics.clone());
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
    tokio::spawn(memory::release_freed_memory(
        config.history.heap_release_interval,
        cancel.clone(),
    ));
    if let Some(handle) = &web {
        handle.watch_with(telemetry.web_config_series()?);
        tokio::spawn(handle.clone().watch(config.server.web_config_poll_interval, cancel.clone()));
    }
    let settings = ServeSettings {
        header_read_timeout: config.server.header_read_timeout,
        idle_timeout: config.server.idle_timeout,
        max_connections: config.server.max_connections.get(),
        reserved_connections: config.server.reserved_connections,
        write_stall_timeout: config.server.write_stall_timeout,
    };
    let server =
        server::serve(listener, app, web, settings, telemetry.http_series()?, cancel.clone());
    let mut server = tokio::spawn(server);

    tokio::select! {
        () = shutdown => {
            if let Some(notifier) = &systemd {
                notifier.send("STOPPING=1\nSTATUS=stopping");
            }
        }
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
    if tokio::time::timeout(config.server.shutdown_timeout, analysis).await.is_err() {
        warn!("analysis did not stop within the shutdown grace time");
    }
    if tokio::time::timeout(config.server.shutdown_timeout, evaluation).await.is_err() {
        warn!("alert evaluation did not stop within the shutdown grace time");
    }
    Ok(())
}

/// Under a `Type=notify` systemd unit, tells the manager when sampling is
/// live and feeds its watchdog while `/readyz` would answer ready.
fn notify_systemd(
    store: &Arc<HistoryStore>,
    cancel: &CancellationToken,
) -> Option<Arc<systemd_notify::Notifier>> {
    let notifier = Arc::new(systemd_notify::Notifier::from_env()?);
    let watchdog = systemd_notify::watchdog_interval_from_env();
    let (store, sender, cancel) = (store.clone(), notifier.clone(), cancel.clone());
    tokio::spawn(async move {
        let ready = move || store.readiness(wall_now()).map_err(|not| not.to_string());
        systemd_notify::run(&sender, ready, watchdog, cancel).await;
    });
    Some(notifier)
}

/// Start-up work that blocks (file reads, opening the source), off the
/// async workers.
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, AppError> {
    tokio::task::spawn_blocking(work).await.map_err(|error| AppError::Startup(error.to_string()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Config;

    #[test]
    fn detection_keys_reach_the_analysis() {
        let mut config = Config::default();
        let analysis = &mut config.analysis;
        analysis.leak_check_interval = Duration::from_secs(7);
        analysis.leak_shortest_window = Duration::from_secs(120);
        analysis.leak_warmup = Duration::from_secs(11);
        analysis.forecast_min_span = Duration::from_secs(13);
        let settings = super::analysis_settings(&config);
        assert_eq!(settings.leak_check_interval, Duration::from_secs(7));
        assert_eq!(settings.forecast.min_span, Duration::from_secs(13));
        let (_, leak) = settings.leak.unwrap();
        assert_eq!(leak.shortest_window, Duration::from_secs(120));
        assert_eq!(leak.warmup, Duration::from_secs(11));
        // A shortest window longer than the window is the window.
        config.analysis.leak_shortest_window = Duration::from_secs(24 * 3600);
        let (window, leak) = super::analysis_settings(&config).leak.unwrap();
        assert_eq!(leak.shortest_window, window);
    }
}
