//! `oom-spike`: steady training everywhere; once, GPU 0's job meets an
//! outsized batch that fills the device to ~98 % for a few seconds, ends in
//! one OOM, and the job goes back to exactly where it was.
//!
//! Owns: that job's dynamics. Depends on the simulator's `process`, `noise`
//! and `timeline` only.

use super::devices::MIB;
use super::noise;
use super::process::{self, Gpu, SimProcess, TRAINING_LOAD, UNATTRIBUTED_MAX};
use super::timeline::{
    SPIKE_DURATION, SPIKE_OOM_AFTER, SPIKE_START, SPIKE_USED_FRACTION, Workload, millis,
};

const START_MS: u64 = millis(SPIKE_START);
const END_MS: u64 = START_MS + millis(SPIKE_DURATION);
const OOM_MS: u64 = START_MS + millis(SPIKE_OOM_AFTER);

pub(super) fn workload(gpu: &Gpu) -> Workload {
    let processes =
        if gpu.index == 0 { vec![spiking_job(gpu)] } else { vec![process::training_rank(gpu, 0)] };
    Workload { processes, load: TRAINING_LOAD }
}

fn spiking_job(gpu: &Gpu) -> SimProcess {
    let mut memory = process::training_rank_memory(gpu, 0);
    if (START_MS..END_MS).contains(&gpu.t_ms) {
        // Sized so that driver reserved + used is the documented fraction of
        // total even with the largest unattributed share.
        let target_used = noise::fraction_of(gpu.model.total_bytes, SPIKE_USED_FRACTION)
            .saturating_sub(gpu.model.driver_reserved_bytes);
        memory.reserved =
            target_used.saturating_sub(memory.outside).saturating_sub(UNATTRIBUTED_MAX);
        // Nearly all of it live: the spike is one huge activation, not cache.
        memory.allocated = memory.reserved.saturating_sub(96 * MIB);
    }
    if gpu.t_ms >= OOM_MS {
        // The allocator flushes its cache once (a retry), still cannot fit
        // the next block, and raises; both counters stay at 1 afterwards.
        memory.alloc_retries = 1;
        memory.ooms = 1;
    }
    memory.build(gpu.pid(0), "pt_main_thread")
}

#[cfg(test)]
mod tests {
    use super::super::devices::H100_80GB;
    use super::*;

    fn job(t_ms: u64) -> SimProcess {
        spiking_job(&Gpu { seed: 3, index: 0, gpus: 1, model: &H100_80GB, t_ms })
    }

    #[test]
    fn spike_is_confined_to_its_window() {
        let before = job(START_MS - 1).used_bytes;
        let during = job(START_MS).used_bytes;
        let after = job(END_MS).used_bytes;
        assert_eq!(before, after, "reserved returns to exactly the steady value");
        assert!(during > before + 10 * 1024 * MIB);
        assert_eq!(job(OOM_MS - 1).allocator.unwrap().ooms, 0);
        assert_eq!(job(OOM_MS).allocator.unwrap().ooms, 1);
    }
}
