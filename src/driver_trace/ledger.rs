//! The accounting of traced calls per process: live allocations (pointer
//! or handle → bytes), bytes held, counts and the size histogram, within
//! `driver_trace.max_processes` and `driver_trace.max_live_allocations`,
//! each overflow counted. Pure: no I/O, no clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ::driver_trace::{Event, EventKind};

use crate::model::{DriverStats, SIZE_BUCKETS};

/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: i32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerLimits {
    pub max_processes: usize,
    pub max_live_allocations: usize,
}

/// Events the ledger could not keep, since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overflow {
    /// Events of a process not tracked yet while `max_processes` were.
    pub processes: u64,
    /// Successful allocations not kept while `max_live_allocations` were
    /// live in their process.
    pub live_allocations: u64,
}

/// Pointers (`cuMemAlloc*`) and physical-allocation handles (`cuMemCreate`)
/// are separate namespaces: the same number may be both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Held {
    Pointer(u64),
    Handle(u64),
}

impl Held {
    fn of(event: &Event) -> Held {
        match event.kind {
            EventKind::Alloc | EventKind::Free => Held::Pointer(event.address),
            EventKind::Create | EventKind::Release => Held::Handle(event.address),
        }
    }
}

#[derive(Default)]
struct ProcessLedger {
    live: HashMap<Held, u64>,
    stats: DriverStats,
    /// The first out-of-memory failure not retried yet: when it was
    /// handled (the ledger's clock) and its size.
    pending_oom: Option<(Duration, u64)>,
}

/// An out-of-memory failure the process did not retry successfully within
/// the window: an OOM it surely saw, with the evidence at hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverOom {
    pub pid: u32,
    pub requested_bytes: u64,
    /// What the process held through the driver then.
    pub held_bytes: u64,
}

pub struct Ledger {
    limits: LedgerLimits,
    processes: HashMap<u32, ProcessLedger>,
    overflow: Overflow,
}

impl Ledger {
    pub fn new(limits: LedgerLimits) -> Self {
        Self { limits, processes: HashMap::new(), overflow: Overflow::default() }
    }

    /// Accounts one traced call, handled at `now` (any monotonic clock the
    /// caller keeps; it only times out-of-memory retries).
    pub fn apply(&mut self, event: &Event, now: Duration) {
        let tracked = self.processes.len();
        let process = match self.processes.get_mut(&event.pid) {
            Some(process) => process,
            None if tracked >= self.limits.max_processes => {
                self.overflow.processes += 1;
                return;
            }
            None => self.processes.entry(event.pid).or_insert_with(|| ProcessLedger {
                stats: DriverStats {
                    size_buckets: vec![0; SIZE_BUCKETS.len() + 1],
                    ..DriverStats::default()
                },
                ..ProcessLedger::default()
            }),
        };
        let stats = &mut process.stats;
        if event.kind.allocates() {
            if !event.succeeded() {
                stats.allocation_failures += 1;
                if event.result == OUT_OF_MEMORY {
                    stats.out_of_memory_failures += 1;
                    process.pending_oom.get_or_insert((now, event.size));
                }
                return;
            }
            stats.allocations += 1;
            if process.pending_oom.is_some_and(|(_, requested)| event.size >= requested) {
                process.pending_oom = None;
                stats.allocation_retries += 1;
            }
            if let Some(bucket) = stats.size_buckets.get_mut(DriverStats::bucket(event.size)) {
                *bucket += 1;
            }
            if process.live.len() >= self.limits.max_live_allocations {
                stats.untracked_allocations += 1;
                self.overflow.live_allocations += 1;
                return;
            }
            // The driver never hands out a live address twice; if it seems
            // to (a free the trace missed), the newer size is the truth.
            if let Some(stale) = process.live.insert(Held::of(event), event.size) {
                stats.allocated_bytes = stats.allocated_bytes.saturating_sub(stale);
                stats.live_allocations = stats.live_allocations.saturating_sub(1);
            }
            stats.allocated_bytes = stats.allocated_bytes.saturating_add(event.size);
            stats.live_allocations += 1;
        } else if event.succeeded() {
            // A failed free gave nothing back.
            stats.frees += 1;
            match process.live.remove(&Held::of(event)) {
                Some(bytes) => {
                    stats.allocated_bytes = stats.allocated_bytes.saturating_sub(bytes);
                    stats.live_allocations = stats.live_allocations.saturating_sub(1);
                }
                None => stats.unmatched_frees += 1,
            }
        }
    }

    /// The out-of-memory failures not retried within `window` of `now`,
    /// each reported once.
    pub fn unretried_ooms(&mut self, now: Duration, window: Duration) -> Vec<DriverOom> {
        let mut ooms = Vec::new();
        for (pid, process) in &mut self.processes {
            if let Some((at, requested_bytes)) = process.pending_oom
                && now.saturating_sub(at) >= window
            {
                process.pending_oom = None;
                ooms.push(DriverOom {
                    pid: *pid,
                    requested_bytes,
                    held_bytes: process.stats.allocated_bytes,
                });
            }
        }
        ooms
    }

