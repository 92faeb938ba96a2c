//! [`FailureBudget`]: failed credential checks per client address and
//! minute (`server.auth_failure_budget`); past it an address is refused
//! without a check for the rest of its minute. Basic auth (the server's
//! guard) and the ingest bearer token each keep one.
//!
//! Owns: the per-address table and its bound. Depends on nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The window of `server.auth_failure_budget`.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// Failed checks per client address in its current window.
pub struct FailureBudget {
    budget: u32,
    /// Addresses tracked at most (`server.auth_cache_size`).
    capacity: usize,
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl FailureBudget {
    pub fn new(budget: u32, capacity: usize) -> Self {
        Self { budget, capacity: capacity.max(1), failures: Mutex::new(HashMap::new()) }
    }

    /// Whether `peer` spent its budget in its current window (an unknown
    /// peer never has).
    pub fn spent(&self, peer: Option<IpAddr>) -> bool {
        let Some(peer) = peer else { return false };
        self.failures
            .lock()
            .get(&peer)
            .is_some_and(|(start, count)| start.elapsed() < FAILURE_WINDOW && *count >= self.budget)
    }

    /// Counts a failed check against `peer`'s budget.
    pub fn fail(&self, peer: Option<IpAddr>) {
        let Some(peer) = peer else { return };
        let mut failures = self.failures.lock();
        if failures.len() >= self.capacity && !failures.contains_key(&peer) {
            // Windows that ended go first, and a table still full starts
            // over.
            failures.retain(|_, (start, _)| start.elapsed() < FAILURE_WINDOW);
            if failures.len() >= self.capacity {
                failures.clear();
            }
        }
        let now = Instant::now();
        let entry = failures.entry(peer).or_insert((now, 0));
        if entry.0.elapsed() >= FAILURE_WINDOW {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}
