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
    /// how often the daemon hands the memory malloc keeps freed back to the
    /// kernel (glibc's malloc_trim): the history's chunks are freed and
    /// made again all the time, and the holes they leave would stay
    /// resident; 0s never
    pub heap_release_interval: Duration,
}

/// Default `heap_release_interval`: the heap holds a few hundred KiB of
/// holes after a minute of churn, and a release costs under a millisecond
/// (docs/performance.md).
pub const HEAP_RELEASE_INTERVAL: Duration = Duration::from_secs(60);

impl Default for HistoryConfig {
    fn default() -> Self {
        Self { retention: hours(1), heap_release_interval: HEAP_RELEASE_INTERVAL }
    }
}

impl HistoryConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.duration("retention", self.retention, secs(1), days(7))
            .note(", at most 10000000 fast samples");
        keys.duration("heap_release_interval", self.heap_release_interval, Duration::ZERO, days(1));
    }
}
