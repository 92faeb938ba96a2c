//! `[metrics]`: the Prometheus exposition. Depends only on `setting`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setting::{Keys, days, mins, ms};

/// `[metrics]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// window of vramd_memory_used_peak_bytes
    pub peak_window: Duration,
    /// put pod, namespace and container on a GPU's device series while exactly one pod holds it, as dcgm-exporter does
    pub device_pod_labels: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self { peak_window: mins(1), device_pod_labels: false }
    }
}

impl MetricsConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.duration("peak_window", self.peak_window, ms(1), days(7))
            .note(", at most history.retention");
        keys.flag("device_pod_labels");
    }
}
