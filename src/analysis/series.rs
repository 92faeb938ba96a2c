//! Time series pulled out of history snapshots for the analyzer.
//!
//! Owns: turning a `Snapshot` window into `(Timestamp, value)` pairs (device
//! used), gathering every process's allocator and NVML figures of a window
//! in one pass, and the step of a monotonic counter across restarts.
//! Depends on: `model`, `history` (read-only snapshots). No I/O, no clocks:
//! windows are bounded by sample timestamps the caller passes.
//!
//! A sample that lacks a value contributes no point: absent is left out,
//! never read as zero, so a failed read cannot look like a drop to 0 bytes.

use crate::history::{FastPoint, SlowPoint, Snapshot, Stamped};
use crate::model::Timestamp;

/// Which per-process figure a series follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessMetric {
    /// `allocated_bytes.all.current`: live tensors.
    AllocatorAllocated,
    /// What NVML attributes to the process.
    NvmlUsed,
}

impl ProcessMetric {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessMetric::AllocatorAllocated => "allocator_allocated",
            ProcessMetric::NvmlUsed => "nvml_used",
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

/// Every process's leak figures over a sliding window, kept between
/// passes: each pass appends only the slow-tier samples that arrived since
/// the previous one and drops those that left the window, rather than
/// re-reading the whole window per process. Per process both figures are
/// kept, allocator `allocated` and NVML usage, because which one a leak
/// follows depends on the whole window ([`PidSeries::preferred`]).
#[derive(Debug, Default)]
pub struct ProcessWindows {
    /// The newest sample added.
    scanned_to: Option<Timestamp>,
    /// A handful of PIDs per device: a linear search beats hashing.
    pids: Vec<PidSeries>,
}

/// One process's figures in the window, oldest first; a sample that did
/// not report a figure adds no point to it.
#[derive(Debug, Default)]
pub struct PidSeries {
    pub pid: u32,
    allocated: Vec<(Timestamp, u64)>,
    used: Vec<(Timestamp, u64)>,
}

impl PidSeries {
    /// The figure a leak follows, and its series: allocator `allocated`
    /// when any sample reports allocator statistics (NVML usage includes a
    /// cache that grows and stays by design), NVML usage when any reports
    /// that, `None` when neither is known.
    pub fn preferred(&self) -> Option<(ProcessMetric, &[(Timestamp, u64)])> {
        if !self.allocated.is_empty() {
            Some((ProcessMetric::AllocatorAllocated, &self.allocated))
        } else if !self.used.is_empty() {
            Some((ProcessMetric::NvmlUsed, &self.used))
        } else {
            None
        }
    }
}

impl ProcessWindows {
    /// Where the samples to add next begin: just after the newest one
    /// added, or `from` for a window never filled (or left behind).
    pub fn resume_at(&self, from: Timestamp) -> Timestamp {
        self.scanned_to
            .map_or(from, |scanned| scanned.saturating_add(std::time::Duration::from_millis(1)))
            .max(from)
    }

    /// Adds one slow-tier sample newer than every one added before. A
    /// sample whose process list could not be read adds nothing.
    pub fn add(&mut self, sample: &SlowPoint) {
        let at = sample.at();
        self.scanned_to = Some(self.scanned_to.map_or(at, |scanned| scanned.max(at)));
        for process in sample.processes().into_iter().flatten() {
            let slot = match self.pids.iter().position(|entry| entry.pid == process.pid) {
                Some(slot) => slot,
                None => {
                    self.pids.push(PidSeries { pid: process.pid, ..PidSeries::default() });
                    self.pids.len() - 1
                }
            };
            let Some(entry) = self.pids.get_mut(slot) else { continue };
            // While a process has allocator points the leak follows them
            // (`preferred`), so its NVML series would never be read: not
            // keeping it halves what a reporting process costs (two series
            // of one window each, 512 of them at 8 × 64).
            if let Some(stats) = process.allocator() {
                if entry.allocated.is_empty() {
                    entry.used = Vec::new();
                }
                entry.allocated.push((at, stats.allocated_bytes));
            } else if entry.allocated.is_empty()
                && let Some(used) = process.used_bytes()
            {
                entry.used.push((at, used));
            }
        }
    }

    /// Drops the points older than `from`, and the processes left with
    /// none: what is kept stays bounded by one window.
    pub fn trim(&mut self, from: Timestamp) {
        for entry in &mut self.pids {
            for series in [&mut entry.allocated, &mut entry.used] {
                let old = series.partition_point(|&(at, _)| at < from);
                series.drain(..old);
            }
        }
        self.pids.retain(|entry| !(entry.allocated.is_empty() && entry.used.is_empty()));
    }

    /// The processes with a figure in the window, in the order first seen.
    pub fn processes(&self) -> impl Iterator<Item = &PidSeries> {
        self.pids.iter()
    }
}

/// What a monotonic counter gained from `previous` to `current`; a drop
/// means the process restarted its counters, so the new value counts in full.
pub fn counter_step(previous: u64, current: u64) -> u64 {
    if current >= previous { current - previous } else { current }
}

#[cfg(test)]
mod tests;
