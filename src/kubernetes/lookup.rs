//! Placing a container the moment its first process is read, instead of at
//! the next periodic refresh.
//!
//! Owns: the container IDs a slow reading could not place, the bounded
//! wait of that reading for a refresh that asks about them, and the wake-up
//! of the poller. Each ID is asked about once: an ID the answer does not
//! list belongs to no Kubernetes container (the runtime lists a container
//! before its first process can start), and from then on only the periodic
//! refresh can place it. The poller's rate limit lives in `mod.rs`.
//! Depends on nothing but `parking_lot` and `tokio::sync`.

use std::collections::HashSet;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tokio::sync::Notify;

/// Asks between the readings (any slow-tier thread) and the poller.
#[derive(Debug)]
pub(super) struct Lookups {
    state: Mutex<State>,
    refreshed: Condvar,
    wake: Notify,
    /// `kubernetes.lookup_wait`.
    wait: Duration,
    /// `kubernetes.max_containers`: the bound of both sets.
    max: usize,
}

#[derive(Debug, Default)]
struct State {
    /// IDs a reading missed, for the next refresh to ask about.
    wanted: HashSet<String>,
    /// IDs a refresh has asked about: never asked about again.
    asked: HashSet<String>,
    /// Refreshes started and finished so far; a reading waits for the
    /// first refresh started after its IDs were wanted.
    started: u64,
    finished: u64,
}

impl Lookups {
    pub(super) fn new(wait: Duration, max: usize) -> Self {
        Self { state: Mutex::default(), refreshed: Condvar::new(), wake: Notify::new(), wait, max }
    }

    /// Wants the IDs among `missing` never asked about, wakes the poller
    /// if there are any, and waits up to `kubernetes.lookup_wait` for the
    /// refresh that asks about them. True when it waited for one that
    /// finished (the caller joins again). Called on a slow tier's thread:
    /// the wait parks that thread, never the async runtime, and happens at
    /// most once per container ID.
    pub(super) fn ask<'a>(&self, missing: impl Iterator<Item = &'a str>) -> bool {
        let mut state = self.state.lock();
        let mut new = false;
        for id in missing {
            if state.wanted.len() >= self.max {
                break;
            }
            if !state.asked.contains(id) && !state.wanted.contains(id) {
                new |= state.wanted.insert(id.to_owned());
            }
        }
        if !new {
            return false;
        }
        self.wake.notify_one();
        if self.wait.is_zero() {
            return false;
        }
        let target = state.started + 1;
        let timed_out = self
            .refreshed
            .wait_while_for(&mut state, |state| state.finished < target, self.wait)
            .timed_out();
        !timed_out
    }

    /// Resolves once a reading has wanted an ID since the last refresh
    /// started (at once if one did while nobody was waiting).
    pub(super) async fn wanted(&self) {
        self.wake.notified().await;
    }

    /// Whether any ID waits for a refresh.
    pub(super) fn any_wanted(&self) -> bool {
        !self.state.lock().wanted.is_empty()
    }

    /// A refresh starts: the IDs wanted so far are asked about by it.
    pub(super) fn refresh_started(&self) {
        let mut state = self.state.lock();
        let state = &mut *state;
        if state.asked.len() + state.wanted.len() > self.max {
            // Bounded: forgetting costs at most one more lookup per ID.
            state.asked.clear();
        }
        state.asked.extend(state.wanted.drain());
        state.started += 1;
    }

    /// The refresh published its answers: wake every reading waiting on it.
    pub(super) fn refresh_finished(&self) {
        let mut state = self.state.lock();
        state.finished = state.started;
        self.refreshed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn an_id_is_asked_about_once_and_a_reading_waits_for_the_refresh_that_asks() {
        let lookups = Arc::new(Lookups::new(Duration::from_secs(30), 10));
        let poller = {
            let lookups = lookups.clone();
            std::thread::spawn(move || {
                while !lookups.any_wanted() {
                    std::thread::yield_now();
                }
                lookups.refresh_started();
                lookups.refresh_finished();
            })
        };
        assert!(lookups.ask(["a"].into_iter()), "waited for the refresh");
        poller.join().unwrap();
        // Asked about already: no wait, no new want.
        assert!(!lookups.ask(["a"].into_iter()));
        assert!(!lookups.any_wanted());
    }

    #[test]
    fn without_a_refresh_the_wait_ends_at_its_bound() {
        let lookups = Lookups::new(Duration::from_millis(10), 10);
        assert!(!lookups.ask(["a", "b"].into_iter()));
        assert!(lookups.any_wanted());
        // Wanted already: the next reading does not wait again.
        assert!(!lookups.ask(["b"].into_iter()));
    }

    #[test]
    fn the_sets_stay_within_the_bound() {
        let lookups = Lookups::new(Duration::ZERO, 2);
        assert!(!lookups.ask(["a", "b", "c"].into_iter()));
        lookups.refresh_started();
        assert_eq!(lookups.state.lock().asked.len(), 2);
        assert!(!lookups.ask(["c", "d"].into_iter()));
        lookups.refresh_started();
        assert!(lookups.state.lock().asked.len() <= 2);
    }
}
