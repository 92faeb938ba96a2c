//! The configuration schema: every key, written once.
//!
//! Owns: the validated [`Config`] and its sections. Each key's entry gives
//! its field, name, type, kind, built-in default, accepted bounds and
//! summary; `schema`'s macros make the struct, its `Default` (what
//! `config/vramd.toml` documents), the catalogue entries, reading and
//! rendering from it. The checks that involve two keys are `validate`'s.
//! Depends only on the config schema machinery and `model`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use super::error::ConfigError;
use super::field::{
    Addr, Bool, Bytes, Count, Dur, Format, Kind, Level, Mode, Opt, Path, Scenario, Speed, U32, U64,
    USize, Url,
};
use super::keys::Accepts::{Int, Size, Time, Words};
use super::keys::KeySpec;
use super::render::TomlValue;
use super::rules::RulesConfig;
use super::schema::{GIB, KIB, MIB, TIB, days, hours, mins, ms, non_zero, secs, section};
use super::walk::Values;
use crate::model::{RecordMode, ScenarioKind};

/// `server.listen`: loopback only, so nothing is exposed until asked for.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9477);

const PATH: &str = "path; not set by default";
const URL: &str = "http:// or https:// URL; not set by default";

/// Everything the daemon needs to run, validated. `Default` is the
/// configuration with nothing set.
#[derive(Clone, Debug, Default, PartialEq)]
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

/// The configuration with nothing set.
pub fn defaults() -> Config {
    Config::default()
}

/// `[alerts]` with nothing set: every rule enabled.
pub fn default_alerts() -> AlertsConfig {
    AlertsConfig::default()
}

section! {
    /// `[server]`: the HTTP listener and its protections.
    pub ServerConfig "server" {
        listen "listen": SocketAddr as Addr = DEFAULT_LISTEN, Words("IP:port"),
            "address for /metrics, the REST API and health checks";
        request_timeout "request_timeout": Duration as Dur = secs(10), Time(ms(1), mins(10)),
            "a request still running after this gets 408";
        max_request_body_bytes "max_request_body": usize as USize = 1 << 20,
            Size(KIB, 64 * MIB), "larger request bodies get 413";
        max_concurrent_requests "max_concurrent_requests": NonZeroUsize as Count = non_zero(64),
            Int(1, 10_000), "requests beyond this many in flight get 503";
        // Short enough that the daemon exits within 2 s of SIGTERM.
        shutdown_timeout "shutdown_timeout": Duration as Dur = ms(1500),
            Time(Duration::ZERO, secs(10)),
            "how long in-flight requests may finish after SIGTERM/SIGINT";
    }
}

section! {
    /// `[sampler]`: how often and how patiently devices are read.
    pub SamplerConfig "sampler" {
        fast_interval "fast_interval": Duration as Dur = ms(250), Time(ms(10), hours(1)),
            "how often memory and utilization are read";
        slow_interval "slow_interval": Duration as Dur = secs(1), Time(ms(100), hours(1))
            => ", at least sampler.fast_interval",
            "how often processes, clocks, power and health are read";
        call_timeout "call_timeout": Duration as Dur = secs(2), Time(ms(1), mins(1)),
            "deadline of one driver call; a later answer is discarded";
        max_processes_per_device "max_processes_per_device": NonZeroUsize as Count = non_zero(64),
            Int(1, 1_024), "processes kept per device and sample, largest first";
        discovery_retry_max "discovery_retry_max": Duration as Dur = secs(60),
            Time(secs(1), hours(1)),
            "longest wait between attempts to list devices when the source is unavailable";
        // A host has at most 8 GPUs, or 56 MIG devices; a trace claiming
        // thousands would cost a task each and megabytes of /metrics.
        max_devices "max_devices": NonZeroUsize as Count = non_zero(64), Int(1, 1_024),
            "devices monitored at most, from any source; the rest are left out and logged";
        // Driver calls run on these threads; a call stuck in the driver
        // holds one, and each device and tier has at most one stuck call.
        max_blocking_threads "max_blocking_threads": NonZeroUsize as Count = non_zero(64),
            Int(4, 1_024), "threads for blocking driver and file calls at most";
    }
}

