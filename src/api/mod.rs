//! The HTTP surface: `/metrics`, the REST API under `/api/v1/`, `/healthz`,
//! `/readyz` and the live page at `/` (`ui`).
//!
//! Owns: routes, request limits (body size, timeout, concurrency), JSON
//! shapes and error codes. Reads history and telemetry only; never calls a
//! device source, so a stuck driver can't slow a request.
//! Depends on: `history`, `analysis` (the published snapshot),
//! `alerts::board`, `ingest`, `exposition`, `telemetry`, `model`.

mod alerts;
mod config;
mod dto;
mod error;
mod failure_budget;
mod history;
mod history_body;
mod oom;
mod oom_snapshot;
pub mod openapi;
pub mod reports;
mod ui;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod write_tests;

#[cfg(test)]
mod history_tests;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use serde::Serialize;
use tower::ServiceBuilder;

use crate::alerts::board::AlertBoard;
use crate::analysis::snapshot::AnalysisBoard;
use crate::exposition;
use crate::history::{HistoryStore, NotReady};
use crate::telemetry::Telemetry;

pub use config::ApiConfig;
pub use error::{ApiError, ErrorBody, StaleTier};
pub use failure_budget::FailureBudget;

/// Put on a request by the server's guard when the web configuration's
/// credentials (client certificate, basic auth) were checked and accepted;
/// the report route then needs no bearer token from a remote writer.
#[derive(Clone, Copy, Debug)]
pub struct Authenticated;

/// The bounds the HTTP layer enforces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub request_timeout: Duration,
    /// How long a snapshot upload may take (`ingest.snapshot_upload_timeout`),
    /// in place of `request_timeout`.
    pub snapshot_upload_timeout: Duration,
    pub max_request_body_bytes: usize,
    pub max_concurrent_requests: usize,
    /// `/healthz`, `/readyz` and `/metrics` in flight at most, apart from
    /// `max_concurrent_requests`.
    pub max_concurrent_scrapes: usize,
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
    pub analyses: Arc<AnalysisBoard>,
    pub board: Arc<AlertBoard>,
    /// One permit per open event stream (`api.max_event_streams`).
    pub streams: Arc<tokio::sync::Semaphore>,
    pub limits: Limits,
    pub ingest: Arc<reports::Ingest>,
    /// `[metrics]`: how `/metrics` labels device series.
    pub metrics: Arc<exposition::MetricsConfig>,
}

impl AppState {
    pub fn new(
        store: Arc<HistoryStore>,
        telemetry: Arc<Telemetry>,
        analyses: Arc<AnalysisBoard>,
        board: Arc<AlertBoard>,
        limits: Limits,
        ingest: reports::Ingest,
    ) -> Self {
        let streams = Arc::new(tokio::sync::Semaphore::new(limits.max_event_streams));
        let ingest = Arc::new(ingest);
        let metrics = Arc::default();
        Self { store, telemetry, analyses, board, streams, limits, ingest, metrics }
    }

    /// `/metrics` as `[metrics]` says (the defaults otherwise).
    #[must_use]
    pub fn with_metrics(mut self, metrics: exposition::MetricsConfig) -> Self {
        self.metrics = Arc::new(metrics);
        self
    }
}

/// Builds the router with every route and protection. Routes come only
/// from [`openapi::operations`], so `GET /api/v1/openapi.json` describes
/// exactly what is served.
pub fn router(state: AppState) -> Router {
    router_guarded(state, |routes| routes)
}

/// [`router`] with `guard` (the web configuration's authentication) wrapped
/// around the routes inside the request protections, so a flood of bad
/// credentials is bounded by the same concurrency limits.
pub fn router_guarded(state: AppState, guard: impl FnOnce(Router) -> Router) -> Router {
    let limits = state.limits;
    let (routes, document) = openapi::build();
    let routes = routes
        .fallback(not_found)
        .layer(Extension(openapi::Document::new(&document)))
        .with_state(state);
    protect(guard(routes), limits)
}

/// The routes a monitoring system polls; they have their own concurrency
/// (`server.max_concurrent_scrapes`), so slow API or report clients holding
/// every `server.max_concurrent_requests` slot cannot fail a liveness probe
/// or a scrape.
pub const SCRAPE_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The two pools of request slots.
#[derive(Clone)]
struct Slots {
    api: Arc<tokio::sync::Semaphore>,
    scrapes: Arc<tokio::sync::Semaphore>,
}