    /// Drops an exited process.
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.processes.keys().copied()
    }

    pub fn overflow(&self) -> Overflow {
        self.overflow
    }

    /// Every tracked process's statistics, as published to the join.
    pub fn snapshot(&self) -> HashMap<u32, Arc<DriverStats>> {
        self.processes
            .iter()
            .map(|(pid, process)| (*pid, Arc::new(process.stats.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(pid: u32, kind: EventKind, result: i32, size: u64, address: u64) -> Event {
        Event { timestamp_ns: 0, pid, tid: pid, kind, result, size, address, device: None }
    }

    fn ledger(max_processes: usize, max_live_allocations: usize) -> Ledger {
        Ledger::new(LedgerLimits { max_processes, max_live_allocations })
    }

    #[test]
    fn allocations_frees_and_failures_add_up_per_process() {
        let mut ledger = ledger(8, 8);
        for event in [
            event(1, EventKind::Alloc, 0, 1 << 20, 0x1000),
            event(1, EventKind::Alloc, 0, 3 << 30, 0x2000),
            event(1, EventKind::Alloc, 2, 64 << 30, 0),
            event(1, EventKind::Alloc, 1, 0, 0),
            event(1, EventKind::Free, 0, 0, 0x1000),
            event(1, EventKind::Free, 1, 0, 0x9999),
            event(1, EventKind::Free, 0, 0, 0x7777),
            event(1, EventKind::Create, 0, 2 << 20, 0x1000),
            event(2, EventKind::Alloc, 0, 512, 0x1000),
        ] {
            ledger.apply(&event, Duration::ZERO);
        }
        let stats = ledger.snapshot();
        let first = &stats[&1];
        assert_eq!(first.allocated_bytes, (3 << 30) + (2 << 20), "a handle is not a pointer");
        assert_eq!(first.live_allocations, 2);
        assert_eq!((first.allocations, first.frees, first.unmatched_frees), (3, 2, 1));
        assert_eq!((first.allocation_failures, first.out_of_memory_failures), (2, 1));
        assert_eq!(first.allocation_retries, 0, "the 64 GiB request was never retried");
        assert_eq!(first.size_buckets, [0, 1, 1, 0, 0, 0, 1, 0, 0]);
        assert_eq!(stats[&2].allocated_bytes, 512);
        ledger.apply(&event(1, EventKind::Release, 0, 0, 0x1000), Duration::ZERO);
        assert_eq!(ledger.snapshot()[&1].allocated_bytes, 3 << 30);
        ledger.forget(1);
        assert_eq!(ledger.pids().collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn bounds_count_what_they_keep_out() {
        let mut ledger = ledger(1, 1);
        for (pid, address) in [(1, 0x1000), (1, 0x2000), (2, 0x1000)] {
            ledger.apply(&event(pid, EventKind::Alloc, 0, 100, address), Duration::ZERO);
        }
        let stats = &ledger.snapshot()[&1];
        assert_eq!(
            (stats.allocated_bytes, stats.allocations, stats.untracked_allocations),
            (100, 2, 1)
        );
        assert_eq!(ledger.overflow(), Overflow { processes: 1, live_allocations: 1 });
        assert!(!ledger.snapshot().contains_key(&2));
    }

    #[test]
    fn a_failure_retried_in_time_is_a_retry_and_one_not_retried_an_oom() {
        let window = Duration::from_millis(250);
        let at = Duration::from_millis;
        let mut ledger = ledger(8, 8);
        // pid 1: fails, frees its cache, retries the same size: a retry.
        ledger.apply(&event(1, EventKind::Alloc, 0, 1 << 30, 0x1000), at(0));
        ledger.apply(&event(1, EventKind::Alloc, 2, 4 << 30, 0), at(10));
        ledger.apply(&event(1, EventKind::Free, 0, 0, 0x1000), at(11));
        ledger.apply(&event(1, EventKind::Alloc, 0, 4 << 30, 0x2000), at(12));
        // pid 2: fails, then only a smaller allocation succeeds: an OOM.
        ledger.apply(&event(2, EventKind::Alloc, 2, 8 << 30, 0), at(20));
        ledger.apply(&event(2, EventKind::Alloc, 2, 8 << 30, 0), at(21));
        ledger.apply(&event(2, EventKind::Alloc, 0, 1 << 20, 0x3000), at(22));
        assert_eq!(ledger.unretried_ooms(at(200), window), [], "inside the window");
        let ooms = ledger.unretried_ooms(at(300), window);
        assert_eq!(ooms, [DriverOom { pid: 2, requested_bytes: 8 << 30, held_bytes: 1 << 20 }]);
        assert_eq!(ledger.unretried_ooms(at(900), window), [], "reported once");
        let stats = ledger.snapshot();
        assert_eq!((stats[&1].allocation_retries, stats[&2].allocation_retries), (1, 0));
        assert_eq!(stats[&2].out_of_memory_failures, 2);
    }
}
