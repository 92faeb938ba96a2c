//! History answers longer than one part: streamed, and the same JSON.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::body::HttpBody;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::history_body::PART_ENTRIES;
use super::tests::{limits, state_with_intake};
use super::*;
use crate::clock::ScaledClock;
use crate::history::{HistoryStore, Sizing};
use crate::play::{self, Schedule};
use crate::source::simulator::{GOLDEN_ORIGIN, ScenarioKind, Simulator, SimulatorSpec};

const FAST_SAMPLES: usize = 2_000;

/// One simulated GPU with 2,000 fast samples, four parts' worth.
fn long_state() -> AppState {
    let spec = SimulatorSpec { scenario: ScenarioKind::SteadyInference, gpus: 1, seed: 5 };
    let simulator =
        Simulator::with_origin(spec, ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0), GOLDEN_ORIGIN)
            .unwrap();
    let store = Arc::new(HistoryStore::new(Sizing {
        fast_capacity: FAST_SAMPLES,
        slow_capacity: 16,
        peak_window: Duration::from_secs(60),
        oom_events: 4,
    }));
    let schedule = Schedule {
        from: GOLDEN_ORIGIN,
        duration: Duration::from_millis(250 * (FAST_SAMPLES as u64 - 1)),
        fast: Duration::from_millis(250),
        slow: Duration::from_secs(60),
    };
    play::play_simulator(&simulator, &store, schedule, play::ProcessCap(64), |_| {}).unwrap();
    store.mark_cycle_completed();
    let mut state =
        state_with_intake(store, crate::app::report_intake(&crate::app::Config::default(), None));
    state.limits = Limits { max_history_points: 10_000, ..limits() };
    state
}

/// The answer's length if known before its body is sent (what hyper
/// writes as `Content-Length`), the number of data frames its body arrived
/// in, and the body as JSON.
async fn get_in_frames(state: &AppState, uri: &str) -> (Option<u64>, usize, Value) {
    let response = router(state.clone())
        .oneshot(Request::builder().uri(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
    let mut body = response.into_body();
    let length = body.size_hint().exact();
    let (mut frames, mut bytes) = (0, Vec::new());
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            frames += 1;
            bytes.extend_from_slice(&data);
        }
    }
    (length, frames, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_long_window_is_streamed_in_parts_and_lists_every_sample() {
    let state = long_state();
    let (length, frames, raw) = get_in_frames(&state, "/api/v1/devices/0/history?window=10m").await;
    assert_eq!(length, None, "written as read, its length is not known up front");
    assert!(frames > FAST_SAMPLES / PART_ENTRIES, "{frames} frames");
    let points = raw["points"].as_array().unwrap();
    assert_eq!(points.len(), FAST_SAMPLES);
    let times: Vec<&str> = points.iter().map(|point| point["at"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|pair| pair[0] < pair[1]), "oldest first, none twice");
    assert!(raw["from"].as_str().unwrap() <= times[0], "{}", raw["from"]);
    assert_eq!(raw["to"].as_str(), times.last().copied());
    assert!(points[0]["used_bytes"].as_u64().is_some(), "{}", points[0]);
}

#[tokio::test]
async fn many_buckets_are_streamed_in_parts_too() {
    let state = long_state();
    let (length, frames, coarse) =
        get_in_frames(&state, "/api/v1/devices/0/history?window=10m&step=500ms").await;
    assert_eq!(length, None);
    let buckets = coarse["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), FAST_SAMPLES / 2, "two samples in each 500 ms");
    assert!(frames > buckets.len() / PART_ENTRIES, "{frames} frames");
    assert!(buckets.iter().all(|bucket| bucket["samples"] == 2), "{}", buckets[0]);
    assert_eq!(coarse["step_seconds"], 0.5);
}

/// Prometheus, browsers and curl --compressed ask for gzip: the compression
/// layer polls the body once more after its end, which an unfused stream
/// answered with a panic (the connection closed with no answer).
#[tokio::test]
async fn a_streamed_answer_can_be_gzipped() {
    use std::io::Read;
    let state = long_state();
    for uri in
        ["/api/v1/devices/0/history?window=10m", "/api/v1/devices/0/history?window=10m&step=500ms"]
    {
        let response = router(state.clone())
            .oneshot(
                Request::builder()
                    .uri(uri)
                    .header(header::ACCEPT_ENCODING, "gzip")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_ENCODING], "gzip");
        let mut body = response.into_body();
        let mut zipped = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.unwrap().into_data() {
                zipped.extend_from_slice(&data);
            }
        }
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(zipped.as_slice()).read_to_end(&mut json).unwrap();
        let answer: Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(answer["gpu"], 0, "{uri}");
    }
}