section! {
    /// `[history]`: the per-device ring buffers. Capacity per device and
    /// tier is `retention / interval` samples.
    pub HistoryConfig "history" {
        retention "retention": Duration as Dur = hours(1), Time(secs(1), days(7))
            => ", at most 10000000 fast samples", "how far back history reaches";
    }
}

section! {
    /// `[metrics]`: the Prometheus exposition.
    pub MetricsConfig "metrics" {
        peak_window "peak_window": Duration as Dur = mins(1), Time(ms(1), days(7))
            => ", at most history.retention", "window of vramd_memory_used_peak_bytes";
    }
}

section! {
    /// `[api]`: REST limits.
    pub ApiConfig "api" {
        max_history_points "max_history_points": NonZeroUsize as Count = non_zero(50_000),
            Int(1, 1_000_000), "most points one history response returns";
        max_event_streams "max_event_streams": NonZeroUsize as Count = non_zero(16),
            Int(1, 1_024), "open alert event streams at most";
        max_stream_backlog "max_stream_backlog": NonZeroUsize as Count = non_zero(256),
            Int(1, 65_536), "state changes buffered per slow stream reader";
    }
}

section! {
    /// `[source]` as written; [`SourceConfig`] is what the daemon reads.
    pub(super) SourceKeys "source" {
        simulate "simulate": Option<ScenarioKind> as Opt<Scenario> = None,
            Words("scenario name; not set by default"),
            "simulate this scenario instead of reading the driver (see `vramd scenarios`)";
        replay "replay": Option<PathBuf> as Opt<Path> = None, Words(PATH),
            "replay this recorded NDJSON trace instead of reading the driver";
        record "record": Option<PathBuf> as Opt<Path> = None, Words(PATH),
            "also write every reading to this NDJSON trace";
        // Rotate: a restart never truncates the last run's trace.
        record_mode "record_mode": RecordMode as Mode = RecordMode::Rotate,
            Words("\"rotate\", \"refuse\" or \"overwrite\""),
            "what source.record does to an existing file: keep it as <file>.1, refuse to start, or truncate it";
        record_keep "record_keep": NonZeroUsize as Count = non_zero(5), Int(1, 100),
            "earlier recordings kept by record_mode = \"rotate\" (<file>.1 … <file>.N)";
        speed "speed": f64 as Speed = 1.0, Words("number, above 0, at most 10000"),
            "simulated or replayed seconds per real second";
        max_trace_line_bytes "max_trace_line": usize as USize = 1 << 20, Size(KIB, 64 * MIB),
            "longest accepted line of a replayed trace";
        max_trace_bytes "max_trace_size": u64 as Bytes = GIB, Size(MIB, 64 * GIB),
            "largest replayed trace file; its records are all held in memory";
    }
}

section! {
    /// `[simulator]` as written; used only with `source.simulate`.
    pub(super) SimulatorKeys "simulator" {
        gpus "gpus": u32 as U32 = 2, Int(1, 8), "number of simulated GPUs";
        seed "seed": u64 as U64 = 1, Int(0, u64::MAX),
            "seed of the simulator; the same seed gives the same readings";
    }
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
    /// `source.record_mode`: what recording does to an existing file.
    pub record_mode: RecordMode,
    /// `source.record_keep`: earlier recordings kept when rotating.
    pub record_keep: NonZeroUsize,
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

/// `source.simulate` with `simulator.gpus` and `simulator.seed`.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulatorConfig {
    pub scenario: ScenarioKind,
    pub gpus: u32,
    pub seed: u64,
}

