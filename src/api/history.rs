//! `GET /api/v1/devices/{gpu}/history?window=10m&step=1s`.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::history::{Bucket, FastPoint, QueryError, WindowAnswer, WindowQuery};
use crate::model::{DeviceInfo, Timestamp};

use super::error::{ApiError, ErrorBody};
use super::{AppState, PathId};

/// Window used when the request names none.
const DEFAULT_WINDOW: Duration = Duration::from_secs(600);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// How far back from the newest sample: a duration such as `10m`, `1h`,
    /// `500ms` (at least 1ms, at most `history.retention`; default 10m).
    #[param(example = "10m")]
    window: Option<String>,
    /// Downsample into buckets this long, each with min, max and last (at
    /// least 1ms, at most `window`); without it every sample is listed.
    #[param(example = "30s")]
    step: Option<String>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HistoryResponse {
    gpu: u32,
    uuid: String,
    window_seconds: f64,
    step_seconds: Option<f64>,
    /// Start and end of the window; absent while the device has no samples.
    #[serde(skip_serializing_if = "Option::is_none", with = "crate::model::rfc3339::option")]
    #[schema(value_type = Option<String>)]
    from: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none", with = "crate::model::rfc3339::option")]
    #[schema(value_type = Option<String>)]
    to: Option<Timestamp>,
    /// Every sample in the window (without `step`).
    points: Option<Vec<PointDto>>,
    /// Downsampled buckets (with `step`), each keeping min, max and last.
    buckets: Option<Vec<Bucket>>,
}

/// One fast-tier sample.
#[serde_with::skip_serializing_none]
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct PointDto {
    #[serde(with = "crate::model::rfc3339")]
    #[schema(value_type = String)]
    at: Timestamp,
    total_bytes: Option<u64>,
    reserved_bytes: Option<u64>,
    used_bytes: Option<u64>,
    free_bytes: Option<u64>,
    gpu_utilization_ratio: Option<f64>,
    memory_bandwidth_utilization_ratio: Option<f64>,
}

