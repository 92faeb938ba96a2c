//! One simulated PyTorch training job of the corpus: its memory at any
//! instant, from parameters drawn per run.
//!
//! Owns: the job's memory dynamics (model load, per-step sawtooth, warm-up
//! of the cache, evaluation phases, checkpoint spikes, a leak or linear
//! growth, `empty_cache()` every step). Depends on the corpus's
//! `allocator` rules and the simulator's `devices` constants only. Pure: a
//! reading is a function of the job and the instant (plus a per-sample
//! phase).

use super::allocator::{SizeMix, segments_for, warm_share};
#[cfg(test)]
use vramd::source::simulator::devices::MIB;

/// A growth that the job's floor takes on from `onset_s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Growth {
    pub onset_s: f64,
    pub bytes_per_second: f64,
}

/// A recurring phase: every `period_s`, for `duration_s`, from `offset_s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Phase {
    pub period_s: f64,
    pub duration_s: f64,
    pub offset_s: f64,
}

impl Phase {
    fn active(&self, age_s: f64) -> bool {
        let since = age_s - self.offset_s;
        since >= 0.0 && since % self.period_s.max(1.0) < self.duration_s
    }

    /// Whether the phase has happened at least once by `age_s`.
    fn happened(&self, age_s: f64) -> bool {
        age_s >= self.offset_s
    }
}

/// A training job's parameters.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Job {
    pub pid: u32,
    pub name: &'static str,
    pub start_s: f64,
    pub end_s: f64,
    /// Whether its allocator statistics reach vramd (reports).
    pub reports: bool,
    /// Calls `empty_cache()` at the end of every step.
    pub empty_cache: bool,
    /// Weights, gradients and optimizer state once training runs.
    pub base: u64,
    /// Seconds the model takes to load (allocated climbs to the weights).
    pub load_s: f64,
    /// The sawtooth: activations at the peak of a step.
    pub activation: u64,
    /// Where in a step the peak lies (end of the forward pass), 0..1.
    pub peak_phase: f64,
    /// How far a step's peak varies with the batch's shape, as a share.
    pub shape_spread: f64,
    /// Time constant and stairs of the cache's warm-up.
    pub warm_tau_s: f64,
    pub warm_stairs: u32,
    pub mix: SizeMix,
    /// CUDA context, cuBLAS/cuDNN workspaces, NCCL.
    pub outside: u64,
    pub eval: Option<Phase>,
    pub checkpoint: Option<(Phase, u64)>,
    pub growth: Option<Growth>,
    /// Share of the cache in split segments.
    pub split_share: f64,
    /// A slow warm-up of the floor itself after the load (a large model's
    /// caches, a curriculum ramping up): bytes it levels off at above
    /// `base`, and its time constant in seconds.
    pub climb: Option<(u64, f64)>,
    /// Steps of a fixed period (seconds) from a fixed phase (0..1), where
    /// the samples catch them at a phase that only drifts; `None`: each
    /// sample at a phase of its own.
    pub step: Option<(f64, f64)>,
    /// The cache following the largest batch so far: at each (seconds
    /// since the job's start, bytes) reserved memory grows by that much
    /// and keeps it (without `empty_cache()`).
    pub cache_steps: Vec<(f64, u64)>,
}

/// What the job holds at one instant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct JobMemory {
    pub allocated: u64,
    pub reserved: u64,
    pub inactive_split: u64,
    pub nvml_used: u64,
}

impl Job {
    pub fn alive(&self, t_s: f64) -> bool {
        t_s >= self.start_s && t_s < self.end_s
    }

    /// Bytes the growth has added by `t_s`.
    pub fn grown(&self, t_s: f64) -> u64 {
        self.growth
            .map_or(0, |growth| ((t_s - growth.onset_s).max(0.0) * growth.bytes_per_second) as u64)
    }

