//! What every route shares: the timeout, the concurrency limit, who may
//! write, what a write must be, and compression.

use super::*;

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
