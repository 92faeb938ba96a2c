//! The whole configuration: every component's own section, in file and
//! rendering order, and the few checks that span sections. `config` loads
//! it ([`load`]); each component reads its section directly.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use crate::alerts::AlertsConfig;
use crate::alerts::notify::NotifyConfig;
use crate::analysis::AnalysisConfig;
use crate::api::ApiConfig;
use crate::config::{ConfigError, Conflict, Document, KeySpec, LoadOptions, catalogue};
use crate::driver_trace::DriverTraceConfig;
use crate::exposition::MetricsConfig;
use crate::history::HistoryConfig;
use crate::ingest::IngestConfig;
use crate::kubernetes::KubernetesConfig;
use crate::logging::LogConfig;
use crate::sampler::SamplerConfig;
use crate::sampler::probe_config::ProbeConfig;
use crate::server::ServerConfig;
use crate::setting::{Keys, format_duration};
use crate::source::nvml::NvmlConfig;
use crate::source::{SimulatorConfig, SourceConfig, SourceSelection};

/// Everything the daemon needs to run. `Default` is the configuration
/// with nothing set.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub sampler: SamplerConfig,
    pub history: HistoryConfig,
    pub metrics: MetricsConfig,
    pub api: ApiConfig,
    pub source: SourceConfig,
    pub simulator: SimulatorConfig,
    pub nvml: NvmlConfig,
    pub probe: ProbeConfig,
    pub log: LogConfig,
    pub analysis: AnalysisConfig,
    pub alerts: AlertsConfig,
    pub notify: NotifyConfig,
    pub ingest: IngestConfig,
    pub kubernetes: KubernetesConfig,
    pub driver_trace: DriverTraceConfig,
}

/// Most samples `history.retention / sampler.fast_interval` may ask for.
pub const MAX_SAMPLES_PER_DEVICE: u128 = 10_000_000;
/// Fewest slow samples `alerts.leak_suspected.window` must hold: its 24
/// floor buckets with 5 observations each (`analysis::leak::density`). The
/// detector judges a window 10 % short of this, so that clock jitter or a
/// late tick does not leave it unjudged; the configuration asks for the
/// nominal count, so that a window it accepts keeps that margin.
pub const MIN_LEAK_WINDOW_SAMPLES: u128 = 120;
/// The slowest upload (bytes per second) that must be able to bring an
/// `ingest.max_snapshot_upload` snapshot in within
/// `ingest.snapshot_upload_timeout`: a link shared with training traffic,
/// or a remote writer across a data centre, still manages 10 MiB/s.
pub const SLOWEST_SNAPSHOT_UPLOAD_RATE: u64 = 10 << 20;

/// Loads and validates the daemon's configuration.
pub fn load(options: &LoadOptions) -> Result<Config, ConfigError> {
    crate::config::load_noting(options).map(|(config, _)| config)
}

impl Config {
    /// The device source the keys select.
    pub fn selection(&self) -> SourceSelection {
        self.source.selection(&self.simulator)
    }
}

impl Document for Config {
    fn check(&self, keys: &mut Keys) {
        keys.table("server", |keys| self.server.check(keys))
            .table("sampler", |keys| self.sampler.check(keys))
            .table("history", |keys| self.history.check(keys))
            .table("metrics", |keys| self.metrics.check(keys))
            .table("api", |keys| self.api.check(keys))
            .table("source", |keys| self.source.check(keys))
            .table("simulator", |keys| self.simulator.check(keys))
            .table("nvml", |keys| self.nvml.check(keys))
            .table("probe", |keys| self.probe.check(keys))
            .table("log", |keys| self.log.check(keys))
            .table("analysis", |keys| self.analysis.check(keys))
            .table("alerts", |keys| self.alerts.check(keys))
            .table("notify", |keys| self.notify.check(keys))
            .table("ingest", |keys| self.ingest.check(keys))
            .table("kubernetes", |keys| self.kubernetes.check(keys))
            .table("driver_trace", |keys| self.driver_trace.check(keys));
    }

