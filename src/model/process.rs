//! One process on one device: its identity (kind, command line, container,
//! pod, vramd's own role), per-process utilization and the PyTorch
//! caching-allocator statistics and snapshot summary a workload reports.
//!
//! The identity strings are [`SharedStr`]: a sample repeats its process's
//! identity, and a copy of one is a reference count, not an allocation.
//!
//! Depends only on `model`'s bounded-input serde helpers and `SharedStr`.

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

use super::driver::DriverStats;
use super::readings::percent;
use super::shared_str::SharedStr;

/// One process holding memory on one device.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessInfo {
    /// Host PID, as the driver reports it.
    pub pid: u32,
    /// Short process name (`comm`), when known.
    pub name: Option<SharedStr>,
    /// Device memory the driver attributes to the process; absent when the
    /// driver cannot say (e.g. without privileges, or under MIG).
    pub used_bytes: Option<u64>,
    /// PyTorch caching-allocator statistics, for processes that report them.
    pub allocator: Option<AllocatorStats>,
    /// Who the process is: kind of GPU work, command line, container.
    #[serde(default, skip_serializing_if = "ProcessDetails::is_empty")]
    pub details: ProcessDetails,
}

impl ProcessInfo {
    /// The order the per-device process cap keeps processes in: most memory
    /// first, unknown usage last, then by PID. The NVML source reads /proc
    /// only for the processes this order keeps.
    pub fn cap_order(a: &ProcessInfo, b: &ProcessInfo) -> std::cmp::Ordering {
        Self::cap_order_of((a.used_bytes, a.pid), (b.used_bytes, b.pid))
    }

    /// [`ProcessInfo::cap_order`] on (usage, PID) pairs: for a source that
    /// cuts its listing before it builds any `ProcessInfo`.
    pub fn cap_order_of(a: (Option<u64>, u32), b: (Option<u64>, u32)) -> std::cmp::Ordering {
        b.0.cmp(&a.0).then(a.1.cmp(&b.1))
    }
}

/// Identity of a process beyond its PID and name; each field absent when
/// unknown (the process exited, no permission, not in a container).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessDetails {
    pub kind: Option<ProcessKind>,
    /// Command line, truncated to `nvml.max_cmdline_bytes`.
    #[schema(value_type = Option<String>)]
    pub cmdline: Option<SharedStr>,
    #[schema(value_type = Option<String>)]
    pub container_id: Option<SharedStr>,
    /// Kubernetes pod UID, from the process's cgroup.
    #[schema(value_type = Option<String>)]
    pub pod_uid: Option<SharedStr>,
    /// The PID inside the process's own PID namespace (`NSpid`).
    pub namespace_pid: Option<u32>,
    /// SM (compute) utilization of this process over the latest slow-tier
    /// period, 0–100 (NVML process utilization). 0 when the driver had
    /// samples of other processes but none of this one; absent when the
    /// driver has no per-process utilization.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "percent")]
    pub sm_utilization_percent: Option<u32>,
    /// Memory-bandwidth utilization of this process, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "percent")]
    pub memory_utilization_percent: Option<u32>,
    /// What vramd knows the process to be beyond a workload: `probe` for
    /// vramd's own CUDA probe child (never attributed to a pod, never
    /// assessed for leaks).
    pub role: Option<ProcessRole>,
    /// Kubernetes pod name: from the container runtime (CRI) by container
    /// ID, else from the process's allocator report.
    #[schema(value_type = Option<String>)]
    pub pod: Option<SharedStr>,
    /// Kubernetes namespace of [`Self::pod`].
    #[schema(value_type = Option<String>)]
    pub namespace: Option<SharedStr>,
    /// Container name within [`Self::pod`].
    #[schema(value_type = Option<String>)]
    pub container: Option<SharedStr>,
    /// Summary of the process's last allocator snapshot, when it reports one.
    pub snapshot: Option<SnapshotSummary>,
    /// The allocator's own ceiling, when it preallocated a pool (JAX's
    /// `bytes_limit`): the part of the pool not in use is free to that
    /// process, so a full-looking GPU is not pressure by itself.
    pub pool_limit_bytes: Option<u64>,
    /// What the driver trace saw the process allocate and free through
    /// `libcuda` (`[driver_trace]`), on the one device it is attributed to.
    /// Shared: a sample repeats it without copying.
    #[schema(value_type = Option<DriverStats>)]
    pub driver: Option<std::sync::Arc<DriverStats>>,
}