impl SourceConfig {
    /// The source the keys select; `source.simulate` wins over
    /// `source.replay` here, `validate` refuses both.
    pub(super) fn from_keys(keys: SourceKeys, simulator: SimulatorKeys) -> Self {
        let selection = match (keys.simulate, keys.replay) {
            (Some(scenario), _) => SourceSelection::Simulate(SimulatorConfig {
                scenario,
                gpus: simulator.gpus,
                seed: simulator.seed,
            }),
            (None, Some(path)) => SourceSelection::Replay { path },
            (None, None) => SourceSelection::Driver,
        };
        let SourceKeys {
            record,
            speed,
            max_trace_line_bytes,
            max_trace_bytes,
            record_mode,
            record_keep,
            ..
        } = keys;
        Self {
            selection,
            record,
            speed,
            max_trace_line_bytes,
            max_trace_bytes,
            record_mode,
            record_keep,
        }
    }

    /// The keys as written; the simulator keys keep their defaults unless
    /// the simulator is selected, since they are unused otherwise.
    pub(super) fn keys(&self) -> (SourceKeys, SimulatorKeys) {
        let (mut simulate, mut replay, mut simulator) = (None, None, SimulatorKeys::default());
        match &self.selection {
            SourceSelection::Driver => {}
            SourceSelection::Simulate(chosen) => {
                simulate = Some(chosen.scenario);
                simulator = SimulatorKeys { gpus: chosen.gpus, seed: chosen.seed };
            }
            SourceSelection::Replay { path } => replay = Some(path.clone()),
        }
        let keys = SourceKeys {
            simulate,
            replay,
            record: self.record.clone(),
            speed: self.speed,
            max_trace_line_bytes: self.max_trace_line_bytes,
            max_trace_bytes: self.max_trace_bytes,
            record_mode: self.record_mode,
            record_keep: self.record_keep,
        };
        (keys, simulator)
    }
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self::from_keys(SourceKeys::default(), SimulatorKeys::default())
    }
}

section! {
    /// `[nvml]`: the real driver source (used when neither `source.simulate`
    /// nor `source.replay` is set). `library_path` is not checked for
    /// existence at load time.
    pub NvmlConfig "nvml" {
        library_path "library_path": Option<PathBuf> as Opt<Path> = None, Words(PATH),
            "load NVML from this file instead of the system's libnvidia-ml.so.1";
        require_gpu "require_gpu": bool as Bool = false, Words("true or false"),
            "exit with status 1 when NVML cannot be initialised, instead of retrying";
        // NVML init can take seconds with persistence mode off.
        init_timeout "init_timeout": Duration as Dur = secs(30), Time(ms(100), mins(10)),
            "deadline for initialising NVML and listing devices";
        pcie_throughput "pcie_throughput": bool as Bool = false, Words("true or false"),
            "read PCIe TX/RX throughput on the slow tier (blocks ~20ms per direction)";
        max_cmdline_bytes "max_cmdline_bytes": usize as USize = 256, Size(0, 64 * KIB),
            "longest process command line kept, truncated beyond; 0 turns them off";
        xid_events "xid_events": bool as Bool = true, Words("true or false"),
            "watch NVML Xid error events on a dedicated thread";
    }
}

