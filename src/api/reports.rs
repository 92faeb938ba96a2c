//! `POST /api/v1/allocator-reports` (workloads report their allocator
//! statistics) and `GET /api/v1/allocator-reports` (what was received, and
//! whether it joined a process).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::ingest::{self, Refused, ReportLimits, ReportStore, ReportView};

use super::AppState;
use super::error::{ApiError, ErrorBody};

/// What the write endpoint needs.
pub struct Ingest {
    pub store: Arc<ReportStore>,
    /// Event ids and the rate limit of OOM events.
    /// Shared with the driver trace, which numbers its OOM events alike.
    pub oom: Arc<crate::ingest::OomIntake>,
    /// Called (on a blocking thread) with each stored OOM event and its
    /// device's index: the wiring writes it into a recording.
    pub oom_hook: Option<OomHook>,
    /// Where uploaded OOM snapshots are kept (`ingest.snapshot_dir`); none:
    /// uploads are refused.
    pub snapshots: Option<Arc<crate::ingest::SnapshotStore>>,
    pub limits: ReportLimits,
    /// Bearer token for writers that are not on loopback.
    pub token: Option<String>,
    /// Wrong bearer tokens per client address (`server.auth_failure_budget`).
    pub token_failures: super::FailureBudget,
}

/// Where an accepted OOM event goes besides history (a recording).
pub type OomHook = Arc<dyn Fn(u32, &crate::model::OomEvent) + Send + Sync>;

/// Who may write reports, OOM events and snapshots: a request the web
/// configuration's credentials let in ([`super::Authenticated`]), else
/// loopback, else the configured bearer token.
///
/// The token of an `Authorization: Bearer <token>` value. The scheme is
/// matched without regard to case (RFC 9110, 11.1: `bearer` is `Bearer`).
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim_start())
}

/// Why a write is not allowed, as its answer; `None` for an authenticated
/// web client, a writer on loopback, or the configured bearer token. A
/// presented token is checked even from loopback; an address that presented
/// `server.auth_failure_budget` wrong tokens this minute gets 429 without
/// a check, so a token cannot be guessed at request rate.
pub(super) fn refusal(request: &Request, ingest: &Ingest) -> Option<Response> {
    let (token, failures) = (ingest.token.as_deref(), &ingest.token_failures);
    if request.extensions().get::<super::Authenticated>().is_some() {
        return None;
    }
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| *addr);
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token);
    if let (Some(expected), Some(presented)) = (token, presented) {
        let address = peer.map(|addr| addr.ip());
        if failures.spent(address) {
            let mut refused = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_failures",
                "too many wrong bearer tokens from this address (server.auth_failure_budget); \
                 retry in a minute",
            )
            .into_response();
            refused.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            return Some(refused);
        }
        // Equal-time comparison is not needed for a shared secret whose
        // guesses are budgeted per address, but a wrong token is always
        // refused.
        if expected.as_bytes() == presented.as_bytes() {
            return None;
        }
        failures.fail(address);
        return Some(
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "bad_token",
                "the bearer token is not the one configured (ingest.token_file)",
            )
            .into_response(),
        );
    }
    if peer.is_some_and(|addr| is_loopback(addr.ip())) {
        return None;
    }
    let refusal = match (token, presented) {
        (Some(_), None) => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing_token",
            "writes from other hosts need Authorization: Bearer <token> (ingest.token_file)",
        ),
        _ => ApiError::new(
            StatusCode::FORBIDDEN,
            "remote_writes_disabled",
            "only loopback may write allocator reports; set ingest.token_file to accept others",
        ),
    };
    Some(refusal.into_response())
}

/// Loopback, including IPv4-mapped loopback (`::ffff:127.0.0.1`), which is
/// how a local IPv4 client arrives on a `[::]` listener.
fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The body of a JSON write, at most `limit` bytes. A body whose announced
/// length is over the limit is refused before any of it is read (a 10 GB
/// `Content-Length` gets 413 at once, not a timeout). A `Content-Length`
/// that is not a number, or that the body does not match (cut short, or
/// longer), is the client's malformed request: 400, not 413.
pub(super) async fn json_body(request: Request, limit: usize) -> Result<Bytes, ApiError> {
    require_json(request.headers())?;
    let announced = match request.headers().get(header::CONTENT_LENGTH) {
        None => None,
        Some(_) => Some(announced_length(request.headers()).ok_or_else(|| {
            ApiError::bad_request("bad_body", "Content-Length is not a number of bytes")
        })?),
    };
    if announced.is_some_and(|length| length > limit as u64) {
        return Err(body_too_large(limit));
    }
    let body = axum::body::to_bytes(request.into_body(), limit).await.map_err(|error| {
        if over_the_limit(&error) {
            body_too_large(limit)
        } else {
            ApiError::bad_request("bad_body", format!("the body broke off: {error}"))
        }
    })?;
    match announced {
        Some(length) if length != body.len() as u64 => Err(ApiError::bad_request(
            "bad_body",
            format!("Content-Length announced {length} bytes, the body has {}", body.len()),
        )),
        _ => Ok(body),
    }
}

/// Whether reading a body failed on the size limit, not on the body itself
/// (a connection closed before the announced length arrived).
fn over_the_limit(error: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = cause {
        if current.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = current.source();
    }
    false
}

/// Writes must say they are JSON: a form or `text/plain` POST needs no CORS
/// preflight, so without this a web page on the host could post reports.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if json {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "reports must be sent with Content-Type: application/json",
        ))
    }
}

/// The `Content-Length` a request announces, when it is a number.
pub(super) fn announced_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
}

fn body_too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the report is larger than server.max_request_body ({limit} bytes)"),
    )
}

