//! The HTTP server: its own accept loop (instead of `axum::serve`) so that
//! hostile or careless clients cannot take the monitor down, and the
//! exporter-toolkit web configuration (TLS, client certificates, basic
//! auth, extra headers) with reload on change.
//!
//! Owns: accepting (the connection cap, its reserve for probes and
//! scrapes, eviction of the idlest connection at the cap, the counter and
//! gauge), the TLS handshake, header-read and idle timeouts, graceful
//! close, the answer to plain HTTP on a TLS port. Routes, their limits and
//! JSON shapes are `api`'s; this module never looks inside a request beyond
//! the guard and the path a reserve slot may serve.
//! Depends on `api` (the router's error shape), `telemetry`, `clock`.

mod auth;
mod config;
mod handle;
mod slots;
mod stall;
mod tls;
mod web_config;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::{debug, info, warn};

use stall::StallGuard;

pub use auth::{Guard, TlsPeer, guard};
pub use config::{DEFAULT_LISTEN, ServerConfig};
pub use handle::{PreparedWebConfig, Verdict, WebConfigHandle};
pub use web_config::{WebConfigError, WebState};

use crate::telemetry::HttpSeries;
use slots::{Admission, Slots};

/// The connection-level bounds (`[server]` keys).
#[derive(Clone, Copy, Debug)]
pub struct ServeSettings {
    /// From accept to a complete first request head, TLS handshake included.
    pub header_read_timeout: Duration,
    /// From the end of an answer to the next complete request head.
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Connections beyond `max_connections` for probes and scrapes only.
    pub reserved_connections: usize,
    /// A write that lands no byte for this long ends the connection.
    pub write_stall_timeout: Duration,
}

/// Serves `router` on `listener` until `cancel`, then lets open
/// connections finish their request in flight and waits for them to close
/// (the caller bounds that wait with `server.shutdown_timeout`).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    web: Option<WebConfigHandle>,
    settings: ServeSettings,
    series: HttpSeries,
    cancel: CancellationToken,
) {
    let max = settings.max_connections.max(1);
    let slots = Slots::new(max, settings.reserved_connections);
    let at_cap = AtomicBool::new(false);
    // Accept failures (out of file descriptors, mostly) come ten a second
    // while they last: warn at most once per `ACCEPT_WARNING_PERIOD`, with
    // the count since, and say once when accepting works again.
    let mut failures = AcceptFailures::default();
    loop {
        let (tcp, peer) = tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Not fatal; pause so the loop does not spin.
                    failures.failed(&error);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        failures.accepted();
        let ticket = match slots.admit() {
            Admission::Free(ticket) => ticket,
            Admission::Evicted(ticket) => {
                series.evicted.inc();
                debug!(peer = %peer, "at the connection cap: closed the connection idle the longest");
                ticket
            }
            Admission::Full => {
                series.rejected.inc();
                if !at_cap.swap(true, Ordering::Relaxed) {
                    warn!(
                        max_connections = max,
                        reserved_connections = settings.reserved_connections,
                        "connection cap reached (server.max_connections and \
                         server.reserved_connections), every connection busy; \
                         closing new connections until some end"
                    );
                }
                drop(tcp);
                continue;
            }
        };
        if at_cap.swap(false, Ordering::Relaxed) {
            info!("below the connection cap again; accepting");
        }
        let connection = Connection {
            router: router.clone(),
            web: web.clone(),
            settings,
            peer,
            cancel: cancel.clone(),
        };
        let open = series.open.clone();
        open.inc();
        tokio::spawn(async move {
            // Evicted: the connection is dropped where it waits, which
            // closes its socket. Only one with nothing in flight (a TLS
            // handshake or a request head still to come) is ever chosen.
            tokio::select! {
                () = ticket.evicted() => {}
                () = connection.run(tcp, ticket.lease()) => {}
            }
            open.dec();
            drop(ticket);
        });
    }
    drop(listener);
    slots.all_closed().await;
}

struct Connection {
    router: Router,
    web: Option<WebConfigHandle>,
    settings: ServeSettings,
    peer: SocketAddr,
    cancel: CancellationToken,
}

