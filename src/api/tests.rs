//! Every route and error, through the router without a socket.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::reports;
use super::*;
use crate::alerts::board::AlertBoard;
use crate::clock::ScaledClock;
use crate::history::{HistoryStore, Sizing};
use crate::model::RuleId;
use crate::play::{self, Schedule};
use crate::source::simulator::{GOLDEN_ORIGIN, ScenarioKind, Simulator, SimulatorSpec};

pub(super) fn limits() -> Limits {
    Limits {
        request_timeout: Duration::from_secs(5),
        snapshot_upload_timeout: Duration::from_secs(5),
        max_request_body_bytes: 1024,
        max_concurrent_requests: 8,
        max_concurrent_scrapes: 4,
        max_history_points: 200,
        retention: Duration::from_secs(3_600),
        max_event_streams: 2,
    }
}

/// A store filled with two minutes of a simulated multi-tenant host.
pub(super) fn filled_state() -> AppState {
    state_with(filled_store())
}

pub(super) fn filled_store() -> Arc<HistoryStore> {
    let spec = SimulatorSpec { scenario: ScenarioKind::MultiTenant, gpus: 2, seed: 3 };
    let simulator =
        Simulator::with_origin(spec, ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0), GOLDEN_ORIGIN)
            .unwrap();
    let store = Arc::new(HistoryStore::new(Sizing {
        fast_capacity: 10_000,
        slow_capacity: 1_000,
        peak_window: Duration::from_secs(60),
        oom_events: 64,
    }));
    let schedule = Schedule {
        from: GOLDEN_ORIGIN,
        // 480 fast readings (the first at the origin), 120 slow ones.
        duration: Duration::from_millis(250 * 479),
        fast: Duration::from_millis(250),
        slow: Duration::from_secs(1),
    };
    let played = play::play_simulator(
        &simulator,
        &store,
        schedule,
        play::ProcessCap(crate::app::Config::default().sampler.max_processes_per_device.get()),
        |_| {},
    )
    .unwrap();
    assert_eq!(played.samples, 2 * (480 + 120));
    store.mark_cycle_completed();
    store
}

fn state_with(store: Arc<HistoryStore>) -> AppState {
    state_with_intake(store, crate::app::report_intake(&crate::app::Config::default(), None))
}

pub(super) fn state_with_intake(store: Arc<HistoryStore>, intake: reports::Ingest) -> AppState {
    AppState::new(
        store,
        Arc::new(Telemetry::new("simulator").unwrap()),
        Arc::new(AnalysisBoard::default()),
        Arc::new(AlertBoard::new(16, 0x5eed)),
        limits(),
        intake,
    )
}

