//! JSON errors with a stable `code` and a human `message`.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"code": "unknown_device", "message": "no device with index or UUID `7`; GET /api/v1/devices lists them"}))]
pub struct ErrorBody {
    /// Stable, machine-readable: `not_found`, `unknown_device`,
    /// `unknown_alert`, `unknown_oom_event` (404); `bad_window`, `bad_step`, `bad_query`,
    /// `bad_filter`, `too_many_points`, `bad_report`, `bad_oom_event`, `bad_body` (400);
    /// `missing_token`, `bad_token` (401); `remote_writes_disabled` (403);
    /// `method_not_allowed` (405); `request_timeout` (408); `body_too_large`
    /// (413); `unsupported_media_type` (415); `rate_limited`,
    /// `too_many_failures` (429); `internal` (500); `overloaded`,
    /// `too_many_streams`, `not_ready` (503).
    #[schema(example = "unknown_device")]
    pub code: &'static str,
    /// For people: what was wrong and, where it helps, what to do.
    pub message: String,
    /// Only on `/readyz`'s 503 `not_ready`: the device tiers the sampler
    /// has fallen behind on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<Vec<StaleTier>>,
}

/// One device tier the sampler has not kept up with.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct StaleTier {
    pub gpu: u32,
    pub uuid: String,
    /// `fast` or `slow`.
    #[schema(example = "fast")]
    pub tier: &'static str,
    /// How long past its promised next sample the tier is.
    pub overdue_seconds: f64,
    /// Time since the tier last stored a reading (absent: never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_success_seconds: Option<f64>,
}

/// An error answer of the API.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, body: ErrorBody { code, message: message.into(), stale: None } }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 500 `internal`: a bug or a failed task, never the client's doing.
    pub fn internal(error: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", error.to_string())
    }

    /// A query string the route's parameters refused: serde's reason, then
    /// the parameters the route accepts, so a typo shows its fix.
    pub fn rejected_query(code: &'static str, rejection: &QueryRejection, accepted: &str) -> Self {
        Self::bad_request(
            code,
            format!("{}; accepted parameters: {accepted}", rejection.body_text()),
        )
    }

    pub fn unknown_device(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown_device",
            format!("no device with index or UUID `{id}`; GET /api/v1/devices lists them"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

/// The JSON error for a status produced by a middleware layer with an empty
/// body (timeout, body limit, overload), so every error has the same shape.
pub fn for_status(status: StatusCode) -> Option<ApiError> {
    let (code, message) = match status {
        StatusCode::REQUEST_TIMEOUT => {
            ("request_timeout", "the request took longer than server.request_timeout")
        }
        StatusCode::PAYLOAD_TOO_LARGE => {
            ("body_too_large", "the request body is larger than server.max_request_body")
        }
        StatusCode::SERVICE_UNAVAILABLE => (
            "overloaded",
            "too many concurrent requests (server.max_concurrent_requests); retry shortly",
        ),
        StatusCode::METHOD_NOT_ALLOWED => {
            ("method_not_allowed", "this route does not accept that method")
        }
        _ => return None,
    };
    Some(ApiError::new(status, code, message))
}
