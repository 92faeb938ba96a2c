//! The accounting of traced calls per process and device: live
//! allocations (pointer or handle → device and bytes), bytes held, counts
//! and the size histogram, within `driver_trace.max_processes` and
//! `driver_trace.max_live_allocations`, each overflow counted. An
//! allocation's device is its thread's current context's (`contexts`), a
//! physical one's the device it names, a free's that of what it frees.
//! Pure: no I/O, no clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ::driver_trace::{Event, EventKind};

use super::contexts::Contexts;
use crate::model::{DriverStats, SIZE_BUCKETS};

/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: i32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerLimits {
    pub max_processes: usize,
    pub max_live_allocations: usize,
    /// Contexts, and threads with a current context, kept per process.
    pub max_contexts: usize,
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
            EventKind::Create | EventKind::Release => Held::Handle(event.address),
            _ => Held::Pointer(event.address),
        }
    }
}

/// A process's statistics on each device its calls named; `None`: calls
/// whose device is not known (no current context seen).
pub type ByDevice = BTreeMap<Option<u32>, DriverStats>;

/// An out-of-memory failure not retried yet: when it was handled (the
/// ledger's clock), its size and device, and what the process held there
/// at that moment.
#[derive(Clone, Copy)]
struct PendingOom {
    at: Duration,
    requested_bytes: u64,
    device: Option<u32>,
    held_bytes: u64,
}

#[derive(Default)]
struct ProcessLedger {
    live: HashMap<Held, (Option<u32>, u64)>,
    devices: ByDevice,
    contexts: Contexts,
    pending_oom: Option<PendingOom>,
}

impl ProcessLedger {
    fn stats(&mut self, device: Option<u32>) -> &mut DriverStats {
        self.devices.entry(device).or_insert_with(|| DriverStats {
            size_buckets: vec![0; SIZE_BUCKETS.len() + 1],
            ..DriverStats::default()
        })
    }
}