/// What a workload's `torch.cuda.memory_snapshot()` says about one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotSummary {
    #[schema(maximum = 9007199254740992_u64)]
    pub segments: u64,
    #[schema(maximum = 9007199254740992_u64)]
    pub total_bytes: u64,
    #[schema(maximum = 9007199254740992_u64)]
    pub allocated_bytes: u64,
    #[schema(maximum = 9007199254740992_u64)]
    pub largest_free_block_bytes: u64,
}

impl ProcessDetails {
    pub fn is_empty(&self) -> bool {
        *self == ProcessDetails::default()
    }

    /// vramd's own probe child: not a workload.
    pub fn is_probe(&self) -> bool {
        self.role == Some(ProcessRole::Probe)
    }
}

/// A process vramd recognises as its own rather than a workload's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ProcessRole {
    /// The CUDA probe child (`vramd-probe`), alive for about a second.
    Probe,
}

/// How a process uses the GPU, as NVML lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ProcessKind {
    Compute,
    Graphics,
    /// Listed both as a compute and as a graphics process.
    ComputeAndGraphics,
    /// A client of the Multi-Process Service.
    Mps,
}

/// The subset of `torch.cuda.memory_stats()` the accounting model uses.
///
/// Invariant kept by every source: `allocated <= reserved`,
/// `active <= reserved`, `inactive_split <= reserved - allocated`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AllocatorStats {
    /// `allocated_bytes.all.current`: live tensors.
    pub allocated_bytes: u64,
    /// `reserved_bytes.all.current`: segments the allocator holds from CUDA.
    pub reserved_bytes: u64,
    /// `active_bytes.all.current`: blocks in use, including not yet freed
    /// blocks awaiting stream synchronisation.
    pub active_bytes: u64,
    /// `inactive_split_bytes.all.current`: free pieces of split segments,
    /// which `empty_cache()` cannot return.
    pub inactive_split_bytes: u64,
    /// `num_alloc_retries`: times the allocator flushed its cache to satisfy
    /// an allocation. Monotonic for the life of the process.
    pub alloc_retries: u64,
    /// `num_ooms`: out-of-memory errors raised. Monotonic.
    pub ooms: u64,
    /// The lowest and highest `allocated` and `reserved` over the
    /// reporter's interval, where it sends them (`vramd_reporter` 0.3 on);
    /// absent from older reporters and NVML-only sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<AllocatorRange>,
}

/// The range `allocated` and `reserved` covered over one reporting
/// interval, sampled between reports (or at the training loop's step
/// hook): a training step that lasts exactly the interval is seen at every
/// phase, not at the one the timer happens to catch.
///
/// Invariant kept by every source: each minimum is at most the current
/// value, which is at most the maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AllocatorRange {
    pub allocated_min_bytes: u64,
    pub allocated_max_bytes: u64,
    pub reserved_min_bytes: u64,
    pub reserved_max_bytes: u64,
}

impl AllocatorStats {
    /// The `allocated` figure a memory floor is built from: the interval's
    /// minimum where the reporter sent one, else the current value (one
    /// point, whose phase in a training step is luck).
    pub fn floor_allocated_bytes(&self) -> u64 {
        self.interval.map_or(self.allocated_bytes, |range| range.allocated_min_bytes)
    }

    /// Whether the invariants documented on the type hold.
    pub fn is_consistent(&self) -> bool {
        self.allocated_bytes <= self.reserved_bytes
            && self.active_bytes <= self.reserved_bytes
            && self.inactive_split_bytes <= self.reserved_bytes - self.allocated_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_consistency_rejects_allocated_above_reserved() {
        let mut stats = AllocatorStats {
            allocated_bytes: 10,
            reserved_bytes: 20,
            active_bytes: 12,
            inactive_split_bytes: 5,
            alloc_retries: 0,
            ooms: 0,
            interval: None,
        };
        assert!(stats.is_consistent());
        stats.allocated_bytes = 30;
        assert!(!stats.is_consistent());
    }
}
