//! Compact stored forms of readings, so an hour of history at a fast rate
//! stays small (see `docs/performance.md` for the bytes per sample).
//!
//! Absent values are tracked with a presence mask, not sentinels: every
//! accessor returns an `Option`.

use std::sync::Arc;

use crate::model::{AllocatorStats, FastReading, MemoryInfo, ProcessInfo, SlowReading, Timestamp};

use super::ring::Stamped;

const HAS_MEMORY: u8 = 1 << 0;
const HAS_RESERVED: u8 = 1 << 1;
const HAS_GPU_UTIL: u8 = 1 << 2;
const HAS_BANDWIDTH_UTIL: u8 = 1 << 3;

/// One fast-tier sample: 48 bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FastPoint {
    at: Timestamp,
    total: u64,
    used: u64,
    free: u64,
    reserved: u64,
    /// Ratios in parts per 10 000: NVML reports whole percent, so nothing
    /// is lost, and two `u16` keep the point at 48 bytes.
    gpu_utilization: u16,
    bandwidth_utilization: u16,
    present: u8,
}

const RATIO_SCALE: f64 = 10_000.0;

fn ratio_to_stored(ratio: Option<f64>) -> u16 {
    let scaled = (ratio.unwrap_or(0.0) * RATIO_SCALE).round();
    if scaled.is_finite() { scaled.clamp(0.0, RATIO_SCALE) as u16 } else { 0 }
}

fn stored_to_ratio(stored: u16) -> f64 {
    f64::from(stored) / RATIO_SCALE
}

impl FastPoint {
    pub fn at(&self) -> Timestamp {
        self.at
    }

    pub fn memory(&self) -> Option<MemoryInfo> {
        (self.present & HAS_MEMORY != 0).then(|| MemoryInfo {
            total_bytes: self.total,
            reserved_bytes: (self.present & HAS_RESERVED != 0).then_some(self.reserved),
            used_bytes: self.used,
            free_bytes: self.free,
        })
    }

    pub fn used_bytes(&self) -> Option<u64> {
        (self.present & HAS_MEMORY != 0).then_some(self.used)
    }

    pub fn gpu_utilization(&self) -> Option<f64> {
        (self.present & HAS_GPU_UTIL != 0).then(|| stored_to_ratio(self.gpu_utilization))
    }

    pub fn memory_bandwidth_utilization(&self) -> Option<f64> {
        (self.present & HAS_BANDWIDTH_UTIL != 0)
            .then(|| stored_to_ratio(self.bandwidth_utilization))
    }
}

impl From<&FastReading> for FastPoint {
    fn from(reading: &FastReading) -> Self {
        let memory = reading.memory.unwrap_or(MemoryInfo {
            total_bytes: 0,
            reserved_bytes: None,
            used_bytes: 0,
            free_bytes: 0,
        });
        let bit = |present: bool, bit: u8| if present { bit } else { 0 };
        let present = bit(reading.memory.is_some(), HAS_MEMORY)
            | bit(memory.reserved_bytes.is_some(), HAS_RESERVED)
            | bit(reading.gpu_utilization.is_some(), HAS_GPU_UTIL)
            | bit(reading.memory_bandwidth_utilization.is_some(), HAS_BANDWIDTH_UTIL);
        Self {
            at: reading.at,
            total: memory.total_bytes,
            used: memory.used_bytes,
            free: memory.free_bytes,
            reserved: memory.reserved_bytes.unwrap_or(0),
            gpu_utilization: ratio_to_stored(reading.gpu_utilization),
            bandwidth_utilization: ratio_to_stored(reading.memory_bandwidth_utilization),
            present,
        }
    }
}

impl Stamped for FastPoint {
    fn at(&self) -> Timestamp {
        self.at
    }
}

/// One process in a slow-tier sample: 104 bytes. The name is not stored per
/// sample; it lives in the latest reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessPoint {
    pub pid: u32,
    used: u64,
    has_used: bool,
    allocator: Option<AllocatorStats>,
}

