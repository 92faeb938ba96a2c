//! `GET /api/v1/alerts`, `GET /api/v1/alerts/{id}` and the server-sent
//! event stream `GET /api/v1/alerts/stream` of state changes.

use std::convert::Infallible;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use crate::alerts::{Alert, AlertState, Severity};

use super::AppState;
use super::error::ApiError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertFilter {
    state: Option<String>,
    severity: Option<String>,
    gpu: Option<String>,
    rule: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct AlertList {
    alerts: Vec<Alert>,
}

fn parse_state(text: &str) -> Result<AlertState, ApiError> {
    match text {
        "pending" => Ok(AlertState::Pending),
        "firing" => Ok(AlertState::Firing),
        "resolved" => Ok(AlertState::Resolved),
        other => Err(ApiError::bad_request(
            "bad_filter",
            format!("unknown state `{other}`; expected pending, firing or resolved"),
        )),
    }
}

pub async fn list(
    State(state): State<AppState>,
    filter: Result<Query<AlertFilter>, QueryRejection>,
) -> Result<Json<AlertList>, ApiError> {
    let Query(filter) = filter.map_err(|rejection| {
        ApiError::bad_request(
            "bad_filter",
            format!("{}; accepted parameters: state, severity, gpu, rule", rejection.body_text()),
        )
    })?;
    let wanted_state = filter.state.as_deref().map(parse_state).transpose()?;
    let wanted_severity = filter
        .severity
        .as_deref()
        .map(|text| {
            text.parse::<Severity>().map_err(|reason| ApiError::bad_request("bad_filter", reason))
        })
        .transpose()?;
    let alerts = state
        .board
        .alerts()
        .iter()
        .filter(|alert| wanted_state.is_none_or(|wanted| alert.state == wanted))
        .filter(|alert| wanted_severity.is_none_or(|wanted| alert.severity == wanted))
        .filter(|alert| {
            filter.gpu.as_deref().is_none_or(|gpu| {
                alert.gpu.to_string() == gpu || alert.key.uuid.eq_ignore_ascii_case(gpu)
            })
        })
        .filter(|alert| filter.rule.as_deref().is_none_or(|rule| alert.key.rule == rule))
        .cloned()
        .collect();
    Ok(Json(AlertList { alerts }))
}

pub async fn one(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Alert>, ApiError> {
    state.board.alerts().iter().find(|alert| alert.id == id).cloned().map(Json).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_alert",
            format!("no alert `{id}`; resolved alerts are kept for alerts.resolved_retention"),
        )
    })
}

/// Each state change as an event named after the new state, its data the
/// alert as JSON. A reader too slow for `api.max_stream_backlog` changes
/// gets a `lagged` event saying how many it missed.
pub async fn stream(
    State(state): State<AppState>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let permit = state.streams.clone().try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "too many open event streams (api.max_event_streams); retry later",
        )
    })?;
    let receiver = state.board.subscribe();
    let events = stream::unfold((receiver, permit), |(mut receiver, permit)| async move {
        let event = match receiver.recv().await {
            Ok(transition) => {
                let data = serde_json::to_string(&transition).unwrap_or_else(|_| "{}".to_owned());
                Event::default().event(transition.alert.state.as_str()).data(data)
            }
            Err(RecvError::Lagged(missed)) => {
                Event::default().event("lagged").data(missed.to_string())
            }
            Err(RecvError::Closed) => return None,
        };
        Some((Ok(event), (receiver, permit)))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}
