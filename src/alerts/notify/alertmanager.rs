//! Alertmanager API v2: `POST {base}/api/v2/alerts` with a JSON array of
//! postable alerts.
//!
//! Firing alerts carry `endsAt = updated_at + 3 × resend_interval`, so
//! Alertmanager resolves them by itself if vramd stops re-sending (dies);
//! resolved alerts carry `endsAt = resolved_at`. Every timestamp comes from
//! the alert (source time), never from the wall clock, so replays and tests
//! produce the same payloads.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::alerts::{Alert, AlertState};

use super::http::HttpClient;
use super::{BoxFuture, Notifier, NotifyConfig, NotifyError};

/// How many resend intervals a firing alert stays active in Alertmanager
/// without being re-sent.
const EXPIRY_RESENDS: u32 = 3;

/// Delivers to an Alertmanager's API v2.
pub struct AlertmanagerNotifier {
    client: HttpClient,
    external_url: String,
    instance: String,
    resend_interval: Duration,
}

impl AlertmanagerNotifier {
    /// `base_url` is the Alertmanager root (`http://am:9093`, or with a path
    /// prefix); `external_url` is where this daemon's API is reachable, the
    /// base of each alert's `generatorURL`. Uses `config.timeout` per request
    /// and `config.resend_interval` for the expiry of firing alerts. The
    /// `instance` label is [`host_name`] unless set with
    /// [`with_instance`](Self::with_instance).
    pub fn new(
        base_url: &str,
        config: &NotifyConfig,
        external_url: &str,
    ) -> Result<Self, NotifyError> {
        let url = format!("{}/api/v2/alerts", base_url.trim_end_matches('/'));
        Ok(Self {
            client: HttpClient::new(&url, config.timeout)?,
            external_url: external_url.trim_end_matches('/').to_owned(),
            instance: host_name(),
            resend_interval: config.resend_interval,
        })
    }

    /// Overrides the `instance` label.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = instance.into();
        self
    }

    /// The request body for `batch`, as Alertmanager will receive it.
    pub fn payload(&self, batch: &[Alert]) -> Result<Vec<u8>, NotifyError> {
        let alerts: Vec<PostableAlert> = batch
            .iter()
            .map(|alert| {
                PostableAlert::new(alert, &self.instance, &self.external_url, self.resend_interval)
            })
            .collect();
        serde_json::to_vec(&alerts)
            .map_err(|source| NotifyError::Encode { notifier: "alertmanager", source })
    }
}

impl Notifier for AlertmanagerNotifier {
    fn name(&self) -> &'static str {
        "alertmanager"
    }

    fn deliver<'a>(&'a self, batch: &'a [Alert]) -> BoxFuture<'a, Result<(), NotifyError>> {
        Box::pin(async move { self.client.post_json(self.payload(batch)?).await })
    }
}

/// One element of the `POST /api/v2/alerts` body (Alertmanager's
/// `postableAlert`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PostableAlert {
    labels: BTreeMap<&'static str, String>,
    annotations: BTreeMap<&'static str, String>,
    starts_at: String,
    ends_at: String,
    #[serde(rename = "generatorURL")]
    generator_url: String,
}

impl PostableAlert {
    fn new(alert: &Alert, instance: &str, external_url: &str, resend_interval: Duration) -> Self {
        let mut labels = BTreeMap::from([
            ("alertname", alert.alertname()),
            ("severity", alert.severity.as_str().to_owned()),
            ("gpu", alert.gpu.to_string()),
            ("uuid", alert.key.uuid.clone()),
            ("rule", alert.key.rule.as_str().to_owned()),
            ("instance", instance.to_owned()),
        ]);
        if let Some(pid) = alert.key.pid {
            labels.insert("pid", pid.to_string());
        }
        if let Some(process) = alert.process.as_deref().filter(|name| !name.is_empty()) {
            labels.insert("process", process.to_owned());
        }
        let annotations = BTreeMap::from([
            ("summary", alert.summary.clone()),
            ("description", alert.description.clone()),
            ("remediation", alert.remediation.clone()),
            ("value", alert.value.to_string()),
            ("threshold", alert.threshold.to_string()),
            ("unit", alert.unit.clone()),
        ]);
        let starts_at = alert.firing_since.unwrap_or(alert.since);
        let ends_at = match alert.state {
            AlertState::Resolved => alert.resolved_at.unwrap_or(alert.updated_at),
            // Pending alerts are never delivered; were one posted, it would
            // be as active as a firing one.
            AlertState::Firing | AlertState::Pending => {
                alert.updated_at.saturating_add(resend_interval.saturating_mul(EXPIRY_RESENDS))
            }
        };
        Self {
            labels,
            annotations,
            starts_at: starts_at.to_rfc3339(),
            ends_at: ends_at.to_rfc3339(),
            generator_url: format!("{external_url}/api/v1/alerts/{}", alert.id),
        }
    }
}

/// This host's name, for the `instance` label: the kernel's host name, then
/// `/etc/hostname`, then `$HOSTNAME`, else `localhost`.
pub fn host_name() -> String {
    let from_file =
        |path: &str| std::fs::read_to_string(path).ok().map(|text| text.trim().to_owned());
    from_file("/proc/sys/kernel/hostname")
        .filter(|name| !name.is_empty())
        .or_else(|| from_file("/etc/hostname").filter(|name| !name.is_empty()))
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|name| !name.is_empty()))
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
impl AlertmanagerNotifier {
    /// The URL alerts are posted to.
    pub fn endpoint(&self) -> &str {
        self.client.url()
    }
}
