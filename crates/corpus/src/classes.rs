//! The corpus's classes of run beyond its benign, leak and growth runs:
//! shapes the detector once failed on, each drawn from its own seed stream
//! so the other runs of a seed are unchanged.
//!
//! Owns: slow warm-ups below capacity, steps commensurate with the
//! sampling, leaks through evaluation dips, NVML-only running-max
//! reserved growth. Depends on its parent's drawing of a run and the
//! job's parameters only.

use super::job::Phase;
use super::{CorpusRun, Draw, Kind, LEAK_RATES, MIB_F};

/// Step periods of training loops that are commonly exact, seconds: the
/// slow tier and the reporter sample every second.
pub const STEP_PERIODS: [f64; 3] = [0.5, 1.0, 2.0];

/// `runs` runs whose primary job steps with a period of 0.5, 1 or 2 s
/// (within 20 parts per million) from a fixed phase, so that sampling
/// once a second catches each step at a phase that only drifts: the floor
/// a bucket minimum finds then depends on where that phase lies. Every
/// other run leaks, at the corpus's rates in turn; the rest are benign.
/// Drawn apart, so the other runs of a seed are unchanged.
pub fn stepped_runs(seed: u64, runs: usize) -> Vec<CorpusRun> {
    (0..runs as u64)
        .map(|index| {
            let leak = index % 2 == 1;
            let rate = LEAK_RATES.get((index / 2 % 4) as usize).copied().unwrap_or(MIB_F);
            let kind = if leak { Kind::Leak { rate, empty_cache: false } } else { Kind::Benign };
            let mut run = CorpusRun::draw(seed ^ 0x7374_6570, index, kind);
            let period = STEP_PERIODS.get((index / 8 % 3) as usize).copied().unwrap_or(1.0);
            let mut draw = Draw { seed: seed ^ 0x7374_6570, run: index, next: 1_000 };
            let step = (period * (1.0 + draw.between(-2e-5, 2e-5)), draw.unit());
            if let Some(primary) = run.jobs.first_mut() {
                primary.step = Some(step);
            }
            run.step_period = Some(period);
            run
        })
        .collect()
}

/// `runs` leak runs, at 0.25 and 1 MiB/s in turn, whose job pauses for
/// an evaluation every 15–20 min for 1.5–3 min (the floor dropping by a
/// sixteenth of the job while it runs): one leak must stay one alert
/// through its dips. Drawn apart, so the other runs of a seed are
/// unchanged.
pub fn dipping_runs(seed: u64, runs: usize) -> Vec<CorpusRun> {
    let seed = seed ^ 0x6469_7073;
    (0..runs as u64)
        .map(|index| {
            let rate = if index % 2 == 0 { 0.25 * MIB_F } else { MIB_F };
            let mut run = CorpusRun::draw(seed, index, Kind::Leak { rate, empty_cache: false });
            let mut draw = Draw { seed, run: index, next: 1_000 };
            let period_s = draw.between(900.0, 1_200.0);
            let duration_s = draw.between(90.0, 180.0);
            let offset_s = draw.between(60.0, period_s);
            if let Some(primary) = run.jobs.first_mut() {
                primary.eval = Some(Phase { period_s, duration_s, offset_s });
            }
            run
        })
        .collect()
}

/// `runs` benign runs, NVML only, whose reserved memory follows the
/// largest batch so far: three to six irregular steps of 0.25–2.5 GiB in
/// the first hour, held after (no `empty_cache()`). Without allocator
/// statistics that is cache growth or a leak, not a leak. Drawn apart, so
/// the other runs of a seed are unchanged.
pub fn running_max_runs(seed: u64, runs: usize) -> Vec<CorpusRun> {
    let seed = seed ^ 0x6d61_7872;
    (0..runs as u64)
        .map(|index| {
            let mut run = CorpusRun::draw(seed, index, Kind::Benign);
            let mut draw = Draw { seed, run: index, next: 1_000 };
            let count = 3 + (draw.unit() * 4.0) as usize;
            let mut steps: Vec<(f64, u64)> = (0..count)
                .map(|_| (draw.between(300.0, 3_600.0), draw.log_mib(256.0, 2_560.0)))
                .collect();
            steps.sort_by(|a, b| a.0.total_cmp(&b.0));
            if let Some(primary) = run.jobs.first_mut() {
                primary.reports = false;
                primary.empty_cache = false;
                primary.cache_steps = steps;
            }
            run.cut_at_full();
            run
        })
        .collect()
}

/// `runs` benign runs whose primary job warms up slowly (time constants of
/// 1–10 min, 4–30 GiB) to a plateau below the capacity: the corpus's other
/// warm-ups (the cache's, 15–150 s) are shorter than those of real jobs
/// loading large models or ramping curricula. Drawn apart from [`corpus`],
/// so that corpus's runs are unchanged.
pub fn warmup_runs(seed: u64, runs: usize) -> Vec<CorpusRun> {
    (0..runs as u64).map(|index| CorpusRun::draw(seed ^ 0x7761_726d, index, Kind::Warmup)).collect()
}