pub(super) async fn get(state: &AppState, uri: &str) -> (StatusCode, String, Option<String>) {
    let response = router(state.clone())
        .oneshot(Request::builder().uri(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|value| value.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap(), content_type)
}

pub(super) async fn get_json(state: &AppState, uri: &str) -> (StatusCode, Value) {
    let (status, body, content_type) = get(state, uri).await;
    assert_eq!(content_type.as_deref(), Some("application/json"), "{uri}: {body}");
    (status, serde_json::from_str(&body).unwrap())
}

/// The start of a body, so a failing assertion stays readable.
fn excerpt(body: &Value) -> String {
    body.to_string().chars().take(300).collect()
}

pub(super) fn assert_error(status: StatusCode, body: &Value, expected: StatusCode, code: &str) {
    assert_eq!(status, expected, "{}", excerpt(body));
    assert_eq!(body["code"], code, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
}

#[tokio::test]
async fn health_is_always_ok_and_readiness_waits_for_a_cycle() {
    let empty = state_with(Arc::new(HistoryStore::new(Sizing {
        fast_capacity: 1,
        slow_capacity: 1,
        peak_window: Duration::from_secs(1),
        oom_events: 64,
    })));
    assert_eq!(get_json(&empty, "/healthz").await.0, StatusCode::OK);
    let (status, body) = get_json(&empty, "/readyz").await;
    assert_error(status, &body, StatusCode::SERVICE_UNAVAILABLE, "not_ready");
    empty.store.mark_cycle_completed();
    assert_eq!(get_json(&empty, "/readyz").await.0, StatusCode::OK);
}

#[tokio::test]
async fn metrics_are_served_in_the_text_format() {
    let state = filled_state();
    let (status, body, content_type) = get(&state, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type.as_deref(), Some(crate::exposition::CONTENT_TYPE));
    assert!(body.contains("vramd_memory_used_bytes{gpu=\"0\""));
    assert!(body.contains("vramd_source_errors_total{kind=\"timeout\"} 0"));
}

#[tokio::test]
async fn devices_are_listed_and_found_by_index_or_uuid() {
    let state = filled_state();
    let (status, list) = get_json(&state, "/api/v1/devices").await;
    assert_eq!(status, StatusCode::OK);
    let devices = list["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[1]["index"], 1);
    assert_eq!(devices[0]["up"], true);
    let used = devices[0]["memory"]["used_bytes"].as_u64().unwrap();
    let peak = devices[0]["memory"]["used_peak_bytes"].as_u64().unwrap();
    assert!(peak >= used);

    let uuid = devices[1]["uuid"].as_str().unwrap().to_owned();
    let (status, by_uuid) =
        get_json(&state, &format!("/api/v1/devices/{}", uuid.to_lowercase())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(by_uuid["index"], 1);
    let (_, by_index) = get_json(&state, "/api/v1/devices/1").await;
    assert_eq!(by_index["uuid"], uuid.as_str());
}

#[tokio::test]
async fn device_detail_breaks_memory_down_per_process() {
    let state = filled_state();
    let (status, detail) = get_json(&state, "/api/v1/devices/0").await;
    assert_eq!(status, StatusCode::OK);
    let processes = detail["processes"].as_array().unwrap();
    assert!(processes.len() >= 3, "{detail}");
    let torch = processes.iter().find(|p| p.get("allocator").is_some()).expect("a PyTorch process");
    let allocator = &torch["allocator"];
    let breakdown = &torch["breakdown"];
    let reserved = allocator["reserved_bytes"].as_u64().unwrap();
    let allocated = allocator["allocated_bytes"].as_u64().unwrap();
    assert_eq!(breakdown["live_tensors_bytes"].as_u64().unwrap(), allocated);
    assert_eq!(breakdown["allocator_cache_bytes"].as_u64().unwrap(), reserved - allocated);
    assert_eq!(
        breakdown["outside_allocator_bytes"].as_u64().unwrap(),
        torch["used_bytes"].as_u64().unwrap() - reserved
    );
    let plain =
        processes.iter().find(|p| p.get("allocator").is_none()).expect("a non-PyTorch process");
    assert!(plain.get("breakdown").is_none(), "no allocator stats, no breakdown: {plain}");

    let accounting = &detail["accounting"];
    let total = accounting["total_bytes"].as_u64().unwrap();
    let parts = accounting["driver_reserved_bytes"].as_u64().unwrap()
        + accounting["used_bytes"].as_u64().unwrap()
        + accounting["free_bytes"].as_u64().unwrap();
    assert_eq!(total, parts, "total = reserved + used + free");
    assert_eq!(
        accounting["used_bytes"].as_u64().unwrap(),
        accounting["processes_bytes"].as_u64().unwrap()
            + accounting["unattributed_bytes"].as_u64().unwrap()
    );
    assert_eq!(detail["history"]["fast_samples"], 480);
}

#[tokio::test]
async fn unknown_device_is_404_json() {
    let state = filled_state();
    for id in ["7", "GPU-nope", "-1"] {
        let (status, body) = get_json(&state, &format!("/api/v1/devices/{id}")).await;
        assert_error(status, &body, StatusCode::NOT_FOUND, "unknown_device");
        let (status, body) = get_json(&state, &format!("/api/v1/devices/{id}/history")).await;
        assert_error(status, &body, StatusCode::NOT_FOUND, "unknown_device");
    }
}

#[tokio::test]
async fn history_raw_and_downsampled() {
    let state = filled_state();
    let (status, raw) = get_json(&state, "/api/v1/devices/0/history?window=10s").await;
    assert_eq!(status, StatusCode::OK, "{raw}");
    let points = raw["points"].as_array().unwrap();
    assert_eq!(points.len(), 41, "10 s at 4 Hz, both ends included");
    assert!(raw.get("buckets").is_none());
    assert_eq!(raw["to"], "2026-01-01T00:01:59.750Z");

    let (status, coarse) = get_json(&state, "/api/v1/devices/0/history?window=1m&step=10s").await;
    assert_eq!(status, StatusCode::OK, "{coarse}");
    let buckets = coarse["buckets"].as_array().unwrap();
    assert!((6..=7).contains(&buckets.len()), "{coarse}");
    let full = &buckets[1];
    assert_eq!(full["samples"], 40);
    let used = &full["used_bytes"];
    assert!(used["min"].as_u64() <= used["last"].as_u64());
    assert!(used["last"].as_u64() <= used["max"].as_u64());
    assert_eq!(coarse["step_seconds"], 10.0);
}

#[tokio::test]
async fn history_of_a_device_not_read_yet_is_an_empty_window_not_an_error() {
    // Listed, but its first sample has not landed (a slow driver at start).
    let store = Arc::new(HistoryStore::new(Sizing {
        fast_capacity: 100,
        slow_capacity: 10,
        peak_window: Duration::from_secs(60),
        oom_events: 4,
    }));
    store.set_devices(vec![crate::model::DeviceInfo {
        index: 0,
        uuid: "GPU-empty".into(),
        name: "Fake".into(),
        pci_bus_id: None,
        driver_version: None,
        mig: None,
    }]);
    let state = state_with(store);
    let (status, raw) = get_json(&state, "/api/v1/devices/0/history?window=1m").await;
    assert_eq!(status, StatusCode::OK, "{raw}");
    assert_eq!(raw["uuid"], "GPU-empty");
    assert_eq!(raw["points"], serde_json::json!([]), "{raw}");
    for absent in ["from", "to", "buckets", "step_seconds"] {
        assert!(raw.get(absent).is_none(), "{absent} must be absent, not zero: {raw}");
    }
    let (status, coarse) =
        get_json(&state, "/api/v1/devices/GPU-empty/history?window=1m&step=10s").await;
    assert_eq!(status, StatusCode::OK, "{coarse}");
    assert_eq!(coarse["buckets"], serde_json::json!([]), "{coarse}");
    assert!(coarse.get("points").is_none() && coarse.get("from").is_none(), "{coarse}");
}

#[tokio::test]
async fn history_rejects_bad_parameters_with_a_reason() {
    let state = filled_state();
    let cases = [
        ("window=soon", "bad_window"),
        ("window=0s", "bad_window"),
        ("window=2h", "bad_window"),
        ("window=1m&step=banana", "bad_step"),
        ("window=1m&step=2m", "bad_step"),
        ("window=1h&step=1ms", "too_many_points"),
        ("window=1h", "too_many_points"),
        ("windw=1m", "bad_query"),
    ];
    for (query, code) in cases {
        let (status, body) = get_json(&state, &format!("/api/v1/devices/0/history?{query}")).await;
        assert_error(status, &body, StatusCode::BAD_REQUEST, code);
    }
    let (_, body) = get_json(&state, "/api/v1/devices/0/history?window=2h").await;
    assert!(body["message"].as_str().unwrap().contains("history.retention"), "{body}");
    let (_, body) = get_json(&state, "/api/v1/devices/0/history?window=1h").await;
    assert!(body["message"].as_str().unwrap().contains("step"), "{body}");
    let (_, body) = get_json(&state, "/api/v1/devices/0/history?windw=1m").await;
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("unknown field `windw`"), "{body}");
    assert!(message.ends_with("; accepted parameters: window, step"), "{body}");
}

#[tokio::test]
async fn unknown_routes_and_methods_get_json_errors() {
    let state = filled_state();
    let (status, body) = get_json(&state, "/api/v1/nothing").await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not_found");
    let response = router(state.clone())
        .oneshot(
            Request::builder().method("DELETE").uri("/api/v1/devices").body(Body::empty()).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["code"], "method_not_allowed");
}

/// A route that takes a second, behind the real protections.
fn slow_app(limits: Limits) -> Router {
    let routes = Router::new().route(
        "/slow",
        axum::routing::get(|| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            "done"
        }),
    );
    protect(routes, limits)
}

async fn json_body(response: Response) -> Value {
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

fn slow_request() -> Request<Body> {
    Request::builder().uri("/slow").body(Body::empty()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_request_past_the_timeout_gets_408_json() {
    let app = slow_app(Limits { request_timeout: Duration::from_millis(50), ..limits() });
    let response = app.oneshot(slow_request()).await.unwrap();
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(json_body(response).await["code"], "request_timeout");
}

#[tokio::test(start_paused = true)]
async fn requests_beyond_the_concurrency_limit_get_503_json() {
    let app = slow_app(Limits { max_concurrent_requests: 1, ..limits() });
    let first = tokio::spawn(app.clone().oneshot(slow_request()));
    tokio::task::yield_now().await;
    let second = app.clone().oneshot(slow_request()).await.unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(json_body(second).await["code"], "overloaded");
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK, "the first still completes");
    let third = app.oneshot(slow_request()).await.unwrap();
    assert_eq!(third.status(), StatusCode::OK, "the permit is returned");
}

fn alert(
    rule: RuleId,
    uuid: &str,
    state: crate::alerts::AlertState,
    severity: crate::alerts::Severity,
) -> crate::alerts::Alert {
    let key = crate::alerts::AlertKey { rule, uuid: uuid.into(), pid: None };
    crate::alerts::Alert {
        id: key.id(),
        key,
        severity,
        state,
        gpu: 0,
        process: None,
        value: 0.95,
        threshold: 0.92,
        unit: "ratio".into(),
        since: GOLDEN_ORIGIN,
        firing_since: Some(GOLDEN_ORIGIN),
        resolved_at: None,
        updated_at: GOLDEN_ORIGIN,
        summary: "GPU 0 memory 95% used".into(),
        description: "evidence".into(),
        remediation: "advice".into(),
    }
}

fn with_alerts() -> AppState {
    use crate::alerts::{AlertState, Severity};
    let state = filled_state();
    let alerts = vec![
        alert(RuleId::MemoryHigh, "GPU-a", AlertState::Firing, Severity::Warning),
        alert(RuleId::DeviceLost, "GPU-b", AlertState::Firing, Severity::Critical),
        alert(RuleId::XidError, "GPU-a", AlertState::Resolved, Severity::Critical),
    ];
    state.board.publish(alerts, &[]);
    state
}

#[tokio::test]
async fn alerts_are_listed_filtered_and_found_by_id() {
    let state = with_alerts();
    let (status, all) = get_json(&state, "/api/v1/alerts").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all["alerts"].as_array().unwrap().len(), 3);
    let (_, firing) = get_json(&state, "/api/v1/alerts?state=firing").await;
    assert_eq!(firing["alerts"].as_array().unwrap().len(), 2);
    let (_, critical) = get_json(&state, "/api/v1/alerts?severity=critical&state=firing").await;
    assert_eq!(critical["alerts"][0]["rule"], "device_lost");
    let (_, by_gpu) = get_json(&state, "/api/v1/alerts?gpu=gpu-a").await;
    assert_eq!(by_gpu["alerts"].as_array().unwrap().len(), 2, "UUID filter ignores case");
    let (_, by_rule) = get_json(&state, "/api/v1/alerts?rule=xid_error").await;
    assert_eq!(by_rule["alerts"][0]["state"], "resolved");
    let (status, unknown) = get_json(&state, "/api/v1/alerts?rule=memory_hgh").await;
    assert_eq!(status, StatusCode::OK, "an unknown rule matches no alert: {unknown}");
    assert_eq!(unknown["alerts"].as_array().unwrap().len(), 0);
    assert_eq!(by_rule["alerts"][0]["since"], "2026-01-01T00:00:00.000Z", "times are RFC 3339");

    let (status, one) = get_json(&state, "/api/v1/alerts/memory_high.GPU-a").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["summary"], "GPU 0 memory 95% used");
    let (status, body) = get_json(&state, "/api/v1/alerts/memory_high.GPU-zzz").await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "unknown_alert");
}

#[tokio::test]
async fn bad_alert_filters_get_400_with_a_reason() {
    let state = with_alerts();
    for query in ["state=burning", "severity=loud", "colour=red"] {
        let (status, body) = get_json(&state, &format!("/api/v1/alerts?{query}")).await;
        assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_filter");
    }
    let (_, body) = get_json(&state, "/api/v1/alerts?colour=red").await;
    let message = body["message"].as_str().unwrap();
    assert!(message.ends_with("; accepted parameters: state, severity, gpu, rule"), "{body}");
}

#[tokio::test]
async fn the_event_stream_delivers_state_changes_and_is_bounded() {
    let state = with_alerts();
    let response = router(state.clone())
        .oneshot(Request::builder().uri("/api/v1/alerts/stream").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers().get(header::CONTENT_TYPE).unwrap().to_str().unwrap(),
        "text/event-stream"
    );
    let transition = crate::alerts::Transition {
        from: Some(crate::alerts::AlertState::Pending),
        alert: alert(
            RuleId::MemoryHigh,
            "GPU-a",
            crate::alerts::AlertState::Firing,
            crate::alerts::Severity::Warning,
        ),
    };
    state.board.publish(Vec::new(), std::slice::from_ref(&transition));
    let mut body = response.into_body();
    let frame =
        tokio::time::timeout(Duration::from_secs(5), body.frame()).await.unwrap().unwrap().unwrap();
    let text = String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap();
    let epoch = state.board.epoch();
    assert!(text.starts_with(&format!("id: {epoch:x}-1\nevent: firing\n")), "{text}");
    assert!(text.contains("\"rule\":\"memory_high\""), "{text}");

    // limits() allows two streams: this one and one more, then 503.
    let second = router(state.clone())
        .oneshot(Request::builder().uri("/api/v1/alerts/stream").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    let (status, refused) = get_json(&state, "/api/v1/alerts/stream").await;
    assert_error(status, &refused, StatusCode::SERVICE_UNAVAILABLE, "too_many_streams");
    drop(second);
    drop(body);
}

/// The text of the stream's frames until `wanted` events have arrived.
async fn read_events(body: Body, wanted: usize) -> String {
    let mut body = body;
    let mut text = String::new();
    for _ in 0..64 {
        if text.matches("\n\n").count() >= wanted {
            break;
        }
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&frame.into_data().unwrap()).unwrap());
    }
    text
}

