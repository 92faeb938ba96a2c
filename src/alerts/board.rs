//! The latest alerts, as the HTTP surfaces read them, and the stream of
//! state changes. (Device analyses have their own board in `analysis`.)
//!
//! The evaluation task replaces the snapshot after each evaluation;
//! readers clone an `Arc` and never wait on an evaluation.

use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::broadcast;

use super::model::{Alert, Transition};

/// Published results of the latest evaluation.
pub struct AlertBoard {
    alerts: RwLock<Arc<Vec<Alert>>>,
    events: broadcast::Sender<Transition>,
}

impl AlertBoard {
    /// `stream_capacity` bounds the transitions buffered for slow stream
    /// readers; a reader that falls further behind is told it lagged.
    pub fn new(stream_capacity: usize) -> Self {
        let (events, _) = broadcast::channel(stream_capacity.max(1));
        Self { alerts: RwLock::new(Arc::new(Vec::new())), events }
    }

    pub fn alerts(&self) -> Arc<Vec<Alert>> {
        self.alerts.read().clone()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.events.subscribe()
    }

    /// Publishes one evaluation's results.
    pub fn publish(&self, alerts: Vec<Alert>, transitions: &[Transition]) {
        *self.alerts.write() = Arc::new(alerts);
        for transition in transitions {
            // No subscriber is not an error: nobody is listening.
            let _ = self.events.send(transition.clone());
        }
    }
}
