//! Time series pulled out of history snapshots for the analyzer.
//!
//! Owns: turning a `Snapshot` window into `(Timestamp, value)` pairs (device
//! used, per-process allocator and NVML figures), listing the PIDs seen in
//! a window, and the step of a monotonic counter across restarts.
//! Depends on: `model`, `history` (read-only snapshots). No I/O, no clocks:
//! windows are bounded by sample timestamps the caller passes.
//!
//! A sample that lacks a value contributes no point: absent is left out,
//! never read as zero, so a failed read cannot look like a drop to 0 bytes.

use std::collections::BTreeSet;

use crate::history::{FastPoint, ProcessPoint, SlowPoint, Snapshot, Stamped};
use crate::model::Timestamp;

/// Which per-process figure a series follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessMetric {
    /// `allocated_bytes.all.current`: live tensors.
    AllocatorAllocated,
    /// `reserved_bytes.all.current`: what the caching allocator holds.
    AllocatorReserved,
    /// What NVML attributes to the process.
    NvmlUsed,
    /// `num_alloc_retries` (monotonic counter).
    AllocatorRetries,
    /// `num_ooms` (monotonic counter).
    AllocatorOoms,
}

impl ProcessMetric {
    /// The figure in one stored process point, if it was reported.
    pub fn of(self, point: &ProcessPoint) -> Option<u64> {
        match self {
            ProcessMetric::NvmlUsed => point.used_bytes(),
            ProcessMetric::AllocatorAllocated => point.allocator().map(|s| s.allocated_bytes),
            ProcessMetric::AllocatorReserved => point.allocator().map(|s| s.reserved_bytes),
            ProcessMetric::AllocatorRetries => point.allocator().map(|s| s.alloc_retries),
            ProcessMetric::AllocatorOoms => point.allocator().map(|s| s.ooms),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ProcessMetric::AllocatorAllocated => "allocator_allocated",
            ProcessMetric::AllocatorReserved => "allocator_reserved",
            ProcessMetric::NvmlUsed => "nvml_used",
            ProcessMetric::AllocatorRetries => "allocator_retries",
            ProcessMetric::AllocatorOoms => "allocator_ooms",
        }
    }
}

/// Device `used` bytes for samples with `from <= at <= to`, oldest first,
/// into a caller's buffer (cleared first), so a periodic analysis pass can
/// reuse one allocation.
pub fn device_used_into(
    snapshot: &Snapshot<FastPoint>,
    from: Timestamp,
    to: Timestamp,
    out: &mut Vec<(Timestamp, u64)>,
) {
    out.clear();
    out.extend(
        snapshot.range(from, to).filter_map(|point| point.used_bytes().map(|u| (point.at(), u))),
    );
}

/// One process's stored points in `[from, to]`, oldest first. Samples whose
/// process list could not be read, or that do not list `pid`, yield nothing.
pub fn process_points(
    snapshot: &Snapshot<SlowPoint>,
    pid: u32,
    from: Timestamp,
    to: Timestamp,
) -> impl Iterator<Item = (Timestamp, &ProcessPoint)> {
    snapshot.range(from, to).filter_map(move |sample| {
        let process = sample.processes()?.iter().find(|process| process.pid == pid)?;
        Some((sample.at(), process))
    })
}

/// One figure of one process in `[from, to]`, oldest first; samples where
/// the figure was not reported are left out.
pub fn process_series(
    snapshot: &Snapshot<SlowPoint>,
    pid: u32,
    from: Timestamp,
    to: Timestamp,
    metric: ProcessMetric,
) -> Vec<(Timestamp, u64)> {
    process_points(snapshot, pid, from, to)
        .filter_map(|(at, point)| metric.of(point).map(|value| (at, value)))
        .collect()
}

/// Every PID listed in `[from, to]`, ascending, each once. The result is
/// bounded by what history holds (the sampler caps processes per sample).
pub fn pids_in(snapshot: &Snapshot<SlowPoint>, from: Timestamp, to: Timestamp) -> Vec<u32> {
    // A set rather than collect-then-dedup: a window of thousands of samples
    // repeats the same handful of PIDs, and this keeps memory at that handful.
    let pids: BTreeSet<u32> = snapshot
        .range(from, to)
        .filter_map(SlowPoint::processes)
        .flatten()
        .map(|process| process.pid)
        .collect();
    pids.into_iter().collect()
}

/// What a monotonic counter gained from `previous` to `current`; a drop
/// means the process restarted its counters, so the new value counts in full.
pub fn counter_step(previous: u64, current: u64) -> u64 {
    if current >= previous { current - previous } else { current }
}

#[cfg(test)]
mod tests;
