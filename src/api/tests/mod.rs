//! Every route and error, through the router without a socket: the shared
//! state builders and request helpers here, the tests by surface in the
//! submodules (devices, alerts and their stream, reports, the OpenAPI
//! document, and the protections every route shares).

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

mod alert_routes;
mod device_routes;
mod openapi_document;
mod protections;
mod report_routes;

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
    state_with_intake(filled_store(), ingest(token, 2, 3))
}

/// Report and OOM intake for tests: 8 reporters, `rate_per_second` each,
/// `token` (if any) with a budget of `failure_budget` wrong tokens, no
/// snapshot store.
pub(super) fn ingest(
    token: Option<&str>,
    rate_per_second: usize,
    failure_budget: u32,
) -> reports::Ingest {
    reports::Ingest {
        store: Arc::new(crate::ingest::ReportStore::new(crate::ingest::StoreLimits {
            ttl: Duration::from_secs(30),
            rate_limit_per_second: rate_per_second,
            max_reporters: 8,
        })),
        limits: crate::ingest::ReportLimits { max_devices: 4, max_stats: 64 },
        oom: Arc::new(crate::ingest::OomIntake::new(rate_per_second, 8)),
        oom_hook: None,
        snapshots: None,
        token: token.map(str::to_owned),
        token_failures: crate::api::FailureBudget::new(failure_budget, 1024),
    }
}
