//! Allocator retries the driver trace saw (`DriverStats::allocation_retries`:
//! an out-of-memory failure followed by a successful allocation at least
//! as large), for the processes no reporter speaks for, windowed like the
//! reporter's `num_alloc_retries` so `allocator_retries` fires for them.
//! Read from each pass's latest slow reading: history does not keep the
//! driver's counters. A process whose reporter speaks is skipped here: its
//! own counter wins, and the two are never added.
//!
//! Depends on `model` only.

use std::collections::VecDeque;
use std::time::Duration;

use crate::model::{SlowReading, Timestamp};

#[derive(Default)]
pub struct DriverRetries {
    pids: Vec<Track>,
}

struct Track {
    pid: u32,
    last: u64,
    last_seen: Timestamp,
    /// (reading time, retries gained), only where some were gained.
    steps: VecDeque<(Timestamp, u64)>,
}

impl DriverRetries {
    /// Takes the steps of the reading's traced processes that report no
    /// allocator statistics, and forgets what is older than `keep`. A
    /// process's first reading counts in full: the trace counts from the
    /// moment it first saw the process, which is recent.
    pub fn update(&mut self, reading: Option<&SlowReading>, keep: Duration) {
        let Some(reading) = reading else { return };
        let at = reading.at;
        for process in reading.processes.iter().flatten() {
            let Some(driver) = process.details.driver.as_deref() else { continue };
            if process.allocator.is_some() {
                continue;
            }
            let current = driver.allocation_retries;
            let gained = match self.pids.iter_mut().find(|track| track.pid == process.pid) {
                Some(track) => {
                    track.last_seen = at;
                    // A drop: the PID is a new process; it counts in full.
                    let gained = current.checked_sub(track.last).unwrap_or(current);
                    track.last = current;
                    (gained > 0).then_some((track, gained))
                }
                None => {
                    self.pids.push(Track {
                        pid: process.pid,
                        last: current,
                        last_seen: at,
                        steps: VecDeque::new(),
                    });
                    let track = self.pids.last_mut();
                    track.filter(|_| current > 0).map(|track| (track, current))
                }
            };
            if let Some((track, gained)) = gained
                && track.steps.back().is_none_or(|(seen, _)| *seen < at)
            {
                track.steps.push_back((at, gained));
            }
        }
        let oldest = at.saturating_sub(keep);
        self.pids.retain(|track| track.last_seen >= oldest);
        for track in &mut self.pids {
            while track.steps.front().is_some_and(|(seen, _)| *seen < oldest) {
                track.steps.pop_front();
            }
        }
    }

    /// Retries the driver saw for `pid` within `window` of `now`; `None`
    /// when the trace does not follow it (or its reporter speaks).
    pub fn in_window(&self, pid: u32, now: Timestamp, window: Duration) -> Option<u64> {
        let track = self.pids.iter().find(|track| track.pid == pid)?;
        let from = now.saturating_sub(window);
        let steps = track.steps.iter().filter(|(seen, _)| *seen >= from);
        Some(steps.fold(0u64, |sum, (_, gained)| sum.saturating_add(*gained)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{AllocatorStats, DriverStats, ProcessInfo};

    fn reading(at_secs: i64, processes: Vec<ProcessInfo>) -> SlowReading {
        SlowReading::listing(Timestamp::from_unix_millis(at_secs * 1000), Some(processes))
    }

    fn traced(pid: u32, retries: u64) -> ProcessInfo {
        let mut process = ProcessInfo {
            pid,
            name: None,
            used_bytes: None,
            allocator: None,
            details: Default::default(),
        };
        let stats = DriverStats { allocation_retries: retries, ..DriverStats::default() };
        process.details.driver = Some(Arc::new(stats));
        process
    }

    #[test]
    fn the_drivers_retries_count_in_the_window_unless_a_reporter_speaks() {
        let mut retries = DriverRetries::default();
        let keep = Duration::from_secs(300);
        let mut reported = traced(2, 5);
        reported.allocator = Some(AllocatorStats {
            allocated_bytes: 0,
            reserved_bytes: 0,
            active_bytes: 0,
            inactive_split_bytes: 0,
            alloc_retries: 5,
            ooms: 0,
            interval: None,
        });
        retries.update(Some(&reading(100, vec![traced(1, 0), reported.clone()])), keep);
        retries.update(Some(&reading(110, vec![traced(1, 2), reported])), keep);
        retries.update(Some(&reading(120, vec![traced(1, 3)])), keep);
        let now = Timestamp::from_unix_millis(120_000);
        let window = Duration::from_secs(60);
        assert_eq!(retries.in_window(1, now, window), Some(3));
        assert_eq!(retries.in_window(1, now, Duration::from_secs(5)), Some(1));
        assert_eq!(retries.in_window(2, now, window), None, "its reporter's counter wins");
        let later = Timestamp::from_unix_millis(500_000);
        retries.update(Some(&reading(500, vec![traced(1, 3)])), keep);
        assert_eq!(retries.in_window(1, later, window), Some(0), "out of the window");
    }
}
