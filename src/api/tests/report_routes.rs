//! Allocator reports: who may write them, and bad, large and too frequent
//! ones refused.

use super::*;

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
