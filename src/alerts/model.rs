//! What an alert is: identity, state, the numbers behind it and the words
//! that explain it. Shared by the engine, the REST API, the metrics and the
//! notifiers.

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr};

pub use crate::model::Severity;
use crate::model::{RuleId, Timestamp};

/// Where an alert is in its life: inactive alerts are not kept at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[derive(IntoStaticStr, EnumString)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_state)]
pub enum AlertState {
    /// The condition holds, but not yet for the rule's `for` duration.
    Pending,
    Firing,
    /// The condition cleared after firing; kept visible for
    /// `alerts.resolved_retention`.
    Resolved,
}

crate::model::label_as_str!(AlertState);

fn unknown_state(other: &str) -> String {
    format!("unknown state `{other}`; expected pending, firing or resolved")
}

/// What an alert is about: rule + device + (optionally) process. Stable for
/// as long as the condition lasts, so notifiers can deduplicate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AlertKey {
    /// Rule name, e.g. `memory_high` (the Alertmanager `alertname` is the
    /// CamelCase form, see [`Alert::alertname`]).
    #[schema(value_type = String)]
    pub rule: RuleId,
    pub uuid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// By rule name, then UUID, then PID: the order alerts are listed in (API,
/// metrics), whatever the order of [`RuleId`]'s variants.
impl Ord for AlertKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.rule.as_str(), &self.uuid, self.pid).cmp(&(
            other.rule.as_str(),
            &other.uuid,
            other.pid,
        ))
    }
}

impl PartialOrd for AlertKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl AlertKey {
    /// URL-safe identifier: `memory_high.GPU-…` or `leak_suspected.GPU-….1234`.
    pub fn id(&self) -> String {
        match self.pid {
            Some(pid) => format!("{}.{}.{}", self.rule, self.uuid, pid),
            None => format!("{}.{}", self.rule, self.uuid),
        }
    }
}

/// An alert as the API, metrics and notifiers see it.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Alert {
    pub id: String,
    #[serde(flatten)]
    pub key: AlertKey,
    pub severity: Severity,
    pub state: AlertState,
    /// GPU index (the parent's for a MIG device).
    pub gpu: u32,
    /// Process name, for process alerts.
    pub process: Option<String>,
    /// The measured value that crossed the threshold (unit in `unit`).
    pub value: f64,
    pub threshold: f64,
    /// Unit of `value` and `threshold`: `ratio`, `bytes`, `seconds`, `count`.
    pub unit: String,
    /// When the condition started to hold (pending since). RFC 3339.
    #[serde(with = "crate::model::rfc3339")]
    #[schema(value_type = String, format = DateTime, example = "2026-01-01T00:00:00.000Z")]
    pub since: Timestamp,
    #[serde(default, with = "crate::model::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub firing_since: Option<Timestamp>,
    #[serde(default, with = "crate::model::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub resolved_at: Option<Timestamp>,
    /// Last evaluation that changed or confirmed it.
    #[serde(with = "crate::model::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// One line: what is wrong.
    pub summary: String,
    /// The evidence: slope, fit, window, the numbers behind a ratio.
    pub description: String,
    /// What to change.
    pub remediation: String,
}

impl Alert {
    /// `memory_high` → `VramdMemoryHigh`, the Alertmanager `alertname`.
    pub fn alertname(&self) -> String {
        let mut name = String::from("Vramd");
        for part in self.key.rule.as_str().split('_') {
            let mut chars = part.chars();
            if let Some(first) = chars.next() {
                name.extend(first.to_uppercase());
                name.push_str(chars.as_str());
            }
        }
        name
    }
}

/// A change of an alert's state, as the engine reports it to notifiers and
/// the event stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Transition {
    /// `None` when the alert is new.
    pub from: Option<AlertState>,
    pub alert: Alert,
}

#[cfg(test)]
impl Alert {
    /// An alert of `key` in `state` with neutral figures and no text, for
    /// tests to adjust.
    pub(crate) fn for_test(key: AlertKey, state: AlertState) -> Self {
        Self {
            id: key.id(),
            key,
            severity: Severity::Warning,
            state,
            gpu: 0,
            process: None,
            value: 0.5,
            threshold: 0.3,
            unit: "ratio".into(),
            since: Timestamp::from_unix_millis(0),
            firing_since: None,
            resolved_at: None,
            updated_at: Timestamp::from_unix_millis(0),
            summary: String::new(),
            description: String::new(),
            remediation: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alertname_is_camel_case_with_prefix() {
        let key = AlertKey {
            rule: RuleId::AllocatorFragmentationHigh,
            uuid: "GPU-1".into(),
            pid: Some(7),
        };
        let alert = Alert::for_test(key, AlertState::Firing);
        assert_eq!(alert.alertname(), "VramdAllocatorFragmentationHigh");
        assert_eq!(alert.key.id(), "allocator_fragmentation_high.GPU-1.7");
    }
}
