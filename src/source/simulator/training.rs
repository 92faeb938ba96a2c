//! `training-fragmentation`: GPU 0's training job fragments its allocator
//! cache until it runs out of memory, in 20-minute cycles; other GPUs run
//! steady training ranks.
//!
//! Owns: that job's dynamics. Depends on the simulator's `process`, `noise`
//! and `timeline` only.

use super::devices::MIB;
use super::noise::{self, Stream};
use super::process::{self, Gpu, SimProcess, TRAINING_LOAD, Torch, UNATTRIBUTED_MAX};
use super::timeline::{
    TRAINING_CYCLE, TRAINING_GROWTH_END, TRAINING_GROWTH_STEP, TRAINING_RETRIES_ONSET, Workload,
    millis,
};

const CYCLE_MS: u64 = millis(TRAINING_CYCLE);
const GROWTH_END_MS: u64 = millis(TRAINING_GROWTH_END);
const STEP_MS: u64 = millis(TRAINING_GROWTH_STEP);
const RETRIES_ONSET_MS: u64 = millis(TRAINING_RETRIES_ONSET);
/// Seconds per cycle during which retries accumulate.
const RETRY_WINDOW_S: u64 = (CYCLE_MS - RETRIES_ONSET_MS) / 1_000;

/// While cache flushes (the retries) stall the stream, the GPU is less busy.
const RETRYING_LOAD: f64 = 0.78;

pub(super) fn workload(gpu: &Gpu) -> Workload {
    if gpu.index != 0 {
        return Workload { processes: vec![process::training_rank(gpu, 0)], load: TRAINING_LOAD };
    }
    let in_cycle = gpu.t_ms % CYCLE_MS;
    let load = if in_cycle >= RETRIES_ONSET_MS { RETRYING_LOAD } else { TRAINING_LOAD };
    Workload { processes: vec![fragmenting_job(gpu)], load }
}

/// Allocated stays flat (same model, same batch) while reserved climbs: each
/// step's activations land in blocks split from fresh segments whose
/// remainders are too small to reuse, so the gap is mostly `inactive_split`.
fn fragmenting_job(gpu: &Gpu) -> SimProcess {
    let capacity = gpu.capacity();
    let cycle = gpu.t_ms / CYCLE_MS;
    let in_cycle = gpu.t_ms % CYCLE_MS;
    let outside = gpu.context_bytes(0).saturating_add(900 * MIB);
    let start = noise::fraction_of(capacity, 0.70);
    // Leaves ≈ 0.8 % of total free at the ceiling: deep into pressure, yet
    // the device is never reported as 100 % used.
    let ceiling = capacity
        .saturating_sub(outside)
        .saturating_sub(UNATTRIBUTED_MAX)
        .saturating_sub(noise::fraction_of(gpu.model.total_bytes, 0.008));
    let allocated = noise::jitter(
        noise::fraction_of(capacity, 0.64),
        noise::fraction_of(capacity, 0.005),
        gpu.noise(Stream::Allocated, 0, gpu.second()),
    );
    Torch {
        allocated,
        reserved: reserved_at(gpu, in_cycle, start, ceiling),
        fragmented_share: 0.85,
        pending_free: 128 * MIB,
        outside,
        alloc_retries: retries(gpu, cycle, in_cycle),
        // One OOM ends every cycle; the job's handler skips the batch and
        // calls empty_cache(), so the next cycle starts from `start` again
        // in the same process.
        ooms: cycle,
    }
    .build(gpu.pid(0), "pt_main_thread")
}

fn reserved_at(gpu: &Gpu, in_cycle: u64, start: u64, ceiling: u64) -> u64 {
    let steps = GROWTH_END_MS / STEP_MS;
    let step_bytes = ceiling.saturating_sub(start) / steps.max(1);
    if in_cycle < GROWTH_END_MS {
        let step = in_cycle / STEP_MS;
        if step == 0 {
            return start;
        }
        // Jitter under half a step keeps every step a strict increase:
        // reserved never shrinks without empty_cache().
        let jitter = noise::fraction_of(step_bytes / 2, gpu.unit(Stream::Reserved, 0, step));
        start.saturating_add(step_bytes.saturating_mul(step)).saturating_add(jitter).min(ceiling)
    } else {
        // Each retry frees cached blocks and re-reserves them, so reserved
        // hovers just under the ceiling.
        let dip = noise::fraction_of(256 * MIB, gpu.unit(Stream::Reserved, 0, gpu.second()));
        ceiling.saturating_sub(dip)
    }
}

/// Cumulative retries: every full cycle adds the same total, the current
/// one adds those of its retry window so far. Summing per-second increments
/// (bounded by the window) keeps the count monotonic yet irregular.
fn retries(gpu: &Gpu, cycle: u64, in_cycle: u64) -> u64 {
    let per_cycle: u64 = (0..RETRY_WINDOW_S).map(|second| retry_increment(gpu, second)).sum();
    let current = match in_cycle.checked_sub(RETRIES_ONSET_MS) {
        Some(since_onset) => {
            let seconds = (since_onset / 1_000).saturating_add(1).min(RETRY_WINDOW_S);
            (0..seconds).map(|second| retry_increment(gpu, second)).sum()
        }
        None => 0,
    };
    cycle.saturating_mul(per_cycle).saturating_add(current)
}

/// 0–3 retries in one second; more likely as the window goes on because
/// memory gets tighter.
fn retry_increment(gpu: &Gpu, second: u64) -> u64 {
    let pressure = 1.5 + 2.5 * second as f64 / RETRY_WINDOW_S as f64;
    (gpu.unit(Stream::Retries, 0, second) * pressure) as u64
}

#[cfg(test)]
mod tests {
    use super::super::devices::H100_80GB;
    use super::*;

    fn gpu(t_ms: u64) -> Gpu {
        Gpu { seed: 5, index: 0, gpus: 1, model: &H100_80GB, t_ms }
    }

    fn reserved(t_ms: u64) -> u64 {
        fragmenting_job(&gpu(t_ms)).allocator.unwrap().reserved_bytes
    }

    #[test]
    fn reserved_steps_up_every_step_of_the_growth_phase() {
        let steps: Vec<u64> = (0..GROWTH_END_MS / STEP_MS).map(|k| reserved(k * STEP_MS)).collect();
        assert!(steps.windows(2).all(|pair| pair[1] > pair[0]), "{steps:?}");
        assert!(reserved(GROWTH_END_MS) > reserved(GROWTH_END_MS - 1));
    }

    #[test]
    fn retries_are_zero_before_onset_and_carry_over_cycles() {
        let gpu_at = |t_ms| gpu(t_ms);
        assert_eq!(retries(&gpu_at(0), 0, RETRIES_ONSET_MS - 1), 0);
        let first = retries(&gpu_at(CYCLE_MS - 1), 0, CYCLE_MS - 1);
        assert!(first > 100, "{first}");
        assert_eq!(retries(&gpu_at(CYCLE_MS), 1, 0), first);
        assert!(retries(&gpu_at(0), 1, CYCLE_MS - 1) == 2 * first);
    }
}