impl ProcessPoint {
    /// A process's figures as a stored chunk gives them back.
    pub(super) fn new(
        pid: u32,
        used_bytes: Option<u64>,
        allocator: Option<AllocatorStats>,
    ) -> Self {
        Self { pid, used: used_bytes.unwrap_or(0), has_used: used_bytes.is_some(), allocator }
    }

    pub fn used_bytes(&self) -> Option<u64> {
        self.has_used.then_some(self.used)
    }

    pub fn allocator(&self) -> Option<AllocatorStats> {
        self.allocator
    }

    /// The allocator statistics without copying them (88 bytes).
    pub fn allocator_stats(&self) -> Option<&AllocatorStats> {
        self.allocator.as_ref()
    }
}

impl From<&ProcessInfo> for ProcessPoint {
    fn from(process: &ProcessInfo) -> Self {
        Self {
            pid: process.pid,
            used: process.used_bytes.unwrap_or(0),
            has_used: process.used_bytes.is_some(),
            allocator: process.allocator,
        }
    }
}

/// One slow-tier sample as recorded. Processes are shared, so copying a
/// point never copies the list. The ring keeps the newest samples in this
/// form and seals older ones into compressed columns (`columnar`).
#[derive(Clone, Debug, PartialEq)]
pub struct SlowPoint {
    at: Timestamp,
    processes: Option<Arc<[ProcessPoint]>>,
    /// Whether `sampler.max_processes_per_device` left processes out of
    /// the list: a process missing from a capped list may still run.
    capped: bool,
}

impl SlowPoint {
    /// A sample as a stored chunk gives it back.
    pub(super) fn from_parts(
        at: Timestamp,
        processes: Option<Arc<[ProcessPoint]>>,
        capped: bool,
    ) -> Self {
        Self { at, processes, capped }
    }

    pub fn at(&self) -> Timestamp {
        self.at
    }

    pub fn processes(&self) -> Option<&[ProcessPoint]> {
        self.processes.as_deref()
    }

    /// Whether the process cap left some of the device's processes out.
    pub fn capped(&self) -> bool {
        self.capped
    }

    /// The stored form of `reading`, sharing `previous` (the list stored
    /// last) when the processes and their figures are unchanged: the common
    /// case, which then costs no list of its own sample after sample.
    pub fn sharing(
        reading: &SlowReading,
        previous: Option<&Arc<[ProcessPoint]>>,
        capped: bool,
    ) -> Self {
        let processes = reading.processes.as_ref().map(|list| {
            // vramd's own probe child lives for a second and is not a
            // workload: kept out of the windows that leak and counter
            // analysis read (the live reading still lists it, marked).
            let workloads = || list.iter().filter(|process| !process.details.is_probe());
            match previous {
                Some(previous)
                    if previous.len() == workloads().count()
                        && previous
                            .iter()
                            .zip(workloads())
                            .all(|(point, process)| *point == ProcessPoint::from(process)) =>
                {
                    previous.clone()
                }
                _ => workloads().map(ProcessPoint::from).collect(),
            }
        });
        Self { at: reading.at, processes, capped }
    }

    /// The stored list itself, for the next point to share.
    pub(super) fn shared_processes(&self) -> Option<&Arc<[ProcessPoint]>> {
        self.processes.as_ref()
    }
}

/// For tests, which build points one reading at a time.
#[cfg(test)]
impl From<&SlowReading> for SlowPoint {
    fn from(reading: &SlowReading) -> Self {
        Self::sharing(reading, None, false)
    }
}