/// An out-of-memory failure the process did not retry successfully within
/// the window: an OOM it surely saw, with the evidence at hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverOom {
    pub pid: u32,
    /// The device the failed call was made on, when known.
    pub device: Option<u32>,
    pub requested_bytes: u64,
    /// What the process held through the driver on that device when the
    /// allocation failed.
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
            None => self.processes.entry(event.pid).or_default(),
        };
        if process.contexts.apply(event, self.limits.max_contexts) {
            return;
        }
        if event.kind.allocates() {
            let device = match event.kind {
                EventKind::Create => event.device,
                _ => process.contexts.device_of_thread(event.tid),
            };
            Self::allocated(process, event, device, now, self.limits, &mut self.overflow);
        } else if event.kind.frees() && event.succeeded() {
            // A failed free gave nothing back.
            match process.live.remove(&Held::of(event)) {
                Some((device, bytes)) => {
                    let stats = process.stats(device);
                    stats.frees += 1;
                    stats.allocated_bytes = stats.allocated_bytes.saturating_sub(bytes);
                    stats.live_allocations = stats.live_allocations.saturating_sub(1);
                }
                None => {
                    let device = process.contexts.device_of_thread(event.tid);
                    let stats = process.stats(device);
                    stats.frees += 1;
                    stats.unmatched_frees += 1;
                }
            }
        }
    }

    fn allocated(
        process: &mut ProcessLedger,
        event: &Event,
        device: Option<u32>,
        now: Duration,
        limits: LedgerLimits,
        overflow: &mut Overflow,
    ) {
        if !event.succeeded() {
            let stats = process.stats(device);
            stats.allocation_failures += 1;
            if event.result == OUT_OF_MEMORY {
                stats.out_of_memory_failures += 1;
                let held_bytes = stats.allocated_bytes;
                process.pending_oom.get_or_insert(PendingOom {
                    at: now,
                    requested_bytes: event.size,
                    device,
                    held_bytes,
                });
            }
            return;
        }
        let retried = process
            .pending_oom
            .is_some_and(|oom| oom.device == device && event.size >= oom.requested_bytes);
        if retried {
            process.pending_oom = None;
        }
        let full = process.live.len() >= limits.max_live_allocations;
        let stats = process.stats(device);
        stats.allocations += 1;
        stats.allocation_retries += u64::from(retried);
        if let Some(bucket) = stats.size_buckets.get_mut(DriverStats::bucket(event.size)) {
            *bucket += 1;
        }
        if full {
            stats.untracked_allocations += 1;
            overflow.live_allocations += 1;
            return;
        }
        stats.allocated_bytes = stats.allocated_bytes.saturating_add(event.size);
        stats.live_allocations += 1;
        // The driver never hands out a live address twice; if it seems to
        // (a free the trace missed), the newer size is the truth.
        if let Some((stale_device, stale)) =
            process.live.insert(Held::of(event), (device, event.size))
        {
            let stats = process.stats(stale_device);
            stats.allocated_bytes = stats.allocated_bytes.saturating_sub(stale);
            stats.live_allocations = stats.live_allocations.saturating_sub(1);
        }
    }

    /// The out-of-memory failures not retried within `window` of `now`,
    /// each reported once.
    pub fn unretried_ooms(&mut self, now: Duration, window: Duration) -> Vec<DriverOom> {
        let mut ooms = Vec::new();
        for (pid, process) in &mut self.processes {
            if let Some(oom) = process.pending_oom
                && now.saturating_sub(oom.at) >= window
            {
                process.pending_oom = None;
                ooms.push(DriverOom {
                    pid: *pid,
                    device: oom.device,
                    requested_bytes: oom.requested_bytes,
                    held_bytes: oom.held_bytes,
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

    /// Every tracked process's statistics by device, as published to the join.
    pub fn snapshot(&self) -> HashMap<u32, Arc<ByDevice>> {
        self.processes
            .iter()
            .map(|(pid, process)| (*pid, Arc::new(process.devices.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(pid: u32, kind: EventKind, result: i32, size: u64, address: u64) -> Event {
        Event { pid, tid: pid, kind, result, size, address, device: None }
    }

    fn ledger(max_processes: usize, max_live_allocations: usize) -> Ledger {
        Ledger::new(LedgerLimits { max_processes, max_live_allocations, max_contexts: 8 })
    }

    /// The process's statistics on no known device (no context seen).
    fn unplaced(ledger: &Ledger, pid: u32) -> DriverStats {
        ledger.snapshot()[&pid][&None].clone()
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
            Event { device: Some(1), ..event(1, EventKind::Create, 0, 2 << 20, 0x1000) },
            event(2, EventKind::Alloc, 0, 512, 0x1000),
        ] {
            ledger.apply(&event, Duration::ZERO);
        }
        let stats = ledger.snapshot();
        let mut first = stats[&1][&None].clone();
        first.absorb(&stats[&1][&Some(1)]);
        assert_eq!(stats[&1][&Some(1)].allocated_bytes, 2 << 20, "cuMemCreate names its device");
        assert_eq!(first.allocated_bytes, (3 << 30) + (2 << 20), "a handle is not a pointer");
        assert_eq!(first.live_allocations, 2);
        assert_eq!((first.allocations, first.frees, first.unmatched_frees), (3, 2, 1));
        assert_eq!((first.allocation_failures, first.out_of_memory_failures), (2, 1));
        assert_eq!(first.allocation_retries, 0, "the 64 GiB request was never retried");
        assert_eq!(first.size_buckets, [0, 1, 1, 0, 0, 0, 1, 0, 0]);
        assert_eq!(stats[&2][&None].allocated_bytes, 512);
        ledger.apply(&event(1, EventKind::Release, 0, 0, 0x1000), Duration::ZERO);
        assert_eq!(unplaced(&ledger, 1).allocated_bytes, 3 << 30);
        assert_eq!(ledger.snapshot()[&1][&Some(1)].allocated_bytes, 0);
        ledger.forget(1);
        assert_eq!(ledger.pids().collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn bounds_count_what_they_keep_out() {
        let mut ledger = ledger(1, 1);
        for (pid, address) in [(1, 0x1000), (1, 0x2000), (2, 0x1000)] {
            ledger.apply(&event(pid, EventKind::Alloc, 0, 100, address), Duration::ZERO);
        }
        let stats = &unplaced(&ledger, 1);
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
        // pid 2: holds 2 MiB, fails, then only a smaller allocation
        // succeeds: an OOM, with what it held when it failed.
        ledger.apply(&event(2, EventKind::Alloc, 0, 2 << 20, 0x5000), at(19));
        ledger.apply(&event(2, EventKind::Alloc, 2, 8 << 30, 0), at(20));
        ledger.apply(&event(2, EventKind::Alloc, 2, 8 << 30, 0), at(21));
        ledger.apply(&event(2, EventKind::Alloc, 0, 1 << 20, 0x3000), at(22));
        assert_eq!(ledger.unretried_ooms(at(200), window), [], "inside the window");
        let ooms = ledger.unretried_ooms(at(300), window);
        assert_eq!(
            ooms,
            [DriverOom { pid: 2, device: None, requested_bytes: 8 << 30, held_bytes: 2 << 20 }]
        );
        assert_eq!(ledger.unretried_ooms(at(900), window), [], "reported once");
        let (first, second) = (unplaced(&ledger, 1), unplaced(&ledger, 2));
        assert_eq!((first.allocation_retries, second.allocation_retries), (1, 0));
        assert_eq!(second.out_of_memory_failures, 2);
    }

    #[test]
    fn each_call_counts_on_the_device_of_its_threads_current_context() {
        let mut ledger = ledger(8, 8);
        let on = |tid: u32, kind: EventKind, address: u64, device: Option<u32>| Event {
            tid,
            device,
            ..event(1, kind, 0, 0, address)
        };
        let alloc = |tid: u32, result: i32, size: u64, address: u64| Event {
            tid,
            ..event(1, EventKind::Alloc, result, size, address)
        };
        for call in [
            on(10, EventKind::ContextCreate, 0xc0, Some(0)),
            on(10, EventKind::PrimaryContext, 0xc1, Some(1)),
            alloc(10, 0, 100, 0x1000),
            on(10, EventKind::PushCurrent, 0xc1, None),
            alloc(10, 0, 300, 0x2000),
            alloc(10, 2, 900, 0),
            alloc(10, 0, 700, 0x4000),
            on(10, EventKind::PopCurrent, 0, None),
            // Another thread frees what the first allocated on device 1.
            on(11, EventKind::Free, 0x2000, None),
            alloc(11, 0, 50, 0x3000),
        ] {
            ledger.apply(&call, Duration::ZERO);
        }
        let devices = &ledger.snapshot()[&1];
        let held = |device: Option<u32>| {
            devices
                .get(&device)
                .map(|stats| (stats.allocated_bytes, stats.allocations, stats.frees))
        };
        assert_eq!(held(Some(0)), Some((100, 1, 0)));
        assert_eq!(held(Some(1)), Some((700, 2, 1)), "freed on the device it was allocated on");
        assert_eq!(held(None), Some((50, 1, 0)), "a thread with no current context");
        assert_eq!(devices[&Some(1)].out_of_memory_failures, 1);
        let ooms = ledger.unretried_ooms(Duration::from_secs(1), Duration::from_millis(250));
        assert_eq!(
            ooms,
            [DriverOom { pid: 1, device: Some(1), requested_bytes: 900, held_bytes: 300 }]
        );
    }
}
