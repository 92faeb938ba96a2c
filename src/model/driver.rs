//! What the driver trace saw one process do through `libcuda`'s allocation
//! and free calls (the `driver_trace` module keeps it; a process's
//! `details.driver` carries it to history, `/metrics` and REST).
//!
//! Depends on nothing else in `model`.

use serde::{Deserialize, Serialize};

/// Upper bounds (bytes, inclusive) of the allocation-size histogram's
/// buckets; a last bucket holds everything larger.
pub const SIZE_BUCKETS: [u64; 8] =
    [64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4 << 30, 16 << 30];

/// One process's driver-level allocations since the trace began. Calls the
/// process made before the trace attached are unseen: their frees count as
/// `unmatched_frees`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DriverStats {
    /// Bytes held through traced allocations not freed yet
    /// (`cuMemAlloc*` pointers and `cuMemCreate` physical allocations).
    pub allocated_bytes: u64,
    /// Allocations held now (counted in `allocated_bytes`).
    pub live_allocations: u64,
    /// Allocation calls that succeeded.
    pub allocations: u64,
    /// Free and release calls that succeeded (`unmatched_frees` among them).
    pub frees: u64,
    /// Allocation calls that failed, whatever the error.
    pub allocation_failures: u64,
    /// Of those, the ones that failed with `CUDA_ERROR_OUT_OF_MEMORY`.
    pub out_of_memory_failures: u64,
    /// Out-of-memory failures followed, within `driver_trace.oom_retry_window`,
    /// by a successful allocation at least as large: a caching allocator
    /// that flushed its cache and retried (PyTorch's `num_alloc_retries`).
    pub allocation_retries: u64,
    /// Successful frees of an allocation the trace never saw (made before
    /// it attached, or not kept at `driver_trace.max_live_allocations`).
    pub unmatched_frees: u64,
    /// Successful allocations not kept at `driver_trace.max_live_allocations`:
    /// their bytes are missing from `allocated_bytes`.
    pub untracked_allocations: u64,
    /// Successful allocations by size: `size_buckets[i]` counts those of at
    /// most 64 KiB, 1 MiB, 16 MiB, 64 MiB, 256 MiB, 1 GiB, 4 GiB, 16 GiB,
    /// and larger (the last).
    pub size_buckets: Vec<u64>,
}

impl DriverStats {
    /// Adds another part of the same process's statistics (those of
    /// another device, or of calls on no known device) to these.
    pub fn absorb(&mut self, other: &DriverStats) {
        self.allocated_bytes = self.allocated_bytes.saturating_add(other.allocated_bytes);
        self.live_allocations = self.live_allocations.saturating_add(other.live_allocations);
        self.allocations = self.allocations.saturating_add(other.allocations);
        self.frees = self.frees.saturating_add(other.frees);
        self.allocation_failures =
            self.allocation_failures.saturating_add(other.allocation_failures);
        self.out_of_memory_failures =
            self.out_of_memory_failures.saturating_add(other.out_of_memory_failures);
        self.allocation_retries = self.allocation_retries.saturating_add(other.allocation_retries);
        self.unmatched_frees = self.unmatched_frees.saturating_add(other.unmatched_frees);
        self.untracked_allocations =
            self.untracked_allocations.saturating_add(other.untracked_allocations);
        if self.size_buckets.len() < other.size_buckets.len() {
            self.size_buckets.resize(other.size_buckets.len(), 0);
        }
        for (mine, theirs) in self.size_buckets.iter_mut().zip(&other.size_buckets) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// The histogram bucket of an allocation of `bytes`.
    pub fn bucket(bytes: u64) -> usize {
        SIZE_BUCKETS.iter().position(|bound| bytes <= *bound).unwrap_or(SIZE_BUCKETS.len())
    }
}