impl Stamped for SlowPoint {
    fn at(&self) -> Timestamp {
        self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_point_round_trips_present_and_absent_values() {
        let reading = FastReading {
            at: Timestamp::from_unix_millis(42),
            memory: Some(MemoryInfo {
                total_bytes: 100,
                reserved_bytes: None,
                used_bytes: 0,
                free_bytes: 100,
            }),
            gpu_utilization: Some(0.5),
            memory_bandwidth_utilization: None,
        };
        let point = FastPoint::from(&reading);
        assert_eq!(point.memory(), reading.memory);
        assert_eq!(point.used_bytes(), Some(0), "zero used is a value, not absence");
        assert_eq!(point.gpu_utilization(), Some(0.5));
        let odd =
            FastPoint::from(&FastReading { gpu_utilization: Some(0.6950109), ..reading.clone() });
        assert_eq!(odd.gpu_utilization(), Some(0.695), "kept to 1/10 000");
        assert_eq!(point.memory_bandwidth_utilization(), None);

        let empty = FastPoint::from(&FastReading { memory: None, ..reading });
        assert_eq!(empty.memory(), None);
        assert_eq!(empty.used_bytes(), None);
    }

    fn slow(at: i64, used: &[Option<u64>]) -> SlowReading {
        let processes = used
            .iter()
            .enumerate()
            .map(|(pid, used_bytes)| ProcessInfo {
                pid: pid as u32,
                name: None,
                used_bytes: *used_bytes,
                allocator: None,
                details: Default::default(),
            })
            .collect();
        SlowReading {
            at: Timestamp::from_unix_millis(at),
            processes: Some(processes),
            allocations: None,
            temperature_celsius: None,
            power_usage_watts: None,
            power_limit_watts: None,
            details: Default::default(),
            processes_left_out: 0,
        }
    }

    #[test]
    fn an_unchanged_process_list_is_stored_once() {
        let first = SlowPoint::from(&slow(0, &[Some(5), None]));
        let list = first.shared_processes().unwrap();
        let same = SlowPoint::sharing(&slow(1_000, &[Some(5), None]), Some(list), false);
        assert!(Arc::ptr_eq(list, same.shared_processes().unwrap()));
        assert_eq!(same.at(), Timestamp::from_unix_millis(1_000));

        // Absent usage is not zero usage: a list that changes only there is new.
        let zero = SlowPoint::sharing(&slow(2_000, &[Some(5), Some(0)]), Some(list), false);
        assert!(!Arc::ptr_eq(list, zero.shared_processes().unwrap()));
        assert_eq!(zero.processes().unwrap()[1].used_bytes(), Some(0));
        assert_eq!(same.processes().unwrap()[1].used_bytes(), None);
        let grown = SlowPoint::sharing(&slow(3_000, &[Some(6), None]), Some(list), false);
        assert!(!Arc::ptr_eq(list, grown.shared_processes().unwrap()));
    }

    #[test]
    fn the_probe_child_never_enters_the_process_windows() {
        let process = |pid: u32, role: Option<crate::model::ProcessRole>| ProcessInfo {
            pid,
            name: None,
            used_bytes: Some(500 << 20),
            allocator: None,
            details: crate::model::ProcessDetails { role, ..Default::default() },
        };
        let reading = SlowReading::listing(
            Timestamp::from_unix_millis(42),
            Some(vec![process(7, None), process(8, Some(crate::model::ProcessRole::Probe))]),
        );
        let point = SlowPoint::from(&reading);
        let pids: Vec<u32> = point.processes().unwrap().iter().map(|p| p.pid).collect();
        assert_eq!(pids, [7]);
    }

    #[test]
    fn stored_points_stay_compact() {
        assert_eq!(std::mem::size_of::<FastPoint>(), 48);
        // 64 bytes before the allocator's interval range (issue 32), 40 more
        // with it; only a process's newest samples are kept as points, older
        // ones sealed into columns (`columnar`).
        assert!(std::mem::size_of::<ProcessPoint>() <= 104);
        // Timestamp, shared list, and whether the process cap cut it.
        assert!(std::mem::size_of::<SlowPoint>() <= 32);
    }
}
