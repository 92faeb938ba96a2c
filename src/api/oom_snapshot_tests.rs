//! `PUT/GET /api/v1/oom-events/{id}/snapshot` through the router: stored
//! and served byte for byte, the event names its URL, the budget evicts the
//! oldest upload (then 404), the per-upload cap answers 413 whether or not
//! the length was announced, writers are checked, and uploads are off
//! without `ingest.snapshot_dir`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::super::tests::{
    assert_error, filled_store, get, get_json, ingest, oom_body, post_json, state_with_intake,
};
use crate::api::{AppState, reports, router};
use crate::ingest::{SnapshotLimits, SnapshotStore};

fn state(token: Option<&str>, dir: Option<&Path>, total: u64, upload: u64) -> AppState {
    let snapshots = dir.map(|dir| {
        let limits =
            SnapshotLimits { max_total_bytes: total, max_upload_bytes: upload, max_files: 16 };
        Arc::new(SnapshotStore::open(dir, limits).unwrap())
    });
    state_with_intake(filled_store(), reports::Ingest { snapshots, ..ingest(token, 100, 10) })
}

/// Posts an OOM event and answers its id.
async fn event(state: &AppState) -> u64 {
    let device = state.store.devices()[0].clone();
    let uuid = device.info().uuid.clone();
    let (status, body, _) =
        post_json(state, "/api/v1/oom-events", "127.0.0.1:9", None, oom_body(&uuid, 1)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["id"].as_u64().unwrap()
}

async fn put(
    state: &AppState,
    id: u64,
    from: &str,
    token: Option<&str>,
    body: Body,
    length: Option<usize>,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method("PUT")
        .uri(format!("/api/v1/oom-events/{id}/snapshot"))
        .header(header::CONTENT_TYPE, "application/octet-stream");
    if let Some(length) = length {
        request = request.header(header::CONTENT_LENGTH, length);
    }
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let mut request = request.body(body).unwrap();
    let peer: std::net::SocketAddr = from.parse().unwrap();
    request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
    let response = router(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

async fn upload(state: &AppState, id: u64, bytes: Vec<u8>) -> (StatusCode, Value) {
    let length = bytes.len();
    put(state, id, "127.0.0.1:9", None, Body::from(bytes), Some(length)).await
}

/// The snapshot served for `id`: status, content type, bytes. Asked with
/// gzip accepted, as HTTP clients do, so the compression layer is in play.
async fn fetch(state: &AppState, id: u64) -> (StatusCode, Option<String>, Vec<u8>) {
    let request = Request::builder()
        .uri(format!("/api/v1/oom-events/{id}/snapshot"))
        .header(header::ACCEPT_ENCODING, "identity")
        .body(Body::empty());
    let response = router(state.clone()).oneshot(request.unwrap()).await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|value| value.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, content_type, bytes.to_vec())
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn an_uploaded_snapshot_is_served_and_named_by_its_event() {
    let dir = tempfile::tempdir().unwrap();
    let state = state(None, Some(dir.path()), 1 << 20, 1 << 20);
    let id = event(&state).await;
    let (_, before) = get_json(&state, &format!("/api/v1/oom-events/{id}")).await;
    assert_eq!(before["snapshot_held"], false, "{before}");
    assert!(before.get("snapshot_url").is_none(), "{before}");

    // Larger than one write chunk, so it goes to disk in pieces.
    let snapshot: Vec<u8> = (0..(3 << 20) / 2).map(|i: u32| (i % 251) as u8).collect();
    let state_big = state.clone();
    let (status, body) = upload(&state_big, id, snapshot[..(1 << 20)].to_vec()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["bytes"], 1 << 20);
    assert_eq!(body["url"], format!("/api/v1/oom-events/{id}/snapshot"));

    let (status, content_type, served) = fetch(&state, id).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type.as_deref(), Some("application/octet-stream"));
    assert!(served == snapshot[..(1 << 20)], "served bytes differ from the upload");
    let (_, after) = get_json(&state, &format!("/api/v1/oom-events/{id}")).await;
    assert_eq!(after["snapshot_held"], true, "{after}");
    assert_eq!(after["snapshot_url"], format!("/api/v1/oom-events/{id}/snapshot"));
    assert_eq!(files(dir.path()), vec![format!("oom-{id}.snapshot")]);
}

#[tokio::test]
async fn the_oldest_upload_is_evicted_beyond_the_budget_and_then_404() {
    let dir = tempfile::tempdir().unwrap();
    let state = state(None, Some(dir.path()), 1000, 600);
    let ids = [event(&state).await, event(&state).await, event(&state).await];
    for id in &ids[..2] {
        let (status, body) = upload(&state, *id, vec![1; 400]).await;
        assert_eq!((status, body["evicted"].clone()), (StatusCode::CREATED, serde_json::json!([])));
    }
    let (status, body) = upload(&state, ids[2], vec![2; 400]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["evicted"], serde_json::json!([ids[0]]), "the oldest upload goes: {body}");

    let (status, _, body) = fetch(&state, ids[0]).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_error(status, &body, StatusCode::NOT_FOUND, "no_snapshot");
    let (_, event) = get_json(&state, &format!("/api/v1/oom-events/{}", ids[0])).await;
    assert_eq!(event["snapshot_held"], false, "{event}");
    assert_eq!(fetch(&state, ids[2]).await.2, vec![2; 400]);
    assert_eq!(files(dir.path()).len(), 2);
}

#[tokio::test]
async fn a_snapshot_over_the_cap_gets_413_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let state = state(None, Some(dir.path()), 1 << 20, 1000);
    let id = event(&state).await;
    let (status, body) = upload(&state, id, vec![0; 1001]).await;
    assert_error(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "snapshot_too_large");

    // No length announced: refused while streaming, at the byte that passes.
    let pieces: Vec<Result<Vec<u8>, std::io::Error>> = vec![Ok(vec![0; 600]), Ok(vec![0; 600])];
    let streamed = Body::from_stream(futures_util::stream::iter(pieces));
    let (status, body) = put(&state, id, "127.0.0.1:9", None, streamed, None).await;
    assert_error(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "snapshot_too_large");
    let (status, body) = upload(&state, id, Vec::new()).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_snapshot");
    assert_eq!(files(dir.path()), Vec::<String>::new());
    let (status, _, _) = fetch(&state, id).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn only_loopback_or_the_token_may_upload_and_only_when_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let guarded = state(Some("s3cret"), Some(dir.path()), 1 << 20, 1 << 20);
    let id = event(&guarded).await;
    let body = || Body::from(vec![1_u8; 10]);
    let (status, answer) = put(&guarded, id, "10.1.2.3:5000", None, body(), Some(10)).await;
    assert_error(status, &answer, StatusCode::UNAUTHORIZED, "missing_token");
    let (status, answer) =
        put(&guarded, id, "10.1.2.3:5000", Some("guess"), body(), Some(10)).await;
    assert_error(status, &answer, StatusCode::UNAUTHORIZED, "bad_token");
    let (status, answer) =
        put(&guarded, id, "10.1.2.3:5000", Some("s3cret"), body(), Some(10)).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let (status, answer) = put(&guarded, 999, "127.0.0.1:9", None, body(), Some(10)).await;
    assert_error(status, &answer, StatusCode::NOT_FOUND, "unknown_oom_event");

    let open = state(None, Some(dir.path()), 1 << 20, 1 << 20);
    let id = event(&open).await;
    let (status, answer) = put(&open, id, "10.1.2.3:5000", None, body(), Some(10)).await;
    assert_error(status, &answer, StatusCode::FORBIDDEN, "remote_writes_disabled");

    let off = state(None, None, 0, 0);
    let id = event(&off).await;
    let (status, answer) = put(&off, id, "127.0.0.1:9", None, body(), Some(10)).await;
    assert_error(status, &answer, StatusCode::NOT_FOUND, "snapshots_disabled");
    let (status, answer, _) = get(&off, &format!("/api/v1/oom-events/{id}/snapshot")).await;
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_error(status, &answer, StatusCode::NOT_FOUND, "snapshots_disabled");
}

#[tokio::test]
async fn a_snapshot_is_served_through_gzip_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let state = state(None, Some(dir.path()), 1 << 20, 1 << 20);
    let id = event(&state).await;
    let (status, _) = upload(&state, id, vec![9; 5000]).await;
    assert_eq!(status, StatusCode::CREATED);
    let request = Request::builder()
        .uri(format!("/api/v1/oom-events/{id}/snapshot"))
        .header(header::ACCEPT_ENCODING, "gzip")
        .body(Body::empty())
        .unwrap();
    let response = router(state.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // The whole body is read: the stream must end cleanly, not fail.
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(!body.is_empty());
}

/// A body that sends `chunks` pieces of 1 KiB, `pause` apart.
fn slow_body(chunks: usize, pause: Duration) -> Body {
    let pieces = futures_util::stream::unfold(0, move |sent| async move {
        if sent == chunks {
            return None;
        }
        if sent > 0 {
            tokio::time::sleep(pause).await;
        }
        Some((Ok::<_, std::io::Error>(vec![7_u8; 1024]), sent + 1))
    });
    Body::from_stream(pieces)
}

#[tokio::test]
async fn an_upload_longer_than_the_request_timeout_but_within_its_own_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = state(None, Some(dir.path()), 1 << 20, 1 << 20);
    // Issue 35: the upload was held to server.request_timeout.
    state.limits.request_timeout = Duration::from_millis(200);
    state.limits.snapshot_upload_timeout = Duration::from_secs(30);
    let id = event(&state).await;
    let body = slow_body(3, Duration::from_millis(300));
    let (status, answer) = put(&state, id, "127.0.0.1:9", None, body, None).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["bytes"], 3 * 1024);
}

#[tokio::test]
async fn an_upload_past_its_timeout_gets_408_naming_the_key_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = state(None, Some(dir.path()), 1 << 20, 1 << 20);
    state.limits.request_timeout = Duration::from_secs(30);
    state.limits.snapshot_upload_timeout = Duration::from_millis(200);
    let id = event(&state).await;
    let body = slow_body(3, Duration::from_secs(5));
    let (status, answer) = put(&state, id, "127.0.0.1:9", None, body, None).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{answer}");
    assert_eq!(answer["code"], "request_timeout");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains("ingest.snapshot_upload_timeout"), "{message}");
    // The unfinished upload removes its temporary file on a blocking thread.
    for _ in 0..100 {
        if files(dir.path()).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(files(dir.path()), Vec::<String>::new());
}
