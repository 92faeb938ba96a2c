//! Who may do what once a web configuration asks for credentials: every
//! route needs them except `/healthz` (a liveness probe carries none); the
//! ingest write routes (allocator reports, OOM events, their snapshots)
//! also take their own bearer token instead.
//!
//! Owns: the request guard (client certificate, basic auth) and its 401
//! answers. Depends on `handle` (state, credential cache) and `api` (the
//! JSON error, the [`Authenticated`] mark the report route reads).

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::handle::{Verdict, WebConfigHandle};
use crate::api::{ApiError, Authenticated};

/// What the TLS handshake established about the client, put on every
/// request of the connection by the accept loop.
#[derive(Clone, Copy, Debug, Default)]
pub struct TlsPeer {
    /// A client certificate that the verifier checked against the client
    /// CA (only `VerifyClientCertIfGiven`/`RequireAndVerifyClientCert`).
    pub verified_cert: bool,
}

/// The guard's settings.
#[derive(Clone)]
pub struct Guard {
    pub handle: WebConfigHandle,
    /// `ingest.token_file` is set: a bearer token on an ingest write route
    /// is checked by that route instead of here.
    pub ingest_token: bool,
    /// How long one bcrypt check may take (`server.request_timeout`).
    pub deadline: Duration,
}

/// The routes a reporter writes to, which check `ingest.token_file`'s
/// bearer token themselves: a reporter on another host holds that token,
/// not the web configuration's credentials.
fn is_ingest_write(method: &Method, path: &str) -> bool {
    let snapshot = path
        .strip_prefix("/api/v1/oom-events/")
        .and_then(|rest| rest.strip_suffix("/snapshot"))
        .is_some_and(|id| !id.is_empty() && !id.contains('/'));
    match *method {
        Method::POST => path == "/api/v1/allocator-reports" || path == "/api/v1/oom-events",
        Method::PUT => snapshot,
        _ => false,
    }
}

/// The middleware: passes the request on, marked [`Authenticated`], or
/// answers 401.
pub async fn guard(State(guard): State<Guard>, mut request: Request, next: Next) -> Response {
    let state = guard.handle.current();
    if !state.requires_auth() || request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| crate::api::reports::bearer_token(value).is_some());
    if guard.ingest_token && bearer && is_ingest_write(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    let basic = !state.users.is_empty();
    let verified = request.extensions().get::<TlsPeer>().is_some_and(|peer| peer.verified_cert);
    if state.require_verified_cert && !verified {
        return unauthorized(
            basic,
            "a client certificate signed by tls_server_config.client_ca_file is required",
        );
    }
    if basic {
        let Some((user, password)) = credentials(&request) else {
            return unauthorized(basic, "this endpoint needs HTTP basic authentication");
        };
        let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|info| info.0.ip());
        match guard.handle.verify(&state, peer, &user, &password, guard.deadline).await {
            Verdict::Accepted => {}
            Verdict::Refused => return unauthorized(basic, "wrong user name or password"),
            Verdict::Limited => {
                return retry_after(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too_many_failures",
                    "too many failed logins from this address (server.auth_failure_budget); \
                     retry in a minute",
                    "60",
                );
            }
            Verdict::Busy => {
                return retry_after(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "overloaded",
                    "another password is being checked; retry shortly",
                    "1",
                );
            }
            Verdict::TimedOut => {
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "overloaded",
                    "checking the password took longer than server.request_timeout; retry shortly",
                )
                .into_response();
            }
        }
    }
    request.extensions_mut().insert(Authenticated);
    next.run(request).await
}

fn credentials(request: &Request) -> Option<(String, String)> {
    use base64::Engine as _;
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

fn retry_after(
    status: StatusCode,
    code: &'static str,
    message: &'static str,
    seconds: &'static str,
) -> Response {
    let mut response = ApiError::new(status, code, message).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(seconds));
    response
}

fn unauthorized(basic: bool, message: &str) -> Response {
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    if basic {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"vramd\""));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ingest_write_routes_are_the_three_a_reporter_writes_to() {
        assert!(is_ingest_write(&Method::POST, "/api/v1/allocator-reports"));
        assert!(is_ingest_write(&Method::POST, "/api/v1/oom-events"));
        assert!(is_ingest_write(&Method::PUT, "/api/v1/oom-events/7/snapshot"));
        assert!(!is_ingest_write(&Method::GET, "/api/v1/oom-events"));
        assert!(!is_ingest_write(&Method::GET, "/api/v1/oom-events/7/snapshot"));
        assert!(!is_ingest_write(&Method::PUT, "/api/v1/oom-events//snapshot"));
        assert!(!is_ingest_write(&Method::PUT, "/api/v1/oom-events/7/x/snapshot"));
        assert!(!is_ingest_write(&Method::POST, "/api/v1/alerts"));
    }
}
