//! The OpenAPI 3.1 document of the HTTP surface, generated from the code.
//!
//! Each handler carries a `#[utoipa::path]` annotation (method, path,
//! parameters, bodies, answers). [`operations`] is the one list of handlers:
//! the router registers every route from it (utoipa-axum takes the method
//! and path from the same annotation), and the served document is the one
//! those registrations produce, so the two cannot drift. A route added with
//! a plain `.route(…)` instead would be missing from the document; the unit
//! test `openapi_lists_every_registered_route` checks the served document
//! against [`operations`] and probes every listed route through the router.
//!
//! Statuses the protections of every route can answer (405 for a method the
//! path does not list, 408 past the request timeout, 503 beyond the
//! concurrency limit) are added to every operation by [`protection_answers`].

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use utoipa::OpenApi as _;
use utoipa::openapi::path::Operation;
use utoipa::openapi::{ContentBuilder, OpenApi, RefOr, ResponseBuilder, Schema};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use super::error::{ErrorBody, for_status};
use super::{AppState, alerts, history, oom, oom_snapshot, reports};

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "vramd REST API",
        description = "GPU memory of one host: devices, where their memory went, its history, \
alerts, and the PyTorch allocator reports workloads send. Everything under `/api/v1/` is JSON; \
errors are `{\"code\": \"…\", \"message\": \"…\"}` with a stable `code`. Times are RFC 3339 \
with milliseconds unless a field says otherwise. Absent values are left out, never `0` or \
`null`. Any route answers 405 `method_not_allowed` (with `Allow`) to a method it does not \
list, 408 `request_timeout` past `server.request_timeout` and 503 `overloaded` beyond \
`server.max_concurrent_requests`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    tags(
        (name = "devices", description = "GPUs, their memory and its history"),
        (name = "alerts", description = "Alerts and their state changes (docs/alerts.md)"),
        (name = "allocator-reports", description = "PyTorch caching-allocator statistics sent by workloads"),
        (name = "operations", description = "Prometheus metrics, liveness, readiness, this document"),
    ),
    components(schemas(ErrorBody, crate::alerts::Transition)),
    modifiers(&BearerToken),
)]
struct ApiDoc;

/// The bearer token writers on other hosts present (`ingest.token_file`).
struct BearerToken;

impl utoipa::Modify for BearerToken {
    fn modify(&self, document: &mut OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "The contents of `ingest.token_file`; needed only for writes from other hosts \
(loopback may write without it).",
            ))
            .build();
        document
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// Every operation the daemon serves. The router is built from this list
/// only, and the served document is what it registers.
pub fn operations() -> Vec<UtoipaMethodRouter<AppState>> {
    vec![
        routes!(super::ui::page),
        routes!(super::ui::script),
        routes!(super::ui::style),
        routes!(super::metrics),
        routes!(super::healthz),
        routes!(super::readyz),
        routes!(openapi_json),
        routes!(super::devices),
        routes!(super::device),
        routes!(history::device_history),
        routes!(reports::list, reports::post),
        routes!(oom::list, oom::post),
        routes!(oom::one),
        routes!(oom_snapshot::put, oom_snapshot::get),
        routes!(alerts::list),
        routes!(alerts::stream),
        routes!(alerts::one),
    ]
}

/// The routes of [`operations`] and the document they make.
pub fn build() -> (axum::Router<AppState>, OpenApi) {
    let (router, mut document) = operations()
        .into_iter()
        .fold(OpenApiRouter::with_openapi(ApiDoc::openapi()), OpenApiRouter::routes)
        .split_for_parts();
    protection_answers(&mut document);
    open_flattened(&mut document);
    (router, document)
}

