//! Wiring, the settings: each component's own settings, built from the
//! configuration; the only place that knows defaults and sizing.
//!
//! Part of `app`, the one module that knows the concrete types.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::AppError;
use super::Config;
use crate::alerts::AlertState;
use crate::alerts::board::AlertBoard;
use crate::analysis::analyzer::AnalysisSettings;
use crate::analysis::leak::LeakParams;
use crate::analysis::pressure::PressureThresholds;
use crate::analyze::AnalyzeSettings;
use crate::api;
use crate::history::Sizing;
use crate::ingest::ReportStore;
use crate::kubernetes::{self, AttributionBoard};
use crate::model::RuleId;
use crate::sampler::SamplerSettings;
use crate::sampler::probe::{ProbeGate, ProbeSettings};
use crate::source::SourceSelection;
use crate::source::probe::ProbeRequest;
use crate::telemetry::Telemetry;

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
    let text = crate::setting::read_at_most(path, MAX_TOKEN_FILE_BYTES)
        .map_err(|error| failed(error.to_string()))?
        .ok_or_else(|| failed(format!("larger than {MAX_TOKEN_FILE_BYTES} bytes; not a token")))?;
    match text.trim() {
        "" => Err(failed("the token file is empty".into())),
        token => Ok(Some(token.to_owned())),
    }
}

/// The sampler settings the configuration implies.
pub fn sampler_settings(config: &Config) -> SamplerSettings {
    let driver = config.selection() == SourceSelection::Driver;
    SamplerSettings {
        config: config.sampler.clone(),
        discovery_timeout: if driver {
            config.nvml.init_timeout
        } else {
            config.sampler.call_timeout
        },
        speed: if driver { 1.0 } else { config.source.speed },
        runtime_ticks: false,
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
pub(super) struct AlertGate(pub(super) Arc<AlertBoard>);

impl ProbeGate for AlertGate {
    fn unsafe_alert_firing(&self, uuid: &str) -> bool {
        self.0.alerts().iter().any(|alert| {
            alert.state == AlertState::Firing
                && alert.key.uuid == uuid
                && matches!(alert.key.rule, RuleId::AllocatorOom | RuleId::AllocatorRetries)
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

/// The analysis settings: `[analysis]`, and the windows and thresholds of
/// the rules it serves; a probe reading is stale after two probe intervals.
pub fn analysis_settings(config: &Config) -> AnalysisSettings {
    let rules = &config.alerts.rules;
    let analysis = &config.analysis;
    let leak = &rules.leak_suspected;
    let leak = leak.rule.enabled.then(|| {
        let params = LeakParams {
            min_slope_bytes_per_second: leak.rule.threshold,
            hold_slope_bytes_per_second: leak.rule.clear,
            shortest_window: analysis.leak_shortest_window.min(leak.window),
            warmup: analysis.leak_warmup,
            ..LeakParams::for_window(leak.window)
        };
        (leak.window, params)
    });
    AnalysisSettings {
        config: analysis.clone(),
        exhaustion_min_fit: rules.exhaustion_forecast.min_fit,
        retries_window: rules.allocator_retries.window,
        oom_window: rules.allocator_oom.window,
        xid_window: rules.xid_error.window,
        leak,
        probe_stale_after: config.probe.interval.saturating_mul(2),
        pressure: PressureThresholds::default(),
        forecast: crate::analysis::trend::ForecastParams {
            min_span: analysis.forecast_min_span,
            ..Default::default()
        },
    }
}

/// `vramd analyze`'s settings: the daemon's history sizing, sampling
/// intervals, analysis and rules, so the timeline is the daemon's.
pub fn analyze_settings(config: &Config) -> AnalyzeSettings {
    AnalyzeSettings {
        sizing: history_sizing(config),
        fast_interval: config.sampler.fast_interval,
        slow_interval: config.sampler.slow_interval,
        max_processes_per_device: config.sampler.max_processes_per_device.get(),
        analysis: analysis_settings(config),
        alerts: config.alerts.clone(),
    }
}

/// Starts the Kubernetes attribution poller (`kubernetes.enabled`), which
/// publishes to `board`; the sampler or the recorder joins it.
pub(super) fn start_kubernetes(
    config: &Config,
    board: Arc<AttributionBoard>,
    telemetry: &Arc<Telemetry>,
    cancel: &CancellationToken,
) -> Result<(), AppError> {
    telemetry.watch_kubernetes(&[kubernetes::API_POD_RESOURCES, kubernetes::API_RUNTIME])?;
    tokio::spawn(kubernetes::run(
        config.kubernetes.clone(),
        board,
        telemetry.clone(),
        cancel.clone(),
    ));
    Ok(())
}

/// The allocator report intake: its store, document bounds and token.
pub fn report_intake(config: &Config, token: Option<String>) -> api::reports::Ingest {
    let ingest = &config.ingest;
    api::reports::Ingest {
        store: Arc::new(ReportStore::new(ingest.store_limits())),
        limits: ingest.report_limits(),
        oom: Arc::new(crate::ingest::OomIntake::new(
            ingest.rate_limit_per_second.get(),
            ingest.max_reporters.get(),
        )),
        oom_hook: None,
        snapshots: None,
        token,
        token_failures: api::FailureBudget::new(
            config.server.auth_failure_budget,
            config.server.auth_cache_size.get(),
        ),
    }
}

/// The OOM snapshot directory, when `ingest.snapshot_dir` is set; opening
/// it lists and clears files, so off the async workers.
pub(super) async fn open_snapshots(
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
    let store = super::off_runtime(move || crate::ingest::SnapshotStore::open(&dir, limits))
        .await?
        .map_err(AppError::Snapshots)?;
    Ok(Some(Arc::new(store)))
}
