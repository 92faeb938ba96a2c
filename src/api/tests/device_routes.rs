//! Health, metrics, devices, their history, the landing page, and the JSON
//! errors of unknown routes and methods.

use super::*;

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
