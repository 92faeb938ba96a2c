//! Where a device's memory went, per DESIGN.md's accounting table.
//!
//! Device: `total = driver_reserved + used + free`; `used` splits into the
//! processes' usage plus an unattributed rest. A process with allocator
//! statistics splits further into live tensors, allocator cache (of which
//! fragmented and releasable) and memory outside the allocator.
//!
//! The ratios of DESIGN.md come from here alone, so the API, `/metrics` and
//! the fragmentation rule can never disagree.

use serde::Serialize;

use super::snapshot::ProcessFacts;
use crate::model::{AllocatorStats, MemoryInfo, ProcessInfo};

/// The split of one process's memory. Parts that cannot be known are absent.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ProcessBreakdown {
    /// `allocated`: live tensors.
    pub live_tensors_bytes: u64,
    /// `reserved - allocated`: held by the caching allocator, not in tensors.
    pub allocator_cache_bytes: u64,
    /// `inactive_split`: the part of the cache in free pieces of split
    /// segments; `empty_cache()` cannot return it.
    pub fragmented_bytes: u64,
    /// `cache - fragmented`: what `empty_cache()` could give back.
    pub releasable_bytes: u64,
    /// NVML process usage minus `reserved`: CUDA context, cuBLAS/cuDNN
    /// workspaces, NCCL, other libraries. Absent without NVML usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_allocator_bytes: Option<u64>,
    /// `(reserved - allocated) / reserved`; absent when nothing is reserved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_ratio: Option<f64>,
    /// `inactive_split / reserved`; absent when nothing is reserved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fragmentation_ratio: Option<f64>,
}

/// Splits a process's memory; `None` when it reports no allocator stats.
pub fn process_breakdown(process: &ProcessInfo) -> Option<ProcessBreakdown> {
    let stats: AllocatorStats = process.allocator?;
    let cache = stats.reserved_bytes.saturating_sub(stats.allocated_bytes);
    let fragmented = stats.inactive_split_bytes.min(cache);
    let reserved = stats.reserved_bytes;
    Some(ProcessBreakdown {
        live_tensors_bytes: stats.allocated_bytes,
        allocator_cache_bytes: cache,
        fragmented_bytes: fragmented,
        releasable_bytes: cache - fragmented,
        outside_allocator_bytes: process.used_bytes.map(|used| used.saturating_sub(reserved)),
        cache_ratio: (reserved > 0).then(|| cache as f64 / reserved as f64),
        fragmentation_ratio: split_fragmentation_ratio(&stats),
    })
}

/// `inactive_split / reserved` (fragmented pieces counted only up to the
/// cache); `None` when nothing is reserved.
pub fn split_fragmentation_ratio(stats: &AllocatorStats) -> Option<f64> {
    let cache = stats.reserved_bytes.saturating_sub(stats.allocated_bytes);
    let fragmented = stats.inactive_split_bytes.min(cache);
    (stats.reserved_bytes > 0).then(|| fragmented as f64 / stats.reserved_bytes as f64)
}

/// The share of reserved memory that is fragmented, for the fragmentation
/// rule: PyTorch's `inactive_split` where the allocator splits blocks;
/// otherwise (JAX's BFC pool reports no `inactive_split`) the free pool
/// outside its largest free block, from the snapshot summary. A JAX pool
/// preallocated and mostly empty is one large free block: not fragmented.
pub fn fragmentation_ratio(
    stats: &AllocatorStats,
    snapshot: Option<&crate::model::SnapshotSummary>,
) -> Option<f64> {
    match snapshot {
        Some(snapshot) if stats.inactive_split_bytes == 0 && stats.reserved_bytes > 0 => {
            let free = stats.reserved_bytes.saturating_sub(stats.allocated_bytes);
            let outside = free.saturating_sub(snapshot.largest_free_block_bytes);
            Some(outside as f64 / stats.reserved_bytes as f64)
        }
        _ => split_fragmentation_ratio(stats),
    }
}

/// The split of a device's memory.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DeviceBreakdown {
    pub total_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_reserved_bytes: Option<u64>,
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// Sum of the listed processes' usage; absent when the process list or
    /// any process's usage is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes_bytes: Option<u64>,
    /// `used - processes`; absent under the same conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unattributed_bytes: Option<u64>,
    /// Across processes reporting allocator stats.
    pub live_tensors_bytes: u64,
    pub allocator_cache_bytes: u64,
    pub fragmented_bytes: u64,
    /// Processes that reported allocator statistics.
    pub processes_with_allocator_stats: usize,
    /// What the processes with no allocator statistics hold through the
    /// driver's allocation calls (the driver trace, docs/driver-trace.md):
    /// for PyTorch without `expandable_segments`, its allocator's
    /// `reserved`. Absent when the trace sees none of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_held_bytes: Option<u64>,
    /// Those processes' NVML usage minus `driver_held_bytes`: contexts and
    /// libraries outside any allocator. Absent under the same condition, or
    /// when one of them has no NVML usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_driver_allocations_bytes: Option<u64>,
}