fn change(gpu_uuid: &str, to: crate::alerts::AlertState) -> crate::alerts::Transition {
    crate::alerts::Transition {
        from: None,
        alert: alert(RuleId::MemoryHigh, gpu_uuid, to, crate::alerts::Severity::Warning),
    }
}

async fn open_stream(state: &AppState, last_event_id: Option<&str>) -> Body {
    let mut request = Request::builder().uri("/api/v1/alerts/stream");
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    let response =
        router(state.clone()).oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.into_body()
}

#[tokio::test]
async fn a_reconnecting_stream_reader_gets_the_changes_it_missed_once() {
    use crate::alerts::AlertState::{Firing, Pending, Resolved};
    let state = with_alerts();
    let first = open_stream(&state, None).await;
    state.board.publish(Vec::new(), &[change("GPU-a", Pending)]);
    let seen = read_events(first, 1).await;
    let id = seen.lines().find_map(|line| line.strip_prefix("id: ")).unwrap().to_owned();
    // The reader is away while two changes happen, then comes back.
    state.board.publish(Vec::new(), &[change("GPU-a", Firing), change("GPU-b", Pending)]);
    let again = open_stream(&state, Some(&id)).await;
    state.board.publish(Vec::new(), &[change("GPU-a", Resolved)]);
    let text = read_events(again, 3).await;
    let names: Vec<&str> = text.lines().filter_map(|line| line.strip_prefix("event: ")).collect();
    assert_eq!(names, ["firing", "pending", "resolved"], "{text}");
    assert!(
        !text.contains(&format!("id: {id}\n")),
        "the change already seen is not sent again: {text}"
    );
}