impl Connection {
    async fn run(self, tcp: TcpStream, lease: slots::Lease) {
        let deadline = tokio::time::Instant::now() + self.settings.header_read_timeout;
        let state = self.web.as_ref().map(WebConfigHandle::current);
        let Some(config) = state.as_ref().and_then(|state| state.tls.clone()) else {
            let guarded = StallGuard::new(tcp, self.settings.write_stall_timeout);
            self.http(TokioIo::new(guarded), TlsPeer::default(), lease, deadline).await;
            return;
        };
        let mut first = [0u8; 1];
        match tokio::time::timeout_at(deadline, tcp.peek(&mut first)).await {
            Ok(Ok(1)) => {}
            _ => return,
        }
        // 0x16: a TLS handshake record. Anything else is most likely a
        // plain HTTP request, which gets a readable answer, not a reset.
        if first[0] != 0x16 {
            plain_http_on_tls(tcp, deadline).await;
            return;
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let stream = match tokio::time::timeout_at(deadline, acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                debug!(peer = %self.peer, error = %error, "TLS handshake failed");
                return;
            }
            Err(_) => return,
        };
        let verified_cert = state.as_ref().is_some_and(|state| state.require_verified_cert)
            && stream.get_ref().1.peer_certificates().is_some_and(|certs| !certs.is_empty());
        let guarded = StallGuard::new(stream, self.settings.write_stall_timeout);
        self.http(TokioIo::new(guarded), TlsPeer { verified_cert }, lease, deadline).await;
    }

