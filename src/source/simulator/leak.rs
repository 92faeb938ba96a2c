//! `leak`: a process on GPU 0 keeps references to tensors it no longer
//! needs, so its live memory grows linearly until the device is nearly full;
//! other GPUs run steady inference.
//!
//! Owns: that process's dynamics. Depends on the simulator's `process`,
//! `noise` and `timeline` only.

use super::devices::{GIB, MIB};
use super::noise;
use super::noise::Stream;
use super::process::{self, Gpu, INFERENCE_LOAD, SimProcess, Torch, UNATTRIBUTED_MAX};
use super::timeline::{
    LEAK_HEADROOM_BYTES, LEAK_ONSET, LEAK_RATE_BYTES_PER_SECOND, Workload, grown, millis,
};

const ONSET_MS: u64 = millis(LEAK_ONSET);
const BASE_ALLOCATED: u64 = 6 * GIB;
/// The allocator keeps a constant cache on top of the leak: every leaked
/// tensor needs a new segment, so reserved tracks allocated.
const CACHE: u64 = 1_536 * MIB;
/// A light inference job, so the GPU is far from busy while it leaks.
const LEAK_LOAD: f64 = 0.45;

pub(super) fn workload(gpu: &Gpu) -> Workload {
    if gpu.index != 0 {
        return Workload {
            processes: vec![process::inference_server(gpu, 0)],
            load: INFERENCE_LOAD,
        };
    }
    Workload { processes: vec![leaking(gpu)], load: LEAK_LOAD }
}

fn leaking(gpu: &Gpu) -> SimProcess {
    let outside = gpu.context_bytes(0).saturating_add(150 * MIB);
    // The most the leak can reach with the device still answering: what is
    // left once everything else and the headroom are accounted for.
    let ceiling = gpu
        .capacity()
        .saturating_sub(UNATTRIBUTED_MAX)
        .saturating_sub(LEAK_HEADROOM_BYTES)
        .saturating_sub(outside)
        .saturating_sub(CACHE);
    let leaked = grown(LEAK_RATE_BYTES_PER_SECOND, gpu.t_ms.saturating_sub(ONSET_MS));
    let live = BASE_ALLOCATED.saturating_add(leaked).min(ceiling);
    let allocated =
        noise::jitter(live, 8 * MIB, gpu.noise(Stream::Allocated, 0, gpu.second())).min(live);
    Torch {
        allocated,
        reserved: live.saturating_add(CACHE),
        fragmented_share: 0.2,
        pending_free: 32 * MIB,
        outside,
        ..Torch::default()
    }
    .build(gpu.pid(0), "python3")
}

#[cfg(test)]
mod tests {
    use super::super::devices::H100_80GB;
    use super::*;

    fn used(t_ms: u64) -> u64 {
        leaking(&Gpu { seed: 1, index: 0, gpus: 1, model: &H100_80GB, t_ms }).used_bytes
    }

    #[test]
    fn flat_before_onset_then_exactly_the_documented_rate() {
        assert_eq!(used(0), used(ONSET_MS));
        assert_eq!(used(ONSET_MS + 10_000) - used(ONSET_MS), 10 * LEAK_RATE_BYTES_PER_SECOND);
    }

    #[test]
    fn saturates_below_capacity_after_about_half_an_hour() {
        let capacity = H100_80GB.capacity_bytes();
        assert!(used(30 * 60_000) < used(33 * 60_000));
        assert_eq!(used(34 * 60_000), used(90 * 60_000));
        assert!(used(90 * 60_000) + UNATTRIBUTED_MAX + LEAK_HEADROOM_BYTES <= capacity);
    }
}