#[tokio::test]
async fn a_stream_id_from_another_run_or_never_sent_asks_the_reader_to_read_again() {
    let state = with_alerts();
    state.board.publish(Vec::new(), &[change("GPU-a", crate::alerts::AlertState::Pending)]);
    // Another run: a different epoch; this run's one kept change follows.
    let text = read_events(open_stream(&state, Some("1-1")).await, 2).await;
    assert!(text.starts_with("event: reset\n"), "{text}");
    assert!(text.contains("\"read\":\"/api/v1/alerts\""), "{text}");
    assert!(text.contains("event: pending\n"), "{text}");
    for odd in ["02", "garbage", &format!("{:x}-9", state.board.epoch())] {
        let text = read_events(open_stream(&state, Some(odd)).await, 1).await;
        assert!(text.starts_with("event: reset\n"), "{odd}: {text}");
    }
}

pub(super) fn report_body(pid: u32) -> String {
    serde_json::json!({
        "version": 1,
        "reporter": { "pid": pid, "hostname": "node-1" },
        "at": "2026-01-01T00:01:59.000Z",
        "devices": [ { "uuid": "GPU-x", "index": 0, "memory_stats": {
            "allocated_bytes.all.current": 10, "reserved_bytes.all.current": 20,
            "active_bytes.all.current": 10, "inactive_split_bytes.all.current": 5,
            "num_alloc_retries": 0, "num_ooms": 0 } } ],
    })
    .to_string()
}

/// An OOM event of `pid` on the device `uuid`: 1 GiB asked, 100 MiB free on
/// the device, 2 GiB cached in pieces of at most 256 MiB (fragmentation).
pub(super) fn oom_body(uuid: &str, pid: u32) -> String {
    serde_json::json!({
        "version": 1,
        "reporter": { "pid": pid, "hostname": "node-1" },
        "at": "2026-01-01T00:01:59.000Z",
        "uuid": uuid,
        "index": 0,
        "requested_bytes": 1_u64 << 30,
        "device_free_bytes": 100_u64 << 20,
        "memory_stats": {
            "allocated_bytes.all.current": 6_u64 << 30, "reserved_bytes.all.current": 8_u64 << 30,
            "active_bytes.all.current": 6_u64 << 30, "inactive_split_bytes.all.current": 1_u64 << 30,
            "num_alloc_retries": 2, "num_ooms": 1 },
        "snapshot": { "segments": 40, "total_bytes": 8_u64 << 30, "allocated_bytes": 6_u64 << 30,
            "largest_free_block_bytes": 256_u64 << 20 },
        "snapshot_path": "/tmp/snapshots/oom-1.pickle",
    })
    .to_string()
}

