//! `GET /api/v1/alerts`, `GET /api/v1/alerts/{id}` and the server-sent
//! event stream `GET /api/v1/alerts/stream` of state changes.

use std::convert::Infallible;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::http::header::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use crate::alerts::board::{Backlog, NumberedTransition};
use crate::alerts::{Alert, AlertState, Severity};

use super::error::{ApiError, ErrorBody};

/// The SSE reconnection header (not in `http`'s list).
const LAST_EVENT_ID: &str = "last-event-id";
use super::{AppState, PathId};

/// Filters of `GET /api/v1/alerts`; each one given must match.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AlertFilter {
    /// Only alerts in this state.
    #[param(value_type = Option<AlertState>, example = "firing")]
    state: Option<String>,
    /// Only alerts of this severity.
    #[param(value_type = Option<Severity>, example = "critical")]
    severity: Option<String>,
    /// Only alerts about this GPU: index, or UUID in any case.
    #[param(example = "0")]
    gpu: Option<String>,
    /// Only alerts of this rule (docs/alerts.md), e.g. `memory_high`.
    #[param(example = "memory_high")]
    rule: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AlertList {
    alerts: Vec<Alert>,
}

#[utoipa::path(
    get,
    path = "/api/v1/alerts",
    tag = "alerts",
    operation_id = "list_alerts",
    summary = "Alerts, optionally filtered",
    description = "Pending, firing and recently resolved alerts (kept for \
`alerts.resolved_retention`), each with its evidence and remediation.",
    params(AlertFilter),
    responses(
        (status = 200, description = "The alerts that match every filter given", body = AlertList,
            links(("GetAlert" = (
                operation_id = "get_alert",
                parameters(("id" = "$response.body#/alerts/0/id")),
                description = "The first alert listed, by its id",
            )))),
        (status = 400, description = "An unknown state or severity, or an unknown parameter \
(`bad_filter`)", body = ErrorBody,
            example = json!({"code": "bad_filter", "message": "unknown state `burning`; expected pending, firing or resolved"})),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    filter: Result<Query<AlertFilter>, QueryRejection>,
) -> Result<Json<AlertList>, ApiError> {
    let Query(filter) = filter.map_err(|rejection| {
        ApiError::rejected_query("bad_filter", &rejection, "state, severity, gpu, rule")
    })?;
    let bad_filter = |reason| ApiError::bad_request("bad_filter", reason);
    let wanted_state = filter.state.as_deref().map(str::parse::<AlertState>);
    let wanted_state = wanted_state.transpose().map_err(bad_filter)?;
    let wanted_severity = filter.severity.as_deref().map(str::parse::<Severity>);
    let wanted_severity = wanted_severity.transpose().map_err(bad_filter)?;
    let alerts = state
        .board
        .alerts()
        .iter()
        .filter(|alert| wanted_state.is_none_or(|wanted| alert.state == wanted))
        .filter(|alert| wanted_severity.is_none_or(|wanted| alert.severity == wanted))
        .filter(|alert| super::gpu_matches(filter.gpu.as_deref(), alert.gpu, &alert.key.uuid))
        .filter(|alert| filter.rule.as_deref().is_none_or(|rule| alert.key.rule.as_str() == rule))
        .cloned()
        .collect();
    Ok(Json(AlertList { alerts }))
}

#[utoipa::path(
    get,
    path = "/api/v1/alerts/{id}",
    tag = "alerts",
    operation_id = "get_alert",
    summary = "One alert by id",
    params(
        ("id" = String, Path, description = "Alert id: `rule.UUID`, or `rule.UUID.PID` for a process alert",
            example = "memory_high.GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"),
    ),
    responses(
        (status = 200, description = "The alert", body = Alert),
        (status = 404, description = "No such alert (`unknown_alert`); resolved alerts are kept \
for `alerts.resolved_retention`", body = ErrorBody,
            example = json!({"code": "unknown_alert", "message": "no alert `memory_high.GPU-zzz`; resolved alerts are kept for alerts.resolved_retention"})),
    )
)]
pub async fn one(
    State(state): State<AppState>,
    PathId(id): PathId,
) -> Result<Json<Alert>, ApiError> {
    state.board.alerts().iter().find(|alert| alert.id == id).cloned().map(Json).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_alert",
            format!("no alert `{id}`; resolved alerts are kept for alerts.resolved_retention"),
        )
    })
}

