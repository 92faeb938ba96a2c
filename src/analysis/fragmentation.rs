//! Allocator cache and fragmentation: the ratios, the findings worth
//! reporting, and device totals over stored history points.
//!
//! Owns: cache ratio, split-fragmentation ratio and the external
//! fragmentation index of DESIGN.md, plus fragmentation and releasable-cache
//! findings with their remediation. The per-process split itself is
//! `accounting::process_breakdown`'s; this module reuses it so the numbers
//! can never disagree. Depends on: `model`, `history::ProcessPoint`,
//! `analysis::{accounting, pressure, remediation}`. Pure; no I/O.
//!
//! For live readings (`ProcessInfo`) the device totals are already in
//! `accounting::device_breakdown`; [`device_fragmentation`] is the same sum
//! over stored `ProcessPoint`s, which carry no `ProcessInfo`.

use serde::Serialize;

use crate::history::ProcessPoint;
use crate::model::{AllocatorStats, ProcessInfo};

use super::accounting::{self, ProcessBreakdown};
use super::pressure::PressureLevel;
use super::remediation;

/// The accounting split of one process's allocator statistics.
fn breakdown(stats: &AllocatorStats) -> Option<ProcessBreakdown> {
    // A ProcessInfo with no name or details allocates nothing; going through
    // it keeps one definition of cache and fragmented bytes.
    accounting::process_breakdown(&ProcessInfo {
        pid: 0,
        name: None,
        used_bytes: None,
        allocator: Some(*stats),
        details: Default::default(),
    })
}

/// `(reserved − allocated) / reserved`; `None` when nothing is reserved.
pub fn cache_ratio(stats: &AllocatorStats) -> Option<f64> {
    breakdown(stats)?.cache_ratio
}

/// `inactive_split / reserved`; `None` when nothing is reserved.
pub fn split_fragmentation_ratio(stats: &AllocatorStats) -> Option<f64> {
    breakdown(stats)?.fragmentation_ratio
}

/// `1 − largest_free_block / total_free`, from an allocator snapshot
/// summary: 0 when all free memory is one block, near 1 when it is dust.
/// `None` when nothing is free, or when the block is larger than the total
/// (an inconsistent report says nothing).
pub fn external_fragmentation_index(largest_free_block: u64, total_free: u64) -> Option<f64> {
    if total_free == 0 || largest_free_block > total_free {
        return None;
    }
    Some(1.0 - largest_free_block as f64 / total_free as f64)
}

/// When fragmentation is worth a finding. Defaults match the
/// `allocator_fragmentation_high` alert rule's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FragmentationThresholds {
    /// Split-fragmentation ratio must be above this (default 0.30).
    pub min_ratio: f64,
    /// Only processes reserving at least this much (default 2 GiB): a
    /// high ratio of a small pool wastes little.
    pub min_reserved_bytes: u64,
}

impl Default for FragmentationThresholds {
    fn default() -> Self {
        Self { min_ratio: 0.30, min_reserved_bytes: 2 << 30 }
    }
}

/// A process whose cache is largely in split pieces `empty_cache()` cannot
/// return.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FragmentationFinding {
    pub pid: u32,
    pub reserved_bytes: u64,
    pub inactive_split_bytes: u64,
    /// `reserved − allocated`.
    pub cache_bytes: u64,
    /// `inactive_split / reserved`.
    pub ratio: f64,
    pub remediation: &'static str,
}

/// A finding when the ratio is above and the pool at least the thresholds.
pub fn fragmentation_finding(
    pid: u32,
    stats: &AllocatorStats,
    thresholds: &FragmentationThresholds,
) -> Option<FragmentationFinding> {
    let parts = breakdown(stats)?;
    let ratio = parts.fragmentation_ratio?;
    if ratio <= thresholds.min_ratio || stats.reserved_bytes < thresholds.min_reserved_bytes {
        return None;
    }
    Some(FragmentationFinding {
        pid,
        reserved_bytes: stats.reserved_bytes,
        inactive_split_bytes: parts.fragmented_bytes,
        cache_bytes: parts.allocator_cache_bytes,
        ratio,
        remediation: remediation::FRAGMENTATION,
    })
}

/// When a releasable cache is worth a finding.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CacheThresholds {
    /// Releasable bytes must be at least this (default 2 GiB).
    pub min_releasable_bytes: u64,
    /// The device must be at least this pressed (default `High`): a big
    /// cache on a roomy device costs nobody anything and speeds the owner up.
    pub min_pressure: PressureLevel,
}

impl Default for CacheThresholds {
    fn default() -> Self {
        Self { min_releasable_bytes: 2 << 30, min_pressure: PressureLevel::High }
    }
}

/// A process holding cache it could give back while the device is short.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheFinding {
    pub pid: u32,
    pub reserved_bytes: u64,
    pub cache_bytes: u64,
    /// `cache − inactive_split`: what `empty_cache()` would return.
    pub releasable_bytes: u64,
    /// `(reserved − allocated) / reserved`.
    pub cache_ratio: f64,
    pub remediation: &'static str,
}

/// A finding when the releasable cache and the device pressure both reach
/// the thresholds.
pub fn releasable_cache_finding(
    pid: u32,
    stats: &AllocatorStats,
    device_pressure: PressureLevel,
    thresholds: &CacheThresholds,
) -> Option<CacheFinding> {
    if device_pressure < thresholds.min_pressure {
        return None;
    }
    let parts = breakdown(stats)?;
    if parts.releasable_bytes < thresholds.min_releasable_bytes {
        return None;
    }
    Some(CacheFinding {
        pid,
        reserved_bytes: stats.reserved_bytes,
        cache_bytes: parts.allocator_cache_bytes,
        releasable_bytes: parts.releasable_bytes,
        cache_ratio: parts.cache_ratio?,
        remediation: remediation::RELEASE_CACHE,
    })
}

/// Allocator totals of one device, across processes reporting statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceFragmentation {
    pub processes_with_allocator_stats: usize,
    pub reserved_bytes: u64,
    pub cache_bytes: u64,
    pub fragmented_bytes: u64,
    pub releasable_bytes: u64,
}

impl DeviceFragmentation {
    /// `fragmented / reserved` over the device; `None` when nothing is
    /// reserved (including when no process reports statistics).
    pub fn fragmentation_ratio(&self) -> Option<f64> {
        (self.reserved_bytes > 0).then(|| self.fragmented_bytes as f64 / self.reserved_bytes as f64)
    }
}

/// Sums the allocator split over one stored sample's processes.
pub fn device_fragmentation(processes: &[ProcessPoint]) -> DeviceFragmentation {
    processes
        .iter()
        .filter_map(|process| process.allocator())
        .filter_map(|stats| breakdown(&stats).map(|parts| (stats.reserved_bytes, parts)))
        .fold(DeviceFragmentation::default(), |mut sum, (reserved, parts)| {
            sum.processes_with_allocator_stats += 1;
            sum.reserved_bytes = sum.reserved_bytes.saturating_add(reserved);
            sum.cache_bytes = sum.cache_bytes.saturating_add(parts.allocator_cache_bytes);
            sum.fragmented_bytes = sum.fragmented_bytes.saturating_add(parts.fragmented_bytes);
            sum.releasable_bytes = sum.releasable_bytes.saturating_add(parts.releasable_bytes);
            sum
        })
}

#[cfg(test)]
mod tests;
