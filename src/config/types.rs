//! The validated configuration: real types, every bound explicit.
//!
//! Produced only by `config::load` from the raw, string-typed layers; the
//! rest of the daemon never sees unvalidated values.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use crate::model::{ScenarioKind, Severity};

/// Everything the daemon needs to run, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub server: ServerConfig,
    pub sampler: SamplerConfig,
    pub history: HistoryConfig,
    pub metrics: MetricsConfig,
    pub api: ApiConfig,
    pub source: SourceConfig,
    pub nvml: NvmlConfig,
    pub probe: ProbeConfig,
    pub log: LogConfig,
    pub alerts: AlertsConfig,
    pub notify: NotifyConfig,
    pub ingest: IngestConfig,
}

/// `[server]`: the HTTP listener and its protections.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    /// `server.listen`: address for /metrics, the REST API and health.
    pub listen: SocketAddr,
    /// `server.request_timeout`: a request still running after this gets 408.
    pub request_timeout: Duration,
    /// `server.max_request_body`: larger bodies get 413.
    pub max_request_body_bytes: usize,
    /// `server.max_concurrent_requests`: requests beyond this get 503.
    pub max_concurrent_requests: NonZeroUsize,
    /// `server.shutdown_timeout`: how long in-flight requests may finish
    /// after SIGTERM/SIGINT before the daemon exits anyway.
    pub shutdown_timeout: Duration,
}

/// `[sampler]`: how often and how patiently devices are read.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// `sampler.fast_interval`: memory and utilization (10 ms – 1 h).
    pub fast_interval: Duration,
    /// `sampler.slow_interval`: processes and everything else (100 ms – 1 h).
    pub slow_interval: Duration,
    /// `sampler.call_timeout`: deadline for one source call; a later answer
    /// is discarded and the call counted as `kind="timeout"`.
    pub call_timeout: Duration,
    /// `sampler.max_processes_per_device`: processes kept per device and
    /// sample (largest first); the rest are counted, not kept.
    pub max_processes_per_device: NonZeroUsize,
    /// `sampler.discovery_retry_max`: ceiling of the backoff between
    /// attempts to list devices when the source is unavailable.
    pub discovery_retry_max: Duration,
}

/// `[history]`: the per-device ring buffers.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryConfig {
    /// `history.retention`: how far back queries can reach. Capacity per
    /// device and tier is `retention / interval` samples.
    pub retention: Duration,
}

/// `[metrics]`: the Prometheus exposition.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsConfig {
    /// `metrics.peak_window`: window of `vramd_memory_used_peak_bytes`.
    pub peak_window: Duration,
}

/// `[api]`: REST limits.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiConfig {
    /// `api.max_history_points`: most points one history response returns;
    /// a larger request gets 400 asking for a coarser `step`.
    pub max_history_points: NonZeroUsize,
    /// `api.max_event_streams`: open `/api/v1/alerts/stream` connections at
    /// most; more get 503.
    pub max_event_streams: NonZeroUsize,
    /// `api.max_stream_backlog`: state changes buffered for a slow stream
    /// reader before it is told it lagged.
    pub max_stream_backlog: NonZeroUsize,
}

/// `[source]` and `[simulator]`: where readings come from.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceConfig {
    pub selection: SourceSelection,
    /// `source.record`: also write every reading to this trace file.
    pub record: Option<PathBuf>,
    /// `source.speed`: simulated or replayed seconds per real second.
    pub speed: f64,
    /// `source.max_trace_line`: longest accepted line of a replayed trace.
    pub max_trace_line_bytes: usize,
    /// `source.max_trace_size`: largest replayed trace file.
    pub max_trace_bytes: u64,
}

/// Which device source the daemon reads.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceSelection {
    /// The real driver (NVML, see [`NvmlConfig`]); without one the daemon
    /// serves with no devices, unless `nvml.require_gpu` is set.
    Driver,
    /// `source.simulate` with `[simulator]`.
    Simulate(SimulatorConfig),
    /// `source.replay`: a recorded NDJSON trace.
    Replay { path: PathBuf },
}

/// `[simulator]`.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulatorConfig {
    /// `source.simulate`.
    pub scenario: ScenarioKind,
    /// `simulator.gpus`: 1–8.
    pub gpus: u32,
    /// `simulator.seed`: the same seed gives the same readings.
    pub seed: u64,
}

