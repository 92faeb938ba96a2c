//! The configuration schema: every key, written once.
//!
//! Owns: the validated [`Config`], its sections and [`Document`], the
//! file's shape that serde reads and `check-config` writes. Each key is one
//! field of a section with its summary as a doc comment and one line with
//! its name, type, built-in default and bounds; `schema`'s macros make the
//! serde struct, its `Default` (what `config/vramd.toml` documents), the
//! catalogue entries and the bounds check from it. The checks that involve
//! two keys are `validate`'s. Depends only on the config schema machinery
//! and `model`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::field::{ByteSize, de, ser};
use super::keys::Accepts::{Int, Size, Time, Words};
use super::keys::KeySpec;
use super::rules::AlertsConfig;
use super::schema::{GIB, KIB, MIB, TIB, days, hours, mins, ms, non_zero, secs, section, within};
use super::walk::Values;
use crate::model::{RecordMode, ScenarioKind};

/// `server.listen`: loopback only, so nothing is exposed until asked for.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9477);

const PATH: &str = "path; not set by default";
const URL: &str = "http:// or https:// URL; not set by default";

/// The sections, in file and rendering order, each named once; from the
/// list come the validated [`Config`], the file's [`Document`], the bounds
/// check of every section and the catalogue. `[source]` and `[simulator]`
/// are two tables of the file but one [`SourceConfig`], between the two
/// lists.
macro_rules! document {
    ($($before:ident: $b_ty:ty,)* [source] $($after:ident: $a_ty:ty,)*) => {
        /// Everything the daemon needs to run, validated. `Default` is the
        /// configuration with nothing set.
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct Config {
            $(pub $before: $b_ty,)*
            pub source: SourceConfig,
            $(pub $after: $a_ty,)*
        }

        /// The configuration file's shape, section by section: what serde
        /// reads and `check-config` writes.
        #[derive(Clone, Default, Deserialize, Serialize)]
        #[serde(deny_unknown_fields, default)]
        pub(super) struct Document {
            $($before: $b_ty,)*
            source: SourceKeys,
            simulator: SimulatorKeys,
            $($after: $a_ty,)*
        }

        impl Document {
            /// Every value within its key's bounds.
            pub(super) fn check(&self, values: &Values) -> Result<(), ConfigError> {
                $(self.$before.check(values)?;)*
                self.source.check(values)?;
                self.simulator.check(values)?;
                $(self.$after.check(values)?;)*
                Ok(())
            }
        }

        impl From<Document> for Config {
            fn from(file: Document) -> Self {
                Config {
                    $($before: file.$before,)*
                    source: SourceConfig::from_keys(file.source, file.simulator),
                    $($after: file.$after,)*
                }
            }
        }

        impl From<&Config> for Document {
            fn from(config: &Config) -> Self {
                let (source, simulator) = config.source.keys();
                let config = config.clone();
                Document {
                    $($before: config.$before,)*
                    source,
                    simulator,
                    $($after: config.$after,)*
                }
            }
        }

        /// Every section's keys, in rendering order.
        pub(super) fn catalogue() -> Vec<KeySpec> {
            [$(<$b_ty>::KEYS,)* SourceKeys::KEYS, SimulatorKeys::KEYS, $(<$a_ty>::KEYS,)*].concat()
        }
    };
}

document! {
    server: ServerConfig,
    sampler: SamplerConfig,
    history: HistoryConfig,
    metrics: MetricsConfig,
    api: ApiConfig,
    [source]
    nvml: NvmlConfig,
    probe: ProbeConfig,
    log: LogConfig,
    alerts: AlertsConfig,
    notify: NotifyConfig,
    ingest: IngestConfig,
    kubernetes: KubernetesConfig,
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
    pub struct ServerConfig "server" {
        /// address for /metrics, the REST API and health checks
        listen "listen": SocketAddr = DEFAULT_LISTEN, Words("IP:port");
        /// a request still running after this gets 408
        request_timeout "request_timeout": Duration = secs(10), Time(ms(1), mins(10));
        /// larger request bodies get 413
        max_request_body_bytes "max_request_body": ByteSize = ByteSize(MIB), Size(KIB, 64 * MIB);
        /// requests beyond this many in flight get 503
        max_concurrent_requests "max_concurrent_requests": NonZeroUsize = non_zero(64),
            Int(1, 10_000);
        /// /healthz, /readyz and /metrics requests in flight at most, apart from max_concurrent_requests
        max_concurrent_scrapes "max_concurrent_scrapes": NonZeroUsize = non_zero(16),
            Int(1, 10_000);
        // Below the usual 1024 file-descriptor soft limit, leaving room for
        // the trace, the log and notifier connections.
        /// open connections at most; more are closed on accept and counted
        max_connections "max_connections": NonZeroUsize = non_zero(512), Int(1, 100_000);
        /// a new connection must complete its TLS handshake and first request head within this
        header_read_timeout "header_read_timeout": Duration = secs(10), Time(ms(100), mins(5));
        // Above the usual 15-60 s scrape intervals, so Prometheus keeps
        // its connection (and its TLS session) between scrapes.
        /// a connection with no complete request head this long after its last answer is closed
        idle_timeout "idle_timeout": Duration = secs(90), Time(secs(1), hours(1));
        /// exporter-toolkit web configuration (TLS, client certificates, basic auth, headers)
        web_config "web_config": Option<PathBuf> = None, Words(PATH);
        /// how often the web configuration and the files it names are checked for changes
        web_config_poll_interval "web_config_poll_interval": Duration = secs(10),
            Time(secs(1), hours(1));
        /// verified basic-auth credentials remembered (so a scrape skips bcrypt); full: cleared
        auth_cache_size "auth_cache_size": NonZeroUsize = non_zero(1024), Int(1, 100_000);
        // Short enough that the daemon exits within 2 s of SIGTERM.
        /// how long in-flight requests may finish after SIGTERM/SIGINT
        shutdown_timeout "shutdown_timeout": Duration = ms(1500), Time(Duration::ZERO, secs(10));
    }
}

