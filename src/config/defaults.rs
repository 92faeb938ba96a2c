//! The built-in defaults, as a validated [`Config`].
//!
//! Owns: [`defaults`] and the default constants. This is the single source
//! of the default values: the lowest configuration layer is rendered from
//! it, and `config/vramd.toml` is tested to load to exactly it. Depends only
//! on the config types.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroUsize;
use std::time::Duration;

use super::types::{
    ApiConfig, Config, HistoryConfig, LogConfig, LogFormat, MetricsConfig, NvmlConfig,
    SamplerConfig, ServerConfig, SourceConfig, SourceSelection,
};

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
        api: ApiConfig { max_history_points: non_zero(50_000) },
        source: SourceConfig {
            selection: SourceSelection::Driver,
            record: None,
            speed: 1.0,
            max_trace_line_bytes: 1 << 20,
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
        log: LogConfig { format: LogFormat::Text, level: DEFAULT_LOG_LEVEL.to_owned() },
    }
}
