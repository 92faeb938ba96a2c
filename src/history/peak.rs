//! Sliding-window maximum of used memory, so `vramd_memory_used_peak_bytes`
//! shows spikes that fall between two scrapes.
//!
//! A monotonic deque: O(1) amortised per sample, and its length is bounded
//! by the samples inside the window. Time comes from sample timestamps.

use std::collections::VecDeque;
use std::time::Duration;

use crate::model::Timestamp;

#[derive(Clone, Debug)]
pub struct PeakTracker {
    window: Duration,
    /// (at, used), strictly decreasing in `used` from front to back.
    candidates: VecDeque<(Timestamp, u64)>,
}

impl PeakTracker {
    pub fn new(window: Duration) -> Self {
        Self { window, candidates: VecDeque::new() }
    }

    pub fn observe(&mut self, at: Timestamp, used: u64) {
        while self.candidates.back().is_some_and(|&(_, kept)| kept <= used) {
            self.candidates.pop_back();
        }
        self.candidates.push_back((at, used));
        self.expire(at);
    }

    /// Drops what fell out of the window ending at `now`.
    pub fn expire(&mut self, now: Timestamp) {
        let oldest_kept = now.saturating_sub(self.window);
        while self.candidates.front().is_some_and(|&(at, _)| at < oldest_kept) {
            self.candidates.pop_front();
        }
    }

    /// The largest value seen in the window, or `None` when nothing is in it.
    pub fn peak(&self) -> Option<u64> {
        self.candidates.front().map(|&(_, used)| used)
    }

    /// Forgets everything, e.g. when the device's readings stop.
    pub fn clear(&mut self) {
        self.candidates.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts(millis: i64) -> Timestamp {
        Timestamp::from_unix_millis(millis)
    }

    #[test]
    fn a_spike_is_remembered_for_the_window_then_forgotten() {
        let mut tracker = PeakTracker::new(Duration::from_secs(60));
        tracker.observe(ts(0), 10);
        tracker.observe(ts(1_000), 90);
        tracker.observe(ts(2_000), 20);
        assert_eq!(tracker.peak(), Some(90));
        tracker.observe(ts(61_000), 20);
        assert_eq!(tracker.peak(), Some(90), "the spike at 1 s is still inside [1 s, 61 s]");
        tracker.observe(ts(61_001), 15);
        assert_eq!(tracker.peak(), Some(20));
    }

    proptest! {
        #[test]
        fn peak_equals_the_max_over_the_window(
            values in proptest::collection::vec((0i64..3_000, 0u64..1_000), 1..300),
            window_ms in 1u64..20_000,
        ) {
            let mut tracker = PeakTracker::new(Duration::from_millis(window_ms));
            let mut at = 0;
            let mut seen = Vec::new();
            for (step, used) in values {
                at += step;
                tracker.observe(ts(at), used);
                seen.push((at, used));
                let expected = seen
                    .iter()
                    .filter(|&&(t, _)| t >= at - window_ms as i64)
                    .map(|&(_, u)| u)
                    .max();
                prop_assert_eq!(tracker.peak(), expected);
            }
        }
    }
}
