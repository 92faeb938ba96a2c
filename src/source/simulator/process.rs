//! Simulated GPU processes and the building blocks every scenario is made of:
//! a per-device context, PyTorch processes whose allocator numbers are
//! consistent by construction, opaque (non-PyTorch) processes, and the steady
//! inference and training workloads scenarios place on their quiet GPUs.
//!
//! Owns: the memory layout of one process (allocator + "outside the allocator").
//! Depends on: `model`, and the simulator's `noise` and `devices`. Knows
//! nothing of scenario timelines.

use super::devices::{GpuModel, MIB};
use super::noise::{self, Stream};
use crate::model::{AllocatorStats, ProcessInfo, SharedStr};

const SECOND_MS: u64 = 1_000;

/// Upper bound of device memory no process accounts for (see [`Gpu::unattributed`]).
pub(super) const UNATTRIBUTED_MAX: u64 = 6 * MIB;

/// One simulated device at one scenario time: everything a workload needs to
/// derive its numbers.
#[derive(Clone, Copy, Debug)]
pub(super) struct Gpu {
    pub seed: u64,
    pub index: u32,
    pub gpus: u32,
    pub model: &'static GpuModel,
    /// Milliseconds since the scenario's origin.
    pub t_ms: u64,
}

impl Gpu {
    pub fn capacity(&self) -> u64 {
        self.model.capacity_bytes()
    }

    /// The whole second the time falls in: memory noise changes once a
    /// second, which is how often allocations visibly shift at 1 Hz sampling
    /// and keeps both tiers consistent at any fast-tier rate.
    pub fn second(&self) -> u64 {
        self.t_ms / SECOND_MS
    }

    /// Noise in `[-1, 1)` for this device, a process slot and a time step.
    pub fn noise(&self, stream: Stream, slot: u32, step: u64) -> f64 {
        noise::symmetric(self.seed, stream, &[u64::from(self.index), u64::from(slot), step])
    }

    /// Noise in `[0, 1)` for this device, a process slot and a time step.
    pub fn unit(&self, stream: Stream, slot: u32, step: u64) -> f64 {
        noise::unit(self.seed, stream, &[u64::from(self.index), u64::from(slot), step])
    }

    /// A host PID for a process slot: seeded, distinct across devices and slots.
    pub fn pid(&self, slot: u32) -> u32 {
        let base = noise::hash(self.seed, Stream::Pid, &[]) % 3_000_000;
        // Offsets stay below 8 × 1000 + 16 × 37, so no two (device, slot)
        // pairs collide and every PID stays within Linux's default pid_max.
        let offset = self.index.saturating_mul(1_000).saturating_add(slot.saturating_mul(37));
        u32::try_from(base).unwrap_or(0).saturating_add(1_000).saturating_add(offset)
    }

    /// CUDA context of a process slot: 300–550 MiB, fixed for its lifetime.
    pub fn context_bytes(&self, slot: u32) -> u64 {
        let extra =
            noise::hash(self.seed, Stream::Context, &[u64::from(self.index), u64::from(slot)]);
        (300 + extra % 251) * MIB
    }

    /// Memory the driver counts as used but no listed process holds (e.g. a
    /// process in another container the driver does not report): 2–6 MiB.
    pub fn unattributed(&self) -> u64 {
        let share = self.unit(Stream::Unattributed, 0, self.second());
        2 * MIB + noise::fraction_of(UNATTRIBUTED_MAX - 2 * MIB, share)
    }
}

/// A process as a scenario describes it at one instant.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SimProcess {
    pub pid: u32,
    pub name: &'static str,
    pub used_bytes: u64,
    pub allocator: Option<AllocatorStats>,
}

impl SimProcess {
    /// A process that does not report allocator statistics.
    pub fn opaque(pid: u32, name: &'static str, used_bytes: u64) -> Self {
        Self { pid, name, used_bytes, allocator: None }
    }

    /// The process as a reading lists it, named `name` (its [`Self::name`],
    /// made once by the simulator and shared sample after sample).
    pub fn to_info(&self, name: SharedStr) -> ProcessInfo {
        ProcessInfo {
            pid: self.pid,
            name: Some(name),
            used_bytes: Some(self.used_bytes),
            allocator: self.allocator,
            details: Default::default(),
        }
    }
}

/// The memory of a PyTorch process, as a scenario thinks of it. [`Torch::build`]
/// turns it into NVML + allocator numbers that satisfy every invariant.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Torch {
    pub allocated: u64,
    pub reserved: u64,
    /// Share of the allocator cache (`reserved − allocated`) that is split
    /// blocks `empty_cache()` cannot return.
    pub fragmented_share: f64,
    /// Blocks freed by Python but still awaiting stream synchronisation.
    pub pending_free: u64,
    /// CUDA context, cuBLAS/cuDNN workspaces, NCCL: NVML sees it, the
    /// allocator does not.
    pub outside: u64,
    pub alloc_retries: u64,
    pub ooms: u64,
}

