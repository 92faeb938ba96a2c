//! The HTTP surface: `/metrics`, the REST API under `/api/v1/`, `/healthz`
//! and `/readyz`.
//!
//! Owns: routes, request limits (body size, timeout, concurrency), JSON
//! shapes and error codes. Reads history and telemetry only; never calls a
//! device source, so a stuck driver can't slow a request.
//! Depends on: `history`, `analysis`, `exposition`, `telemetry`, `model`.

mod alerts;
mod dto;
mod error;
mod history;
pub mod reports;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use crate::alerts::board::AlertBoard;
use crate::exposition;
use crate::history::HistoryStore;
use crate::ingest::{ReportLimits, ReportStore, StoreLimits};
use crate::telemetry::Telemetry;

pub use error::{ApiError, ErrorBody};

/// The bounds the HTTP layer enforces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub request_timeout: Duration,
    pub max_request_body_bytes: usize,
    pub max_concurrent_requests: usize,
    pub max_history_points: usize,
    /// How far back history reaches (`history.retention`).
    pub retention: Duration,
    /// Open `/api/v1/alerts/stream` connections at most.
    pub max_event_streams: usize,
}

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<HistoryStore>,
    pub telemetry: Arc<Telemetry>,
    pub board: Arc<AlertBoard>,
    /// One permit per open event stream (`api.max_event_streams`).
    pub streams: Arc<tokio::sync::Semaphore>,
    pub limits: Limits,
    pub ingest: Arc<reports::Ingest>,
}

impl AppState {
    pub fn new(
        store: Arc<HistoryStore>,
        telemetry: Arc<Telemetry>,
        board: Arc<AlertBoard>,
        limits: Limits,
    ) -> Self {
        let streams = Arc::new(tokio::sync::Semaphore::new(limits.max_event_streams));
        let ingest = Arc::new(reports::Ingest {
            store: Arc::new(ReportStore::new(StoreLimits {
                ttl: Duration::from_secs(30),
                rate_limit_per_second: 10,
                max_reporters: 1024,
            })),
            limits: ReportLimits { max_devices: 16, max_stats: 1024 },
            token: None,
        });
        Self { store, telemetry, board, streams, limits, ingest }
    }

    /// Replaces the default (loopback-only, default bounds) report intake.
    pub fn with_ingest(mut self, ingest: reports::Ingest) -> Self {
        self.ingest = Arc::new(ingest);
        self
    }
}

/// Builds the router with every route and protection.
pub fn router(state: AppState) -> Router {
    let limits = state.limits;
    let routes = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/v1/devices", get(devices))
        .route("/api/v1/devices/{gpu}", get(device))
        .route("/api/v1/devices/{gpu}/history", get(history::device_history))
        .route("/api/v1/allocator-reports", get(reports::list).post(reports::post))
        .route("/api/v1/alerts", get(alerts::list))
        .route("/api/v1/alerts/stream", get(alerts::stream))
        .route("/api/v1/alerts/{id}", get(alerts::one))
        .fallback(not_found)
        .with_state(state);
    protect(routes, limits)
}

/// Wraps routes in the request protections: JSON errors, load shedding
/// beyond the concurrency limit, the request timeout and the body limit.
fn protect(routes: Router, limits: Limits) -> Router {
    routes.layer(
        ServiceBuilder::new()
            .layer(middleware::from_fn(json_errors))
            .layer(axum::error_handling::HandleErrorLayer::new(overloaded))
            .layer(tower::load_shed::LoadShedLayer::new())
            .layer(GlobalConcurrencyLimitLayer::new(limits.max_concurrent_requests.max(1)))
            .layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                limits.request_timeout,
            ))
            .layer(DefaultBodyLimit::max(limits.max_request_body_bytes)),
    )
}

async fn overloaded(_error: tower::BoxError) -> Response {
    StatusCode::SERVICE_UNAVAILABLE.into_response()
}

/// Gives error statuses produced by layers (which have empty bodies) the
/// same JSON shape as handler errors.
async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    if is_json || response.status().is_success() {
        return response;
    }
    match error::for_status(response.status()) {
        Some(api_error) => api_error.into_response(),
        None => response,
    }
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no route for {} {}; see /api/v1/devices, /metrics, /healthz, /readyz",
            request.method(),
            request.uri().path()
        ),
    )
}

async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let body =
        exposition::render(&state.store, &state.telemetry, &state.board).map_err(|error| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", error.to_string())
        })?;
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(exposition::CONTENT_TYPE));
    Ok(response)
}

/// The process is responsive. Says nothing about GPUs, on purpose: a
/// liveness probe that failed on GPU trouble would restart a healthy daemon.
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// The sampler has completed a cycle, so `/metrics` holds real readings
/// (or the definite news that the device source is down).
async fn readyz(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    if state.store.cycle_completed() {
        Ok(Json(json!({ "status": "ready" })))
    } else {
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "the sampler has not completed its first cycle yet",
        ))
    }
}

async fn devices(State(state): State<AppState>) -> Json<dto::DeviceList> {
    let devices = state
        .store
        .devices()
        .iter()
        .map(|device| dto::summary(device.info(), &device.live()))
        .collect();
    Json(dto::DeviceList { devices })
}

async fn device(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<dto::DeviceDetail>, ApiError> {
    let device = state.store.find(&id).ok_or_else(|| ApiError::unknown_device(&id))?;
    let counts =
        dto::HistoryCounts { fast_samples: device.fast_len(), slow_samples: device.slow_len() };
    let analysis = state.board.analysis(&device.info().uuid);
    Ok(Json(dto::detail(device.info(), &device.live(), counts, analysis)))
}