async fn post_report(
    state: &AppState,
    from: &str,
    token: Option<&str>,
    body: String,
) -> (StatusCode, Value, Option<String>) {
    post_json(state, "/api/v1/allocator-reports", from, token, body).await
}

/// POSTs a JSON `body` to `path` from the peer `from`, with an optional
/// bearer `token`; the status, the JSON answer and any `Retry-After`.
pub(super) async fn post_json(
    state: &AppState,
    path: &str,
    from: &str,
    token: Option<&str>,
    body: String,
) -> (StatusCode, Value, Option<String>) {
    let mut request = Request::builder()
        .method("POST")
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let mut request = request.body(Body::from(body)).unwrap();
    let peer: std::net::SocketAddr = from.parse().unwrap();
    request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
    let response = router(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let retry =
        response.headers().get(header::RETRY_AFTER).map(|value| value.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap(), retry)
}

pub(super) fn with_token(token: Option<&str>) -> AppState {
    state_with_intake(
        filled_store(),
        reports::Ingest {
            store: Arc::new(crate::ingest::ReportStore::new(crate::ingest::StoreLimits {
                ttl: Duration::from_secs(30),
                rate_limit_per_second: 2,
                max_reporters: 8,
            })),
            limits: crate::ingest::ReportLimits { max_devices: 4, max_stats: 64 },
            oom: std::sync::Arc::new(crate::ingest::OomIntake::new(2, 8)),
            oom_hook: None,
            snapshots: None,
            token: token.map(str::to_owned),
            token_failures: crate::api::FailureBudget::new(3, 1024),
        },
    )
}

#[tokio::test]
async fn loopback_may_write_reports_and_others_need_the_token() {
    let open = with_token(None);
    let (status, body, _) = post_report(&open, "127.0.0.1:5000", None, report_body(1)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body, _) = post_report(&open, "10.1.2.3:5000", None, report_body(2)).await;
    assert_error(status, &body, StatusCode::FORBIDDEN, "remote_writes_disabled");

    let guarded = with_token(Some("s3cret"));
    let (status, body, _) = post_report(&guarded, "10.1.2.3:5000", None, report_body(3)).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "missing_token");
    let (status, body, _) =
        post_report(&guarded, "10.1.2.3:5000", Some("guess"), report_body(3)).await;
    assert_error(status, &body, StatusCode::UNAUTHORIZED, "bad_token");
    let (status, _, _) =
        post_report(&guarded, "10.1.2.3:5000", Some("s3cret"), report_body(3)).await;
    assert_eq!(status, StatusCode::ACCEPTED);

    let (status, listed) = get_json(&guarded, "/api/v1/allocator-reports").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["reports"][0]["matched"], false, "GPU-x is no device here: {listed}");
}