impl Torch {
    pub fn build(self, pid: u32, name: &'static str) -> SimProcess {
        let reserved = self.reserved;
        // Scenarios compute allocated and reserved separately, with noise;
        // clamping here makes the invariants hold whatever they computed.
        let allocated = self.allocated.min(reserved);
        let cache = reserved - allocated;
        let stats = AllocatorStats {
            allocated_bytes: allocated,
            reserved_bytes: reserved,
            active_bytes: allocated.saturating_add(self.pending_free).min(reserved),
            inactive_split_bytes: noise::fraction_of(cache, self.fragmented_share),
            alloc_retries: self.alloc_retries,
            ooms: self.ooms,
            interval: None,
        };
        SimProcess {
            pid,
            name,
            used_bytes: reserved.saturating_add(self.outside),
            allocator: Some(stats),
        }
    }
}

/// An inference server holding a flat working set: weights plus a
/// pre-sized KV cache (≈ 55 % of capacity) whose live part moves a little
/// with the requests in flight. Its utilization is [`INFERENCE_LOAD`].
pub(super) fn inference_server(gpu: &Gpu, slot: u32) -> SimProcess {
    let capacity = gpu.capacity();
    let second = gpu.second();
    let base = noise::fraction_of(capacity, 0.55);
    let reserved = base.saturating_add(noise::fraction_of(capacity, 0.03));
    let allocated = noise::jitter(
        base,
        noise::fraction_of(capacity, 0.004),
        gpu.noise(Stream::Allocated, slot, second),
    );
    Torch {
        allocated,
        reserved,
        fragmented_share: 0.3,
        pending_free: 64 * MIB,
        outside: gpu.context_bytes(slot).saturating_add(180 * MIB),
        ..Torch::default()
    }
    .build(gpu.pid(slot), "python3")
}

pub(super) const INFERENCE_LOAD: f64 = 0.55;

/// One data-parallel training rank in its steady state: allocated swings
/// within each iteration (activations come and go) but reserved is flat.
/// Its utilization is [`TRAINING_LOAD`].
pub(super) fn training_rank(gpu: &Gpu, slot: u32) -> SimProcess {
    training_rank_memory(gpu, slot).build(gpu.pid(slot), "pt_main_thread")
}

/// The memory of [`training_rank`], for scenarios that modify it.
pub(super) fn training_rank_memory(gpu: &Gpu, slot: u32) -> Torch {
    let capacity = gpu.capacity();
    let second = gpu.second();
    let base = noise::fraction_of(capacity, 0.62);
    Torch {
        allocated: noise::jitter(
            base,
            noise::fraction_of(capacity, 0.02),
            gpu.noise(Stream::Allocated, slot, second),
        ),
        reserved: noise::fraction_of(capacity, 0.70),
        fragmented_share: 0.5,
        pending_free: 256 * MIB,
        // NCCL buffers and cuBLAS workspaces on top of the context.
        outside: gpu.context_bytes(slot).saturating_add(900 * MIB),
        ..Torch::default()
    }
}

pub(super) const TRAINING_LOAD: f64 = 0.92;

#[cfg(test)]
mod tests {
    use super::super::devices::{A100_40GB, H100_80GB};
    use super::*;

    fn gpu(index: u32, t_ms: u64) -> Gpu {
        Gpu { seed: 9, index, gpus: 8, model: &H100_80GB, t_ms }
    }

    #[test]
    fn torch_build_clamps_into_a_consistent_state() {
        let process = Torch {
            allocated: 10 * MIB,
            reserved: 8 * MIB,
            fragmented_share: 3.0,
            pending_free: u64::MAX,
            outside: 400 * MIB,
            alloc_retries: 2,
            ooms: 1,
        }
        .build(7, "python3");
        let stats = process.allocator.unwrap();
        assert!(stats.is_consistent(), "{stats:?}");
        assert_eq!(stats.allocated_bytes, 8 * MIB);
        assert_eq!(process.used_bytes, 408 * MIB);
    }

    #[test]
    fn pids_are_distinct_across_devices_and_slots() {
        let mut pids: Vec<u32> =
            (0..8).flat_map(|index| (0..16).map(move |slot| gpu(index, 0).pid(slot))).collect();
        let count = pids.len();
        pids.sort_unstable();
        pids.dedup();
        assert_eq!(pids.len(), count);
        assert!(pids.iter().all(|&pid| pid < 4_194_304));
    }

    #[test]
    fn contexts_and_unattributed_stay_in_their_documented_ranges() {
        for t_ms in (0..100_000).step_by(997) {
            let gpu = gpu(3, t_ms);
            assert!((300 * MIB..=550 * MIB).contains(&gpu.context_bytes(t_ms as u32 % 9)));
            assert!((2 * MIB..=UNATTRIBUTED_MAX).contains(&gpu.unattributed()));
        }
    }

    #[test]
    fn steady_workloads_fit_on_the_smallest_model() {
        let small = Gpu { model: &A100_40GB, ..gpu(0, 5_000) };
        for process in [inference_server(&small, 0), training_rank(&small, 0)] {
            assert!(process.used_bytes < small.capacity(), "{process:?}");
            assert!(process.allocator.unwrap().is_consistent());
        }
    }
}
