//! The latest alerts and device analyses, as the HTTP surfaces read them,
//! and the stream of state changes.
//!
//! The evaluation task replaces the snapshots after each evaluation;
//! readers clone an `Arc` and never wait on an evaluation.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::broadcast;

use super::model::{Alert, Transition};
use crate::analysis::summary::DeviceAnalysis;

/// Published results of the latest evaluation.
pub struct AlertBoard {
    alerts: RwLock<Arc<Vec<Alert>>>,
    analyses: RwLock<Arc<BTreeMap<String, DeviceAnalysis>>>,
    events: broadcast::Sender<Transition>,
}

impl AlertBoard {
    /// `stream_capacity` bounds the transitions buffered for slow stream
    /// readers; a reader that falls further behind is told it lagged.
    pub fn new(stream_capacity: usize) -> Self {
        let (events, _) = broadcast::channel(stream_capacity.max(1));
        Self {
            alerts: RwLock::new(Arc::new(Vec::new())),
            analyses: RwLock::new(Arc::new(BTreeMap::new())),
            events,
        }
    }

    pub fn alerts(&self) -> Arc<Vec<Alert>> {
        self.alerts.read().clone()
    }

    /// Latest analysis per device UUID.
    pub fn analyses(&self) -> Arc<BTreeMap<String, DeviceAnalysis>> {
        self.analyses.read().clone()
    }

    pub fn analysis(&self, uuid: &str) -> Option<DeviceAnalysis> {
        self.analyses.read().get(uuid).cloned()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.events.subscribe()
    }

    /// Publishes one evaluation's results.
    pub fn publish(
        &self,
        alerts: Vec<Alert>,
        analyses: BTreeMap<String, DeviceAnalysis>,
        transitions: &[Transition],
    ) {
        *self.alerts.write() = Arc::new(alerts);
        *self.analyses.write() = Arc::new(analyses);
        for transition in transitions {
            // No subscriber is not an error: nobody is listening.
            let _ = self.events.send(transition.clone());
        }
    }
}
