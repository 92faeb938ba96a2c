//! Counters that only rise, read as increases over a window: a device's
//! Xid errors and each process's allocator retries and OOMs, kept
//! incrementally from the samples that arrived since the last pass.
//!
//! Owns: [`CounterTrack`] and [`xid_increase`]. Depends on `history`
//! (read-only), `model` and `analysis::series`; knows nothing of alert
//! rules, configuration or HTTP (the windows and bounds are passed in).

use std::collections::VecDeque;
use std::time::Duration;

use crate::history::{DeviceHistory, LiveState, ProcessFigure};
use crate::model::Timestamp;

use super::series;

/// New Xid errors of a device within `window`, from the cumulative counts
/// its slow readings carry; `history` holds the totals seen so far, at most
/// `max_history` (`analysis.max_xid_history`).
pub(super) fn xid_increase(
    history: &mut VecDeque<(Timestamp, u64)>,
    live: &LiveState,
    now: Timestamp,
    window: Duration,
    max_history: usize,
) -> Option<u64> {
    // Saturating: the counts come from the driver or a replayed trace.
    let total = live
        .slow
        .as_ref()?
        .details
        .xid_errors
        .values()
        .fold(0u64, |sum, &count| sum.saturating_add(count));
    if history.back().is_none_or(|&(_, last)| last != total) {
        history.push_back((now, total));
    }
    let oldest_kept = now.saturating_sub(window);
    while history.len() > max_history || history.get(1).is_some_and(|&(at, _)| at <= oldest_kept) {
        history.pop_front();
    }
    let baseline =
        history.front().map_or(total, |&(at, count)| if at <= oldest_kept { count } else { 0 });
    Some(total.saturating_sub(baseline))
}

/// Allocator counters of one device's processes, maintained incrementally:
/// each pass reads only the slow-tier samples that arrived since the last
/// one and keeps, per PID, the steps by which `num_alloc_retries` and
/// `num_ooms` rose (a drop means the process restarted: the new value
/// counts in full). A handful of PIDs per device: a linear search beats
/// hashing.
#[derive(Default)]
pub(super) struct CounterTrack {
    scanned_to: Option<Timestamp>,
    pids: Vec<PidCounters>,
}

struct PidCounters {
    pid: u32,
    last_seen: Timestamp,
    last: Option<(u64, u64)>,
    /// (at, retries gained, OOMs gained), only where something was gained.
    steps: VecDeque<(Timestamp, u64, u64)>,
}

impl CounterTrack {
    pub(super) fn update(&mut self, device: &DeviceHistory, now: Timestamp, keep: Duration) {
        let from = match self.scanned_to {
            Some(scanned) => scanned.saturating_add(Duration::from_millis(1)),
            None => now.saturating_sub(keep),
        };
        // Only what arrived since the last pass: a few samples, read under
        // the ring's lock rather than through a snapshot; and of a longer
        // first read, only the two counters of each process are decoded.
        let pids = &mut self.pids;
        let mut newest_seen = self.scanned_to;
        let counters = [ProcessFigure::AllocRetries, ProcessFigure::Ooms];
        device.visit_recent_slow_figures(from, now, counters, |sample| {
            let at = sample.at;
            newest_seen = Some(newest_seen.map_or(at, |seen| seen.max(at)));
            for process in sample.processes.into_iter().flatten() {
                let slot = match pids.iter().position(|entry| entry.pid == process.pid) {
                    Some(slot) => slot,
                    None => {
                        pids.push(PidCounters {
                            pid: process.pid,
                            last_seen: at,
                            last: None,
                            steps: VecDeque::new(),
                        });
                        pids.len() - 1
                    }
                };
                let Some(entry) = pids.get_mut(slot) else { continue };
                entry.last_seen = at;
                // Both present exactly when the sample has allocator statistics.
                let [Some(retries), Some(ooms)] = process.values else { continue };
                let current = (retries, ooms);
                if let Some((retries, ooms)) = entry.last {
                    let step = (
                        series::counter_step(retries, current.0),
                        series::counter_step(ooms, current.1),
                    );
                    if step != (0, 0) {
                        entry.steps.push_back((at, step.0, step.1));
                    }
                }
                entry.last = Some(current);
            }
        });
        // Up to the newest sample read, not `now`: another device's newer
        // sample may set `now` before this device's latest one is stored.
        self.scanned_to = newest_seen;
        let oldest = now.saturating_sub(keep);
        self.pids.retain(|entry| entry.last_seen >= oldest);
        for entry in &mut self.pids {
            while entry.steps.front().is_some_and(|&(at, _, _)| at < oldest) {
                entry.steps.pop_front();
            }
        }
    }

    /// Per PID seen within the longer window: retries gained within
    /// `retries_window` and OOMs within `oom_window`; `None` for a process
    /// that reports no allocator statistics.
    pub(super) fn increases(
        &self,
        now: Timestamp,
        retries_window: Duration,
        oom_window: Duration,
    ) -> Vec<(u32, Option<u64>, Option<u64>)> {
        let retries_from = now.saturating_sub(retries_window);
        let oom_from = now.saturating_sub(oom_window);
        self.pids
            .iter()
            .map(|entry| {
                if entry.last.is_none() {
                    return (entry.pid, None, None);
                }
                let sum = |from: Timestamp, pick: fn(&(Timestamp, u64, u64)) -> u64| {
                    // Saturating: the counters come from allocator reports.
                    entry
                        .steps
                        .iter()
                        .filter(|step| step.0 >= from)
                        .fold(0u64, |sum, step| sum.saturating_add(pick(step)))
                };
                (
                    entry.pid,
                    Some(sum(retries_from, |step| step.1)),
                    Some(sum(oom_from, |step| step.2)),
                )
            })
            .collect()
    }
}

/// The sum of the figures present; `None` only where none is.
pub(super) fn add(sum: Option<u64>, value: Option<u64>) -> Option<u64> {
    match (sum, value) {
        (None, None) => None,
        (sum, value) => Some(sum.unwrap_or(0).saturating_add(value.unwrap_or(0))),
    }
}
