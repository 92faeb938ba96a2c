//! `POST /api/v1/oom-events` (a workload's allocator failed an allocation),
//! `GET /api/v1/oom-events` and `GET /api/v1/oom-events/{id}`.
//!
//! An event is checked like an allocator report (loopback or token, JSON,
//! body limit, rate, bounds), joined to the NVML process that raised it,
//! stamped with the device's newest sample time and kept in the device's
//! bounded ring in history, which asks the analysis for a pass at once.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::ingest::oom;
use crate::model::OomEvent;

use super::error::{ApiError, ErrorBody};
use super::reports::{json_body, refusal, too_many_requests};
use super::{AppState, PathId};

/// The answer to an accepted event.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OomAccepted {
    /// Always `accepted`.
    #[schema(example = "accepted")]
    pub status: &'static str,
    /// The event's id (`GET /api/v1/oom-events/{id}`).
    #[schema(example = 7)]
    pub id: u64,
    /// The host PID it joined; absent when no listed process matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

#[utoipa::path(
    post,
    path = "/api/v1/oom-events",
    tag = "allocator-reports",
    operation_id = "post_oom_event",
    summary = "Report an allocator out-of-memory event",
    description = "Sent by a workload's reporter the moment an allocation fails (PyTorch's OOM \
observer). Checked like an allocator report; joined to the NVML process whose host PID, or \
namespace PID, is `reporter.pid`; kept in the device's ring (`ingest.max_oom_events`) and \
raises `allocator_oom` at once: the event triggers an evaluation of its own (docs/alerts.md).",
    request_body(
        content = crate::ingest::oom::OomDocument,
        content_type = "application/json",
        description = "The OOM event document, version 1",
    ),
    security((), ("bearer" = [])),
    responses(
        (status = 202, description = "Accepted", body = OomAccepted,
            example = json!({"status": "accepted", "id": 7, "pid": 4242})),
        (status = 400, description = "Not a valid event (`bad_oom_event`): malformed JSON, \
unknown version or field, a bad `memory_stats` figure, a size above 2^53, a free or \
reserved figure beyond the device's total memory, `requested_bytes` 0, more than `ingest.max_stats` keys; \
a `Content-Length` that is not a number or that the body does not match (`bad_body`)", body = ErrorBody,
            example = json!({"code": "bad_oom_event", "message": "unsupported report version 9; this vramd reads version 1"})),
        (status = 401, description = "From another host with `ingest.token_file` set: no \
bearer token (`missing_token`) or the wrong one (`bad_token`)", body = ErrorBody,
            example = json!({"code": "missing_token", "message": "writes from other hosts need Authorization: Bearer <token> (ingest.token_file)"})),
        (status = 403, description = "From another host without `ingest.token_file` \
(`remote_writes_disabled`)", body = ErrorBody,
            example = json!({"code": "remote_writes_disabled", "message": "only loopback may write allocator reports; set ingest.token_file to accept others"})),
        (status = 404, description = "No monitored device has the event's UUID \
(`unknown_device`)", body = ErrorBody,
            example = json!({"code": "unknown_device", "message": "no device with index or UUID `GPU-1`; GET /api/v1/devices lists them"})),
        (status = 413, description = "The body is larger than `server.max_request_body` \
(`body_too_large`)", body = ErrorBody,
            example = json!({"code": "body_too_large", "message": "the report is larger than server.max_request_body (1048576 bytes)"})),
        (status = 415, description = "The `Content-Type` is not `application/json` \
(`unsupported_media_type`)", body = ErrorBody,
            example = json!({"code": "unsupported_media_type", "message": "reports must be sent with Content-Type: application/json"})),
        (status = 429, description = "More than `ingest.rate_limit` events a second from this \
reporter, or `ingest.max_reporters` reporters this second (`rate_limited`); \
`server.auth_failure_budget` wrong bearer tokens from this address this minute \
(`too_many_failures`)", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before sending again")),
            example = json!({"code": "rate_limited", "message": "more than 10 OOM events per second from this reporter (ingest.rate_limit)"})),
    )
)]
pub async fn post(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    if let Some(refused) = refusal(&request, &state.ingest) {
        return Ok(refused);
    }
    let body = json_body(request, state.limits.max_request_body_bytes).await?;
    let bad = |error: crate::ingest::ReportError| {
        ApiError::bad_request("bad_oom_event", error.to_string())
    };
    let mut event = oom::parse(&body, state.ingest.limits.max_stats).map_err(bad)?;
    let device =
        state.store.find(&event.uuid).ok_or_else(|| ApiError::unknown_device(&event.uuid))?;
    let live = device.live();
    let total = live.fast.as_ref().and_then(|fast| fast.memory).map(|memory| memory.total_bytes);
    oom::check_device_total(&event, total).map_err(bad)?;
    if let Err(refused) = state.ingest.oom.admit(&event, tokio::time::Instant::now()) {
        return Ok(too_many_requests(&refused));
    }
    let processes = live.slow.as_deref().and_then(|slow| slow.processes.as_deref()).unwrap_or(&[]);
    event.pid = oom::join(&event, processes);
    // Judged on the device's clock, like every sample: a reporter's skewed
    // clock must not put its OOM outside the window the rules look at.
    event.received_at = live.newest_at().unwrap_or(event.at);
    event.id = state.ingest.oom.next_id();
    let stored = state.store.record_oom(&device, event);
    if let Some(hook) = state.ingest.oom_hook.clone() {
        let index = device.info().index;
        let event = stored.clone();
        // A recording writes to a file: off the async workers, and never
        // awaited, so a slow disk cannot hold up the answer.
        drop(tokio::task::spawn_blocking(move || hook(index, &event)));
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(OomAccepted { status: "accepted", id: stored.id, pid: stored.pid }),
    )
        .into_response())
}

