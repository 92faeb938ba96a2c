//! A generic JSON webhook: `POST {url}` with
//! `{"version":"1","source":"vramd","alerts":[…]}`, each alert serialized
//! exactly as the REST API shows it.

use serde::Serialize;

use crate::alerts::Alert;

use super::http::HttpClient;
use super::{BoxFuture, Notifier, NotifyConfig, NotifyError};

/// The webhook document's format version; bumped on incompatible changes.
pub const WEBHOOK_VERSION: &str = "1";

/// Delivers to a generic JSON webhook.
pub struct WebhookNotifier {
    client: HttpClient,
}

impl WebhookNotifier {
    /// Posts to `url` with `config.timeout` per request.
    pub fn new(url: &str, config: &NotifyConfig) -> Result<Self, NotifyError> {
        Ok(Self { client: HttpClient::new(url, config.timeout)? })
    }

    /// The request body for `batch`.
    pub fn payload(&self, batch: &[Alert]) -> Result<Vec<u8>, NotifyError> {
        serde_json::to_vec(&WebhookDocument {
            version: WEBHOOK_VERSION,
            source: "vramd",
            alerts: batch,
        })
        .map_err(|source| NotifyError::Encode { notifier: "webhook", source })
    }
}

#[derive(Serialize)]
struct WebhookDocument<'a> {
    version: &'static str,
    source: &'static str,
    alerts: &'a [Alert],
}

impl Notifier for WebhookNotifier {
    fn name(&self) -> &'static str {
        "webhook"
    }

    fn deliver<'a>(&'a self, batch: &'a [Alert]) -> BoxFuture<'a, Result<(), NotifyError>> {
        Box::pin(async move { self.client.post_json(self.payload(batch)?).await })
    }
}