    fn keys() -> &'static [KeySpec] {
        static KEYS: LazyLock<Vec<KeySpec>> = LazyLock::new(catalogue::<Config>);
        &KEYS
    }

    fn moved() -> Vec<(String, String)> {
        AnalysisConfig::MOVED_FROM_ALERTS
            .iter()
            .map(|name| (format!("alerts.{name}"), format!("analysis.{name}")))
            .collect()
    }

    fn check_across(&self) -> Result<(), Conflict> {
        let Config { sampler, history, metrics, probe, kubernetes, source, alerts, ingest, .. } =
            self;
        let conflict = |first, second, reason: String| Err(Conflict { first, second, reason });
        let duration = |d| format_duration(d);
        if probe.headroom_time_budget >= probe.timeout {
            return conflict(
                "probe.headroom_time_budget",
                "probe.timeout",
                format!(
                    "probe.headroom_time_budget ({}) must be less than probe.timeout ({}), \
                     or every headroom search would be killed",
                    duration(probe.headroom_time_budget),
                    duration(probe.timeout)
                ),
            );
        }
        if probe.max_backoff < probe.interval {
            return conflict(
                "probe.interval",
                "probe.max_backoff",
                format!(
                    "probe.max_backoff ({}) must be at least probe.interval ({})",
                    duration(probe.max_backoff),
                    duration(probe.interval)
                ),
            );
        }
        if kubernetes.call_timeout > kubernetes.refresh_interval {
            return conflict(
                "kubernetes.call_timeout",
                "kubernetes.refresh_interval",
                format!(
                    "kubernetes.call_timeout ({}) must be at most kubernetes.refresh_interval \
                     ({}), or refreshes would queue behind a hung socket",
                    duration(kubernetes.call_timeout),
                    duration(kubernetes.refresh_interval)
                ),
            );
        }
        // Only a node that asks the kubelet waits for it.
        if kubernetes.enabled && kubernetes.lookup_wait >= sampler.call_timeout {
            return conflict(
                "kubernetes.lookup_wait",
                "sampler.call_timeout",
                format!(
                    "kubernetes.lookup_wait ({}) must be less than sampler.call_timeout ({}), \
                     or a slow reading waiting for a new container would time out",
                    duration(kubernetes.lookup_wait),
                    duration(sampler.call_timeout)
                ),
            );
        }
        if sampler.slow_interval < sampler.fast_interval {
            return conflict(
                "sampler.fast_interval",
                "sampler.slow_interval",
                format!(
                    "sampler.slow_interval ({}) must be at least sampler.fast_interval ({})",
                    duration(sampler.slow_interval),
                    duration(sampler.fast_interval)
                ),
            );
        }
        // The leak rule judges a window only when its 24 floor buckets hold
        // 5 process lists each on average (analysis::leak::density); a
        // slower slow tier could never fill the longest, so the rule would
        // silently judge nothing.
        let leak = &alerts.rules.leak_suspected;
        let lists = leak.window.as_nanos() / sampler.slow_interval.as_nanos().max(1);
        if leak.rule.enabled && lists < MIN_LEAK_WINDOW_SAMPLES {
            return conflict(
                "sampler.slow_interval",
                "alerts.leak_suspected.window",
                format!(
                    "alerts.leak_suspected.window ({}) holds {lists} process lists at one every \
                     {}; leak detection needs at least {MIN_LEAK_WINDOW_SAMPLES}: shorten \
                     sampler.slow_interval, lengthen the window, or disable the rule",
                    duration(leak.window),
                    duration(sampler.slow_interval)
                ),
            );
        }
        let samples = history.retention.as_nanos() / sampler.fast_interval.as_nanos().max(1);
        if samples > MAX_SAMPLES_PER_DEVICE {
            return conflict(
                "history.retention",
                "sampler.fast_interval",
                format!(
                    "keeping {} at one sample every {} needs {samples} samples per device; \
                     at most {MAX_SAMPLES_PER_DEVICE} are allowed",
                    duration(history.retention),
                    duration(sampler.fast_interval)
                ),
            );
        }
        if metrics.peak_window > history.retention {
            return conflict(
                "metrics.peak_window",
                "history.retention",
                format!(
                    "metrics.peak_window ({}) must not exceed history.retention ({})",
                    duration(metrics.peak_window),
                    duration(history.retention)
                ),
            );
        }
        let upload_bytes = ingest.max_snapshot_upload.get() as f64;
        let upload_seconds = ingest.snapshot_upload_timeout.as_secs_f64();
        if upload_bytes > SLOWEST_SNAPSHOT_UPLOAD_RATE as f64 * upload_seconds {
            return conflict(
                "ingest.max_snapshot_upload",
                "ingest.snapshot_upload_timeout",
                format!(
                    "an upload of ingest.max_snapshot_upload ({}) within \
                     ingest.snapshot_upload_timeout ({}) needs more than {} per second; \
                     lengthen the timeout or lower the limit",
                    ingest.max_snapshot_upload,
                    duration(ingest.snapshot_upload_timeout),
                    crate::setting::format_size(SLOWEST_SNAPSHOT_UPLOAD_RATE)
                ),
            );
        }
        if source.simulate.is_some() && source.replay.is_some() {
            let reason = "choose one device source: simulate a scenario or replay a trace";
            return conflict("source.simulate", "source.replay", reason.to_owned());
        }
        if let (Some(replay), Some(record)) = (&source.replay, &source.record) {
            // Rotation renames <record>.1 … <record>.N and deletes the one
            // past N: a replayed trace among them would be moved or lost.
            let rotated = (1..=source.record_keep.get())
                .map(|n| std::path::PathBuf::from(format!("{}.{n}", record.display())));
            let rotates = source.record_mode == crate::model::RecordMode::Rotate;
            if replay == record {
                let reason = "recording into the trace being replayed would overwrite it";
                return conflict("source.replay", "source.record", reason.to_owned());
            }
            if rotates && rotated.into_iter().any(|path| path == *replay) {
                let reason = format!(
                    "source.record_mode \"rotate\" keeps {} earlier recordings of {} and \
                     moves or deletes them, the trace being replayed among them",
                    source.record_keep,
                    record.display()
                );
                return conflict("source.replay", "source.record", reason);
            }
        }
        Ok(())
    }
}
