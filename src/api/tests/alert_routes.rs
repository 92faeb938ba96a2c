//! Alerts: listing, filtering, lookup by id, and the event stream with its
//! bound, resume and reset.

use super::*;

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

pub(super) fn with_alerts() -> AppState {
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
