//! `[api]`: the REST limits. Depends only on `setting`.

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use crate::setting::{Keys, non_zero};

/// `[api]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// most points one history response returns
    pub max_history_points: NonZeroUsize,
    /// open alert event streams at most
    pub max_event_streams: NonZeroUsize,
    /// alert state changes kept for slow and for reconnecting stream readers
    pub max_stream_backlog: NonZeroUsize,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            max_history_points: non_zero(50_000),
            max_event_streams: non_zero(16),
            max_stream_backlog: non_zero(256),
        }
    }
}

impl ApiConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.count("max_history_points", self.max_history_points.get() as u64, 1, 1_000_000);
        keys.count("max_event_streams", self.max_event_streams.get() as u64, 1, 1_024);
        keys.count("max_stream_backlog", self.max_stream_backlog.get() as u64, 1, 65_536);
    }
}
