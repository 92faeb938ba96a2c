//! The fake side of the notifier seam: keeps every delivered batch in
//! memory, and can be told to fail the next deliveries or to stall, so the
//! dispatcher's retries, drops and isolation can be tested without a network.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::alerts::Alert;

use super::{BoxFuture, Notifier, NotifyError};

/// A notifier that records instead of sending.
pub struct RecordingNotifier {
    name: &'static str,
    state: Mutex<State>,
    /// Woken whenever an attempt starts or ends.
    changed: Notify,
    /// `true` while deliveries are held.
    stalled: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    batches: Vec<Vec<Alert>>,
    fail_next: u32,
    attempts: Vec<Instant>,
}

impl RecordingNotifier {
    /// `name` is its `notifier` label; give two recorders different names.
    pub fn new(name: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            stalled: watch::Sender::new(false),
        })
    }

    /// Makes the next `count` deliveries fail (added to any still pending).
    pub fn fail_next(&self, count: u32) {
        let mut state = self.state.lock();
        state.fail_next = state.fail_next.saturating_add(count);
    }

    /// Holds every delivery (started or future) until [`resume`](Self::resume).
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }

    /// Every batch delivered successfully, in order.
    pub fn batches(&self) -> Vec<Vec<Alert>> {
        self.state.lock().batches.clone()
    }

    /// Every alert delivered successfully, in order.
    pub fn alerts(&self) -> Vec<Alert> {
        self.state.lock().batches.iter().flatten().cloned().collect()
    }

    /// Deliveries started (successful, failed or still stalled).
    pub fn attempts(&self) -> usize {
        self.state.lock().attempts.len()
    }

    /// When each delivery started (`tokio::time`, so paused time shows the
    /// backoff exactly).
    pub fn attempt_times(&self) -> Vec<Instant> {
        self.state.lock().attempts.clone()
    }

    /// Waits until `done(self)` holds, re-checking after every attempt.
    /// Unbounded: callers put a timeout around it.
    pub async fn wait_until(&self, done: impl Fn(&Self) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done(self) {
                return;
            }
            changed.await;
        }
    }
}

impl Notifier for RecordingNotifier {
    fn name(&self) -> &'static str {
        self.name
    }

    fn deliver<'a>(&'a self, batch: &'a [Alert]) -> BoxFuture<'a, Result<(), NotifyError>> {
        Box::pin(async move {
            self.state.lock().attempts.push(Instant::now());
            self.changed.notify_waiters();
            let mut stalled = self.stalled.subscribe();
            // The sender lives in `self`, so this cannot see it closed.
            let _ = stalled.wait_for(|held| !*held).await;
            let failed = {
                let mut state = self.state.lock();
                if state.fail_next > 0 {
                    state.fail_next -= 1;
                    true
                } else {
                    state.batches.push(batch.to_vec());
                    false
                }
            };
            self.changed.notify_waiters();
            if failed {
                let url = format!("recording:{}", self.name);
                Err(NotifyError::Request { url, reason: "delivery failed on request".into() })
            } else {
                Ok(())
            }
        })
    }
}