    /// The job's memory at `t_s`, the sample caught at `phase` (0..1) of
    /// a step whose shape draw is `shape` (−1..1); `None` when not running.
    pub fn memory(&self, t_s: f64, phase: f64, shape: f64) -> Option<JobMemory> {
        if !self.alive(t_s) {
            return None;
        }
        let age = t_s - self.start_s;
        let climbed = self.climb.map_or(0, |(bytes, tau)| {
            (bytes as f64 * (1.0 - (-(age - self.load_s).max(0.0) / tau.max(1.0)).exp())) as u64
        });
        let grown = self.grown(t_s).saturating_add(climbed);
        let (floor, amplitude, peak_floor) = if age < self.load_s {
            let weights = (self.base as f64 * 0.35 * age / self.load_s.max(1.0)) as u64;
            (weights, 0, weights)
        } else {
            let evaluating = self.eval.is_some_and(|eval| eval.active(age));
            // Evaluation frees the step's scratch buffers and needs a third
            // of the activations; gradients stay until the next zero_grad().
            let (floor, share) =
                if evaluating { (self.base / 16 * 15, 0.3) } else { (self.base, 1.0) };
            let spike = match self.checkpoint {
                Some((phase, bytes)) if phase.active(age) => bytes,
                _ => 0,
            };
            let amplitude = self.activation as f64 * share * (1.0 + self.shape_spread * shape);
            (
                floor.saturating_add(grown).saturating_add(spike),
                amplitude.max(0.0) as u64,
                self.base.saturating_add(grown),
            )
        };
        let lift = if phase < self.peak_phase {
            phase / self.peak_phase
        } else {
            (1.0 - phase) / (1.0 - self.peak_phase)
        };
        let allocated = floor.saturating_add((amplitude as f64 * lift.clamp(0.0, 1.0)) as u64);
        let reserved = if self.empty_cache {
            // Every step hands its segments back; what is left is what the
            // live tensors sit in.
            segments_for(allocated, self.mix)
        } else {
            let peak_share = 1.0 + self.shape_spread;
            let warm = warm_share(age - self.load_s, self.warm_tau_s, self.warm_stairs);
            let transient = (self.activation as f64 * peak_share * warm) as u64;
            // A checkpoint's buffers stay cached once saved.
            let kept = match self.checkpoint {
                Some((phase, bytes)) if phase.happened(age) && age >= self.load_s => bytes,
                _ => 0,
            };
            let largest_batches: u64 = self
                .cache_steps
                .iter()
                .filter(|&&(at, _)| at <= age)
                .map(|&(_, bytes)| bytes)
                .sum();
            let high_water = segments_for(peak_floor, self.mix)
                .saturating_add(segments_for(transient, self.mix))
                .saturating_add(kept)
                .saturating_add(largest_batches);
            high_water.max(segments_for(allocated, self.mix))
        };
        let cache = reserved.saturating_sub(allocated);
        Some(JobMemory {
            allocated,
            reserved,
            inactive_split: (cache as f64 * self.split_share) as u64,
            nvml_used: reserved.saturating_add(self.outside),
        })
    }

    /// The phase of the step a sample at `t_s` catches, where the job's
    /// steps have a fixed period; `None` otherwise.
    pub fn step_phase(&self, t_s: f64) -> Option<f64> {
        self.step.map(|(period, phase)| ((t_s - self.start_s) / period.max(1e-3) + phase).fract())
    }

    /// The NVML usage at the top of a step: what runs out first.
    pub fn peak_used(&self, t_s: f64) -> u64 {
        self.memory(t_s, self.peak_phase, 1.0).map_or(0, |memory| memory.nvml_used)
    }
}

/// A job with sensible defaults for the corpus's tests.
#[cfg(test)]
pub(super) fn example() -> Job {
    Job {
        pid: 4_242,
        name: "python3",
        start_s: 0.0,
        end_s: 7_200.0,
        reports: true,
        empty_cache: false,
        base: 20_000 * MIB,
        load_s: 20.0,
        activation: 8_192 * MIB,
        peak_phase: 0.4,
        shape_spread: 0.1,
        warm_tau_s: 60.0,
        warm_stairs: 8,
        mix: SizeMix { small: 0.05, medium: 0.25 },
        outside: 700 * MIB,
        eval: None,
        checkpoint: None,
        growth: None,
        split_share: 0.2,
        climb: None,
        step: None,
        cache_steps: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocated_sawtooths_and_reserved_holds_the_high_water_mark() {
        let job = example();
        let low = job.memory(600.0, 0.0, 0.0).unwrap();
        let high = job.memory(600.0, 0.4, 0.0).unwrap();
        assert_eq!(high.allocated - low.allocated, 8_192 * MIB);
        assert_eq!(low.reserved, high.reserved, "reserved does not follow the step");
        assert!(low.reserved >= high.allocated);
        assert!(low.inactive_split <= low.reserved - low.allocated);
    }

    #[test]
    fn empty_cache_makes_nvml_usage_follow_the_step() {
        let job = Job { empty_cache: true, ..example() };
        let low = job.memory(600.0, 0.0, 0.0).unwrap();
        let high = job.memory(600.0, 0.4, 0.0).unwrap();
        assert!(high.nvml_used - low.nvml_used >= 8_000 * MIB);
    }

    #[test]
    fn a_leak_raises_the_floor_at_its_rate() {
        let job = Job {
            growth: Some(Growth { onset_s: 600.0, bytes_per_second: MIB as f64 }),
            ..example()
        };
        let before = job.memory(600.0, 0.0, 0.0).unwrap().allocated;
        let after = job.memory(1_600.0, 0.0, 0.0).unwrap().allocated;
        assert_eq!(after - before, 1_000 * MIB);
        assert!(job.memory(7_200.0, 0.0, 0.0).is_none(), "ended");
    }

    #[test]
    fn steps_of_the_sampling_period_are_caught_at_a_phase_that_only_drifts() {
        // A 1 s step a fifty-thousandth long: one sample a second sees a
        // phase that moves 0.072 an hour, not one drawn afresh.
        let job = Job { step: Some((1.000_02, 0.3)), ..example() };
        let phases: Vec<f64> = (0..3_600).map(|t| job.step_phase(f64::from(t)).unwrap()).collect();
        let spread = phases.iter().fold(0.0_f64, |most, &p| most.max((p - 0.3).abs()));
        assert!(spread < 0.08, "{spread}");
        assert_eq!(example().step_phase(10.0), None);
    }
}
