//! The HTTP client the notifiers share: hyper's pooled client over rustls
//! (ring provider, the system's CA roots) for `https://`, plain TCP for
//! `http://`, HTTP/1.1 only, and a deadline around every request.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, USER_AGENT};
use hyper::http::uri::InvalidUri;
use hyper::{Method, Request, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::NotifyError;

const AGENT: &str = concat!("vramd/", env!("CARGO_PKG_VERSION"));

/// Most of an error response body read (the rest is discarded), and most of
/// it quoted in the error.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;
const MAX_QUOTED_CHARS: usize = 512;

/// How long an idle pooled connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A pooled HTTP/1.1 client posting to one URL, with a per-request deadline.
pub(super) struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    uri: Uri,
    /// The URL as given, for error messages.
    url: String,
    timeout: Duration,
}

impl HttpClient {
    /// A client for an absolute `http://` or `https://` URL. Credentials in
    /// the URL are refused: they would end up in logs and error messages.
    /// The system's CA roots (or `SSL_CERT_FILE` / `SSL_CERT_DIR`) are
    /// loaded only for `https://`, so a plain-HTTP set-up works in a
    /// container without CA certificates.
    pub(super) fn new(url: &str, timeout: Duration) -> Result<Self, NotifyError> {
        let invalid = |reason: String| NotifyError::InvalidUrl { url: url.to_owned(), reason };
        let uri: Uri = url.parse().map_err(|error: InvalidUri| invalid(error.to_string()))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            Some(_) => return Err(invalid("the scheme must be http or https".into())),
            None => {
                return Err(invalid("an absolute URL (http:// or https://) is required".into()));
            }
        }
        match uri.authority() {
            Some(authority) if authority.as_str().contains('@') => {
                return Err(invalid("credentials in the URL are not supported".into()));
            }
            Some(authority) if !authority.host().is_empty() => {}
            _ => return Err(invalid("the URL has no host".into())),
        }
        let tls_error = |reason: String| NotifyError::Tls { url: url.to_owned(), reason };
        let mut roots = rustls::RootCertStore::empty();
        if uri.scheme_str() == Some("https") {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                let detail = if errors.is_empty() {
                    String::new()
                } else {
                    format!(": {}", errors.join("; "))
                };
                return Err(tls_error(format!(
                    "no usable CA certificates found in the system store (set SSL_CERT_FILE){detail}"
                )));
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| tls_error(error.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        // One idle connection per receiver, closed after a while so a
        // connection the receiver dropped is rarely reused.
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_timer(TokioTimer::new())
            .build(connector);
        Ok(Self { client, uri, url: url.to_owned(), timeout })
    }

    /// POSTs `body` as JSON; success is any 2xx answer within the deadline.
    pub(super) async fn post_json(&self, body: Vec<u8>) -> Result<(), NotifyError> {
        let url = self.url.as_str();
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, AGENT)
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| NotifyError::Request {
                url: url.to_owned(),
                reason: error.to_string(),
            })?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|error| {
                NotifyError::Request { url: url.to_owned(), reason: describe(&error) }
            })?;
            let status = response.status();
            // Read the body either way so the connection can be reused;
            // bounded, and only quoted when the answer is an error.
            let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map(|collected| collected.to_bytes())
                .unwrap_or_default();
            if !status.is_success() {
                let (status, body) = (status.as_u16(), quote(&body));
                return Err(NotifyError::Status { url: url.to_owned(), status, body });
            }
            Ok(())
        };
        tokio::time::timeout(self.timeout, exchange).await.unwrap_or_else(|_| {
            Err(NotifyError::Timeout { url: url.to_owned(), timeout: self.timeout })
        })
    }
}

/// The error and its causes on one line (hyper's top-level message alone is
/// often just "client error (Connect)").
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    for cause in std::iter::successors(error.source(), |cause| cause.source()) {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
    }
    text
}

fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    let mut quoted: String = text.chars().take(MAX_QUOTED_CHARS).collect();
    if quoted.len() < text.len() {
        quoted.push('…');
    }
    quoted
}

#[cfg(test)]
impl HttpClient {
    pub(super) fn url(&self) -> &str {
        &self.url
    }
}
