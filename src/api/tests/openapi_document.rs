//! The OpenAPI document (GET /api/v1/openapi.json) against the router, and
//! regressions for what fuzzing the document found.

use super::alert_routes::with_alerts;
use super::*;

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