/// Wraps routes in the request protections: JSON errors, load shedding
/// beyond the concurrency limits, the request timeout and the body limit.
fn protect(routes: Router, limits: Limits) -> Router {
    let slots = Slots {
        api: Arc::new(tokio::sync::Semaphore::new(limits.max_concurrent_requests.max(1))),
        scrapes: Arc::new(tokio::sync::Semaphore::new(limits.max_concurrent_scrapes.max(1))),
    };
    routes.layer(
        ServiceBuilder::new()
            // gzip when asked (Prometheus always asks): level 1, measured on
            // the 8 GPU x 64 process exposition at 1.1 ms for 790 KB -> 67 KB;
            // level 6 took 8.8 ms for 52 KB, 28x the 0.31 ms render
            // (docs/performance.md). The default predicate leaves the SSE
            // stream and tiny bodies alone.
            .layer(
                tower_http::compression::CompressionLayer::new()
                    .gzip(true)
                    .quality(tower_http::CompressionLevel::Fastest),
            )
            .layer(middleware::from_fn(json_errors))
            .layer(middleware::from_fn_with_state(slots, admit))
            .layer(middleware::from_fn_with_state(limits, deadline))
            .layer(DefaultBodyLimit::max(limits.max_request_body_bytes)),
    )
}

/// Answers 408 to a request still running at its deadline:
/// `server.request_timeout`, or for a snapshot upload, whose body may be a
/// gigabyte at an ordinary network's pace, `ingest.snapshot_upload_timeout`.
async fn deadline(State(limits): State<Limits>, request: Request, next: Next) -> Response {
    let upload = oom_snapshot::is_upload(&request);
    let limit = if upload { limits.snapshot_upload_timeout } else { limits.request_timeout };
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) if upload => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the upload took longer than ingest.snapshot_upload_timeout",
        )
        .into_response(),
        Err(_) => StatusCode::REQUEST_TIMEOUT.into_response(),
    }
}

/// Takes a slot from the request's pool for as long as the handler runs,
/// or answers 503 at once when the pool is empty (shedding, not queueing).
async fn admit(State(slots): State<Slots>, request: Request, next: Next) -> Response {
    let pool =
        if SCRAPE_PATHS.contains(&request.uri().path()) { &slots.scrapes } else { &slots.api };
    let Ok(_slot) = pool.clone().try_acquire_owned() else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    next.run(request).await
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

/// A `{gpu}` or `{id}` path segment, percent-decoded. axum refuses one that
/// is not UTF-8 (`%FF`) with a plain-text 400; no device or alert has such a
/// name, so the handlers answer it with their JSON 404 like any unknown
/// name (the segment shown as sent, still percent-encoded).
pub(crate) struct PathId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        if let Ok(Path(id)) = Path::<String>::from_request_parts(parts, state).await {
            return Ok(Self(id));
        }
        let raw = parts
            .extensions
            .get::<axum::extract::MatchedPath>()
            .and_then(|matched| {
                matched
                    .as_str()
                    .split('/')
                    .zip(parts.uri.path().split('/'))
                    .find(|(template, _)| template.starts_with('{'))
                    .map(|(_, raw)| raw.to_owned())
            })
            .unwrap_or_default();
        Ok(Self(raw))
    }
}

/// Whether a `gpu` filter (absent: any device) names the device with this
/// index or UUID (in any case).
/// The one way a handler streams a body: fused, because a body may be
/// polled again after its end (tower-http's compression does), and a
/// stream such as `unfold` panics there, closing the connection with no
/// answer.
fn streamed_body<S, E>(parts: S) -> axum::body::Body
where
    S: futures_util::Stream<Item = Result<axum::body::Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    axum::body::Body::from_stream(futures_util::StreamExt::fuse(parts))
}

fn gpu_matches(filter: Option<&str>, index: u32, uuid: &str) -> bool {
    filter.is_none_or(|gpu| index.to_string() == gpu || uuid.eq_ignore_ascii_case(gpu))
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

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    operation_id = "get_metrics",
    summary = "Prometheus metrics",
    description = "The Prometheus text exposition format (0.0.4): `vramd_memory_*`, \
`vramd_process_*`, `vramd_allocator_*`, `vramd_alert_active`, health and build series.",
    responses(
        (status = 200, description = "Every series, in the Prometheus text format", body = String,
            content_type = "text/plain",
            example = "vramd_memory_used_bytes{gpu=\"0\",uuid=\"GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20\"} 8589934592\n"),
        (status = 500, description = "The exposition could not be rendered (`internal`); a bug",
            body = ErrorBody, example = json!({"code": "internal", "message": "duplicate metric"})),
    )
)]
pub(crate) async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let body = exposition::render(
        &state.store,
        &state.telemetry,
        &state.analyses.latest(),
        &state.board,
        &state.metrics,
    )
    .map_err(ApiError::internal)?;
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(exposition::CONTENT_TYPE));
    Ok(response)
}

/// The answer of `/healthz` and `/readyz`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Status {
    /// `ok` (`/healthz`) or `ready` (`/readyz`).
    #[schema(example = "ok")]
    pub status: &'static str,
}

#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    operation_id = "get_healthz",
    summary = "Liveness",
    description = "The process answers. Never reflects GPU health, on purpose: a liveness \
probe that failed on GPU trouble would restart a healthy daemon.",
    responses(
        (status = 200, description = "The process is responsive", body = Status,
            example = json!({"status": "ok"})),
    )
)]
pub(crate) async fn healthz() -> Json<Status> {
    Json(Status { status: "ok" })
}