/// A type with `#[serde(deny_unknown_fields)]` gets `additionalProperties:
/// false`; flattened into another (`allOf`), that would refuse the other
/// type's fields, so the parts of an `allOf` are left open.
fn open_flattened(document: &mut OpenApi) {
    let Some(components) = document.components.as_mut() else { return };
    let prefix = "#/components/schemas/";
    let flattened: Vec<String> = components
        .schemas
        .values()
        .filter_map(|schema| match schema {
            RefOr::T(Schema::AllOf(all_of)) => Some(all_of.items.iter()),
            _ => None,
        })
        .flatten()
        .filter_map(|item| match item {
            RefOr::Ref(reference) => reference.ref_location.strip_prefix(prefix).map(str::to_owned),
            RefOr::T(_) => None,
        })
        .collect();
    for name in flattened {
        if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(&name) {
            object.additional_properties = None;
        }
    }
}

/// The served document, serialized once when the router is built.
#[derive(Clone)]
pub struct Document(pub Bytes);

impl Document {
    pub fn new(document: &OpenApi) -> Self {
        // Serializing plain maps and strings cannot fail; an empty object
        // would still be valid JSON (and fail the unit tests loudly).
        let mut value = serde_json::to_value(document).unwrap_or_else(|_| json!({}));
        fix_spellings(&mut value);
        Self(Bytes::from(serde_json::to_vec(&value).unwrap_or_else(|_| b"{}".to_vec())))
    }
}

/// Two spellings utoipa 5.5 gets wrong in the JSON it writes: the formats of
/// unsigned integers come out as `u-int32`, `u-int64` (its enum in kebab
/// case) where `uint32`, `uint64` are meant (without them a `u32` would be
/// documented as `int32`, whose range stops at 2^31 - 1), and a link's
/// fields come out in snake case (`operation_id`) where OpenAPI spells them
/// in camel case (`operationId`).
fn fix_spellings(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                match item {
                    serde_json::Value::String(text) if key == "format" => {
                        if let Some(bits) = text.strip_prefix("u-int") {
                            *text = format!("uint{bits}");
                        }
                    }
                    serde_json::Value::Object(links) if key == "links" => {
                        for link in links.values_mut() {
                            camel_case_link(link);
                        }
                    }
                    _ => fix_spellings(item),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(fix_spellings),
        _ => {}
    }
}

fn camel_case_link(link: &mut serde_json::Value) {
    let Some(fields) = link.as_object_mut() else { return };
    for (snake, camel) in [
        ("operation_id", "operationId"),
        ("operation_ref", "operationRef"),
        ("request_body", "requestBody"),
    ] {
        if let Some(value) = fields.remove(snake) {
            fields.insert(camel.to_owned(), value);
        }
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "operations",
    operation_id = "get_openapi",
    summary = "This OpenAPI 3.1 document",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of this vramd", body = Object,
            content_type = "application/json"),
    )
)]
pub async fn openapi_json(axum::Extension(document): axum::Extension<Document>) -> Response {
    let mut response = document.0.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The JSON error answers the protections give on any route, each with
/// the code and message `error::for_status` answers with.
fn protection_answers(document: &mut OpenApi) {
    let common: Vec<(StatusCode, RefOr<utoipa::openapi::Response>)> = [
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "The path does not accept this method (another method on the path: the \
`Allow` header lists the accepted ones). OpenAPI has no place for answers to methods a path \
does not list, so it is shown on every operation.",
        ),
        (StatusCode::REQUEST_TIMEOUT, "The request took longer than `server.request_timeout`."),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "More than `server.max_concurrent_requests` requests are in flight; retry shortly.",
        ),
    ]
    .into_iter()
    .filter_map(|(status, description)| {
        let ErrorBody { code, message, .. } = for_status(status)?.body;
        let content = ContentBuilder::new()
            .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
            .example(Some(json!({ "code": code, "message": message })))
            .build();
        let answer = ResponseBuilder::new().description(description);
        Some((status, RefOr::T(answer.content("application/json", content).build())))
    })
    .collect();
    for item in document.paths.paths.values_mut() {
        let operations: [&mut Option<Operation>; 8] = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ];
        for operation in operations.into_iter().flatten() {
            for (status, answer) in &common {
                // An operation that documents its own answer for a status
                // (503 `not_ready`, 503 `too_many_streams`) keeps it.
                operation
                    .responses
                    .responses
                    .entry(status.as_str().to_owned())
                    .or_insert_with(|| answer.clone());
            }
        }
    }
}