/// Filters of `GET /api/v1/oom-events`; each one given must match.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OomFilter {
    /// Only events on this GPU: index, or UUID in any case.
    #[param(example = "0")]
    gpu: Option<String>,
    /// Only events of this process: its host PID or the reporter's own PID.
    #[param(example = 4242)]
    pid: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OomList {
    events: Vec<OomView>,
}

/// An event with the verdict its numbers give.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OomView {
    #[serde(flatten)]
    event: OomEvent,
    /// `fragmentation` (enough was free, in blocks smaller than the
    /// request), `exhaustion` (less was free than requested) or `unknown`.
    #[schema(example = "fragmentation")]
    cause: &'static str,
    /// Device free plus the allocator's cache (reserved − allocated), when
    /// either is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    free_bytes: Option<u64>,
    /// The GPU index as vramd numbers it.
    gpu: u32,
    /// Whether vramd holds the allocator snapshot uploaded for this event
    /// (`ingest.snapshot_dir`).
    snapshot_held: bool,
    /// Where to fetch that snapshot for the memory viewer; absent when none
    /// is held.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "/api/v1/oom-events/7/snapshot")]
    snapshot_url: Option<String>,
}

fn view(state: &AppState, gpu: u32, event: &OomEvent) -> OomView {
    let snapshot_url = super::oom_snapshot::held_url(state, event.id);
    OomView {
        event: event.clone(),
        cause: event.cause().as_str(),
        free_bytes: event.free_bytes(),
        gpu,
        snapshot_held: snapshot_url.is_some(),
        snapshot_url,
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/oom-events",
    tag = "allocator-reports",
    operation_id = "list_oom_events",
    summary = "The allocator OOM events held",
    description = "Every device's newest OOM events (at most `ingest.max_oom_events` each), \
oldest first, with the cause their numbers give.",
    params(OomFilter),
    responses(
        (status = 200, description = "The events that match every filter given", body = OomList,
            links(("GetOomEvent" = (
                operation_id = "get_oom_event",
                parameters(("id" = "$response.body#/events/0/id")),
                description = "The first event listed, by its id",
            )))),
        (status = 400, description = "An unknown parameter or a PID that is not a number \
(`bad_filter`)", body = ErrorBody,
            example = json!({"code": "bad_filter", "message": "unknown field `colour`; accepted parameters: gpu, pid"})),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    filter: Result<Query<OomFilter>, QueryRejection>,
) -> Result<Json<OomList>, ApiError> {
    let Query(filter) = filter
        .map_err(|rejection| ApiError::rejected_query("bad_filter", &rejection, "gpu, pid"))?;
    let mut events = Vec::new();
    for device in state.store.devices().iter() {
        let info = device.info();
        if !super::gpu_matches(filter.gpu.as_deref(), info.gpu_index(), &info.uuid) {
            continue;
        }
        events.extend(
            device
                .oom_events()
                .iter()
                .filter(|event| {
                    filter.pid.is_none_or(|pid| event.pid == Some(pid) || event.reporter_pid == pid)
                })
                .map(|event| view(&state, info.gpu_index(), event)),
        );
    }
    events.sort_by_key(|view| view.event.id);
    Ok(Json(OomList { events }))
}

/// An event id as the API writes it: decimal digits with no sign and no
/// leading zero, so `02` and `+2` name no event rather than event 2 (one
/// resource, one URL).
pub(super) fn event_id(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|byte| byte.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// The event with `id` and its device's index.
pub(super) fn find(state: &AppState, id: &str) -> Result<(u32, Arc<OomEvent>), ApiError> {
    let unknown = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_oom_event",
            format!("no OOM event with id `{id}` is held; GET /api/v1/oom-events lists them"),
        )
    };
    let wanted = event_id(id).ok_or_else(unknown)?;
    state
        .store
        .devices()
        .iter()
        .find_map(|device| {
            let event = device.oom_events().into_iter().find(|event| event.id == wanted)?;
            Some((device.info().gpu_index(), event))
        })
        .ok_or_else(unknown)
}

#[utoipa::path(
    get,
    path = "/api/v1/oom-events/{id}",
    tag = "allocator-reports",
    operation_id = "get_oom_event",
    summary = "One allocator OOM event",
    params(("id" = String, Path, description = "The event's id", example = "7")),
    responses(
        (status = 200, description = "The event", body = OomView),
        (status = 404, description = "No event with that id is held (`unknown_oom_event`)",
            body = ErrorBody,
            example = json!({"code": "unknown_oom_event", "message": "no OOM event with id `7` is held; GET /api/v1/oom-events lists them"})),
    )
)]
pub async fn one(
    State(state): State<AppState>,
    PathId(id): PathId,
) -> Result<Json<OomView>, ApiError> {
    let (gpu, event) = find(&state, &id)?;
    Ok(Json(view(&state, gpu, &event)))
}

#[cfg(test)]
#[path = "oom_tests.rs"]
mod tests;
