//! What a writer that lies or guesses gets (issue 35): a `Content-Length`
//! that is not a number or that the body does not match is a 400, not a
//! 413; wrong bearer tokens spend the address's `server.auth_failure_budget`
//! and are then refused unchecked with 429.

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::router;
use super::tests::{assert_error, post_json, report_body, with_token};

/// POSTs a report with `content_length` (when given) over `body`.
async fn post_with_length(content_length: Option<&str>, body: Body) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method("POST")
        .uri("/api/v1/allocator-reports")
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(length) = content_length {
        request = request.header(header::CONTENT_LENGTH, length);
    }
    let mut request = request.body(body).unwrap();
    let peer: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
    request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
    let response = router(with_token(None)).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_content_length_that_lies_gets_400_and_a_truthful_large_one_413() {
    let report = report_body(4);
    let length = report.len();
    let (status, body) = post_with_length(Some("many"), Body::from(report.clone())).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_body");
    for announced in [length - 5, length + 5] {
        let (status, body) =
            post_with_length(Some(&announced.to_string()), Body::from(report.clone())).await;
        assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_body");
        assert!(body["message"].as_str().unwrap().contains("Content-Length"), "{body}");
    }
    // A client that closes before the announced length arrived: the body
    // breaks off (hyper's incomplete-body error) instead of growing.
    let cut = futures_util::stream::iter([
        Ok(Bytes::from(report[..10].to_owned())),
        Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
    ]);
    let (status, body) = post_with_length(Some(&length.to_string()), Body::from_stream(cut)).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "bad_body");
    let (status, _) = post_with_length(Some(&length.to_string()), Body::from(report)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "a truthful length is fine");
    // Over server.max_request_body (1 KiB in these tests), honestly sent.
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(2048));
    let (status, body) = post_with_length(None, Body::from(huge)).await;
    assert_error(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
}

#[tokio::test]
async fn wrong_bearer_tokens_beyond_the_budget_get_429_for_that_address_only() {
    let state = with_token(Some("s3cret"));
    let path = "/api/v1/allocator-reports";
    // The budget is 3 in these tests.
    for guess in 0..3 {
        let (status, body, _) = post_json(
            &state,
            path,
            "10.1.2.3:5000",
            Some(&format!("guess-{guess}")),
            report_body(3),
        )
        .await;
        assert_error(status, &body, StatusCode::UNAUTHORIZED, "bad_token");
    }
    let (status, body, retry) =
        post_json(&state, path, "10.1.2.3:5001", Some("guess-4"), report_body(3)).await;
    assert_error(status, &body, StatusCode::TOO_MANY_REQUESTS, "too_many_failures");
    assert_eq!(retry.as_deref(), Some("60"));
    let (status, body, _) =
        post_json(&state, path, "10.1.2.3:5002", Some("s3cret"), report_body(3)).await;
    assert_error(status, &body, StatusCode::TOO_MANY_REQUESTS, "too_many_failures");
    let (status, body, _) =
        post_json(&state, path, "10.9.9.9:5000", Some("s3cret"), report_body(3)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "another address is not refused: {body}");
}