    async fn http<I>(
        self,
        io: TokioIo<I>,
        tls: TlsPeer,
        lease: slots::Lease,
        deadline: tokio::time::Instant,
    ) where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let started = Arc::new(AtomicBool::new(false));
        let (router, web, peer) = (self.router, self.web, self.peer);
        let seen = started.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            seen.store(true, Ordering::Relaxed);
            request.extensions_mut().insert(ConnectInfo(peer));
            request.extensions_mut().insert(tls);
            let router = router.clone();
            let headers = web.as_ref().map(|web| web.current());
            let refused =
                lease.restricted() && !crate::api::SCRAPE_PATHS.contains(&request.uri().path());
            // A refusal is not worth keeping a reserved slot for: its
            // connection stays evictable while the 503 is written.
            let in_flight = (!refused).then(|| lease.begin());
            async move {
                let mut response = if refused {
                    reserve_only()
                } else {
                    let Ok(response) = router.oneshot(request.map(Body::new)).await;
                    response
                };
                if let Some(state) = headers {
                    for (name, value) in &state.headers {
                        response.headers_mut().insert(name.clone(), value.clone());
                    }
                }
                if let Some(in_flight) = &in_flight {
                    in_flight.answered(response.status().as_u16() < 400);
                }
                // Idle again once hyper has sent the body whole and drops it.
                Ok::<_, Infallible>(response.map(|body| {
                    Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
                        let _held_until_sent = &in_flight;
                        frame
                    }))
                }))
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            // hyper starts this timer whenever it waits for a request head,
            // so it bounds both idle keep-alive and slow headers.
            .header_read_timeout(self.settings.idle_timeout);
        let connection = builder.serve_connection(io, service);
        tokio::pin!(connection);
        let first_head = tokio::time::sleep_until(deadline);
        tokio::pin!(first_head);
        let mut closing = false;
        // A `select!` reads a branch's condition once, when it starts
        // waiting: `started`, set by the service while this waits, is
        // therefore read again when the timer fires. The header timeout
        // bounds the wait for the first head, never a connection that has
        // sent one (a stream, a kept-alive client, a slow upload).
        let mut awaiting_first_head = true;
        loop {
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        debug!(peer = %peer, error = %error, "connection ended with an error");
                    }
                    return;
                }
                () = &mut first_head, if awaiting_first_head => {
                    if started.load(Ordering::Relaxed) {
                        awaiting_first_head = false;
                        continue;
                    }
                    debug!(peer = %peer, "no complete request head within server.header_read_timeout; closing");
                    return;
                }
                () = self.cancel.cancelled(), if !closing => {
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// The answer on a reserve slot to anything but a probe or a scrape.
fn reserve_only() -> hyper::Response<Body> {
    let mut response = crate::api::ApiError::new(
        hyper::StatusCode::SERVICE_UNAVAILABLE,
        "overloaded",
        "every connection is busy (server.max_connections); only /healthz, /readyz and /metrics \
         are served on the connections kept for them (server.reserved_connections); retry shortly",
    )
    .into_response();
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
    headers.insert(hyper::header::RETRY_AFTER, hyper::header::HeaderValue::from_static("1"));
    response
}

async fn plain_http_on_tls(mut tcp: TcpStream, deadline: tokio::time::Instant) {
    const BODY: &str = "{\"code\":\"tls_required\",\"message\":\"this port serves HTTPS (server.web_config); use https://\"}";
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout_at(deadline, async {
        tcp.write_all(answer.as_bytes()).await?;
        tcp.shutdown().await
    })
    .await;
}

/// At most one warning per this long while accepting connections fails.
const ACCEPT_WARNING_PERIOD: Duration = Duration::from_secs(10);

/// The accept loop's failure log: one warning per period, one line on
/// recovery.
#[derive(Default)]
struct AcceptFailures {
    warned_at: Option<tokio::time::Instant>,
    /// Failures since the last warning, not logged one by one.
    unlogged: u64,
    /// A warning was logged and recovery has not been announced yet.
    announced: bool,
    /// When recovery was last announced: at most once per period too, so
    /// accepts and failures that alternate (descriptors freed and taken
    /// again) log two lines a period, not two a retry.
    recovered_at: Option<tokio::time::Instant>,
}

impl AcceptFailures {
    fn failed(&mut self, error: &std::io::Error) {
        // Also inside the period: a descriptor freed for a moment lets one
        // accept through and announces recovery; failing again must announce
        // recovery again, or the log ends on a false "accepting again" while
        // every accept fails (for at most a period: the next warning is due
        // by then).
        self.announced = true;
        if self.warned_at.is_some_and(|at| at.elapsed() < ACCEPT_WARNING_PERIOD) {
            self.unlogged = self.unlogged.saturating_add(1);
            debug!(error = %error, failures_since_last_warning = self.unlogged, "accepting a connection failed again");
            return;
        }
        warn!(
            error = %error,
            failures_since_last_warning = self.unlogged,
            "accepting a connection failed; retrying every 100 ms"
        );
        self.warned_at = Some(tokio::time::Instant::now());
        self.unlogged = 0;
    }

    fn accepted(&mut self) {
        if !self.announced {
            return;
        }
        // Due once a period, and always after a warning newer than the last
        // recovery line: the log must not end on that warning while accepts
        // work (still at most two lines a period, as warnings are).
        let due = self.recovered_at.is_none_or(|recovered| {
            recovered.elapsed() >= ACCEPT_WARNING_PERIOD
                || self.warned_at.is_some_and(|warned| warned > recovered)
        });
        if due {
            info!(unlogged_failures = self.unlogged, "accepting connections again");
            self.announced = false;
            self.unlogged = 0;
            self.recovered_at = Some(tokio::time::Instant::now());
        }
    }
}

#[cfg(test)]
mod connection_tests;
#[cfg(test)]
mod handle_tests;

#[cfg(test)]
mod accept_failure_tests {
    use std::time::Duration;

    use super::{ACCEPT_WARNING_PERIOD, AcceptFailures};

    fn emfile() -> std::io::Error {
        std::io::Error::from_raw_os_error(24)
    }

    /// One accept let through by a descriptor freed for a moment must not
    /// be the last word: failing again re-arms the recovery line, and the
    /// failures after the warning are counted in it.
    #[tokio::test(start_paused = true)]
    async fn failing_again_after_a_brief_recovery_announces_recovery_again() {
        let mut failures = AcceptFailures::default();
        failures.failed(&emfile());
        assert!(failures.announced);
        failures.accepted();
        assert!(!failures.announced);
        failures.failed(&emfile());
        failures.failed(&emfile());
        assert!(failures.announced, "the second run of failures is never announced as over");
        assert_eq!(failures.unlogged, 2);
        tokio::time::advance(ACCEPT_WARNING_PERIOD).await;
        failures.accepted();
        assert!(!failures.announced);
        assert_eq!(failures.unlogged, 0);
    }

    /// Accepts and failures alternating (the loop retries every 100 ms)
    /// announce recovery once a period, not at every accept.
    #[tokio::test(start_paused = true)]
    async fn alternating_accepts_and_failures_announce_recovery_once_a_period() {
        let mut failures = AcceptFailures::default();
        failures.failed(&emfile());
        failures.accepted();
        assert!(!failures.announced, "the first recovery is announced at once");
        for _ in 0..50 {
            tokio::time::advance(Duration::from_millis(100)).await;
            failures.failed(&emfile());
            failures.accepted();
            assert!(failures.announced, "no second recovery line inside the period");
        }
        assert_eq!(failures.unlogged, 50, "each failure counted for the next line");
        tokio::time::advance(ACCEPT_WARNING_PERIOD).await;
        failures.accepted();
        assert!(!failures.announced);
    }

    /// A warning logged after the last recovery line is always followed by
    /// one once accepts work, even inside the recovery line's period.
    #[tokio::test(start_paused = true)]
    async fn a_warning_after_a_recovery_is_answered_by_the_next_accept() {
        let mut failures = AcceptFailures::default();
        failures.failed(&emfile());
        tokio::time::advance(Duration::from_millis(50)).await;
        failures.accepted();
        // The next warning is due a period after the first, 50 ms short of
        // a period after the recovery line.
        tokio::time::advance(ACCEPT_WARNING_PERIOD - Duration::from_millis(50)).await;
        failures.failed(&emfile());
        assert_eq!(failures.unlogged, 0, "a new warning was logged");
        tokio::time::advance(Duration::from_millis(10)).await;
        failures.accepted();
        assert!(!failures.announced, "the log does not end on the warning");
    }
}