/// `[nvml]`: the real driver source (used when neither `source.simulate`
/// nor `source.replay` is set).
#[derive(Clone, Debug, PartialEq)]
pub struct NvmlConfig {
    /// `nvml.library_path`: load NVML from this file instead of the
    /// system's `libnvidia-ml.so.1`. Not checked for existence at load time.
    pub library_path: Option<PathBuf>,
    /// `nvml.require_gpu`: exit with status 1 at start-up, naming the
    /// library, when NVML cannot be initialised, instead of serving
    /// `vramd_nvml_up 0` and retrying.
    pub require_gpu: bool,
    /// `nvml.init_timeout`: deadline for initialising NVML and listing
    /// devices (NVML init can take seconds with persistence mode off).
    pub init_timeout: Duration,
    /// `nvml.pcie_throughput`: read PCIe TX/RX throughput on the slow tier.
    /// Off by default: each direction blocks ~20 ms in the driver.
    pub pcie_throughput: bool,
    /// `nvml.max_cmdline_bytes`: longest process command line kept
    /// (truncated beyond); 0 turns command lines off.
    pub max_cmdline_bytes: usize,
    /// `nvml.xid_events`: watch NVML Xid error events on a dedicated thread.
    pub xid_events: bool,
}

/// `[log]`.
#[derive(Clone, Debug, PartialEq)]
pub struct LogConfig {
    /// `log.format`.
    pub format: LogFormat,
    /// `log.level`: a tracing filter directive, e.g. `info` or `vramd=debug`.
    pub level: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// `[alerts]`: evaluation and the rule set.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertsConfig {
    /// `alerts.evaluation_interval`: how often rules run, in source time.
    pub evaluation_interval: Duration,
    /// `alerts.resolved_retention`: how long a resolved alert stays visible.
    pub resolved_retention: Duration,
    /// `alerts.max_alerts`: most alerts kept (pending, firing, resolved);
    /// beyond it the oldest resolved go first, then new ones are counted
    /// and dropped.
    pub max_alerts: NonZeroUsize,
    /// `alerts.trend_window`: window of the device growth estimate.
    pub trend_window: Duration,
    pub rules: RulesConfig,
}

/// What every rule has: `[alerts.<rule>]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleConfig {
    /// `enabled`.
    pub enabled: bool,
    /// `threshold`: fires when the value crosses it (unit per rule).
    pub threshold: f64,
    /// `clear`: resolves only when the value is back past this (hysteresis).
    pub clear: f64,
    /// `for`: how long the condition must hold before firing.
    pub for_duration: Duration,
    /// `severity`.
    pub severity: Severity,
}

/// The built-in rules and their settings.
#[derive(Clone, Debug, PartialEq)]
pub struct RulesConfig {
    /// `[alerts.memory_high]`: used / total (ratio), above.
    pub memory_high: RuleConfig,
    /// `[alerts.exhaustion_forecast]`: time to exhaustion (seconds), below;
    /// plus `min_fit` (0–1) for the trend to count.
    pub exhaustion_forecast: RuleConfig,
    pub exhaustion_min_fit: f64,
    /// `[alerts.leak_suspected]`: a process's steady growth (bytes/second),
    /// above, over `window`.
    pub leak_suspected: RuleConfig,
    pub leak_window: Duration,
    /// `[alerts.allocator_fragmentation_high]`: inactive_split / reserved
    /// (ratio), above, only for processes reserving at least `min_reserved`.
    pub allocator_fragmentation_high: RuleConfig,
    pub fragmentation_min_reserved_bytes: u64,
    /// `[alerts.allocator_retries]`: allocator retries within `window`
    /// (count), above.
    pub allocator_retries: RuleConfig,
    pub retries_window: Duration,
    /// `[alerts.allocator_oom]`: allocator OOMs within `window` (count).
    pub allocator_oom: RuleConfig,
    pub oom_window: Duration,
    /// `[alerts.device_lost]`: a device not answering, or NVML down (1/0).
    pub device_lost: RuleConfig,
    /// `[alerts.xid_error]`: Xid errors within `window` (count).
    pub xid_error: RuleConfig,
    pub xid_window: Duration,
    /// `[alerts.probe_free_mismatch]`: |NVML free − CUDA free| at the
    /// latest probe (bytes), above.
    pub probe_free_mismatch: RuleConfig,
    /// `[alerts.probe_headroom_low]`: largest allocatable block at the
    /// latest probe (bytes), below; the threshold is the job size.
    pub probe_headroom_low: RuleConfig,
    /// Not a key: twice `probe.interval`. A probe reading older than this
    /// (its device skipped or failing since) is not judged by the probe
    /// rules, so their alerts resolve instead of firing on stale numbers.
    pub probe_stale_after: Duration,
}

