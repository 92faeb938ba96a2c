//! `[history]`: how far back the per-device rings reach. Depends only on
//! `setting`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setting::{Keys, days, hours, secs};

/// `[history]`: capacity per device and tier is `retention / interval`
/// samples.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryConfig {
    /// how far back history reaches
    pub retention: Duration,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self { retention: hours(1) }
    }
}

impl HistoryConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.duration("retention", self.retention, secs(1), days(7))
            .note(", at most 10000000 fast samples");
    }
}
