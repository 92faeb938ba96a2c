//! `POST/GET /api/v1/oom-events`: auth, bounds, rate limit, join, ring
//! bound, filters, and `allocator_oom` raised by an event at the next pass.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::Value;

use super::super::tests::{
    assert_error, filled_store, get, get_json, ingest, oom_body, post_json, state_with_intake,
};
use crate::api::AppState;
use crate::history::HistoryStore;
use crate::model::RuleId;

fn state(token: Option<&str>, store: Arc<HistoryStore>) -> AppState {
    state_with_intake(store, ingest(token, 2, 10))
}

async fn post(
    state: &AppState,
    from: &str,
    token: Option<&str>,
    body: String,
) -> (StatusCode, Value, Option<String>) {
    post_json(state, "/api/v1/oom-events", from, token, body).await
}

fn first_device(state: &AppState) -> (String, u32) {
    let device = state.store.devices()[0].clone();
    let live = device.live();
    let pid = live.slow.as_ref().and_then(|slow| slow.processes.as_ref()).unwrap()[0].pid;
    (device.info().uuid.clone(), pid)
}

#[tokio::test]
async fn an_event_is_joined_kept_listed_and_found_by_id() {
    let state = state(None, filled_store());
    let (uuid, pid) = first_device(&state);
    let (status, body, _) = post(&state, "127.0.0.1:9", None, oom_body(&uuid, pid)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["pid"], pid, "joined to the NVML process: {body}");
    let id = body["id"].as_u64().unwrap();

    let (status, one) = get_json(&state, &format!("/api/v1/oom-events/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["cause"], "fragmentation", "2 GiB free in 256 MiB pieces, 1 GiB asked: {one}");
    assert_eq!(one["requested_bytes"], 1_u64 << 30);
    assert_eq!(one["snapshot_path"], "/tmp/snapshots/oom-1.pickle");
    assert_eq!(one["gpu"], 0);

    let (_, listed) = get_json(&state, &format!("/api/v1/oom-events?gpu=0&pid={pid}")).await;
    assert_eq!(listed["events"].as_array().unwrap().len(), 1, "{listed}");
    let (_, other) = get_json(&state, "/api/v1/oom-events?gpu=1").await;
    assert_eq!(other["events"], serde_json::json!([]));
    let (status, bad) = get_json(&state, "/api/v1/oom-events?colour=red").await;
    assert_error(status, &bad, StatusCode::BAD_REQUEST, "bad_filter");
    let message = bad["message"].as_str().unwrap();
    assert!(message.ends_with("; accepted parameters: gpu, pid"), "{bad}");
    let (status, missing) = get_json(&state, "/api/v1/oom-events/999").await;
    assert_error(status, &missing, StatusCode::NOT_FOUND, "unknown_oom_event");

    let (_, body, _) = get(&state, "/metrics").await;
    let line = format!("vramd_allocator_oom_events_total{{gpu=\"0\",uuid=\"{uuid}\"}} 1");
    assert!(body.contains(&line), "{line} not in /metrics");
}

#[tokio::test]
async fn only_loopback_or_the_token_may_post_events() {
    let open = state(None, filled_store());
    let (uuid, pid) = first_device(&open);
    let (status, body, _) = post(&open, "10.1.2.3:5000", None, oom_body(&uuid, pid)).await;
    assert_error(status, &body, StatusCode::FORBIDDEN, "remote_writes_disabled");
    let guarded = state(Some("s3cret"), filled_store());
    let (status, body, _) = post(&guarded, "10.1.2.3:5000", None, oom_body(&uuid, pid)).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "missing_token");
    let (status, body, _) =
        post(&guarded, "10.1.2.3:5000", Some("guess"), oom_body(&uuid, pid)).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "bad_token");
    let (status, _, _) =
        post(&guarded, "10.1.2.3:5000", Some("s3cret"), oom_body(&uuid, pid)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn bad_unknown_large_and_too_frequent_events_are_refused() {
    let state = state(None, filled_store());
    let (uuid, pid) = first_device(&state);
    let (status, body, _) = post(&state, "127.0.0.1:1", None, "{\"version\":9}".into()).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_oom_event");
    let mut zero: Value = serde_json::from_str(&oom_body(&uuid, pid)).unwrap();
    zero["requested_bytes"] = 0.into();
    let (status, body, _) = post(&state, "127.0.0.1:1", None, zero.to_string()).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_oom_event");
    let mut huge: Value = serde_json::from_str(&oom_body(&uuid, pid)).unwrap();
    huge["device_free_bytes"] = (1_u64 << 50).into();
    let (status, body, _) = post(&state, "127.0.0.1:1", None, huge.to_string()).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_oom_event");
    assert!(body["message"].as_str().unwrap().contains("total memory"), "{body}");
    let unknown = oom_body("GPU-00000000-dead", pid);
    let (status, body, _) = post(&state, "127.0.0.1:1", None, unknown).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "unknown_device");
    let padded = format!("{{\"pad\":\"{}\"}}", "x".repeat(4096));
    let (status, body, _) = post(&state, "127.0.0.1:1", None, padded).await;
    assert_error(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
    for _ in 0..2 {
        let (status, _, _) = post(&state, "127.0.0.1:1", None, oom_body(&uuid, pid)).await;
        assert_eq!(status, StatusCode::ACCEPTED);
    }
    let (status, body, retry_after) = post(&state, "127.0.0.1:1", None, oom_body(&uuid, pid)).await;
    assert_error(status, &body, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(
        body["message"],
        "more than 2 OOM events per second from this reporter (ingest.rate_limit)"
    );
}

#[test]
fn a_device_keeps_only_its_newest_events() {
    let store = filled_store();
    let device = store.devices()[0].clone();
    let uuid = device.info().uuid.clone();
    let event = crate::ingest::oom::parse(oom_body(&uuid, 1).as_bytes(), 64).unwrap();
    for id in 1..=70 {
        device.record_oom(crate::model::OomEvent { id, ..event.clone() });
    }
    let held: Vec<u64> = device.oom_events().iter().map(|event| event.id).collect();
    assert_eq!(held, (7..=70).collect::<Vec<_>>(), "64 kept, oldest dropped first");
    assert_eq!(device.oom_total(), 70);
}

/// The daemon's analysis and alert passes over the state's store, each at
/// its newest sample time.
struct Passes {
    store: Arc<HistoryStore>,
    analyzer: crate::analysis::analyzer::Analyzer,
    evaluator: crate::alerts::evaluator::Evaluator,
}

impl Passes {
    fn new(state: &AppState) -> Self {
        let config = crate::app::Config::default();
        Self {
            store: state.store.clone(),
            analyzer: crate::analysis::analyzer::Analyzer::new(crate::app::analysis_settings(
                &config,
            )),
            evaluator: crate::alerts::evaluator::Evaluator::new(&config.alerts),
        }
    }

    fn next(&mut self) -> Vec<crate::alerts::Alert> {
        let now = crate::analysis::analyzer::Analyzer::newest(&self.store).unwrap();
        let snapshot = self.analyzer.analyse(&self.store, now);
        self.evaluator.evaluate(&snapshot, crate::alerts::evaluator::SourceState::Up, now).alerts
    }
}

#[tokio::test]
async fn an_event_raises_allocator_oom_at_the_next_evaluation_once() {
    let state = state(None, filled_store());
    let (uuid, pid) = first_device(&state);
    let mut passes = Passes::new(&state);
    let quiet = passes.next();
    assert!(quiet.iter().all(|alert| alert.key.rule != RuleId::AllocatorOom));

    let (status, body, _) = post(&state, "127.0.0.1:9", None, oom_body(&uuid, pid)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // The very next pass, at the same source time: no counter step needed.
    let alerts = passes.next();
    let oom: Vec<_> =
        alerts.iter().filter(|alert| alert.key.rule == RuleId::AllocatorOom).collect();
    assert_eq!(oom.len(), 1, "one alert for one OOM: {oom:?}");
    let alert = oom[0];
    assert_eq!(alert.key.pid, Some(pid));
    assert_eq!(alert.state, crate::alerts::AlertState::Firing);
    for evidence in
        ["OOM event 1", "1.0 GiB", "256 MiB", "fragmentation", "/tmp/snapshots/oom-1.pickle"]
    {
        assert!(alert.description.contains(evidence), "{evidence} missing: {}", alert.description);
    }
    assert!(alert.remediation.contains("expandable_segments:True"), "{}", alert.remediation);
}

/// PyTorch's "Tried to allocate 200.00 GiB. GPU 0 has a total capacity of
/// 79.11 GiB" is a real OOM (a wrong shape, a batch meant for eight GPUs):
/// refusing the event would hide the one OOM whose cause is plainest.
#[tokio::test]
async fn a_request_beyond_the_device_is_an_oom_that_says_so() {
    let state = state(None, filled_store());
    let (uuid, pid) = first_device(&state);
    let mut passes = Passes::new(&state);
    let mut oversized: Value = serde_json::from_str(&oom_body(&uuid, pid)).unwrap();
    oversized["requested_bytes"] = (1_u64 << 44).into();
    let (status, body, _) = post(&state, "127.0.0.1:9", None, oversized.to_string()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    let alerts = passes.next();
    let alert = alerts
        .iter()
        .find(|alert| alert.key.rule == RuleId::AllocatorOom)
        .expect("allocator_oom raised");
    assert!(alert.description.contains("larger than the device's"), "{}", alert.description);
    assert!(alert.remediation.contains("more than the whole GPU"), "{}", alert.remediation);
}

#[test]
fn event_ids_have_one_spelling() {
    use super::event_id;
    assert_eq!(event_id("2"), Some(2));
    assert_eq!(event_id("0"), Some(0));
    for alias in ["02", "+2", "-2", " 2", "2 ", "", "00", "18446744073709551616"] {
        assert_eq!(event_id(alias), None, "{alias:?}");
    }
}