/// `[probe]`: the CUDA driver probe, run in a short-lived child process.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeConfig {
    /// `probe.enabled`.
    pub enabled: bool,
    /// `probe.interval`: time between probes of one device (source time).
    pub interval: Duration,
    /// `probe.timeout`: the child is killed after this (real time).
    pub timeout: Duration,
    /// `probe.min_free`: NVML free memory below which a device is skipped.
    pub min_free_bytes: u64,
    /// `probe.margin`: free memory no probe allocation may go below.
    pub margin_bytes: u64,
    /// `probe.block_size`: the block whose allocation is timed.
    pub block_bytes: u64,
    /// `probe.samples`: allocation/release pairs timed.
    pub samples: u32,
    /// `probe.headroom`: search for the largest allocatable block.
    pub headroom: bool,
    /// `probe.headroom_time_budget`: the search keeps its best answer after this.
    pub headroom_time_budget: Duration,
    /// `probe.max_backoff`: ceiling of the wait after repeated failures.
    pub max_backoff: Duration,
    /// `probe.cuda_library`: CUDA driver library to load instead of libcuda.so.1.
    pub cuda_library: Option<PathBuf>,
}

impl RulesConfig {
    /// How far back the rules read the slow tier (process lists and their
    /// allocator counters): the longest of the leak, retries and OOM
    /// windows, plus a minute so the oldest sample of a window is kept.
    pub fn slow_history_needed(&self) -> Duration {
        self.leak_window
            .max(self.retries_window)
            .max(self.oom_window)
            .saturating_add(Duration::from_secs(60))
    }
}

/// `[notify]`: where alert state changes are delivered.
#[derive(Clone, Debug, PartialEq)]
pub struct NotifyConfig {
    /// `notify.alertmanager_url`: Alertmanager base URL (API v2 is used).
    pub alertmanager_url: Option<String>,
    /// `notify.webhook_url`: generic JSON webhook.
    pub webhook_url: Option<String>,
    /// `notify.queue_capacity`: state changes waiting per notifier; beyond
    /// it the oldest are dropped and counted.
    pub queue_capacity: NonZeroUsize,
    /// `notify.timeout`: deadline of one delivery request.
    pub timeout: Duration,
    /// `notify.resend_interval`: firing alerts are re-sent this often.
    pub resend_interval: Duration,
    /// `notify.max_retries`: attempts after a failed delivery.
    pub max_retries: u32,
    /// `notify.retry_backoff_max`: ceiling of the backoff between attempts.
    pub retry_backoff_max: Duration,
    /// `notify.external_url`: base of generatorURL links (default
    /// `http://<server.listen>`).
    pub external_url: Option<String>,
}

/// `[ingest]`: allocator reports POSTed by workloads.
#[derive(Clone, Debug, PartialEq)]
pub struct IngestConfig {
    /// `ingest.token_file`: file holding the bearer token that writers from
    /// other hosts must send; without it only loopback may write.
    pub token_file: Option<PathBuf>,
    /// `ingest.ttl`: a report older than this (against the device's newest
    /// sample) no longer counts as live.
    pub ttl: Duration,
    /// `ingest.rate_limit`: reports per second accepted from one reporter;
    /// more get 429.
    pub rate_limit_per_second: NonZeroUsize,
    /// `ingest.max_reporters`: reporters tracked at once; a new one beyond
    /// gets 429 until old reports expire.
    pub max_reporters: NonZeroUsize,
    /// `ingest.max_devices`: devices in one report.
    pub max_devices: NonZeroUsize,
    /// `ingest.max_stats`: `memory_stats` keys per device.
    pub max_stats: NonZeroUsize,
}
