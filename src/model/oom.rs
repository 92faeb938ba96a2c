//! An allocator out-of-memory event: what a workload's allocator held at
//! the moment one allocation failed, as its reporter saw it.
//!
//! Owns: [`OomEvent`] and the judgement of its numbers ([`OomCause`]):
//! fragmentation (enough memory was free, in pieces too small) or real
//! exhaustion. Plain data shared by intake, history, traces, analysis and
//! the API; depends on nothing outside `model`.

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

use super::{AllocatorStats, SnapshotSummary, Timestamp};

/// One OOM as stored: validated, stamped with the source time it arrived
/// at, and joined (when it could be) to the NVML process that raised it.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OomEvent {
    /// Assigned by the daemon, increasing from 1 within a run (a replay
    /// keeps the recorded ones).
    #[schema(example = 7)]
    pub id: u64,
    /// The device's UUID as NVML reports it.
    #[schema(example = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20")]
    pub uuid: String,
    /// The device index as the reporting process sees it.
    pub index: u32,
    /// The reporting process's PID (inside its container).
    pub reporter_pid: u32,
    #[schema(max_length = 253)]
    pub hostname: String,
    /// The host PID it joined; absent when no listed process matched.
    pub pid: Option<u32>,
    /// When the allocation failed, by the reporter's clock.
    #[serde(with = "super::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// The device's newest sample time when the event arrived: the time the
    /// analysis judges it by (time is data: never the wall clock).
    #[serde(with = "super::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub received_at: Timestamp,
    /// The allocation that failed.
    pub requested_bytes: u64,
    /// Device memory free at that moment (the observer's `device_free`).
    pub device_free_bytes: Option<u64>,
    /// The allocator's largest free block (from a snapshot, or JAX's
    /// `largest_free_block_bytes`).
    pub largest_free_block_bytes: Option<u64>,
    /// `memory_stats()` at that moment, the keys vramd reads.
    pub stats: Option<AllocatorStats>,
    pub snapshot: Option<SnapshotSummary>,
    /// Where the reporter wrote its allocator snapshot (its own file system).
    #[schema(max_length = 4096)]
    pub snapshot_path: Option<String>,
    /// What the driver trace knew, for an OOM it raised (`hostname`
    /// `driver-trace`: no reporter speaks for the process).
    pub driver: Option<DriverOomEvidence>,
}

/// The driver trace's evidence of an OOM: what the failing process held
/// through the driver on the device, and what every other process on the
/// device held, as the trace and NVML last saw them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DriverOomEvidence {
    /// Bytes the process held through traced allocations on the device
    /// when the allocation failed.
    pub held_bytes: u64,
    /// Every other process the device listed then.
    pub others: Vec<ProcessHolding>,
}

/// What one process held on a device.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessHolding {
    pub pid: u32,
    /// NVML's figure for the process.
    pub used_bytes: Option<u64>,
    /// What it held through traced allocations, when the trace follows it.
    pub driver_held_bytes: Option<u64>,
}

/// Why an allocation failed, judged from the event's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum OomCause {
    /// Enough memory was free in total, but no free block was large enough.
    Fragmentation,
    /// Less was free, in the cache and on the device together, than asked.
    Exhaustion,
    /// The event lacks the figures to tell.
    Unknown,
}

impl OomEvent {
    /// Memory free to this allocator at the OOM: the device's free memory
    /// plus the allocator's own cache (reserved but not allocated); `None`
    /// when neither is known.
    pub fn free_bytes(&self) -> Option<u64> {
        let cache = self.stats.map(|stats| stats.reserved_bytes - stats.allocated_bytes);
        match (self.device_free_bytes, cache) {
            (None, None) => None,
            (free, cache) => Some(free.unwrap_or(0).saturating_add(cache.unwrap_or(0))),
        }
    }

    /// The largest block one allocation could have had: the larger of the
    /// allocator's largest free block and the device's free memory.
    fn largest_block(&self) -> Option<u64> {
        let block = self
            .largest_free_block_bytes
            .or_else(|| self.snapshot.map(|snapshot| snapshot.largest_free_block_bytes));
        match (block, self.device_free_bytes) {
            (None, None) => None,
            (block, free) => Some(block.unwrap_or(0).max(free.unwrap_or(0))),
        }
    }

    pub fn cause(&self) -> OomCause {
        match (self.free_bytes(), self.largest_block()) {
            (Some(free), Some(largest))
                if free >= self.requested_bytes && largest < self.requested_bytes =>
            {
                OomCause::Fragmentation
            }
            (Some(free), _) if free < self.requested_bytes => OomCause::Exhaustion,
            // Enough free and a large enough block, yet it failed: the
            // allocator's own limit (set_per_process_memory_fraction) or a
            // race with another process; the numbers do not say more.
            _ => OomCause::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn event(requested: u64, device_free: Option<u64>, largest: Option<u64>) -> OomEvent {
        OomEvent {
            id: 1,
            uuid: "GPU-0".into(),
            index: 0,
            reporter_pid: 1,
            hostname: "h".into(),
            pid: None,
            at: Timestamp::from_unix_millis(1_000),
            received_at: Timestamp::from_unix_millis(1_000),
            requested_bytes: requested,
            device_free_bytes: device_free,
            largest_free_block_bytes: largest,
            stats: Some(AllocatorStats {
                allocated_bytes: 6_000 * MIB,
                reserved_bytes: 8_000 * MIB,
                active_bytes: 6_000 * MIB,
                inactive_split_bytes: 1_500 * MIB,
                alloc_retries: 1,
                ooms: 1,
                interval: None,
            }),
            snapshot: None,
            snapshot_path: None,
            driver: None,
        }
    }

    #[test]
    fn enough_free_in_pieces_too_small_is_fragmentation() {
        let oom = event(1_024 * MIB, Some(100 * MIB), Some(256 * MIB));
        assert_eq!(oom.cause(), OomCause::Fragmentation);
        assert_eq!(oom.free_bytes(), Some(2_100 * MIB));
    }

    #[test]
    fn less_free_than_requested_is_exhaustion() {
        let oom = event(4_096 * MIB, Some(100 * MIB), Some(1_024 * MIB));
        assert_eq!(oom.cause(), OomCause::Exhaustion);
    }

    #[test]
    fn without_figures_the_cause_is_unknown() {
        let mut oom = event(MIB, None, None);
        oom.stats = None;
        assert_eq!(oom.cause(), OomCause::Unknown);
    }
}