section! {
    /// `[sampler]`: how often and how patiently devices are read.
    pub struct SamplerConfig "sampler" {
        /// how often memory and utilization are read
        fast_interval "fast_interval": Duration = ms(250), Time(ms(10), hours(1));
        /// how often processes, clocks, power and health are read
        slow_interval "slow_interval": Duration = secs(1),
            Time(ms(100), hours(1)) => ", at least sampler.fast_interval";
        /// deadline of one driver call; a later answer is discarded
        call_timeout "call_timeout": Duration = secs(2), Time(ms(1), mins(1));
        /// processes kept per device and sample, largest first
        max_processes_per_device "max_processes_per_device": NonZeroUsize = non_zero(64),
            Int(1, 1_024);
        /// longest wait between attempts to list devices when the source is unavailable
        discovery_retry_max "discovery_retry_max": Duration = secs(60), Time(secs(1), hours(1));
        // A host has at most 8 GPUs, or 56 MIG devices; a trace claiming
        // thousands would cost a task each and megabytes of /metrics.
        /// devices monitored at most, from any source; the rest are left out and logged
        max_devices "max_devices": NonZeroUsize = non_zero(64), Int(1, 1_024);
        // Driver calls run on these threads; a call stuck in the driver
        // holds one, and each device and tier has at most one stuck call.
        /// threads for blocking driver and file calls at most
        max_blocking_threads "max_blocking_threads": NonZeroUsize = non_zero(64), Int(4, 1_024);
    }
}

section! {
    /// `[history]`: the per-device ring buffers. Capacity per device and
    /// tier is `retention / interval` samples.
    pub struct HistoryConfig "history" {
        /// how far back history reaches
        retention "retention": Duration = hours(1),
            Time(secs(1), days(7)) => ", at most 10000000 fast samples";
    }
}

section! {
    /// `[metrics]`: the Prometheus exposition.
    pub struct MetricsConfig "metrics" {
        /// window of vramd_memory_used_peak_bytes
        peak_window "peak_window": Duration = mins(1),
            Time(ms(1), days(7)) => ", at most history.retention";
    }
}

section! {
    /// `[api]`: REST limits.
    pub struct ApiConfig "api" {
        /// most points one history response returns
        max_history_points "max_history_points": NonZeroUsize = non_zero(50_000), Int(1, 1_000_000);
        /// open alert event streams at most
        max_event_streams "max_event_streams": NonZeroUsize = non_zero(16), Int(1, 1_024);
        /// state changes buffered per slow stream reader
        max_stream_backlog "max_stream_backlog": NonZeroUsize = non_zero(256), Int(1, 65_536);
    }
}

