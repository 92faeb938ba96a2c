//! Notifiers: deliver alert state changes to the outside world.
//!
//! Owns: the [`Notifier`] seam and its two implementations (Alertmanager
//! API v2 and a generic JSON webhook; the recording fake lives with the
//! tests), the shared HTTP client, and the dispatcher that queues, batches,
//! retries and counts deliveries — one bounded queue and one worker task per
//! notifier, so a slow receiver delays only its own deliveries and never the
//! alert engine. Depends on: `alerts::model`, `telemetry`,
//! `model::Timestamp` and `setting`; its section, [`NotifyConfig`], is
//! `[notify]` as written.

mod alertmanager;
mod config;
mod dispatch;
mod http;
mod webhook;

#[cfg(test)]
mod recording_tests;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::Alert;

pub use alertmanager::{AlertmanagerNotifier, host_name};
pub use config::NotifyConfig;
pub use dispatch::{DispatchHandle, spawn};
pub use webhook::WebhookNotifier;

/// A boxed, sendable future: what [`Notifier::deliver`] returns, so the
/// trait stays object-safe without an `async-trait` dependency.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Somewhere alerts are delivered to.
///
/// `deliver` sends one batch (firing and resolved alerts, in the order they
/// changed) and resolves when the receiver has accepted it or failed. It is
/// called by one worker at a time per notifier; retries, backoff and
/// counting are the dispatcher's job (see [`spawn`]), not the notifier's.
pub trait Notifier: Send + Sync + 'static {
    /// Short, stable name: the `notifier` label of the notification metrics.
    fn name(&self) -> &'static str;

    fn deliver<'a>(&'a self, batch: &'a [Alert]) -> BoxFuture<'a, Result<(), NotifyError>>;
}

/// Why a delivery (or building a notifier) failed.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("invalid notifier URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("TLS set-up for `{url}`: {reason}")]
    Tls { url: String, reason: String },
    #[error("encoding the {notifier} payload: {source}")]
    Encode { notifier: &'static str, source: serde_json::Error },
    #[error("POST {url}: {reason}")]
    Request { url: String, reason: String },
    #[error("POST {url}: no response within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("POST {url}: HTTP {status}: {body}")]
    Status { url: String, status: u16, body: String },
}

/// Builds the notifiers `config` asks for: Alertmanager when
/// `notify.alertmanager_url` is set, the webhook when `notify.webhook_url`
/// is. `default_external_url` (normally `http://<server.listen>`) is the
/// base of Alertmanager `generatorURL` links unless `notify.external_url`
/// is set; the `instance` label is this host's name.
pub fn build_notifiers(
    config: &NotifyConfig,
    default_external_url: &str,
) -> Result<Vec<Arc<dyn Notifier>>, NotifyError> {
    let mut notifiers: Vec<Arc<dyn Notifier>> = Vec::new();
    if let Some(url) = &config.alertmanager_url {
        let external_url = config.external_url.as_deref().unwrap_or(default_external_url);
        notifiers.push(Arc::new(AlertmanagerNotifier::new(url, config, external_url)?));
    }
    if let Some(url) = &config.webhook_url {
        notifiers.push(Arc::new(WebhookNotifier::new(url, config)?));
    }
    Ok(notifiers)
}