#[tokio::test]
async fn bad_large_and_too_frequent_reports_are_refused() {
    let state = with_token(None);
    let (status, body, _) =
        post_report(&state, "127.0.0.1:1", None, "{\"version\":9}".into()).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_report");
    assert!(body["message"].as_str().unwrap().contains("version 9"), "{body}");
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(2048));
    let (status, body, _) = post_report(&state, "127.0.0.1:1", None, huge).await;
    assert_error(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
    for _ in 0..2 {
        let (status, _, _) = post_report(&state, "127.0.0.1:1", None, report_body(9)).await;
        assert_eq!(status, StatusCode::ACCEPTED);
    }
    let (status, body, retry_after) =
        post_report(&state, "127.0.0.1:1", None, report_body(9)).await;
    assert_error(status, &body, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(retry_after.as_deref(), Some("1"));
}

// --- The OpenAPI document (GET /api/v1/openapi.json) ---

/// The operations the issue asks the document to describe: the whole HTTP
/// surface. A route added or removed must be added or removed here too.
const SURFACE: &[(&str, &str)] = &[
    ("GET", "/"),
    ("GET", "/ui/app.js"),
    ("GET", "/ui/app.css"),
    ("GET", "/metrics"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/api/v1/openapi.json"),
    ("GET", "/api/v1/devices"),
    ("GET", "/api/v1/devices/{gpu}"),
    ("GET", "/api/v1/devices/{gpu}/history"),
    ("GET", "/api/v1/allocator-reports"),
    ("POST", "/api/v1/allocator-reports"),
    ("GET", "/api/v1/alerts"),
    ("GET", "/api/v1/alerts/stream"),
    ("GET", "/api/v1/alerts/{id}"),
    ("GET", "/api/v1/oom-events"),
    ("POST", "/api/v1/oom-events"),
    ("GET", "/api/v1/oom-events/{id}"),
    ("GET", "/api/v1/oom-events/{id}/snapshot"),
    ("PUT", "/api/v1/oom-events/{id}/snapshot"),
];

const HTTP_METHODS: &[&str] =
    &["get", "put", "post", "delete", "options", "head", "patch", "trace"];

async fn served_document(state: &AppState) -> Value {
    let (status, body, content_type) = get(state, "/api/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(content_type.as_deref(), Some("application/json"));
    serde_json::from_str(&body).expect("the served document is JSON")
}

/// (METHOD, path) of every operation in a document.
fn document_operations(document: &Value) -> std::collections::BTreeSet<(String, String)> {
    let paths = document["paths"].as_object().expect("paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            HTTP_METHODS
                .iter()
                .filter(|method| item.get(**method).is_some())
                .map(|method| (method.to_uppercase(), path.clone()))
        })
        .collect()
}

/// (METHOD, path) of every route the router registers: `router()` takes its
/// routes from `openapi::operations()` only.
fn registered_routes() -> std::collections::BTreeSet<(String, String)> {
    let mut routes = std::collections::BTreeSet::new();
    for (_, paths, _) in openapi::operations() {
        for (path, item) in paths.paths {
            let methods = [
                ("GET", item.get.is_some()),
                ("PUT", item.put.is_some()),
                ("POST", item.post.is_some()),
                ("DELETE", item.delete.is_some()),
                ("OPTIONS", item.options.is_some()),
                ("HEAD", item.head.is_some()),
                ("PATCH", item.patch.is_some()),
                ("TRACE", item.trace.is_some()),
            ];
            for (method, present) in methods {
                if present {
                    routes.insert((method.to_owned(), path.clone()));
                }
            }
        }
    }
    routes
}

#[tokio::test]
async fn openapi_document_is_served_as_openapi_3_1() {
    let document = served_document(&filled_state()).await;
    let version = document["openapi"].as_str().expect("an `openapi` version");
    assert!(version.starts_with("3.1"), "{version}");
    assert_eq!(document["info"]["title"], "vramd REST API");
    assert!(document["components"]["schemas"]["ErrorBody"].is_object());
}

#[tokio::test]
async fn openapi_lists_every_registered_route() {
    let state = with_alerts();
    let document = served_document(&state).await;
    let documented = document_operations(&document);
    let registered = registered_routes();
    let surface: std::collections::BTreeSet<(String, String)> =
        SURFACE.iter().map(|(method, path)| ((*method).to_owned(), (*path).to_owned())).collect();
    assert_eq!(registered, documented, "registered routes vs. the served document");
    assert_eq!(registered, surface, "registered routes vs. the HTTP surface of the issue");

    // Each registered route is really served by the router (not the
    // fallback, not a 405), and answers a status and a content type its
    // operation documents.
    let device = state.store.devices()[0].clone();
    let held =
        crate::ingest::oom::parse(oom_body(&device.info().uuid, 4242).as_bytes(), 64).unwrap();
    device.record_oom(crate::model::OomEvent { id: 1, ..held });
    for (method, path) in &registered {
        let id = if path.starts_with("/api/v1/oom-events") { "1" } else { "memory_high.GPU-a" };
        let mut uri = path.replace("{gpu}", "0").replace("{id}", id);
        if path.ends_with("/history") {
            uri.push_str("?window=10s");
        }
        let mut request = Request::builder().method(method.as_str()).uri(&uri);
        let body = if method == "POST" {
            request = request.header(header::CONTENT_TYPE, "application/json");
            if path.starts_with("/api/v1/oom-events") {
                Body::from(oom_body(&device.info().uuid, 77))
            } else {
                Body::from(report_body(77))
            }
        } else {
            Body::empty()
        };
        let mut request = request.body(body).unwrap();
        request.extensions_mut().insert(axum::extract::ConnectInfo(
            "127.0.0.1:9".parse::<std::net::SocketAddr>().unwrap(),
        ));
        let response = router(state.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|value| value.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let operation = &document["paths"][path][method.to_lowercase()];
        let answer = &operation["responses"][status.as_str()];
        assert!(answer.is_object(), "{method} {uri}: status {status} is not documented");
        let media = content_type.split(';').next().unwrap().trim().to_owned();
        assert!(
            answer["content"].get(&media).is_some(),
            "{method} {uri}: {status} {content_type} is not a documented content type: {answer}"
        );
        if path.ends_with("/snapshot") {
            // Off in this state (no ingest.snapshot_dir): answered by its
            // handler, not the fallback (api::oom_snapshot tests the rest).
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["code"], "snapshots_disabled", "{method} {uri}: {body}");
            continue;
        }
        assert!(status.is_success(), "{method} {uri}: {status}");
    }
}

#[tokio::test]
async fn every_documented_error_has_the_error_shape() {
    let document = served_document(&filled_state()).await;
    let mut statuses = std::collections::BTreeSet::new();
    for (method, path) in document_operations(&document) {
        let operation = &document["paths"][&path][method.to_lowercase()];
        let responses = operation["responses"].as_object().unwrap();
        for status in ["405", "408", "503"] {
            assert!(responses.contains_key(status), "{method} {path} lacks {status}");
        }
        for (status, answer) in responses {
            assert!(answer["description"].as_str().is_some_and(|text| !text.is_empty()));
            if status.as_str() < "400" {
                continue;
            }
            statuses.insert(status.clone());
            let json = &answer["content"]["application/json"];
            assert_eq!(
                json["schema"]["$ref"], "#/components/schemas/ErrorBody",
                "{method} {path} {status}: {answer}"
            );
            let example = json.get("example").or_else(|| {
                json["examples"]
                    .as_object()
                    .and_then(|all| all.values().next())
                    .map(|e| &e["value"])
            });
            let example = example.unwrap_or_else(|| panic!("{method} {path} {status}: no example"));
            assert!(example["code"].is_string() && example["message"].is_string(), "{example}");
        }
    }
    let expected = ["400", "401", "403", "404", "405", "408", "413", "415", "429", "500", "503"];
    assert_eq!(statuses, expected.iter().map(|s| (*s).to_owned()).collect());
    let retry_after =
        &document["paths"]["/api/v1/allocator-reports"]["post"]["responses"]["429"]["headers"];
    assert!(retry_after["Retry-After"].is_object(), "{retry_after}");
}

#[tokio::test]
async fn openapi_documents_parameters_bodies_and_media_types() {
    let document = served_document(&filled_state()).await;
    let paths = &document["paths"];
    let parameter = |path: &str, name: &str| -> Value {
        paths[path]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{path} lacks parameter {name}"))
            .clone()
    };
    assert_eq!(parameter("/api/v1/devices/{gpu}", "gpu")["in"], "path");
    assert_eq!(parameter("/api/v1/devices/{gpu}/history", "window")["in"], "query");
    assert_eq!(parameter("/api/v1/devices/{gpu}/history", "step")["in"], "query");
    assert_eq!(parameter("/api/v1/alerts/{id}", "id")["in"], "path");
    let schemas = &document["components"]["schemas"];
    let enum_of = |name: &str| -> Value {
        let reference =
            parameter("/api/v1/alerts", name)["schema"]["$ref"].as_str().unwrap().to_owned();
        schemas[reference.trim_start_matches("#/components/schemas/")]["enum"].clone()
    };
    assert_eq!(enum_of("state"), serde_json::json!(["pending", "firing", "resolved"]));
    assert_eq!(enum_of("severity"), serde_json::json!(["info", "warning", "critical"]));

    let ok = |path: &str| paths[path]["get"]["responses"]["200"]["content"].clone();
    assert!(ok("/metrics")["text/plain"].is_object());
    assert!(ok("/api/v1/alerts/stream")["text/event-stream"].is_object());
    assert_eq!(
        ok("/api/v1/devices/{gpu}")["application/json"]["schema"]["$ref"],
        "#/components/schemas/DeviceDetail"
    );

    let post = &paths["/api/v1/allocator-reports"]["post"];
    assert_eq!(
        post["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/AllocatorReport"
    );
    let device = &schemas["DeviceReport"];
    let stats = &device["properties"]["memory_stats"]["anyOf"];
    assert_eq!(stats[0]["maxProperties"], 0, "empty: an allocator never used");
    assert_eq!(stats[1]["additionalProperties"]["type"], "number");
    assert_eq!(stats[1]["required"].as_array().map(Vec::len), Some(6), "{stats}");
    assert_eq!(schemas["AllocatorReport"]["additionalProperties"], false);
    assert_eq!(
        post["responses"]["202"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Accepted"
    );
}

#[test]
fn the_documented_report_example_is_what_the_parser_accepts() {
    let limits = crate::ingest::ReportLimits { max_devices: 16, max_stats: 1024 };
    let example = crate::ingest::report::example_report();
    let report = crate::ingest::report::parse(example.to_string().as_bytes(), &limits)
        .expect("the documented example is a valid report");
    assert_eq!(report.devices.len(), 1);
    // additionalProperties: false, as the parser refuses unknown fields.
    let mut extra = example.clone();
    extra["colour"] = Value::from("red");
    assert!(crate::ingest::report::parse(extra.to_string().as_bytes(), &limits).is_err());
    let mut extra = example;
    extra["devices"][0]["colour"] = Value::from("red");
    assert!(crate::ingest::report::parse(extra.to_string().as_bytes(), &limits).is_err());
}

// --- Regressions for what fuzzing the document found ---

/// schemathesis (ST108): a process in `GET /api/v1/devices/0` failed its
/// schema, because `ProcessDetails` (deny_unknown_fields) carried
/// `additionalProperties: false` into the `allOf` of the flattened
/// `ProcessDto`, refusing `pid`, `name`, … . Parts of an `allOf` are open.
#[tokio::test]
async fn flattened_parts_of_a_schema_do_not_refuse_the_other_fields() {
    let document = served_document(&filled_state()).await;
    let schemas = document["components"]["schemas"].as_object().unwrap();
    let mut flattened = 0;
    for (name, schema) in schemas {
        for part in schema["allOf"].as_array().into_iter().flatten() {
            let Some(reference) = part["$ref"].as_str() else { continue };
            let target = &schemas[reference.trim_start_matches("#/components/schemas/")];
            assert!(
                target.get("additionalProperties").is_none(),
                "{name} flattens {reference}, which refuses other properties"
            );
            flattened += 1;
        }
    }
    assert!(flattened >= 3, "DeviceDetail, ProcessDto and Alert flatten a part");
    assert!(schemas["ProcessDetails"].get("additionalProperties").is_none());
    // Where nothing is flattened, the strictness stays.
    assert_eq!(schemas["MigInfo"]["additionalProperties"], false);
}

/// schemathesis (ST201): a report with `reporter.pid` 2147483648 was
/// accepted although the document said `format: int32` (so at most
/// 2^31 - 1) for a `u32`. Unsigned integers are documented with their real
/// range (`uint32`, `uint64`, minimum 0, and the maximum on request fields).
#[tokio::test]
async fn unsigned_fields_are_documented_with_their_full_range() {
    let document = served_document(&filled_state()).await;
    let schemas = &document["components"]["schemas"];
    let pid = &schemas["Reporter"]["properties"]["pid"];
    assert_eq!(pid["format"], "uint32", "{pid}");
    assert_eq!(pid["minimum"], 0);
    assert_eq!(pid["maximum"], u64::from(u32::MAX));
    let index = &schemas["DeviceReport"]["properties"]["index"];
    assert_eq!(index["format"], "uint32");
    assert_eq!(index["maximum"], u64::from(u32::MAX));
    // Sizes are refused above 2^53 (no device has 8 PiB; a JSON number
    // is not exact beyond it), and documented so.
    assert_eq!(schemas["SnapshotSummary"]["properties"]["total_bytes"]["maximum"], 1_u64 << 53);
    assert_eq!(schemas["AllocatorStats"]["properties"]["reserved_bytes"]["format"], "uint64");

    // And the daemon agrees: the documented maximum is accepted, one more is not.
    let state = with_token(None);
    let (status, body, _) = post_report(&state, "127.0.0.1:1", None, report_body(u32::MAX)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let too_big =
        report_body(0).replace("\"pid\":0", &format!("\"pid\":{}", u64::from(u32::MAX) + 1));
    let (status, body, _) = post_report(&state, "127.0.0.1:1", None, too_big).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_report");
}

/// A `{gpu}` or `{id}` segment that is not UTF-8 (`%FF`) got axum's
/// plain-text 400, a status and content type no operation documents; it
/// names no device or alert, so it gets their JSON 404.
#[tokio::test]
async fn path_segments_that_are_not_utf8_get_the_json_404() {
    let state = with_alerts();
    for (uri, code) in [
        ("/api/v1/devices/%FF", "unknown_device"),
        ("/api/v1/devices/%FF%FE/history", "unknown_device"),
        ("/api/v1/devices/%C0/history?window=1m", "unknown_device"),
        ("/api/v1/alerts/%FF", "unknown_alert"),
    ] {
        let (status, body) = get_json(&state, uri).await;
        assert_error(status, &body, StatusCode::NOT_FOUND, code);
        assert!(
            body["message"].as_str().unwrap().contains("%F")
                || body["message"].as_str().unwrap().contains("%C0"),
            "{body}"
        );
    }
    // Percent-encoded UTF-8 still finds what it names.
    let (status, _) = get_json(&state, "/api/v1/alerts/memory_high.GPU%2Da").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_landing_page_links_every_surface_and_names_the_build() {
    let (status, body, content_type) = get(&filled_state(), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(content_type.is_some_and(|value| value.starts_with("text/html")));
    for link in [
        "/metrics",
        "/api/v1/devices",
        "/api/v1/alerts",
        "/api/v1/openapi.json",
        "/healthz",
        "/readyz",
    ] {
        assert!(body.contains(&format!("href=\"{link}\"")), "{link} missing:\n{body}");
    }
    assert!(body.contains(env!("CARGO_PKG_VERSION")));
}

/// A local IPv4 client on a `[::]` listener arrives as `::ffff:127.0.0.1`;
/// it is loopback and may write, like 127.0.0.1 itself.
#[tokio::test]
async fn ipv4_mapped_loopback_is_loopback() {
    let state = with_token(None);
    let (status, body, _) = post_report(&state, "[::ffff:127.0.0.1]:1", None, report_body(7)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body, _) = post_report(&state, "[::ffff:10.0.0.7]:1", None, report_body(8)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}

async fn post_raw(
    state: &AppState,
    headers: &[(header::HeaderName, &str)],
    body: &str,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method("POST").uri("/api/v1/allocator-reports");
    for (name, value) in headers {
        request = request.header(name, *value);
    }
    let mut request = request.body(Body::from(body.to_owned())).unwrap();
    let peer: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
    request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
    let response = router(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn writes_must_be_json_and_an_announced_oversize_body_is_refused_at_once() {
    let state = with_token(None);
    let report = report_body(9);
    // What a browser page may send without a preflight.
    for media in
        ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
    {
        let (status, body) = post_raw(&state, &[(header::CONTENT_TYPE, media)], &report).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{media}: {body}");
        assert_eq!(body["code"], "unsupported_media_type");
    }
    let (status, body) = post_raw(&state, &[], &report).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "no Content-Type: {body}");
    let (status, body) =
        post_raw(&state, &[(header::CONTENT_TYPE, "application/json; charset=utf-8")], &report)
            .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // 10 GB announced, one byte sent: 413 from the header, not a timeout.
    let (status, body) = post_raw(
        &state,
        &[(header::CONTENT_TYPE, "application/json"), (header::CONTENT_LENGTH, "10000000000")],
        "{",
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["code"], "body_too_large");
}

#[tokio::test]
async fn gzip_when_asked_and_never_on_the_event_stream() {
    let state = filled_state();
    let ask = |uri: &str, gzip: bool| {
        let mut request = Request::builder().uri(uri);
        if gzip {
            request = request.header(header::ACCEPT_ENCODING, "gzip");
        }
        request.body(Body::empty()).unwrap()
    };
    let plain = router(state.clone()).oneshot(ask("/metrics", false)).await.unwrap();
    assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
    let plain = plain.into_body().collect().await.unwrap().to_bytes();
    let zipped = router(state.clone()).oneshot(ask("/metrics", true)).await.unwrap();
    assert_eq!(zipped.headers().get(header::CONTENT_ENCODING).unwrap(), "gzip");
    let zipped = zipped.into_body().collect().await.unwrap().to_bytes();
    assert!(zipped.len() * 4 < plain.len(), "{} -> {} bytes", plain.len(), zipped.len());
    let mut unzipped = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&zipped[..]), &mut unzipped)
        .unwrap();
    // Two renders of the same store are the same bytes.
    assert_eq!(unzipped, plain.to_vec());
    let json = router(state.clone()).oneshot(ask("/api/v1/devices", true)).await.unwrap();
    assert_eq!(json.headers().get(header::CONTENT_ENCODING).unwrap(), "gzip");
    let stream = router(state).oneshot(ask("/api/v1/alerts/stream", true)).await.unwrap();
    assert!(stream.headers().get(header::CONTENT_ENCODING).is_none(), "SSE is never compressed");
}
