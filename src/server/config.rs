//! `[server]`: the HTTP listener and its protections. Depends only on
//! `setting`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setting::{ByteSize, Form, KIB, Keys, MIB, hours, mins, ms, non_zero, secs};

/// `server.listen`: loopback only, so nothing is exposed until asked for.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9477);

/// `[server]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// address for /metrics, the REST API and health checks
    pub listen: SocketAddr,
    /// a request still running after this gets 408
    pub request_timeout: Duration,
    /// larger request bodies get 413
    #[serde(rename = "max_request_body")]
    pub max_request_body_bytes: ByteSize,
    /// requests beyond this many in flight get 503
    pub max_concurrent_requests: NonZeroUsize,
    /// /healthz, /readyz and /metrics requests in flight at most, apart from max_concurrent_requests
    pub max_concurrent_scrapes: NonZeroUsize,
    // Below the usual 1024 file-descriptor soft limit, leaving room for
    // the trace, the log and notifier connections.
    /// open connections at most; more are closed on accept and counted
    pub max_connections: NonZeroUsize,
    // A few: a probe or a scrape holds one for milliseconds, and any other
    // request on one is answered 503 and closed at once.
    /// connections beyond max_connections that serve only /healthz, /readyz and /metrics
    pub reserved_connections: usize,
    /// a new connection must complete its TLS handshake and first request head within this
    pub header_read_timeout: Duration,
    // Above the usual 15-60 s scrape intervals, so Prometheus keeps its
    // connection (and its TLS session) between scrapes.
    /// a connection with no complete request head this long after its last answer is closed
    pub idle_timeout: Duration,
    // Kernel socket buffers hold a few hundred KiB: a client reading even
    // at modem speed empties some within seconds, so a minute of no
    // progress at all is a client that stopped reading.
    /// a connection whose answer the client takes no byte of for this long is closed
    pub write_stall_timeout: Duration,
    /// exporter-toolkit web configuration (TLS, client certificates, basic auth, headers)
    pub web_config: Option<PathBuf>,
    /// how often the web configuration and the files it names are checked for changes
    pub web_config_poll_interval: Duration,
    /// verified basic-auth credentials remembered (so a scrape skips bcrypt); full: cleared
    pub auth_cache_size: NonZeroUsize,
    // Beyond it a client address is refused without a check for the rest
    // of the minute: a wrong-password flood costs one core at most, and
    // the scrapes and probes of everyone else nothing.
    /// failed basic-auth checks per client address and minute before it is refused unchecked
    pub auth_failure_budget: u32,
    // Short enough that the daemon exits within 2 s of SIGTERM.
    /// how long in-flight requests may finish after SIGTERM/SIGINT
    pub shutdown_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN,
            request_timeout: secs(10),
            max_request_body_bytes: ByteSize(MIB),
            max_concurrent_requests: non_zero(64),
            max_concurrent_scrapes: non_zero(16),
            max_connections: non_zero(512),
            reserved_connections: 16,
            header_read_timeout: secs(10),
            idle_timeout: secs(90),
            write_stall_timeout: secs(60),
            web_config: None,
            web_config_poll_interval: secs(10),
            auth_cache_size: non_zero(1024),
            auth_failure_budget: 10,
            shutdown_timeout: ms(1500),
        }
    }
}

impl ServerConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.words("listen", Form::Address, "IP:port");
        keys.duration("request_timeout", self.request_timeout, ms(1), mins(10));
        keys.size("max_request_body", self.max_request_body_bytes, KIB, 64 * MIB);
        keys.count("max_concurrent_requests", self.max_concurrent_requests.get() as u64, 1, 10_000);
        keys.count("max_concurrent_scrapes", self.max_concurrent_scrapes.get() as u64, 1, 10_000);
        keys.count("max_connections", self.max_connections.get() as u64, 1, 100_000);
        keys.count("reserved_connections", self.reserved_connections as u64, 0, 10_000);
        keys.duration("header_read_timeout", self.header_read_timeout, ms(100), mins(5));
        keys.duration("idle_timeout", self.idle_timeout, secs(1), hours(1));
        keys.duration("write_stall_timeout", self.write_stall_timeout, ms(100), hours(1));
        keys.words("web_config", Form::Path, "path; not set by default");
        keys.duration("web_config_poll_interval", self.web_config_poll_interval, secs(1), hours(1));
        keys.count("auth_cache_size", self.auth_cache_size.get() as u64, 1, 100_000);
        keys.count("auth_failure_budget", self.auth_failure_budget, 1, 10_000);
        keys.duration("shutdown_timeout", self.shutdown_timeout, Duration::ZERO, secs(10));
    }
}
