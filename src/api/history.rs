//! `GET /api/v1/devices/{gpu}/history?window=10m&step=1s`.

use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::history::{Bucket, FastPoint, QueryError, WindowAnswer, WindowQuery};
use crate::model::{DeviceInfo, Timestamp};

use super::error::{ApiError, ErrorBody};
use super::history_body::{Entries, split_at_trailing_list, streamed};
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
    /// Every sample in the window (without `step`). Always last, and
    /// serialized here empty: `history_body` writes its entries in parts.
    points: Option<Vec<PointDto>>,
    /// Downsampled buckets (with `step`), each keeping min, max and last.
    /// Last, as `points`.
    buckets: Option<Vec<Bucket>>,
}

/// One fast-tier sample.
#[serde_with::skip_serializing_none]
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct PointDto {
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
    // Only finds the window (a snapshot of the ring's chunk pointers and a
    // binary search): the samples are read, downsampled and written as JSON
    // by the body, a bounded part at a time, as the client reads.
    let answer = device.query(&query).map_err(query_error)?;
    let (entries, response) = response(device.info(), window, step, answer);
    let json = serde_json::to_vec(&response).map_err(ApiError::internal)?;
    let body = match entries {
        None => Body::from(json),
        Some(entries) => {
            let (head, tail) = split_at_trailing_list(json).map_err(ApiError::internal)?;
            streamed(head, entries, tail)
        }
    };
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

/// The answer with its list of points or buckets left empty, and that
/// list's entries (none for an empty window), which the body writes out
/// in parts.
fn response(
    info: &DeviceInfo,
    window: Duration,
    step: Option<Duration>,
    answer: WindowAnswer,
) -> (Option<Entries>, HistoryResponse) {
    let (span, entries) = match answer {
        WindowAnswer::Empty => (None, None),
        WindowAnswer::Raw { from, to, points } => {
            (Some((from, to)), Some(Entries::Points(points.into_cursor())))
        }
        WindowAnswer::Downsampled { from, to, buckets, .. } => {
            (Some((from, to)), Some(Entries::Buckets(buckets.into_cursor())))
        }
    };
    // An empty window still lists what was asked for: points, or buckets
    // with a step.
    let response = HistoryResponse {
        gpu: info.index,
        uuid: info.uuid.clone(),
        window_seconds: window.as_secs_f64(),
        step_seconds: step.map(|step| step.as_secs_f64()),
        from: span.map(|(from, _)| from),
        to: span.map(|(_, to)| to),
        points: step.is_none().then(Vec::new),
        buckets: step.is_some().then(Vec::new),
    };
    (entries, response)
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

pub(super) fn point_dto(point: &FastPoint) -> PointDto {
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

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::history::{HistoryStore, Sizing};
    use crate::model::{FastReading, MemoryInfo};

    /// A device with `count` samples 100 ms apart, some fields absent.
    fn device(count: i64) -> std::sync::Arc<crate::history::DeviceHistory> {
        let store = HistoryStore::new(Sizing {
            fast_capacity: 4_000,
            slow_capacity: 4,
            peak_window: Duration::from_secs(1),
            oom_events: 1,
        });
        store.set_devices(vec![DeviceInfo {
            index: 3,
            uuid: "GPU-3".into(),
            name: "Fake".into(),
            pci_bus_id: None,
            driver_version: None,
            mig: None,
        }]);
        let device = store.find("3").unwrap();
        for i in 0..count {
            let used = 1_000 + (i as u64 * 7919) % 5_000;
            device
                .record_fast(FastReading {
                    at: Timestamp::from_unix_millis(1_700_000_000_000 + i * 100),
                    memory: (i % 5 != 0).then_some(MemoryInfo {
                        total_bytes: 8_000,
                        reserved_bytes: (i % 3 == 0).then_some(16),
                        used_bytes: used,
                        free_bytes: 8_000 - 16 - used,
                    }),
                    gpu_utilization: (i % 7 != 0).then_some((i % 100) as f64 / 100.0),
                    memory_bandwidth_utilization: None,
                })
                .unwrap();
        }
        device
    }

    /// The answer as it was written before it was streamed: whole.
    fn whole(
        info: &DeviceInfo,
        window: Duration,
        step: Option<Duration>,
        answer: WindowAnswer,
    ) -> Vec<u8> {
        let (entries, mut response) = response(info, window, step, answer.clone());
        assert!(entries.is_some());
        match answer {
            WindowAnswer::Raw { points, .. } => {
                response.points = Some(points.iter().map(point_dto).collect())
            }
            WindowAnswer::Downsampled { buckets, .. } => response.buckets = Some(buckets.to_vec()),
            WindowAnswer::Empty => {}
        }
        serde_json::to_vec(&response).unwrap()
    }

    async fn streamed_bytes(
        info: &DeviceInfo,
        window: Duration,
        step: Option<Duration>,
        answer: WindowAnswer,
    ) -> Vec<u8> {
        let (entries, response) = response(info, window, step, answer);
        let (head, tail) = split_at_trailing_list(serde_json::to_vec(&response).unwrap()).unwrap();
        let body = streamed(head, entries.unwrap(), tail);
        body.collect().await.unwrap().to_bytes().to_vec()
    }

    #[tokio::test]
    async fn the_streamed_json_is_byte_for_byte_the_whole_answer() {
        // Lengths around a part's size: none, one part, a part and one more.
        for count in [1, 511, 512, 513, 1_500] {
            let device = device(count);
            let window = Duration::from_secs(300);
            for step in [None, Some(Duration::from_millis(200))] {
                let query = WindowQuery { window, step, max_points: 10_000 };
                let answer = device.query(&query).unwrap();
                let expected = whole(device.info(), window, step, answer.clone());
                let streamed = streamed_bytes(device.info(), window, step, answer).await;
                assert_eq!(
                    String::from_utf8(streamed).unwrap(),
                    String::from_utf8(expected).unwrap(),
                    "{count} samples, step {step:?}"
                );
            }
        }
    }
}
