//! The built-in defaults, as a validated [`Config`].
//!
//! Owns: [`defaults`], [`default_alerts`] and the default constants. This is the single source
//! of the default values: the lowest configuration layer is rendered from
//! it, and `config/vramd.toml` is tested to load to exactly it. Depends only
//! on the config types and `model`'s rule table, whose defaults the
//! alert rules take.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroUsize;
use std::time::Duration;

use super::types::{
    AlertsConfig, ApiConfig, Config, HistoryConfig, IngestConfig, LogConfig, LogFormat,
    MetricsConfig, NotifyConfig, NvmlConfig, ProbeConfig, RuleConfig, RulesConfig, SamplerConfig,
    ServerConfig, SourceConfig, SourceSelection,
};
use crate::model::RuleId;

/// `server.listen`: loopback only, so nothing is exposed until asked for.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9477);
/// `simulator.gpus`.
pub const DEFAULT_SIMULATOR_GPUS: u32 = 2;
/// `simulator.seed`.
pub const DEFAULT_SIMULATOR_SEED: u64 = 1;
/// `log.level`.
pub const DEFAULT_LOG_LEVEL: &str = "info";

const fn non_zero(value: usize) -> NonZeroUsize {
    match NonZeroUsize::new(value) {
        Some(value) => value,
        None => NonZeroUsize::MIN,
    }
}

/// The configuration with nothing set: what `config/vramd.toml` documents.
pub fn defaults() -> Config {
    Config {
        server: ServerConfig {
            listen: DEFAULT_LISTEN,
            request_timeout: Duration::from_secs(10),
            max_request_body_bytes: 1 << 20,
            max_concurrent_requests: non_zero(64),
            // Short enough that the daemon exits within 2 s of SIGTERM.
            shutdown_timeout: Duration::from_millis(1500),
        },
        sampler: SamplerConfig {
            fast_interval: Duration::from_millis(250),
            slow_interval: Duration::from_secs(1),
            call_timeout: Duration::from_secs(2),
            max_processes_per_device: non_zero(64),
            discovery_retry_max: Duration::from_secs(60),
        },
        history: HistoryConfig { retention: Duration::from_secs(3600) },
        metrics: MetricsConfig { peak_window: Duration::from_secs(60) },
        api: ApiConfig {
            max_history_points: non_zero(50_000),
            max_event_streams: non_zero(16),
            max_stream_backlog: non_zero(256),
        },
        source: SourceConfig {
            selection: SourceSelection::Driver,
            record: None,
            speed: 1.0,
            max_trace_line_bytes: 1 << 20,
            max_trace_bytes: 1 << 30,
        },
        nvml: NvmlConfig {
            library_path: None,
            require_gpu: false,
            // NVML init can take seconds with persistence mode off.
            init_timeout: Duration::from_secs(30),
            // Each direction blocks ~20 ms in the driver.
            pcie_throughput: false,
            max_cmdline_bytes: 256,
            xid_events: true,
        },
        probe: ProbeConfig {
            enabled: true,
            interval: Duration::from_secs(15 * 60),
            timeout: Duration::from_secs(60),
            min_free_bytes: 2 << 30,
            margin_bytes: 1 << 30,
            block_bytes: 64 << 20,
            samples: 5,
            // Off by default: the search briefly takes a device's free
            // memory down to probe.margin, which a workload allocating at
            // that moment would feel.
            headroom: false,
            headroom_time_budget: Duration::from_secs(10),
            max_backoff: Duration::from_secs(6 * 3600),
            cuda_library: None,
        },
        log: LogConfig { format: LogFormat::Text, level: DEFAULT_LOG_LEVEL.to_owned() },
        alerts: default_alerts(),
        notify: NotifyConfig {
            alertmanager_url: None,
            webhook_url: None,
            queue_capacity: non_zero(1024),
            timeout: Duration::from_secs(5),
            resend_interval: Duration::from_secs(60),
            max_retries: 5,
            retry_backoff_max: Duration::from_secs(30),
            external_url: None,
        },
        ingest: IngestConfig {
            token_file: None,
            ttl: Duration::from_secs(30),
            rate_limit_per_second: non_zero(10),
            max_reporters: non_zero(1024),
            max_devices: non_zero(16),
            max_stats: non_zero(1024),
        },
    }
}

/// A rule with its defaults from the rule table, enabled.
fn rule(id: RuleId) -> RuleConfig {
    let spec = id.spec();
    RuleConfig {
        enabled: true,
        threshold: spec.threshold,
        clear: spec.clear,
        for_duration: spec.for_duration,
        severity: spec.severity,
    }
}

/// `[alerts]` with nothing set: every rule enabled.
pub fn default_alerts() -> AlertsConfig {
    AlertsConfig {
        evaluation_interval: Duration::from_secs(5),
        resolved_retention: Duration::from_secs(15 * 60),
        max_alerts: non_zero(1000),
        trend_window: Duration::from_secs(10 * 60),
        rules: RulesConfig {
            memory_high: rule(RuleId::MemoryHigh),
            exhaustion_forecast: rule(RuleId::ExhaustionForecast),
            exhaustion_min_fit: 0.8,
            leak_suspected: rule(RuleId::LeakSuspected),
            leak_window: Duration::from_secs(30 * 60),
            allocator_fragmentation_high: rule(RuleId::AllocatorFragmentationHigh),
            fragmentation_min_reserved_bytes: 2 << 30,
            allocator_retries: rule(RuleId::AllocatorRetries),
            retries_window: Duration::from_secs(5 * 60),
            allocator_oom: rule(RuleId::AllocatorOom),
            oom_window: Duration::from_secs(15 * 60),
            device_lost: rule(RuleId::DeviceLost),
            xid_error: rule(RuleId::XidError),
            xid_window: Duration::from_secs(15 * 60),
            probe_free_mismatch: rule(RuleId::ProbeFreeMismatch),
            probe_headroom_low: rule(RuleId::ProbeHeadroomLow),
            probe_stale_after: Duration::from_secs(2 * 15 * 60),
        },
    }
}
