//! What the trace publishes and the sampling path reads: each process's
//! statistics (swapped whole by the tracer thread, read under a short
//! lock by the join), the PIDs NVML listed (what discovery reads the maps
//! of), and the trace's health for `/metrics`.
//!
//! The join runs on each device's slow-tier thread inside its deadline,
//! so it only reads published maps; it never waits on the tracer.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use super::ledger::ByDevice;
use crate::model::{DeviceInfo, DriverStats, SlowReading};

/// Why a traced call was lost (the `reason` of
/// `vramd_driver_trace_dropped_events_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum DropReason {
    /// The kernel's ring buffer was full (the tracer behind, or held back
    /// at `driver_trace.max_events_per_second`).
    RingFull,
    /// Two threads sharing a slot of the kernel's array of allocation
    /// calls in flight allocated at once: the earlier call is lost.
    InFlightFull,
    /// A new process while `driver_trace.max_processes` were tracked.
    ProcessLimit,
    /// An allocation not kept at `driver_trace.max_live_allocations`.
    LiveAllocationLimit,
}

impl DropReason {
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The trace's own health, written by the tracer thread.
#[derive(Default)]
pub struct TraceHealth {
    up: AtomicBool,
    libraries: AtomicU64,
    events: AtomicU64,
    dropped: [AtomicU64; 4],
}

impl TraceHealth {
    pub fn up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::Relaxed);
    }

    /// libcuda files probed.
    pub fn libraries(&self) -> u64 {
        self.libraries.load(Ordering::Relaxed)
    }

    pub fn set_libraries(&self, count: u64) {
        self.libraries.store(count, Ordering::Relaxed);
    }

    /// Traced calls handled, since start.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    pub fn count_events(&self, count: u64) {
        self.events.fetch_add(count, Ordering::Relaxed);
    }

    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped[reason as usize].load(Ordering::Relaxed)
    }

    /// Sets a drop count read from where it is kept (the kernel's counters,
    /// the ledger's), so the export mirrors it.
    pub fn set_dropped(&self, reason: DropReason, total: u64) {
        self.dropped[reason as usize].store(total, Ordering::Relaxed);
    }
}

pub struct DriverBoard {
    published: RwLock<Arc<HashMap<u32, Arc<ByDevice>>>>,
    /// PID → the device indices that list it. A process's calls count on
    /// the device they named; those on no known device, or on an ordinal
    /// no listing device has (a process that sees a subset of the devices),
    /// on the lowest listing one.
    listed: Mutex<HashMap<u32, BTreeSet<u32>>>,
    max_listed: usize,
    pub health: TraceHealth,
}

impl DriverBoard {
    pub fn new(max_processes: usize) -> Self {
        Self {
            published: RwLock::new(Arc::new(HashMap::new())),
            listed: Mutex::new(HashMap::new()),
            max_listed: max_processes,
            health: TraceHealth::default(),
        }
    }

    /// Joins each listed process's driver statistics on this device onto
    /// a slow reading.
    pub fn join(&self, info: &DeviceInfo, reading: &mut SlowReading) {
        let Some(processes) = reading.processes.as_mut() else { return };
        let published = self.published.read().clone();
        let mut listed = self.listed.lock();
        let here: HashSet<u32> = processes.iter().map(|process| process.pid).collect();
        for (pid, devices) in listed.iter_mut() {
            if !here.contains(pid) {
                devices.remove(&info.index);
            }
        }
        for process in processes.iter_mut() {
            let room = listed.len() < self.max_listed;
            let devices = match listed.get_mut(&process.pid) {
                Some(devices) => devices,
                None if room => listed.entry(process.pid).or_default(),
                None => continue,
            };
            devices.insert(info.index);
            let Some(calls) = published.get(&process.pid) else { continue };
            process.details.driver = on_device(calls, devices, info.index).map(Arc::new);
        }
    }

    /// The PIDs NVML listed, for discovery.
    pub fn listed_pids(&self) -> Vec<u32> {
        self.listed.lock().keys().copied().collect()
    }

    /// The device index a process's calls on `device` (a CUDA ordinal, or
    /// none known) count on: that device when it lists the process, else
    /// the lowest that does.
    pub fn device_of(&self, pid: u32, device: Option<u32>) -> Option<u32> {
        let listed = self.listed.lock();
        let devices = listed.get(&pid)?;
        device.filter(|device| devices.contains(device)).or_else(|| devices.first().copied())
    }

    /// Forgets exited processes.
    pub fn forget(&self, pids: &[u32]) {
        let mut listed = self.listed.lock();
        for pid in pids {
            listed.remove(pid);
        }
    }

    pub fn publish(&self, stats: HashMap<u32, Arc<ByDevice>>) {
        *self.published.write() = Arc::new(stats);
    }
}

/// What of a process's calls counts on device `index`, given the devices
/// that list it; `None` when nothing does.
fn on_device(calls: &ByDevice, listing: &BTreeSet<u32>, index: u32) -> Option<DriverStats> {
    let lowest = listing.first() == Some(&index);
    let mut total: Option<DriverStats> = None;
    for (device, stats) in calls {
        let counts_here = match device {
            Some(device) if listing.contains(device) => *device == index,
            _ => lowest,
        };
        if counts_here {
            match &mut total {
                Some(total) => total.absorb(stats),
                None => total = Some(stats.clone()),
            }
        }
    }
    total
}