/// Splits a device's memory. `processes_complete` says whether the list
/// holds every process (none cut off by the per-device cap).
pub fn device_breakdown(
    memory: &MemoryInfo,
    processes: Option<&[ProcessInfo]>,
    processes_complete: bool,
) -> DeviceBreakdown {
    let attributed = processes.filter(|_| processes_complete).and_then(|list| {
        list.iter().try_fold(0u64, |sum, process| process.used_bytes.map(|b| sum.saturating_add(b)))
    });
    let mut breakdown = DeviceBreakdown {
        total_bytes: memory.total_bytes,
        driver_reserved_bytes: memory.reserved_bytes,
        used_bytes: memory.used_bytes,
        free_bytes: memory.free_bytes,
        processes_bytes: attributed,
        unattributed_bytes: attributed.map(|sum| memory.used_bytes.saturating_sub(sum)),
        live_tensors_bytes: 0,
        allocator_cache_bytes: 0,
        fragmented_bytes: 0,
        processes_with_allocator_stats: 0,
        driver_held_bytes: None,
        outside_driver_allocations_bytes: None,
    };
    // The driver view where no reporter speaks: a reporter's statistics
    // already split the same bytes, and must not be counted twice.
    let driver_only = processes
        .into_iter()
        .flatten()
        .filter(|process| process.allocator.is_none())
        .filter_map(|process| Some((process.details.driver.as_deref()?, process.used_bytes)));
    let mut outside = Some(0u64);
    for (driver, used) in driver_only {
        let held = breakdown.driver_held_bytes.unwrap_or(0);
        breakdown.driver_held_bytes = Some(held.saturating_add(driver.allocated_bytes));
        outside = outside
            .zip(used)
            .map(|(sum, used)| sum.saturating_add(used.saturating_sub(driver.allocated_bytes)));
    }
    if breakdown.driver_held_bytes.is_some() {
        breakdown.outside_driver_allocations_bytes = outside;
    }
    for part in processes.into_iter().flatten().filter_map(process_breakdown) {
        breakdown.live_tensors_bytes =
            breakdown.live_tensors_bytes.saturating_add(part.live_tensors_bytes);
        breakdown.allocator_cache_bytes =
            breakdown.allocator_cache_bytes.saturating_add(part.allocator_cache_bytes);
        breakdown.fragmented_bytes =
            breakdown.fragmented_bytes.saturating_add(part.fragmented_bytes);
        breakdown.processes_with_allocator_stats += 1;
    }
    breakdown
}

/// The unused part of every preallocated pool (a process that reported a
/// pool limit, as JAX does): reserved less allocated. NVML counts it used,
/// yet its process can still allocate from it, so pressure and
/// `memory_high` count it free.
pub fn preallocated_free_bytes(processes: &[ProcessFacts]) -> u64 {
    pools(processes)
        .map(|(stats, _)| stats.reserved_bytes.saturating_sub(stats.allocated_bytes))
        .fold(0, u64::saturating_add)
}

/// How full the fullest preallocated pool is (`in use / limit`): such a
/// process runs out at its own limit, whatever the rest of the GPU holds.
pub fn fullest_pool_ratio(processes: &[ProcessFacts]) -> Option<f64> {
    pools(processes)
        .filter(|(_, limit)| *limit > 0)
        .map(|(stats, limit)| stats.allocated_bytes as f64 / limit as f64)
        .reduce(f64::max)
}