section! {
    /// `[probe]`: the CUDA driver probe, run in a short-lived child process.
    pub ProbeConfig "probe" {
        enabled "enabled": bool as Bool = true, Words("true or false"),
            "run the CUDA driver probe (a short-lived child process per device)";
        interval "interval": Duration as Dur = mins(15), Time(mins(1), hours(24)),
            "how often each device is probed, in source time";
        timeout "timeout": Duration as Dur = mins(1), Time(secs(1), mins(10)),
            "a probe child still running after this is killed and counted as a timeout";
        min_free_bytes "min_free": u64 as Bytes = 2 * GIB, Size(256 * MIB, TIB),
            "never probe a device with less NVML free memory than this";
        margin_bytes "margin": u64 as Bytes = GIB, Size(64 * MIB, TIB),
            "free memory no probe allocation may go below";
        block_bytes "block_size": u64 as Bytes = 64 * MIB, Size(MIB, 16 * GIB),
            "block whose allocation and release are timed";
        samples "samples": u32 as U32 = 5, Int(1, 100),
            "allocation and release pairs timed per probe";
        // Off by default: the search briefly takes a device's free memory
        // down to probe.margin, which a workload allocating then would feel.
        headroom "headroom": bool as Bool = false, Words("true or false"),
            "search for the largest allocatable block (briefly takes free memory down to probe.margin)";
        headroom_time_budget "headroom_time_budget": Duration as Dur = secs(10),
            Time(ms(100), mins(5)) => ", less than probe.timeout",
            "the largest-block search stops after this, keeping its best answer";
        max_backoff "max_backoff": Duration as Dur = hours(6), Time(mins(1), days(7))
            => ", at least probe.interval",
            "longest wait between probes of a device whose probes keep failing";
        cuda_library "cuda_library": Option<PathBuf> as Opt<Path> = None, Words(PATH),
            "load the CUDA driver from this file instead of the system's libcuda.so.1";
    }
}