section! {
    /// `[source]` as written; [`SourceConfig`] is what the daemon reads.
    pub(super) struct SourceKeys "source" {
        /// simulate this scenario instead of reading the driver (see `vramd scenarios`)
        simulate "simulate": Option<ScenarioKind> = None,
            Words("scenario name; not set by default");
        /// replay this recorded NDJSON trace instead of reading the driver
        replay "replay": Option<PathBuf> = None, Words(PATH);
        /// also write every reading to this NDJSON trace
        record "record": Option<PathBuf> = None, Words(PATH);
        // Rotate: a restart never truncates the last run's trace.
        /// what source.record does to an existing file: keep it as <file>.1, refuse to start, or
        /// truncate it
        record_mode "record_mode": RecordMode = RecordMode::Rotate,
            Words("\"rotate\", \"refuse\" or \"overwrite\"");
        /// earlier recordings kept by record_mode = "rotate" (<file>.1 … <file>.N)
        record_keep "record_keep": NonZeroUsize = non_zero(5), Int(1, 100);
        /// simulated or replayed seconds per real second
        speed "speed": f64 = 1.0, Words("number, above 0, at most 10000");
        /// longest accepted line of a replayed trace
        max_trace_line_bytes "max_trace_line": ByteSize = ByteSize(MIB), Size(KIB, 64 * MIB);
        /// largest replayed trace file; its records are all held in memory
        max_trace_bytes "max_trace_size": ByteSize = ByteSize(GIB), Size(MIB, 64 * GIB);
    }
}