#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    operation_id = "get_readyz",
    summary = "Readiness: the sampler is sampling",
    description = "200 while the sampler keeps up: it has completed a first cycle, and every \
tier of every device has completed a step (a stored reading, or an answer from the driver, a \
lost GPU's error included) within one interval plus the call deadline and as much again (at \
least 1 s). 503 `not_ready` otherwise, listing the stale device tiers: a call stuck in the \
driver past its deadline, or a sampler that stopped, shows here, not only in `/metrics`.",
    responses(
        (status = 200, description = "The sampler is keeping up", body = Status,
            example = json!({"status": "ready"})),
        (status = 503, description = "The sampler has not completed its first cycle or has \
fallen behind on the listed device tiers (`not_ready`, with `stale`), or more than \
`server.max_concurrent_requests` requests are in flight (`overloaded`)", body = ErrorBody,
            examples(
                ("not_ready" = (value = json!({"code": "not_ready", "message": "the sampler has fallen behind on 1 device tier", "stale": [{"gpu": 1, "uuid": "GPU-5c3e1d2a-0000-4d7b-9a1e-3b5c7d9e1f20", "tier": "fast", "overdue_seconds": 4.2, "since_success_seconds": 5.4}]}))),
                ("overloaded" = (value = json!({"code": "overloaded", "message": "too many concurrent requests (server.max_concurrent_requests); retry shortly"}))),
            )),
    )
)]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let not_ready = match state.store.readiness(crate::clock::wall_now()) {
        Ok(()) => return Json(Status { status: "ready" }).into_response(),
        Err(not_ready) => not_ready,
    };
    let stale: Vec<StaleTier> = match &not_ready {
        NotReady::FirstCycle => Vec::new(),
        NotReady::Behind(tiers) => tiers
            .iter()
            .map(|(device, late)| {
                let info = device.info();
                StaleTier {
                    gpu: info.gpu_index(),
                    uuid: info.uuid.clone(),
                    tier: late.tier.as_str(),
                    overdue_seconds: late.overdue.as_secs_f64(),
                    since_success_seconds: late.since_success.map(|age| age.as_secs_f64()),
                }
            })
            .collect(),
    };
    let mut error =
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", not_ready.to_string());
    error.body.stale = (!stale.is_empty()).then_some(stale);
    error.into_response()
}

#[utoipa::path(
    get,
    path = "/api/v1/devices",
    tag = "devices",
    operation_id = "list_devices",
    summary = "Every device",
    description = "Identity, `up`, memory (with `used_peak_bytes`), utilization, process \
count and the latest read failures of every monitored device.",
    responses(
        (status = 200, description = "Every monitored device, by index", body = dto::DeviceList,
            links(
                ("GetDevice" = (
                    operation_id = "get_device",
                    parameters(("gpu" = "$response.body#/devices/0/uuid")),
                    description = "The first device listed, by its UUID",
                )),
                ("GetDeviceHistory" = (
                    operation_id = "get_device_history",
                    parameters(("gpu" = "$response.body#/devices/0/uuid")),
                    description = "The history of the first device listed, by its UUID",
                )),
            )),
    )
)]
pub(crate) async fn devices(State(state): State<AppState>) -> Json<dto::DeviceList> {
    let devices = state
        .store
        .devices()
        .iter()
        .map(|device| dto::summary(device.info(), &device.live(), &device.probe()))
        .collect();
    Json(dto::DeviceList { devices })
}

#[utoipa::path(
    get,
    path = "/api/v1/devices/{gpu}",
    tag = "devices",
    operation_id = "get_device",
    summary = "One device in detail",
    description = "The summary plus health (clocks, ECC, …), the memory `accounting` \
breakdown, processes with their allocator statistics and `breakdown`, and the latest \
`analysis` (growth, time to exhaustion, pressure, suspected leaks).",
    params(
        ("gpu" = String, Path, description = "Device index (`0`) or UUID (`GPU-…`, any case)", example = "0"),
    ),
    responses(
        (status = 200, description = "The device", body = dto::DeviceDetail),
        (status = 404, description = "No device has that index or UUID (`unknown_device`)", body = ErrorBody,
            example = json!({"code": "unknown_device", "message": "no device with index or UUID `7`; GET /api/v1/devices lists them"})),
    )
)]
pub(crate) async fn device(
    State(state): State<AppState>,
    PathId(id): PathId,
) -> Result<Json<dto::DeviceDetail>, ApiError> {
    let device = state.store.find(&id).ok_or_else(|| ApiError::unknown_device(&id))?;
    let counts =
        dto::HistoryCounts { fast_samples: device.fast_len(), slow_samples: device.slow_len() };
    let analysis = state.analyses.analysis(&device.info().uuid);
    Ok(Json(dto::detail(device.info(), &device.live(), &device.probe(), counts, analysis)))
}