section! {
    /// `[log]`.
    pub LogConfig "log" {
        format "format": LogFormat as Format = LogFormat::Text, Words("\"text\" or \"json\""),
            "log line format";
        level "level": String as Level = "info".to_owned(), Words("non-empty filter"),
            "tracing filter directive, such as \"info\" or \"info,vramd=debug\"";
        // Lines beyond this wait for nobody: dropped and counted, so a
        // stalled or closed stderr never blocks sampling.
        queue_lines "queue_lines": NonZeroUsize as Count = non_zero(4_096), Int(1, 1_000_000),
            "formatted log lines that may wait for stderr before new ones are dropped";
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

section! {
    /// `[alerts]`: evaluation and the rule set.
    pub AlertsConfig "alerts" {
        evaluation_interval "evaluation_interval": Duration as Dur = secs(5),
            Time(ms(100), mins(10)), "how often the alert rules are evaluated, in source time";
        resolved_retention "resolved_retention": Duration as Dur = mins(15),
            Time(Duration::ZERO, days(7)), "how long a resolved alert stays visible";
        max_alerts "max_alerts": NonZeroUsize as Count = non_zero(1000), Int(1, 100_000),
            "most alerts kept (pending, firing, resolved); the oldest resolved go first";
        trend_window "trend_window": Duration as Dur = mins(10), Time(secs(10), hours(24)),
            "window of the per-device memory growth estimate";
        forecast_min_span "forecast_min_span": Duration as Dur = secs(90),
            Time(Duration::ZERO, hours(1)),
            "least span of samples before a device's growth can count as sustained";
        leak_check_interval "leak_check_interval": Duration as Dur = secs(30),
            Time(secs(1), mins(10)), "how often every process is re-assessed for leaks, in source time";
        leak_shortest_window "leak_shortest_window": Duration as Dur = mins(2),
            Time(secs(30), hours(24)),
            "shortest window a leak is judged on; longer ones double up to leak_suspected.window";
        leak_warmup "leak_warmup": Duration as Dur = mins(3), Time(Duration::ZERO, hours(1)),
            "grace after a process's first sample before it is judged for leaks";
        + rules: RulesConfig
    }
}

section! {
    /// `[notify]`: where alert state changes are delivered.
    pub NotifyConfig "notify" {
        alertmanager_url "alertmanager_url": Option<String> as Opt<Url> = None, Words(URL),
            "send alert state changes to this Alertmanager (API v2)";
        webhook_url "webhook_url": Option<String> as Opt<Url> = None, Words(URL),
            "POST alert state changes as JSON to this URL";
        queue_capacity "queue_capacity": NonZeroUsize as Count = non_zero(1024),
            Int(1, 100_000), "state changes waiting per notifier; beyond it the oldest are dropped";
        timeout "timeout": Duration as Dur = secs(5), Time(ms(100), mins(1)),
            "deadline of one delivery request";
        resend_interval "resend_interval": Duration as Dur = mins(1), Time(secs(1), hours(1)),
            "how often firing alerts are sent again";
        max_retries "max_retries": u32 as U32 = 5, Int(0, 100), "attempts after a failed delivery";
        retry_backoff_max "retry_backoff_max": Duration as Dur = secs(30),
            Time(ms(100), mins(10)), "longest wait between delivery attempts";
        external_url "external_url": Option<String> as Opt<Url> = None, Words(URL),
            "base of the generatorURL links in notifications (default http://<server.listen>)";
    }
}

section! {
    /// `[ingest]`: allocator reports POSTed by workloads.
    pub IngestConfig "ingest" {
        token_file "token_file": Option<PathBuf> as Opt<Path> = None,
            Words("path; not set by default (loopback only)"),
            "file holding the bearer token writers from other hosts must send";
        ttl "ttl": Duration as Dur = secs(30), Time(secs(1), hours(1)),
            "age after which an allocator report no longer counts";
        rate_limit_per_second "rate_limit": NonZeroUsize as Count = non_zero(10), Int(1, 1_000),
            "allocator reports per second from one reporter";
        max_reporters "max_reporters": NonZeroUsize as Count = non_zero(1024), Int(1, 100_000),
            "reporters tracked at once";
        max_devices "max_devices": NonZeroUsize as Count = non_zero(16), Int(1, 64),
            "devices in one allocator report";
        max_stats "max_stats": NonZeroUsize as Count = non_zero(1024), Int(1, 65_536),
            "memory_stats keys per device in a report";
    }
}

/// Every section's keys, in rendering order.
pub(super) fn catalogue() -> Vec<KeySpec> {
    [
        ServerConfig::KEYS,
        SamplerConfig::KEYS,
        HistoryConfig::KEYS,
        MetricsConfig::KEYS,
        ApiConfig::KEYS,
        SourceKeys::KEYS,
        SimulatorKeys::KEYS,
        NvmlConfig::KEYS,
        ProbeConfig::KEYS,
        LogConfig::KEYS,
        AlertsConfig::KEYS,
        RulesConfig::KEYS,
        NotifyConfig::KEYS,
        IngestConfig::KEYS,
    ]
    .concat()
}

/// Every key with `config`'s value, in catalogue order; `None` for an
/// optional key that is not set.
pub(super) fn entries(config: &Config) -> Vec<(&'static str, Option<TomlValue>)> {
    let (source, simulator) = config.source.keys();
    [
        config.server.entries(),
        config.sampler.entries(),
        config.history.entries(),
        config.metrics.entries(),
        config.api.entries(),
        source.entries(),
        simulator.entries(),
        config.nvml.entries(),
        config.probe.entries(),
        config.log.entries(),
        config.alerts.entries(),
        config.notify.entries(),
        config.ingest.entries(),
    ]
    .concat()
}

/// Reads every section; the checks across keys are `validate`'s.
pub(super) fn read(values: &Values) -> Result<Config, ConfigError> {
    Ok(Config {
        server: ServerConfig::read(values)?,
        sampler: SamplerConfig::read(values)?,
        history: HistoryConfig::read(values)?,
        metrics: MetricsConfig::read(values)?,
        api: ApiConfig::read(values)?,
        source: SourceConfig::from_keys(SourceKeys::read(values)?, SimulatorKeys::read(values)?),
        nvml: NvmlConfig::read(values)?,
        probe: ProbeConfig::read(values)?,
        log: LogConfig::read(values)?,
        alerts: AlertsConfig::read(values)?,
        notify: NotifyConfig::read(values)?,
        ingest: IngestConfig::read(values)?,
    })
}
