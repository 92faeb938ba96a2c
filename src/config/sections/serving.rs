//! `[server]`, `[metrics]` and `[api]`: what the HTTP side listens on and
//! the limits that keep a request, a scrape or a stream bounded.
//!
//! Schema entries only (see `sections`); depends on the config schema
//! machinery and nothing outside `config`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::error::ConfigError;
use crate::config::field::{ByteSize, de, ser};
use crate::config::keys::Accepts::{Int, Size, Time, Words};
use crate::config::keys::KeySpec;
use crate::config::schema::{KIB, MIB, days, hours, mins, ms, non_zero, secs, section, within};
use crate::config::walk::Values;

use super::PATH;

/// `server.listen`: loopback only, so nothing is exposed until asked for.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9477);

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
