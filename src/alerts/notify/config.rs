//! `[notify]`: where alert state changes are delivered, and the bounded
//! queues in front of each notifier. Depends only on `setting`.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setting::{Form, Keys, hours, mins, ms, non_zero, secs};

const URL: &str = "http:// or https:// URL; not set by default";

/// `[notify]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// send alert state changes to this Alertmanager (API v2)
    pub alertmanager_url: Option<String>,
    /// POST alert state changes as JSON to this URL
    pub webhook_url: Option<String>,
    /// state changes waiting per notifier; beyond it the oldest are dropped
    pub queue_capacity: NonZeroUsize,
    /// deadline of one delivery request
    pub timeout: Duration,
    /// how often firing alerts are sent again
    pub resend_interval: Duration,
    /// attempts after a failed delivery
    pub max_retries: u32,
    /// longest wait between delivery attempts
    pub retry_backoff_max: Duration,
    /// base of the generatorURL links in notifications (default http://<server.listen>)
    pub external_url: Option<String>,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            alertmanager_url: None,
            webhook_url: None,
            queue_capacity: non_zero(1024),
            timeout: secs(5),
            resend_interval: mins(1),
            max_retries: 5,
            retry_backoff_max: secs(30),
            external_url: None,
        }
    }
}

impl NotifyConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.words("alertmanager_url", Form::Text, URL);
        url(keys, "alertmanager_url", self.alertmanager_url.as_deref());
        keys.words("webhook_url", Form::Text, URL);
        url(keys, "webhook_url", self.webhook_url.as_deref());
        keys.count("queue_capacity", self.queue_capacity.get() as u64, 1, 100_000);
        keys.duration("timeout", self.timeout, ms(100), mins(1));
        keys.duration("resend_interval", self.resend_interval, secs(1), hours(1));
        keys.count("max_retries", self.max_retries, 0, 100);
        keys.duration("retry_backoff_max", self.retry_backoff_max, ms(100), mins(10));
        keys.words("external_url", Form::Text, URL);
        url(keys, "external_url", self.external_url.as_deref());
    }
}

/// An http:// or https:// URL: something after the scheme, no whitespace.
fn url(keys: &mut Keys, name: &str, url: Option<&str>) {
    let Some(url) = url else { return };
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    if !rest.is_some_and(|rest| {
        !rest.is_empty() && !rest.starts_with('/') && !rest.contains(char::is_whitespace)
    }) {
        let reason = "expected an http:// or https:// URL, such as \"http://alertmanager:9093\"";
        keys.refuse(name, format!("{url:?}"), reason);
    }
}