/// The answer to an accepted report.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Accepted {
    /// Always `accepted`.
    #[schema(example = "accepted")]
    pub status: &'static str,
    /// Devices of the report kept (a device with an empty `memory_stats` and
    /// no snapshot says nothing and is not kept).
    #[schema(example = 1)]
    pub devices: usize,
}

#[utoipa::path(
    post,
    path = "/api/v1/allocator-reports",
    tag = "allocator-reports",
    operation_id = "post_allocator_report",
    summary = "Report a workload's PyTorch allocator statistics",
    description = "Replaces the reporter's (hostname and PID) previous report. Loopback may \
write; other hosts need `Authorization: Bearer <token>` matching `ingest.token_file`. The \
report joins the NVML process with the same device UUID whose host PID, or namespace PID, is \
`reporter.pid` (docs/api.md).",
    request_body(
        content = crate::ingest::report::ReportDocument,
        content_type = "application/json",
        description = "The allocator report document, version 1",
    ),
    security((), ("bearer" = [])),
    responses(
        (status = 202, description = "Accepted", body = Accepted,
            example = json!({"status": "accepted", "devices": 1})),
        (status = 400, description = "Not a valid report (`bad_report`): malformed JSON, \
unknown version or field, negative or non-finite number, a value above 2^53, a negative \
`max_split_size` other than -1, allocated > reserved, reserved beyond the device's total \
memory, a missing key, more than `ingest.max_devices` devices or `ingest.max_stats` keys; a \
`Content-Length` that is not a number or that the body does not match (`bad_body`)", body = ErrorBody,
            example = json!({"code": "bad_report", "message": "unsupported report version 9; this vramd reads version 1"})),
        (status = 401, description = "From another host with `ingest.token_file` set: no \
bearer token (`missing_token`) or the wrong one (`bad_token`)", body = ErrorBody,
            examples(
                ("missing_token" = (value = json!({"code": "missing_token", "message": "writes from other hosts need Authorization: Bearer <token> (ingest.token_file)"}))),
                ("bad_token" = (value = json!({"code": "bad_token", "message": "the bearer token is not the one configured (ingest.token_file)"}))),
            )),
        (status = 403, description = "From another host without `ingest.token_file` \
(`remote_writes_disabled`)", body = ErrorBody,
            example = json!({"code": "remote_writes_disabled", "message": "only loopback may write allocator reports; set ingest.token_file to accept others"})),
        (status = 413, description = "The body, or its announced `Content-Length`, is larger \
than `server.max_request_body` (`body_too_large`); refused before reading it", body = ErrorBody,
            example = json!({"code": "body_too_large", "message": "the report is larger than server.max_request_body (1048576 bytes)"})),
        (status = 415, description = "The request's `Content-Type` is not `application/json` \
(`unsupported_media_type`): a form or text POST from a web page is refused", body = ErrorBody,
            example = json!({"code": "unsupported_media_type", "message": "reports must be sent with Content-Type: application/json"})),
        (status = 429, description = "More than `ingest.rate_limit` reports a second from \
this reporter, or `ingest.max_reporters` reporters already tracked (`rate_limited`); \
`server.auth_failure_budget` wrong bearer tokens from this address this minute \
(`too_many_failures`, `Retry-After: 60`)",
            body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before reporting again")),
            example = json!({"code": "rate_limited", "message": "more than 10 reports per second from this reporter (ingest.rate_limit)"})),
    )
)]
pub async fn post(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    if let Some(refused) = refusal(&request, &state.ingest) {
        return Ok(refused);
    }
    let body = json_body(request, state.limits.max_request_body_bytes).await?;
    let report = ingest::report::parse(&body, &state.ingest.limits)
        .map_err(|error| ApiError::bad_request("bad_report", error.to_string()))?;
    let total_of = |uuid: &str| {
        let device = state.store.find(uuid)?;
        device.live().fast?.memory.map(|memory| memory.total_bytes)
    };
    ingest::report::check_device_totals(&report, total_of)
        .map_err(|error| ApiError::bad_request("bad_report", error.to_string()))?;
    let devices = report.devices.len();
    match state.ingest.store.accept(report, tokio::time::Instant::now()) {
        Ok(()) => {
            Ok((StatusCode::ACCEPTED, Json(Accepted { status: "accepted", devices }))
                .into_response())
        }
        Err(refused) => Ok(too_many_requests(&refused)),
    }
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ReportList {
    reports: Vec<ReportView>,
}

#[utoipa::path(
    get,
    path = "/api/v1/allocator-reports",
    tag = "allocator-reports",
    operation_id = "list_allocator_reports",
    summary = "The allocator reports held",
    description = "One entry per device of each reporter's latest report, and the NVML \
process it joined (`matched`, `matched_pid`). A report older than `ingest.ttl` against the \
device's newest sample is dropped, and one whose process exited goes with it.",
    responses(
        (status = 200, description = "The reports held", body = ReportList),
    )
)]
pub async fn list(State(state): State<AppState>) -> Json<ReportList> {
    Json(ReportList { reports: state.ingest.store.views() })
}

/// 429 `rate_limited` with `Retry-After` in whole seconds (at least 1): a
/// write beyond the reporter's rate, for reports, OOM events and uploads.
pub(super) fn too_many_requests(refused: &Refused) -> Response {
    let message = refused.to_string();
    let mut response =
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message).into_response();
    let seconds = refused.retry_after().as_secs_f64().ceil().max(1.0) as u64;
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

#[cfg(test)]
mod bearer_tests {
    use super::bearer_token;

    #[test]
    fn the_bearer_scheme_is_matched_in_any_case() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER  abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }
}
