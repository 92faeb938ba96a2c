//! Golden files for the wire formats: `/metrics` device series and the
//! device REST document, for a fixed seed and simulated time.
//!
//! A difference fails the test. When a change to the output is intended,
//! regenerate deliberately with `VRAMD_UPDATE_GOLDEN=1 cargo test --test golden`
//! and review the diff of `tests/golden/` before committing.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use tower::ServiceExt;

use vramd::alerts::board::AlertBoard;
use vramd::analysis::snapshot::AnalysisBoard;
use vramd::api::{self, AppState, Limits};
use vramd::clock::ScaledClock;
use vramd::history::{HistoryStore, Sizing};
use vramd::play::{self, Schedule};
use vramd::source::simulator::{GOLDEN_ORIGIN, ScenarioKind, Simulator, SimulatorSpec};
use vramd::telemetry::Telemetry;

/// Plays `scenario` from its start to `until` at 4 Hz fast / 1 Hz slow.
fn store_after(scenario: ScenarioKind, gpus: u32, until: Duration) -> Arc<HistoryStore> {
    let spec = SimulatorSpec { scenario, gpus, seed: 42 };
    let clock = ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0);
    let simulator = Simulator::with_origin(spec, clock, GOLDEN_ORIGIN).unwrap();
    let store = Arc::new(HistoryStore::new(Sizing {
        fast_capacity: 20_000,
        slow_capacity: 5_000,
        peak_window: Duration::from_secs(60),
    }));
    let schedule = Schedule {
        from: GOLDEN_ORIGIN,
        duration: until,
        fast: Duration::from_millis(250),
        slow: Duration::from_secs(1),
    };
    play::play_simulator(&simulator, &store, schedule, |_| {}).unwrap();
    store.mark_cycle_completed();
    store
}

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

fn check_golden(name: &str, actual: &str) {
    let path = golden_path(name);
    if std::env::var_os("VRAMD_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!("{}: {error}; create it with VRAMD_UPDATE_GOLDEN=1", path.display())
    });
    if expected != actual {
        let first_difference = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .find(|(_, (want, got))| want != got)
            .map(|(line, (want, got))| {
                format!("line {}:\n  golden: {want}\n  actual: {got}", line + 1)
            })
            .unwrap_or_else(|| "one output is a prefix of the other".to_owned());
        panic!(
            "{name} differs from the golden file ({first_difference}).\nIf the change is intended, regenerate with VRAMD_UPDATE_GOLDEN=1 and review the diff."
        );
    }
}

#[test]
fn metrics_for_a_multi_tenant_host_match_the_golden_file() {
    let store = store_after(ScenarioKind::MultiTenant, 2, Duration::from_secs(300));
    let text = String::from_utf8(vramd::exposition::render_devices(&store)).unwrap();
    check_golden("metrics-multi-tenant.txt", &text);
}

#[test]
fn metrics_for_a_lost_device_leave_its_values_out() {
    let store = store_after(ScenarioKind::DeviceLost, 2, Duration::from_secs(360));
    let text = String::from_utf8(vramd::exposition::render_devices(&store)).unwrap();
    check_golden("metrics-device-lost.txt", &text);
    let lost_uuid = store.devices()[1].info().uuid.clone();
    assert!(text.contains(&format!("vramd_device_up{{gpu=\"1\",uuid=\"{lost_uuid}\"}} 0")));
    assert!(!text.contains("vramd_memory_used_bytes{gpu=\"1\""));
}

#[tokio::test]
async fn device_document_matches_the_golden_file() {
    let store = store_after(ScenarioKind::TrainingFragmentation, 1, Duration::from_secs(900));
    let state = AppState::new(
        store,
        Arc::new(Telemetry::new("simulator").unwrap()),
        Arc::new(AnalysisBoard::default()),
        Arc::new(AlertBoard::new(16)),
        Limits {
            request_timeout: Duration::from_secs(5),
            max_request_body_bytes: 1024,
            max_concurrent_requests: 4,
            max_concurrent_scrapes: 4,
            max_history_points: 1_000,
            retention: Duration::from_secs(3_600),
            max_event_streams: 2,
        },
        vramd::app::report_intake(&vramd::config::defaults(), None),
    );
    let response = api::router(state)
        .oneshot(Request::builder().uri("/api/v1/devices/0").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let mut pretty = serde_json::to_string_pretty(&value).unwrap();
    pretty.push('\n');
    check_golden("device-training-fragmentation.json", &pretty);
}