section! {
    /// `[simulator]` as written; used only with `source.simulate`.
    pub(super) struct SimulatorKeys "simulator" {
        /// number of simulated GPUs
        gpus "gpus": u32 = 2, Int(1, 8);
        /// seed of the simulator; the same seed gives the same readings
        seed "seed": u64 = 1, Int(0, u64::MAX);
        /// give each simulated process a container ID (for testing Kubernetes attribution)
        container_ids "container_ids": bool = false, Words("true or false");
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
    pub max_trace_line_bytes: ByteSize,
    /// `source.max_trace_size`: largest replayed trace file.
    pub max_trace_bytes: ByteSize,
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
    /// `simulator.container_ids`.
    pub container_ids: bool,
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
                container_ids: simulator.container_ids,
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
                simulator = SimulatorKeys {
                    gpus: chosen.gpus,
                    seed: chosen.seed,
                    container_ids: chosen.container_ids,
                };
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
    pub struct NvmlConfig "nvml" {
        /// load NVML from this file instead of the system's libnvidia-ml.so.1
        library_path "library_path": Option<PathBuf> = None, Words(PATH);
        /// exit with status 1 when NVML cannot be initialised, instead of retrying
        require_gpu "require_gpu": bool = false, Words("true or false");
        // NVML init can take seconds with persistence mode off.
        /// deadline for initialising NVML and listing devices
        init_timeout "init_timeout": Duration = secs(30), Time(ms(100), mins(10));
        /// read PCIe TX/RX throughput on the slow tier (blocks ~20ms per direction)
        pcie_throughput "pcie_throughput": bool = false, Words("true or false");
        /// longest process command line kept, truncated beyond; 0 turns them off
        max_cmdline_bytes "max_cmdline_bytes": ByteSize = ByteSize(256), Size(0, 64 * KIB);
        /// watch NVML Xid error events on a dedicated thread
        xid_events "xid_events": bool = true, Words("true or false");
    }
}

section! {
    /// `[probe]`: the CUDA driver probe, run in a short-lived child process.
    pub struct ProbeConfig "probe" {
        /// run the CUDA driver probe (a short-lived child process per device)
        enabled "enabled": bool = true, Words("true or false");
        /// how often each device is probed, in source time
        interval "interval": Duration = mins(15), Time(mins(1), hours(24));
        /// a probe child still running after this is killed and counted as a timeout
        timeout "timeout": Duration = mins(1), Time(secs(1), mins(10));
        /// never probe a device with less NVML free memory than this
        min_free_bytes "min_free": ByteSize = ByteSize(2 * GIB), Size(256 * MIB, TIB);
        /// free memory no probe allocation may go below
        margin_bytes "margin": ByteSize = ByteSize(GIB), Size(64 * MIB, TIB);
        /// block whose allocation and release are timed
        block_bytes "block_size": ByteSize = ByteSize(64 * MIB), Size(MIB, 16 * GIB);
        /// allocation and release pairs timed per probe
        samples "samples": u32 = 5, Int(1, 100);
        // Off by default: the search briefly takes a device's free memory
        // down to probe.margin, which a workload allocating then would feel.
        /// search for the largest allocatable block (briefly takes free memory down to
        /// probe.margin)
        headroom "headroom": bool = false, Words("true or false");
        /// the largest-block search stops after this, keeping its best answer
        headroom_time_budget "headroom_time_budget": Duration = secs(10),
            Time(ms(100), mins(5)) => ", less than probe.timeout";
        /// longest wait between probes of a device whose probes keep failing
        max_backoff "max_backoff": Duration = hours(6),
            Time(mins(1), days(7)) => ", at least probe.interval";
        /// load the CUDA driver from this file instead of the system's libcuda.so.1
        cuda_library "cuda_library": Option<PathBuf> = None, Words(PATH);
    }
}

section! {
    /// `[log]`.
    pub struct LogConfig "log" {
        /// log line format
        format "format": LogFormat = LogFormat::Text, Words("\"text\" or \"json\"");
        /// tracing filter directive, such as "info" or "info,vramd=debug"
        level "level": String = "info".to_owned(), Words("non-empty filter");
        // Lines beyond this wait for nobody: dropped and counted, so a
        // stalled or closed stderr never blocks sampling.
        /// formatted log lines that may wait for stderr before new ones are dropped
        queue_lines "queue_lines": NonZeroUsize = non_zero(4_096), Int(1, 1_000_000);
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
    /// `[notify]`: where alert state changes are delivered.
    pub struct NotifyConfig "notify" {
        /// send alert state changes to this Alertmanager (API v2)
        alertmanager_url "alertmanager_url": Option<String> = None, Words(URL);
        /// POST alert state changes as JSON to this URL
        webhook_url "webhook_url": Option<String> = None, Words(URL);
        /// state changes waiting per notifier; beyond it the oldest are dropped
        queue_capacity "queue_capacity": NonZeroUsize = non_zero(1024), Int(1, 100_000);
        /// deadline of one delivery request
        timeout "timeout": Duration = secs(5), Time(ms(100), mins(1));
        /// how often firing alerts are sent again
        resend_interval "resend_interval": Duration = mins(1), Time(secs(1), hours(1));
        /// attempts after a failed delivery
        max_retries "max_retries": u32 = 5, Int(0, 100);
        /// longest wait between delivery attempts
        retry_backoff_max "retry_backoff_max": Duration = secs(30), Time(ms(100), mins(10));
        /// base of the generatorURL links in notifications (default http://<server.listen>)
        external_url "external_url": Option<String> = None, Words(URL);
    }
}

section! {
    /// `[ingest]`: allocator reports POSTed by workloads.
    pub struct IngestConfig "ingest" {
        /// file holding the bearer token writers from other hosts must send
        token_file "token_file": Option<PathBuf> = None,
            Words("path; not set by default (loopback only)");
        /// age after which an allocator report no longer counts
        ttl "ttl": Duration = secs(30), Time(secs(1), hours(1));
        /// allocator reports per second from one reporter
        rate_limit_per_second "rate_limit": NonZeroUsize = non_zero(10), Int(1, 1_000);
        /// reporters tracked at once
        max_reporters "max_reporters": NonZeroUsize = non_zero(1024), Int(1, 100_000);
        /// devices in one allocator report
        max_devices "max_devices": NonZeroUsize = non_zero(16), Int(1, 64);
        /// memory_stats keys per device in a report
        max_stats "max_stats": NonZeroUsize = non_zero(1024), Int(1, 65_536);
        /// allocator OOM events kept per device; the oldest is dropped beyond
        max_oom_events "max_oom_events": NonZeroUsize = non_zero(64), Int(1, 10_000);
        /// directory for allocator snapshots uploaded to OOM events
        snapshot_dir "snapshot_dir": Option<PathBuf> = None,
            Words("path; not set by default (uploads refused)");
        /// bytes of all uploaded snapshots together; the oldest upload goes first beyond
        max_snapshot_bytes "max_snapshot_bytes": ByteSize = ByteSize(4 * GIB), Size(MIB, 16 * TIB);
        /// bytes of one uploaded snapshot
        max_snapshot_upload "max_snapshot_upload": ByteSize = ByteSize(GIB), Size(KIB, 64 * GIB);
    }
}

section! {
    /// `[kubernetes]`: pod attribution from the kubelet and the container
    /// runtime (CRI), over their unix sockets.
    pub struct KubernetesConfig "kubernetes" {
        /// label GPUs and processes with their pods, from the kubelet and the container runtime
        enabled "enabled": bool = false, Words("true or false");
        /// the kubelet's pod-resources gRPC socket (device allocations)
        pod_resources_socket "pod_resources_socket": PathBuf =
            PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"), Words("path");
        /// the CRI runtime socket (containerd; /var/run/crio/crio.sock for CRI-O)
        runtime_socket "runtime_socket": PathBuf =
            PathBuf::from("/run/containerd/containerd.sock"), Words("path");
        /// how often both APIs are asked, in real time
        refresh_interval "refresh_interval": Duration = secs(10), Time(secs(1), hours(1));
        /// deadline of one call, connecting included
        call_timeout "call_timeout": Duration = secs(2),
            Time(ms(10), mins(1)) => ", at most kubernetes.refresh_interval";
        /// pod containers (runtime) and GPU allocations (kubelet) kept at most; answers are decoded up to 8 KiB per entry
        max_containers "max_containers": NonZeroUsize = non_zero(1024), Int(1, 100_000);
    }
}