#[utoipa::path(
    get,
    path = "/api/v1/alerts/stream",
    tag = "alerts",
    operation_id = "stream_alerts",
    summary = "Server-sent events of alert state changes",
    description = "A stream that stays open: each state change is an event named after the \
new state (`pending`, `firing`, `resolved`) whose data is a `Transition` as JSON \
(`{\"from\": …, \"alert\": {…}}`); a reader too slow for `api.max_stream_backlog` changes gets \
a `lagged` event whose data is how many it missed. Each change has an `id`; a client that \
reconnects with `Last-Event-ID` is first sent the changes after it that are still kept (the \
latest `api.max_stream_backlog`), after a `lagged` event if some are not. An id from an earlier \
run of the daemon, or one it never sent, gets a `reset` event instead (data: \
`{\"reason\": …, \"read\": \"/api/v1/alerts\"}`): read the alerts again. Comments keep idle \
connections alive. At most `api.max_event_streams` streams are open at once.",
    params(
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event this \
client received, to resume after it", example = "187b0c2d5e1f0a00-42"),
    ),
    responses(
        (status = 200, description = "The event stream (`text/event-stream`), open until the \
client leaves", body = String, content_type = "text/event-stream",
            example = "id: 187b0c2d5e1f0a00-42\nevent: firing\ndata: {\"from\":\"pending\",\"alert\":{\"id\":\"memory_high.GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20\",\"rule\":\"memory_high\",\"state\":\"firing\"}}\n\n"),
        (status = 503, description = "`api.max_event_streams` streams are already open \
(`too_many_streams`), or more than `server.max_concurrent_requests` requests are in flight \
(`overloaded`)", body = ErrorBody,
            examples(
                ("too_many_streams" = (value = json!({"code": "too_many_streams", "message": "too many open event streams (api.max_event_streams); retry later"}))),
                ("overloaded" = (value = json!({"code": "overloaded", "message": "too many concurrent requests (server.max_concurrent_requests); retry shortly"}))),
            )),
    )
)]
pub async fn stream(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let permit = state.streams.clone().try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "too many open event streams (api.max_event_streams); retry later",
        )
    })?;
    let board = &state.board;
    let epoch = board.epoch();
    let resume = headers
        .get(LAST_EVENT_ID)
        .map(|value| value.to_str().ok().and_then(|text| StreamPosition::parse(text.trim())));
    let mut first = Vec::new();
    let receiver = match resume {
        None => board.subscribe(),
        Some(Some(position)) if position.epoch == epoch => {
            let (receiver, backlog) = board.subscribe_after(position.seq);
            match backlog {
                Some(backlog) => first.extend(backlog_events(epoch, backlog)),
                None => first.push(reset_event("Last-Event-ID is ahead of this stream")),
            }
            receiver
        }
        // Every change kept in this run came after the reader's last one.
        Some(Some(_)) => {
            let (receiver, backlog) = board.subscribe_after(0);
            first.push(reset_event("the daemon restarted since Last-Event-ID"));
            first.extend(
                backlog.map(|backlog| backlog_events(epoch, backlog)).into_iter().flatten(),
            );
            receiver
        }
        Some(None) => {
            first.push(reset_event("Last-Event-ID is not an id this stream sends"));
            board.subscribe()
        }
    };
    let live = stream::unfold((receiver, permit), move |(mut receiver, permit)| async move {
        let event = match receiver.recv().await {
            Ok(change) => change_event(epoch, &change),
            Err(RecvError::Lagged(missed)) => {
                Event::default().event("lagged").data(missed.to_string())
            }
            Err(RecvError::Closed) => return None,
        };
        Some((Ok(event), (receiver, permit)))
    });
    let events = stream::iter(first.into_iter().map(Ok)).chain(live).fuse();
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// An event's id: which run of the daemon, and the change's number in it.
/// A reconnecting browser sends it back as `Last-Event-ID`.
#[derive(Debug, PartialEq)]
struct StreamPosition {
    epoch: u64,
    seq: u64,
}

impl StreamPosition {
    fn render(epoch: u64, seq: u64) -> String {
        format!("{epoch:x}-{seq}")
    }

    /// Only the exact form `render` writes: an id is not a place for
    /// leniency, and anything else gets a `reset`.
    fn parse(text: &str) -> Option<Self> {
        let (epoch, seq) = text.split_once('-')?;
        let hex = |text: &str| {
            !text.is_empty()
                && text.len() <= 16
                && text.bytes().all(|byte| byte.is_ascii_hexdigit() && !byte.is_ascii_uppercase())
        };
        let decimal = |text: &str| {
            !text.is_empty()
                && text.len() <= 20
                && text.bytes().all(|byte| byte.is_ascii_digit())
                && (text == "0" || !text.starts_with('0'))
        };
        if !hex(epoch) || !decimal(seq) {
            return None;
        }
        Some(Self { epoch: u64::from_str_radix(epoch, 16).ok()?, seq: seq.parse().ok()? })
    }
}

fn change_event(epoch: u64, change: &NumberedTransition) -> Event {
    let data = serde_json::to_string(&change.transition).unwrap_or_else(|_| "{}".to_owned());
    Event::default()
        .id(StreamPosition::render(epoch, change.seq))
        .event(change.transition.alert.state.as_str())
        .data(data)
}

fn backlog_events(epoch: u64, backlog: Backlog) -> Vec<Event> {
    let lagged = (backlog.missed > 0)
        .then(|| Event::default().event("lagged").data(backlog.missed.to_string()));
    lagged
        .into_iter()
        .chain(backlog.replay.iter().map(|change| change_event(epoch, change)))
        .collect()
}

/// The reader cannot know what changed while it was away: it should read
/// `GET /api/v1/alerts` again. The live changes follow.
fn reset_event(reason: &str) -> Event {
    let data = serde_json::json!({ "reason": reason, "read": "/api/v1/alerts" });
    Event::default().event("reset").data(data.to_string())
}

#[cfg(test)]
mod tests {
    use super::StreamPosition;

    #[test]
    fn an_id_reads_back_as_written_and_nothing_else_does() {
        let id = StreamPosition::render(0x1a2b, 42);
        assert_eq!(id, "1a2b-42");
        assert_eq!(StreamPosition::parse(&id), Some(StreamPosition { epoch: 0x1a2b, seq: 42 }));
        for other in [
            "",
            "42",
            "1a2b-",
            "-42",
            "1a2b-042",
            "1a2b-+42",
            "1A2B-42",
            "1a2b-4 2",
            "1a2b--42",
            "11111111111111111-1",
        ] {
            assert_eq!(StreamPosition::parse(other), None, "{other:?}");
        }
    }
}