#[utoipa::path(
    get,
    path = "/api/v1/devices/{gpu}/history",
    tag = "devices",
    operation_id = "get_device_history",
    summary = "Memory and utilization history of one device",
    description = "The fast tier's samples within `window` of the newest (`points`), or, \
with `step`, downsampled `buckets` keeping min, max and last of each quantity. At most \
`api.max_history_points` points or buckets.",
    params(
        ("gpu" = String, Path, description = "Device index (`0`) or UUID (`GPU-…`, any case)", example = "0"),
        HistoryParams,
    ),
    responses(
        (status = 200, description = "The samples or buckets of the window", body = HistoryResponse),
        (status = 400, description = "A parameter is not a duration, too short or too long \
(`bad_window`, `bad_step`), unknown (`bad_query`), or the answer would exceed \
`api.max_history_points` (`too_many_points`)", body = ErrorBody,
            examples(
                ("bad_window" = (value = json!({"code": "bad_window", "message": "window `soon` is not a duration (expected number at 0); use e.g. 10m, 1h, 500ms"}))),
                ("bad_step" = (value = json!({"code": "bad_step", "message": "step 2m is longer than the window 1m"}))),
                ("bad_query" = (value = json!({"code": "bad_query", "message": "Failed to deserialize query string: unknown field `windw`, expected `window` or `step`; accepted parameters: window, step"}))),
                ("too_many_points" = (value = json!({"code": "too_many_points", "message": "the window holds 14400 samples, more than api.max_history_points (2000); add a step"}))),
            )),
        (status = 404, description = "No device has that index or UUID (`unknown_device`)", body = ErrorBody,
            example = json!({"code": "unknown_device", "message": "no device with index or UUID `7`; GET /api/v1/devices lists them"})),
        (status = 500, description = "The history query task failed (`internal`); a bug", body = ErrorBody,
            example = json!({"code": "internal", "message": "task panicked"})),
    )
)]
pub async fn device_history(
    State(state): State<AppState>,
    PathId(id): PathId,
    params: Result<Query<HistoryParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params
        .map_err(|rejection| ApiError::rejected_query("bad_query", &rejection, "window, step"))?;
    let window = match params.window.as_deref() {
        Some(text) => parse_duration("window", text)?,
        None => DEFAULT_WINDOW.min(state.limits.retention),
    };
    if window > state.limits.retention {
        return Err(ApiError::bad_request(
            "bad_window",
            format!(
                "window {} is longer than the history kept (history.retention = {})",
                humantime::format_duration(window),
                humantime::format_duration(state.limits.retention)
            ),
        ));
    }
    let step = params.step.as_deref().map(|text| parse_duration("step", text)).transpose()?;
    if let Some(step) = step
        && step > window
    {
        return Err(ApiError::bad_request(
            "bad_step",
            format!(
                "step {} is longer than the window {}",
                humantime::format_duration(step),
                humantime::format_duration(window)
            ),
        ));
    }
    let device = state.store.find(&id).ok_or_else(|| ApiError::unknown_device(&id))?;
    let query = WindowQuery { window, step, max_points: state.limits.max_history_points };
    // Copying a large window out of the ring and writing it as JSON (up to
    // api.max_history_points entries) takes milliseconds: both run off the
    // async workers, so scrapes and the sampler are never queued behind them.
    let body = tokio::task::spawn_blocking(move || {
        let answer = device.query(&query).map_err(query_error)?;
        serde_json::to_vec(&response(device.info(), window, step, answer))
            .map_err(ApiError::internal)
    })
    .await
    .map_err(ApiError::internal)??;
    Ok(([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body)
        .into_response())
}

fn query_error(error: QueryError) -> ApiError {
    match error {
        QueryError::ZeroStep => ApiError::bad_request("bad_step", error.to_string()),
        QueryError::TooManyPoints { .. } | QueryError::TooManyBuckets { .. } => {
            ApiError::bad_request("too_many_points", error.to_string())
        }
    }
}

fn response(
    info: &DeviceInfo,
    window: Duration,
    step: Option<Duration>,
    answer: WindowAnswer,
) -> HistoryResponse {
    // An empty window still lists what was asked for: points, or buckets
    // with a step.
    let (span, points, buckets) = match answer {
        WindowAnswer::Empty => (None, Vec::new(), Vec::new()),
        WindowAnswer::Raw { from, to, points } => {
            (Some((from, to)), points.iter().map(point_dto).collect(), Vec::new())
        }
        WindowAnswer::Downsampled { from, to, buckets, .. } => {
            (Some((from, to)), Vec::new(), buckets)
        }
    };
    HistoryResponse {
        gpu: info.index,
        uuid: info.uuid.clone(),
        window_seconds: window.as_secs_f64(),
        step_seconds: step.map(|step| step.as_secs_f64()),
        from: span.map(|(from, _)| from),
        to: span.map(|(_, to)| to),
        points: step.is_none().then_some(points),
        buckets: step.is_some().then_some(buckets),
    }
}

fn parse_duration(name: &'static str, text: &str) -> Result<Duration, ApiError> {
    let code = if name == "window" { "bad_window" } else { "bad_step" };
    let duration = humantime::parse_duration(text).map_err(|error| {
        ApiError::bad_request(
            code,
            format!("{name} `{text}` is not a duration ({error}); use e.g. 10m, 1h, 500ms"),
        )
    })?;
    if duration < Duration::from_millis(1) {
        return Err(ApiError::bad_request(
            code,
            format!("{name} must be at least 1ms, got `{text}`"),
        ));
    }
    Ok(duration)
}

fn point_dto(point: &FastPoint) -> PointDto {
    let memory = point.memory();
    PointDto {
        at: point.at(),
        total_bytes: memory.map(|m| m.total_bytes),
        reserved_bytes: memory.and_then(|m| m.reserved_bytes),
        used_bytes: memory.map(|m| m.used_bytes),
        free_bytes: memory.map(|m| m.free_bytes),
        gpu_utilization_ratio: point.gpu_utilization(),
        memory_bandwidth_utilization_ratio: point.memory_bandwidth_utilization(),
    }
}
