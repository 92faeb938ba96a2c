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
use serde_json::json;

use crate::ingest::{self, Refused, ReportLimits, ReportStore, ReportView};

use super::AppState;
use super::error::ApiError;

/// What the write endpoint needs.
pub struct Ingest {
    pub store: Arc<ReportStore>,
    pub limits: ReportLimits,
    /// Bearer token for writers that are not on loopback.
    pub token: Option<String>,
}

/// Loopback may write; others only with the configured bearer token.
fn authorise(
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
    token: Option<&str>,
) -> Result<(), ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    if let (Some(expected), Some(presented)) = (token, presented) {
        // Equal-time comparison is not needed for a shared secret on a
        // rate-limited write path, but a wrong token is always refused.
        return if expected.as_bytes() == presented.as_bytes() {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "bad_token",
                "the bearer token is not the one configured (ingest.token_file)",
            ))
        };
    }
    if peer.is_some_and(|addr| addr.ip().is_loopback()) {
        return Ok(());
    }
    match (token, presented) {
        (Some(_), None) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing_token",
            "writes from other hosts need Authorization: Bearer <token> (ingest.token_file)",
        )),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "remote_writes_disabled",
            "only loopback may write allocator reports; set ingest.token_file to accept others",
        )),
    }
}

pub async fn post(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| *addr);
    authorise(peer, request.headers(), state.ingest.token.as_deref())?;
    let limit = state.limits.max_request_body_bytes;
    let body: Bytes = axum::body::to_bytes(request.into_body(), limit).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the report is larger than server.max_request_body ({limit} bytes)"),
        )
    })?;
    let report = ingest::report::parse(&body, &state.ingest.limits)
        .map_err(|error| ApiError::bad_request("bad_report", error.to_string()))?;
    let devices = report.devices.len();
    match state.ingest.store.accept(report, tokio::time::Instant::now()) {
        Ok(()) => {
            Ok((StatusCode::ACCEPTED, Json(json!({ "status": "accepted", "devices": devices })))
                .into_response())
        }
        Err(refused) => {
            let retry_after = match &refused {
                Refused::RateLimited { retry_after, .. }
                | Refused::TooManyReporters { retry_after, .. } => *retry_after,
            };
            let mut response =
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", refused.to_string())
                    .into_response();
            let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            Ok(response)
        }
    }
}

#[derive(serde::Serialize)]
pub struct ReportList {
    reports: Vec<ReportView>,
}

pub async fn list(State(state): State<AppState>) -> Json<ReportList> {
    Json(ReportList { reports: state.ingest.store.views() })
}
