//! The live page at `/`: one HTML document, a script and a stylesheet,
//! embedded in the binary (no build step, no third-party origin).
//!
//! Owns: the three routes, their Content-Security-Policy, `ETag` and
//! `Cache-Control`. The page reads the REST API and the alert stream like
//! any client; this module knows none of the daemon's state.
//! Depends on: nothing of the daemon (axum only).

use std::sync::LazyLock;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Scripts, styles and fetches from this origin only; nothing inline, no
/// frames, no forms posting elsewhere. The page needs nothing more.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Revalidate on every load: the assets change with the binary, and a
/// matching `ETag` costs a 304 with no body.
const CACHE_CONTROL: &str = "no-cache";

/// One embedded file and its validator.
struct Asset {
    body: &'static [u8],
    content_type: &'static str,
    etag: HeaderValue,
}

impl Asset {
    fn new(body: &'static [u8], content_type: &'static str) -> Self {
        // `{:016x}` of a u64 is always a valid header value; the fallback
        // only keeps this path free of a panic.
        let etag = HeaderValue::from_str(&format!("\"{:016x}\"", fnv1a(body)))
            .unwrap_or_else(|_| HeaderValue::from_static("\"0\""));
        Self { body, content_type, etag }
    }

    fn respond(&self, request: &HeaderMap) -> Response {
        let matches = request
            .get(header::IF_NONE_MATCH)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|tags| {
                tags.split(',').any(|tag| {
                    let tag = tag.trim();
                    tag == "*" || tag.trim_start_matches("W/").as_bytes() == self.etag.as_bytes()
                })
            });
        let mut response = if matches {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            let mut response = self.body.into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(self.content_type));
            response
        };
        let headers = response.headers_mut();
        headers.insert(header::ETAG, self.etag.clone());
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(CACHE_CONTROL));
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
        headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
        response
    }
}

/// FNV-1a: a stable content hash for the `ETag`, not a security measure.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The page with this build's version filled in once.
static PAGE: LazyLock<Asset> = LazyLock::new(|| {
    let html = include_str!("ui/index.html")
        .replace("{{VERSION}}", env!("CARGO_PKG_VERSION"))
        .replace("{{BUILD}}", env!("BUILD_GIT_REVISION"));
    Asset::new(html.leak().as_bytes(), "text/html; charset=utf-8")
});

static SCRIPT: LazyLock<Asset> =
    LazyLock::new(|| Asset::new(include_bytes!("ui/app.js"), "text/javascript; charset=utf-8"));

static STYLE: LazyLock<Asset> =
    LazyLock::new(|| Asset::new(include_bytes!("ui/app.css"), "text/css; charset=utf-8"));

/// The live page: what this is, the links to every surface, and (with
/// scripts on) each GPU's memory, history, processes, alerts and OOMs.
#[utoipa::path(
    get,
    path = "/",
    tag = "operations",
    operation_id = "get_landing_page",
    summary = "Live page",
    description = "An HTML page with vramd's version and build, links to `/metrics`, \
`/api/v1/devices`, `/api/v1/alerts`, `/api/v1/openapi.json`, `/healthz` and `/readyz`, and \
(its script `/ui/app.js`, its style `/ui/app.css`) each GPU's memory waterfall, used memory \
and its floor over a chosen window, processes, alerts and OOM events, updated from the alert \
stream. Strict Content-Security-Policy; `ETag` with `Cache-Control: no-cache` (304 on \
`If-None-Match`).",
    responses(
        (status = 200, description = "The page", body = String, content_type = "text/html"),
        (status = 304, description = "`If-None-Match` names the current `ETag`"),
    )
)]
pub(crate) async fn page(request: HeaderMap) -> Response {
    PAGE.respond(&request)
}

#[utoipa::path(
    get,
    path = "/ui/app.js",
    tag = "operations",
    operation_id = "get_ui_script",
    summary = "The live page's script",
    description = "Plain JavaScript, no dependencies; `ETag` with `Cache-Control: no-cache`.",
    responses(
        (status = 200, description = "The script", body = String, content_type = "text/javascript"),
        (status = 304, description = "`If-None-Match` names the current `ETag`"),
    )
)]
pub(crate) async fn script(request: HeaderMap) -> Response {
    SCRIPT.respond(&request)
}

#[utoipa::path(
    get,
    path = "/ui/app.css",
    tag = "operations",
    operation_id = "get_ui_style",
    summary = "The live page's stylesheet",
    description = "`ETag` with `Cache-Control: no-cache`.",
    responses(
        (status = 200, description = "The stylesheet", body = String, content_type = "text/css"),
        (status = 304, description = "`If-None-Match` names the current `ETag`"),
    )
)]
pub(crate) async fn style(request: HeaderMap) -> Response {
    STYLE.respond(&request)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use crate::api::router;
    use crate::api::tests::filled_state;

    async fn fetch(path: &str, if_none_match: Option<&str>) -> axum::response::Response {
        let mut request = Request::builder().uri(path);
        if let Some(tag) = if_none_match {
            request = request.header(header::IF_NONE_MATCH, tag);
        }
        router(filled_state()).oneshot(request.body(Body::empty()).unwrap()).await.unwrap()
    }

    /// The page, its script and its style: typed, under a CSP that allows
    /// nothing inline and no other origin, revalidated by `ETag` with a 304.
    #[tokio::test]
    async fn the_page_and_its_assets_are_served_with_a_strict_policy_and_revalidated() {
        for (path, media, needle) in [
            ("/", "text/html", "<script src=\"/ui/app.js\""),
            ("/ui/app.js", "text/javascript", "/api/v1/alerts/stream"),
            ("/ui/app.css", "text/css", ".seg-fragmented"),
        ] {
            let response = fetch(path, None).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            let headers = response.headers().clone();
            let header_of = |name: header::HeaderName| {
                headers.get(name).map(|value| value.to_str().unwrap().to_owned()).unwrap()
            };
            assert!(header_of(header::CONTENT_TYPE).starts_with(media), "{path}");
            let policy = header_of(header::CONTENT_SECURITY_POLICY);
            assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self';"));
            assert!(!policy.contains("unsafe-inline") && !policy.contains("http"), "{policy}");
            assert_eq!(header_of(header::CACHE_CONTROL), "no-cache");
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let body = String::from_utf8(body.to_vec()).unwrap();
            assert!(body.contains(needle), "{path} lacks {needle}");

            let etag = header_of(header::ETAG);
            let again = fetch(path, Some(&format!("W/{etag}, \"other\""))).await;
            assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
            assert_eq!(again.headers().get(header::ETAG).unwrap().to_str().unwrap(), etag);
            assert!(again.into_body().collect().await.unwrap().to_bytes().is_empty());
            let changed = fetch(path, Some("\"stale\"")).await;
            assert_eq!(changed.status(), StatusCode::OK, "{path}");
        }
    }

    /// No inline script or style anywhere in the page: the CSP would block
    /// it and the page would silently lose it.
    #[test]
    fn the_page_has_nothing_inline() {
        let html = include_str!("ui/index.html");
        assert!(!html.contains("<style") && !html.contains(" style="));
        assert_eq!(html.matches("<script").count(), 1);
        assert!(html.contains("<script src=\"/ui/app.js\" defer></script>"));
        assert!(!html.contains(" onload=") && !html.contains(" onclick="));
        assert!(!html.contains("http://") && !html.contains("https://"));
    }
}