fn pools(processes: &[ProcessFacts]) -> impl Iterator<Item = (AllocatorStats, u64)> + '_ {
    processes.iter().filter_map(|process| Some((process.allocator?, process.pool_limit_bytes?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn torch_process(used: Option<u64>) -> ProcessInfo {
        ProcessInfo {
            pid: 7,
            name: Some("python3".into()),
            used_bytes: used,
            allocator: Some(AllocatorStats {
                allocated_bytes: 600 * MIB,
                reserved_bytes: 1_000 * MIB,
                active_bytes: 650 * MIB,
                inactive_split_bytes: 150 * MIB,
                alloc_retries: 0,
                ooms: 0,
                interval: None,
            }),
            details: Default::default(),
        }
    }

    #[test]
    fn process_splits_into_live_cache_fragments_and_outside() {
        let parts = process_breakdown(&torch_process(Some(1_500 * MIB))).unwrap();
        assert_eq!(parts.live_tensors_bytes, 600 * MIB);
        assert_eq!(parts.allocator_cache_bytes, 400 * MIB);
        assert_eq!(parts.fragmented_bytes, 150 * MIB);
        assert_eq!(parts.releasable_bytes, 250 * MIB);
        assert_eq!(parts.outside_allocator_bytes, Some(500 * MIB));
        assert_eq!(parts.cache_ratio, Some(0.4));
        assert_eq!(parts.fragmentation_ratio, Some(0.15));
    }

    #[test]
    fn ratios_are_absent_when_nothing_is_reserved() {
        let empty = AllocatorStats {
            allocated_bytes: 0,
            reserved_bytes: 0,
            active_bytes: 0,
            inactive_split_bytes: 0,
            alloc_retries: 0,
            ooms: 0,
            interval: None,
        };
        assert_eq!(split_fragmentation_ratio(&empty), None);
        let parts =
            process_breakdown(&ProcessInfo { allocator: Some(empty), ..torch_process(None) });
        assert_eq!(parts.and_then(|parts| parts.cache_ratio), None);
    }

    #[test]
    fn unknown_nvml_usage_leaves_outside_absent() {
        let parts = process_breakdown(&torch_process(None)).unwrap();
        assert_eq!(parts.outside_allocator_bytes, None);
        let plain = ProcessInfo { allocator: None, ..torch_process(Some(1)) };
        assert_eq!(process_breakdown(&plain), None);
    }

    #[test]
    fn device_unattributed_needs_a_complete_list() {
        let memory = MemoryInfo {
            total_bytes: 10_000 * MIB,
            reserved_bytes: Some(500 * MIB),
            used_bytes: 2_000 * MIB,
            free_bytes: 7_500 * MIB,
        };
        let processes = [torch_process(Some(1_500 * MIB))];
        let complete = device_breakdown(&memory, Some(&processes), true);
        assert_eq!(complete.unattributed_bytes, Some(500 * MIB));
        assert_eq!(complete.allocator_cache_bytes, 400 * MIB);
        assert_eq!(complete.processes_with_allocator_stats, 1);
        let capped = device_breakdown(&memory, Some(&processes), false);
        assert_eq!(capped.unattributed_bytes, None);
        assert_eq!(capped.fragmented_bytes, 150 * MIB, "what is listed still counts");
    }

    #[test]
    fn a_jax_pool_is_judged_by_its_largest_free_block() {
        // JAX maps bytes_in_use to allocated and its pool to reserved, with
        // no inactive_split: a preallocated, mostly empty pool is one free
        // block (no fragmentation); the same pool cut into pieces is.
        const GIB: u64 = 1 << 30;
        let jax = AllocatorStats {
            allocated_bytes: 2 * GIB,
            reserved_bytes: 60 * GIB,
            active_bytes: 2 * GIB,
            inactive_split_bytes: 0,
            alloc_retries: 0,
            ooms: 0,
            interval: None,
        };
        let summary = |largest| crate::model::SnapshotSummary {
            segments: 1,
            total_bytes: 60 * GIB,
            allocated_bytes: 2 * GIB,
            largest_free_block_bytes: largest,
        };
        assert_eq!(fragmentation_ratio(&jax, Some(&summary(58 * GIB))), Some(0.0));
        let cut = fragmentation_ratio(&jax, Some(&summary(GIB))).unwrap();
        assert!((cut - 57.0 / 60.0).abs() < 1e-9, "{cut}");
        // Without a summary it is the split ratio, as for PyTorch.
        assert_eq!(fragmentation_ratio(&jax, None), Some(0.0));
    }

    #[test]
    fn the_driver_view_counts_only_where_no_reporter_speaks() {
        let driver = |held: u64| {
            Some(std::sync::Arc::new(crate::model::DriverStats {
                allocated_bytes: held,
                ..Default::default()
            }))
        };
        let mut reported = torch_process(Some(1_500 * MIB));
        reported.details.driver = driver(1_000 * MIB);
        let mut traced = torch_process(Some(3_000 * MIB));
        traced.pid = 8;
        traced.allocator = None;
        traced.details.driver = driver(2_200 * MIB);
        let memory = MemoryInfo {
            total_bytes: 80_000 * MIB,
            reserved_bytes: None,
            used_bytes: 4_500 * MIB,
            free_bytes: 75_500 * MIB,
        };
        let both = [reported.clone(), traced];
        let breakdown = device_breakdown(&memory, Some(&both), true);
        assert_eq!(
            breakdown.driver_held_bytes,
            Some(2_200 * MIB),
            "the reporter's bytes not again"
        );
        assert_eq!(breakdown.outside_driver_allocations_bytes, Some(800 * MIB));
        assert_eq!(breakdown.processes_with_allocator_stats, 1);
        let alone = device_breakdown(&memory, Some(std::slice::from_ref(&reported)), true);
        assert_eq!((alone.driver_held_bytes, alone.outside_driver_allocations_bytes), (None, None));
    }
}
