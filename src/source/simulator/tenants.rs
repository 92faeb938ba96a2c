//! `multi-tenant`: 3–6 processes share each GPU, a mix of PyTorch jobs
//! (with allocator statistics) and opaque servers (without); on GPU 0 the
//! first one grows slowly for as long as there is room.
//!
//! Owns: the tenants' layout and the grower's dynamics. Depends on the
//! simulator's `process`, `noise` and `timeline` only.

use super::devices::{GIB, MIB};
use super::noise::{self, Stream};
use super::process::{Gpu, SimProcess, Torch, UNATTRIBUTED_MAX};
use super::timeline::{
    TENANT_GROWTH_ONSET, TENANT_GROWTH_RATE_BYTES_PER_SECOND, TENANT_HEADROOM_BYTES, Workload,
    grown, millis,
};

const ONSET_MS: u64 = millis(TENANT_GROWTH_ONSET);
const TENANT_LOAD: f64 = 0.7;

/// How many tenants a GPU has: 3–6, fixed per seed and device.
pub(super) fn tenant_count(gpu: &Gpu) -> u32 {
    let draw = noise::hash(gpu.seed, Stream::TenantCount, &[u64::from(gpu.index)]) % 4;
    3 + u32::try_from(draw).unwrap_or(0)
}

pub(super) fn workload(gpu: &Gpu) -> Workload {
    // One list, the first tenant put in front once the others are known:
    // this runs for every fast and slow sample of every device, and a
    // second list per sample was a tenth of an offline run's simulation.
    let count = tenant_count(gpu);
    let mut processes = Vec::with_capacity(count as usize);
    processes.extend((1..count).map(|slot| tenant(gpu, slot)));
    let others_used = processes.iter().fold(0u64, |sum, p| sum.saturating_add(p.used_bytes));
    processes.insert(0, first_tenant(gpu, others_used));
    Workload { processes, load: TENANT_LOAD }
}

/// A notebook-style job (slot 0); on GPU 0 it keeps more tensors alive
/// every second (a growing cache of embeddings, say) until the room left by
/// its neighbours runs out.
fn first_tenant(gpu: &Gpu, others_used: u64) -> SimProcess {
    let outside = gpu.context_bytes(0).saturating_add(200 * MIB);
    let cache = GIB;
    let base = 5 * GIB;
    let growth = if gpu.index == 0 {
        let room = gpu
            .capacity()
            .saturating_sub(others_used)
            .saturating_sub(UNATTRIBUTED_MAX)
            .saturating_sub(TENANT_HEADROOM_BYTES)
            .saturating_sub(outside)
            .saturating_sub(cache)
            .saturating_sub(base);
        grown(TENANT_GROWTH_RATE_BYTES_PER_SECOND, gpu.t_ms.saturating_sub(ONSET_MS)).min(room)
    } else {
        0
    };
    let live = base.saturating_add(growth);
    torch(gpu, 0, live, live.saturating_add(cache), 0.4, outside, "python3")
}

/// The other slots cycle through a fixed mix, so any 3 tenants include
/// both kinds.
fn tenant(gpu: &Gpu, slot: u32) -> SimProcess {
    let context = gpu.context_bytes(slot);
    match slot % 5 {
        1 => SimProcess::opaque(gpu.pid(slot), "tritonserver", 3 * GIB),
        2 => torch(gpu, slot, 3_584 * MIB, 5 * GIB, 0.6, context + 600 * MIB, "pt_main_thread"),
        3 => torch(gpu, slot, 2 * GIB, 2_560 * MIB, 0.2, context + 100 * MIB, "python3"),
        4 => SimProcess::opaque(gpu.pid(slot), "ffmpeg", 420 * MIB),
        _ => SimProcess::opaque(gpu.pid(slot), "tritonserver", 1_536 * MIB),
    }
}

/// A PyTorch tenant whose live memory wobbles by ±2 % each second.
fn torch(
    gpu: &Gpu,
    slot: u32,
    live: u64,
    reserved: u64,
    fragmented_share: f64,
    outside: u64,
    name: &'static str,
) -> SimProcess {
    let wobble = gpu.noise(Stream::Allocated, slot, gpu.second());
    let allocated = noise::jitter(live, live / 50, wobble).min(reserved);
    Torch {
        allocated,
        reserved,
        fragmented_share,
        pending_free: 16 * MIB,
        outside,
        ..Torch::default()
    }
    .build(gpu.pid(slot), name)
}

#[cfg(test)]
mod tests {
    use super::super::devices::A100_40GB;
    use super::*;

    fn gpu(seed: u64, index: u32, t_ms: u64) -> Gpu {
        Gpu { seed, index, gpus: 8, model: &A100_40GB, t_ms }
    }

    #[test]
    fn every_count_from_three_to_six_occurs() {
        let mut counts: Vec<u32> = (0..64).map(|seed| tenant_count(&gpu(seed, 0, 0))).collect();
        counts.sort_unstable();
        counts.dedup();
        assert_eq!(counts, [3, 4, 5, 6]);
    }

    #[test]
    fn growth_saturates_with_headroom_left() {
        for seed in 0..16 {
            let late = workload(&gpu(seed, 0, 10 * 3_600_000));
            let used = late.processes.iter().map(|p| p.used_bytes).sum::<u64>();
            let capacity = A100_40GB.capacity_bytes();
            assert!(used + UNATTRIBUTED_MAX + TENANT_HEADROOM_BYTES <= capacity, "seed {seed}");
            assert!(
                used + UNATTRIBUTED_MAX + TENANT_HEADROOM_BYTES + GIB > capacity,
                "seed {seed}"
            );
        }
    }
}
