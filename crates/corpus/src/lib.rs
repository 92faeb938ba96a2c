//! The detection corpus, a crate of its own: a labelled, randomised corpus
//! of PyTorch training runs on one H100, for measuring leak detection and
//! the exhaustion forecast (`examples/detection/`, `tests/detection.rs`).
//! It is test and benchmark infrastructure the daemon never runs, so it
//! lives outside the `vramd` library, a dev-dependency of it only.
//!
//! Owns: drawing a run's parameters from a seed, its label (benign, a leak
//! with onset and rate, or linear growth until the device is full), and the
//! readings of the run at any instant. Depends on `vramd`'s `model` and the
//! simulator's `noise`, `devices` and `GOLDEN_ORIGIN` only; never on
//! history, analysis or alerts.
//!
//! Every run has a primary training job ([`job`]): allocated sawtooths per
//! step by the activation size (0.25–8 GiB, sampled at a random phase of
//! the step); reserved is the allocator's high-water mark, a staircase
//! built by the segment rules of [`allocator`] that climbs through a
//! warm-up and levels off; inactive_split is a share of the cache. Drawn
//! per run: evaluation phases (floor and sawtooth drop, then return),
//! checkpoint spikes (whose buffers stay cached), `empty_cache()` every
//! step, allocator reports or NVML only, a second job starting mid-run, the
//! primary job ending, and one to three other tenants (an inference server,
//! a notebook that grabs and frees chunks, an opaque process). One run in
//! four leaks, at 0.25, 1, 4 or 16 MiB/s in turn, with and without
//! `empty_cache()`; [`growth_runs`] grow linearly at 20–80 MiB/s until the
//! device is full; [`warmup_runs`] warm up for minutes to a plateau below
//! the capacity; [`stepped_runs`] step every 0.5, 1 or 2 s from a fixed
//! phase, which sampling once a second sees at a phase that only drifts;
//! [`dipping_runs`] leak through evaluation dips every 15–20 min;
//! [`running_max_runs`] grow reserved memory, NVML only, in a few large
//! irregular steps as the cache follows the largest batch so far.
//!
//! A job that reports sends what the Python reporter sends by default: its
//! figures at the report, and the lowest and highest `allocated` and
//! `reserved` of the `samples_per_interval` (4) samples it took evenly
//! through the interval (1 s) before it, the report's own included. So a
//! step as long as the sampling period is seen at four phases a report,
//! not at the one that only drifts; and, as the Python reporter draws each
//! gap between reports from 0.5-1.5 times its interval, the report a
//! sample finds was sent at a point of the interval before it drawn
//! afresh each second, not at the sample's instant. (Other tenants' reporters are older
//! ones: point figures only. With the benchmark's `--report-interval`, a
//! report still carries the range of the second before it.)

mod allocator;
mod classes;
mod job;

use std::time::Duration;

use vramd::model::{DeviceInfo, FastReading, MemoryInfo, ProcessInfo, SlowReading, Timestamp};
use vramd::source::simulator::GOLDEN_ORIGIN;
use vramd::source::simulator::devices::{self, GIB, H100_80GB, MIB};
use vramd::source::simulator::noise::{self, Stream};

use allocator::SizeMix;
pub use classes::{STEP_PERIODS, dipping_runs, running_max_runs, stepped_runs, warmup_runs};
use job::{Growth, Job, Phase};

/// Leak rates the corpus cycles through, bytes per second.
pub const LEAK_RATES: [f64; 4] = [0.25 * MIB_F, MIB_F, 4.0 * MIB_F, 16.0 * MIB_F];
const MIB_F: f64 = MIB as f64;
/// A benign run's length.
const BENIGN_RUN: Duration = Duration::from_secs(2 * 3600);
/// How long a leak is played after its onset (unless the device fills).
const LEAK_PLAYED: Duration = Duration::from_secs(45 * 60);
const UNATTRIBUTED: u64 = 4 * MIB;
/// How often a job's reporter reports, milliseconds: the Python reporter's
/// default `interval` (1 s), as the benchmark's slow tier takes them.
const REPORT_INTERVAL_MS: u64 = 1_000;

/// Tells the report-time draws from the corpus's other draws.
const REPORT_TIME_KEY: u64 = 0x5245_5054;
/// Allocator samples per report, the report's own included: the Python
/// reporter's default `samples_per_interval`, taken evenly between reports.
const SAMPLES_PER_INTERVAL: u64 = 4;

/// What a run is, for scoring.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Label {
    /// Nothing leaks and nothing grows towards exhaustion.
    Benign,
    /// The primary job's floor grows from `onset` at `bytes_per_second`.
    Leak { pid: u32, onset: Duration, bytes_per_second: f64, empty_cache: bool, reports: bool },
    /// The primary job grows linearly from `onset` until the device is full
    /// at `full` (both since the run's start).
    Growth { onset: Duration, bytes_per_second: f64, full: Duration },
    /// Nothing leaks: after its load the primary job's floor approaches a
    /// plateau `climb_bytes` higher, below the capacity, with time constant
    /// `tau` ([`warmup_runs`]).
    Warmup { tau: Duration, climb_bytes: u64 },
}

/// One labelled run: a single simulated H100 from [`GOLDEN_ORIGIN`].
#[derive(Clone, Debug)]
pub struct CorpusRun {
    pub seed: u64,
    pub label: Label,
    /// How long the run is played.
    pub duration: Duration,
    /// The primary job's step period where it is fixed ([`stepped_runs`]).
    pub step_period: Option<f64>,
    /// Whether its jobs' reporters send the interval range (the Python
    /// reporter's default since 0.3), not point figures only.
    sends_range: bool,
    jobs: Vec<Job>,
    tenants: Vec<Tenant>,
}

/// Another user of the GPU, for multi-tenant noise.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tenant {
    /// Flat working set with a little jitter; reports or not.
    Inference { pid: u32, bytes: u64, reports: bool },
    /// Grabs and frees chunks every 1–5 minutes: 0–3 chunks held, drawn
    /// afresh each time (cells run by hand, not a leak).
    Notebook { pid: u32, base: u64, chunk: u64, period_s: f64 },
    /// A process that never changes (ffmpeg, a monitor).
    Opaque { pid: u32, bytes: u64 },
}

/// `runs` runs drawn from `seed`; every fourth leaks.
pub fn corpus(seed: u64, runs: usize) -> Vec<CorpusRun> {
    (0..runs as u64).map(|index| CorpusRun::draw(seed, index, Kind::of(index))).collect()
}

/// `runs` runs that grow linearly at 20–80 MiB/s until the device is full.
pub fn growth_runs(seed: u64, runs: usize) -> Vec<CorpusRun> {
    (0..runs as u64).map(|index| CorpusRun::draw(seed ^ 0x6772_6f77, index, Kind::Growth)).collect()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Benign,
    Leak { rate: f64, empty_cache: bool },
    Growth,
    Warmup,
}

impl Kind {
    fn of(index: u64) -> Kind {
        if !index.is_multiple_of(4) {
            return Kind::Benign;
        }
        let leak = index / 4;
        let rate = LEAK_RATES.get((leak % 4) as usize).copied().unwrap_or(MIB_F);
        Kind::Leak { rate, empty_cache: (leak / 4) % 2 == 1 }
    }
}

/// Uniform draws for one run.
struct Draw {
    seed: u64,
    run: u64,
    next: u64,
}

impl Draw {
    fn unit(&mut self) -> f64 {
        self.next += 1;
        noise::unit(self.seed, Stream::Corpus, &[self.run, self.next])
    }

    fn between(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.unit()
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    fn mib(&mut self, low: f64, high: f64) -> u64 {
        (self.between(low, high) * MIB_F) as u64
    }

    /// Log-uniform, for sizes spanning orders of magnitude.
    fn log_mib(&mut self, low: f64, high: f64) -> u64 {
        let exponent = self.between(low.ln(), high.ln());
        (exponent.exp() * MIB_F) as u64
    }
}

impl CorpusRun {
    fn draw(seed: u64, run: u64, kind: Kind) -> CorpusRun {
        let mut draw = Draw { seed, run, next: 0 };
        let pid = 1_000 + (noise::hash(seed, Stream::Pid, &[run]) % 60_000) as u32;
        let mut primary = Job {
            pid,
            name: "python3",
            start_s: 0.0,
            end_s: BENIGN_RUN.as_secs_f64(),
            reports: draw.chance(0.6),
            empty_cache: draw.chance(0.25),
            base: draw.log_mib(4_096.0, 40_960.0),
            load_s: draw.between(5.0, 40.0),
            activation: draw.log_mib(256.0, 8_192.0),
            peak_phase: draw.between(0.3, 0.5),
            shape_spread: draw.between(0.0, 0.25),
            warm_tau_s: draw.between(15.0, 150.0),
            warm_stairs: 3 + (draw.unit() * 10.0) as u32,
            mix: SizeMix { small: draw.between(0.02, 0.1), medium: draw.between(0.1, 0.4) },
            outside: draw.mib(400.0, 1_100.0),
            eval: None,
            checkpoint: None,
            growth: None,
            split_share: draw.between(0.05, 0.4),
            climb: None,
            step: None,
            cache_steps: Vec::new(),
        };
        if draw.chance(0.5) {
            let period_s = draw.between(600.0, 1_800.0);
            let duration_s = draw.between(60.0, 240.0);
            primary.eval = Some(Phase { period_s, duration_s, offset_s: period_s });
        }
        if draw.chance(0.5) {
            let period_s = draw.between(900.0, 3_600.0);
            let duration_s = draw.between(5.0, 30.0);
            let bytes = draw.mib(512.0, 4_096.0);
            primary.checkpoint = Some((Phase { period_s, duration_s, offset_s: period_s }, bytes));
        }
        let mut jobs = Vec::new();
        let second = draw.chance(0.3).then(|| Job {
            pid: pid.wrapping_add(17),
            name: "pt_main_thread",
            start_s: draw.between(1_200.0, 4_800.0),
            base: draw.log_mib(2_048.0, 10_240.0),
            activation: draw.log_mib(256.0, 4_096.0),
            checkpoint: None,
            eval: None,
            reports: draw.chance(0.5),
            ..primary.clone()
        });
        let ends_early = draw.chance(0.25).then(|| draw.between(3_600.0, 6_600.0));
        let tenants = tenants(&mut draw, pid);
        let mut label = Label::Benign;
        let mut duration = BENIGN_RUN;
        match kind {
            Kind::Benign | Kind::Warmup => {
                if let Some(end) = ends_early {
                    primary.end_s = end;
                }
            }
            Kind::Leak { rate, empty_cache } => {
                let onset = draw.between(480.0, 2_400.0);
                primary.empty_cache = empty_cache;
                primary.growth = Some(Growth { onset_s: onset, bytes_per_second: rate });
                label = Label::Leak {
                    pid,
                    onset: Duration::from_secs_f64(onset),
                    bytes_per_second: rate,
                    empty_cache,
                    reports: primary.reports,
                };
                duration = Duration::from_secs_f64(onset).saturating_add(LEAK_PLAYED);
            }
            Kind::Growth => {
                let onset = draw.between(300.0, 1_200.0);
                let rate = draw.between(20.0, 80.0) * MIB_F;
                primary.growth = Some(Growth { onset_s: onset, bytes_per_second: rate });
                // Long enough to fill any device; cut at the fill below.
                duration = Duration::from_secs(6 * 3600);
                primary.end_s = duration.as_secs_f64();
                label = Label::Growth {
                    onset: Duration::from_secs_f64(onset),
                    bytes_per_second: rate,
                    full: duration,
                };
            }
        }
        let warmup = (kind == Kind::Warmup)
            .then(|| (draw.log_mib(4_096.0, 30_720.0), draw.between(60.0, 600.0)));
        jobs.push(primary);
        jobs.extend(second);
        let mut run = CorpusRun {
            seed,
            label,
            duration,
            step_period: None,
            sends_range: true,
            jobs,
            tenants,
        };
        if let Some((climb, tau)) = warmup {
            run.warm_up_below_capacity(climb, tau);
        }
        run.cut_at_full();
        run
    }

    /// Gives the primary job a warm-up of `climb` bytes (less where the
    /// device would not hold it: its plateau stays a tenth of the device
    /// below the capacity) with time constant `tau` seconds.
    fn warm_up_below_capacity(&mut self, climb: u64, tau: f64) {
        let capacity = H100_80GB.capacity_bytes();
        let end = self.duration.as_secs();
        let peak = (0..=end / 5).map(|step| self.peak_demand((step * 5) as f64)).max().unwrap_or(0);
        let room = (capacity / 10 * 9).saturating_sub(peak);
        let climb = climb.min(room);
        if let Some(primary) = self.jobs.first_mut() {
            primary.climb = Some((climb, tau));
        }
        self.label = Label::Warmup { tau: Duration::from_secs_f64(tau), climb_bytes: climb };
    }

    /// A run whose peak usage would not fit the device ends there: the job
    /// OOMs. A growth run's label records that instant.
    fn cut_at_full(&mut self) {
        let capacity = H100_80GB.capacity_bytes();
        let end = self.duration.as_secs();
        let full =
            (0..=end / 5).map(|step| (step * 5) as f64).find(|&t| self.peak_demand(t) > capacity);
        let Some(full) = full else { return };
        self.duration = Duration::from_secs_f64(full);
        for job in &mut self.jobs {
            job.end_s = job.end_s.min(full);
        }
        if let Label::Growth { full: at, .. } = &mut self.label {
            *at = Duration::from_secs_f64(full);
        }
    }

    /// What the device would have to hold at `t_s` (seconds since the
    /// start) for every job to reach the top of its step: the figure the
    /// run is cut at once it exceeds the capacity.
    pub fn peak_demand(&self, t_s: f64) -> u64 {
        let jobs = self.jobs.iter().map(|job| job.peak_used(t_s)).sum::<u64>();
        let tenants = self.tenants.iter().map(|tenant| tenant.peak(self.seed, t_s)).sum::<u64>();
        jobs + tenants + UNATTRIBUTED
    }

    /// When a job other than the first starts, if one does before the run
    /// ends: an event no forecast made before it can know of.
    pub fn second_job_start(&self) -> Option<Duration> {
        self.jobs
            .iter()
            .skip(1)
            .map(|job| job.start_s)
            .find(|&start| start < self.duration.as_secs_f64())
            .map(Duration::from_secs_f64)
    }

    pub fn device_info(&self) -> DeviceInfo {
        devices::device_info(&H100_80GB, self.seed, 0)
    }

    /// A number telling this run from the seed's others (its first job's
    /// PID, drawn per run), for draws a player makes of its own.
    pub fn key(&self) -> u64 {
        self.jobs.first().map_or(0, |job| u64::from(job.pid))
    }

    /// The fast tier at `at` (scenario time from [`GOLDEN_ORIGIN`]).
    pub fn fast_at(&self, at: Timestamp) -> FastReading {
        let used = self
            .processes_at(at)
            .iter()
            .filter_map(|process| process.used_bytes)
            .fold(UNATTRIBUTED, u64::saturating_add);
        let total = H100_80GB.total_bytes;
        let reserved = H100_80GB.driver_reserved_bytes;
        let used = used.min(total - reserved);
        FastReading {
            at,
            memory: Some(MemoryInfo {
                total_bytes: total,
                reserved_bytes: Some(reserved),
                used_bytes: used,
                free_bytes: total - reserved - used,
            }),
            gpu_utilization: Some(0.9),
            memory_bandwidth_utilization: Some(0.5),
        }
    }

    /// The slow tier (process list) at `at`.
    pub fn slow_at(&self, at: Timestamp) -> SlowReading {
        SlowReading {
            allocations: None,
            at,
            processes: Some(self.processes_at(at)),
            temperature_celsius: None,
            power_usage_watts: None,
            power_limit_watts: None,
            details: Default::default(),
            processes_left_out: 0,
        }
    }

    fn processes_at(&self, at: Timestamp) -> Vec<ProcessInfo> {
        let t_ms = at.unix_millis().saturating_sub(GOLDEN_ORIGIN.unix_millis()).max(0) as u64;
        let mut out = Vec::with_capacity(self.jobs.len() + self.tenants.len());
        for job in &self.jobs {
            let Some(memory) = self.job_at(job, t_ms) else { continue };
            // The newest report the sample finds was sent at a time of its
            // own: the Python reporter draws each gap from 0.5-1.5 times
            // its interval, so its reports (and the samples between them)
            // meet a step at phases that do not drift with the sampler's.
            // Older reporters' reports are taken at the sample's instant.
            let reported = if self.sends_range {
                let at = self.report_time(job, t_ms);
                self.job_at(job, at).map_or((t_ms, memory), |seen| (at, seen))
            } else {
                (t_ms, memory)
            };
            let allocator = job.reports.then(|| vramd::model::AllocatorStats {
                allocated_bytes: reported.1.allocated,
                reserved_bytes: reported.1.reserved,
                active_bytes: reported.1.allocated,
                inactive_split_bytes: reported.1.inactive_split,
                alloc_retries: 0,
                ooms: 0,
                interval: self
                    .sends_range
                    .then(|| self.interval_range(job, reported.0, reported.1)),
            });
            out.push(ProcessInfo {
                pid: job.pid,
                name: Some(job.name.into()),
                used_bytes: Some(memory.nvml_used),
                allocator,
                details: Default::default(),
            });
        }
        for tenant in &self.tenants {
            out.push(tenant.at(self.seed, t_ms));
        }
        out
    }
}

impl CorpusRun {
    /// The same run with reporters that send point figures only, as those
    /// before 0.3 did: a step as long as the sampling period is seen at the
    /// one phase each report catches.
    pub fn point_reports(self) -> Self {
        CorpusRun { sends_range: false, ..self }
    }

    /// `job`'s memory at `t_ms` (since the run's start), caught at the
    /// phase of its step a sample then sees.
    fn job_at(&self, job: &Job, t_ms: u64) -> Option<job::JobMemory> {
        let t_s = t_ms as f64 / 1000.0;
        let key = [u64::from(job.pid), t_ms];
        let phase =
            job.step_phase(t_s).unwrap_or_else(|| noise::unit(self.seed, Stream::Allocated, &key));
        // A step's shape changes every few seconds, not every sample.
        let shape = noise::symmetric(self.seed, Stream::Reserved, &[key[0], t_ms / 3_000]);
        job.memory(t_s, phase, shape)
    }

    /// When the newest report a sample at `t_ms` finds was sent: within
    /// the interval before it, at a point drawn afresh each interval.
    fn report_time(&self, job: &Job, t_ms: u64) -> u64 {
        let key = [u64::from(job.pid), t_ms / REPORT_INTERVAL_MS, REPORT_TIME_KEY];
        let back = noise::unit(self.seed, Stream::Corpus, &key) * REPORT_INTERVAL_MS as f64;
        t_ms.saturating_sub(back as u64)
    }

    /// The range a reporter sends with the report at `t_ms` (`now`, its
    /// figures): the lowest and highest `allocated` and `reserved` of the
    /// samples it took since the last report, evenly spaced through the
    /// interval, and of the report's own.
    fn interval_range(
        &self,
        job: &Job,
        t_ms: u64,
        now: job::JobMemory,
    ) -> vramd::model::AllocatorRange {
        let gap = REPORT_INTERVAL_MS / SAMPLES_PER_INTERVAL;
        let earlier = (1..SAMPLES_PER_INTERVAL)
            .filter_map(|k| t_ms.checked_sub(k * gap))
            .filter_map(|at| self.job_at(job, at));
        let mut range = vramd::model::AllocatorRange {
            allocated_min_bytes: now.allocated,
            allocated_max_bytes: now.allocated,
            reserved_min_bytes: now.reserved,
            reserved_max_bytes: now.reserved,
        };
        for seen in earlier {
            range.allocated_min_bytes = range.allocated_min_bytes.min(seen.allocated);
            range.allocated_max_bytes = range.allocated_max_bytes.max(seen.allocated);
            range.reserved_min_bytes = range.reserved_min_bytes.min(seen.reserved);
            range.reserved_max_bytes = range.reserved_max_bytes.max(seen.reserved);
        }
        range
    }
}

fn tenants(draw: &mut Draw, pid: u32) -> Vec<Tenant> {
    if !draw.chance(0.4) {
        return Vec::new();
    }
    let count = 1 + (draw.unit() * 3.0) as u32;
    (0..count)
        .map(|slot| {
            let pid = pid.wrapping_add(100 + slot);
            match (draw.unit() * 3.0) as u32 {
                0 => Tenant::Inference {
                    pid,
                    bytes: draw.mib(1_024.0, 6_144.0),
                    reports: draw.chance(0.5),
                },
                1 => Tenant::Notebook {
                    pid,
                    base: draw.mib(600.0, 2_048.0),
                    chunk: draw.mib(128.0, 2_048.0),
                    period_s: draw.between(60.0, 300.0),
                },
                _ => Tenant::Opaque { pid, bytes: draw.mib(300.0, 900.0) },
            }
        })
        .collect()
}

impl Tenant {
    /// What the tenant holds at `t_s`: a notebook's chunks as held then,
    /// not the most it could hold (the device is full when what is held
    /// reaches the capacity; counting chunks a notebook does not hold called
    /// devices full with gigabytes still free).
    fn peak(&self, seed: u64, t_s: f64) -> u64 {
        match *self {
            Tenant::Inference { bytes, .. } => bytes + bytes / 100 + GIB / 2,
            Tenant::Notebook { .. } | Tenant::Opaque { .. } => {
                self.at(seed, (t_s * 1000.0) as u64).used_bytes.unwrap_or(0)
            }
        }
    }

    fn at(&self, seed: u64, t_ms: u64) -> ProcessInfo {
        let process = |pid: u32, name: &str, used: u64| ProcessInfo {
            pid,
            name: Some(name.into()),
            used_bytes: Some(used),
            allocator: None,
            details: Default::default(),
        };
        match *self {
            Tenant::Inference { pid, bytes, reports } => {
                let jitter =
                    noise::symmetric(seed, Stream::TenantCount, &[u64::from(pid), t_ms / 1_000]);
                let allocated = (bytes as f64 * (1.0 + 0.005 * jitter)) as u64;
                let reserved = bytes + bytes / 100;
                let mut info = process(pid, "tritonserver", reserved + GIB / 2);
                info.allocator = reports.then_some(vramd::model::AllocatorStats {
                    allocated_bytes: allocated.min(reserved),
                    reserved_bytes: reserved,
                    active_bytes: allocated.min(reserved),
                    inactive_split_bytes: 0,
                    alloc_retries: 0,
                    ooms: 0,
                    interval: None,
                });
                info
            }
            Tenant::Notebook { pid, base, chunk, period_s } => {
                let slot = t_ms / ((period_s * 1000.0) as u64).max(1);
                let held = noise::hash(seed, Stream::TenantCount, &[u64::from(pid), slot]) % 4;
                process(pid, "jupyter", base + held * chunk)
            }
            Tenant::Opaque { pid, bytes } => process(pid, "ffmpeg", bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_of_the_runs_leak_at_each_rate_in_turn() {
        let runs = corpus(7, 32);
        let leaks: Vec<f64> = runs
            .iter()
            .filter_map(|run| match run.label {
                Label::Leak { bytes_per_second, .. } => Some(bytes_per_second),
                _ => None,
            })
            .collect();
        assert_eq!(leaks.len(), 8);
        assert_eq!(leaks[..4], LEAK_RATES);
    }

    #[test]
    fn readings_are_consistent_and_deterministic() {
        for run in corpus(3, 8) {
            for second in (0..run.duration.as_secs()).step_by(97) {
                let at = GOLDEN_ORIGIN.saturating_add(Duration::from_secs(second));
                let fast = run.fast_at(at);
                let memory = fast.memory.unwrap();
                assert_eq!(
                    memory.total_bytes,
                    memory.reserved_bytes.unwrap() + memory.used_bytes + memory.free_bytes
                );
                let slow = run.slow_at(at);
                let sum: u64 = slow.processes.iter().flatten().filter_map(|p| p.used_bytes).sum();
                assert!(sum <= memory.used_bytes);
                for stats in slow.processes.iter().flatten().filter_map(|p| p.allocator) {
                    assert!(stats.is_consistent(), "{stats:?}");
                }
                assert_eq!(run.slow_at(at), slow);
            }
        }
    }

    #[test]
    fn reports_carry_the_range_of_the_samples_through_their_interval() {
        // A 1 s step from a fixed phase: one sample a second sees one phase
        // of it, the reporter's four a report see a quarter of a step apart.
        let run = (1..20)
            .flat_map(|seed| stepped_runs(seed, 16))
            .find(|run| run.step_period == Some(1.0) && run.jobs[0].reports)
            .expect("a reporting job stepping every second");
        let job = &run.jobs[0];
        let (mut point_floor, mut range_floor) = (u64::MAX, u64::MAX);
        for second in 600..660 {
            let at = GOLDEN_ORIGIN.saturating_add(Duration::from_secs(second));
            let slow = run.slow_at(at);
            let stats = slow
                .processes
                .iter()
                .flatten()
                .find(|process| process.pid == job.pid)
                .and_then(|process| process.allocator)
                .expect("the job reports");
            let range = stats.interval.expect("a range with every report");
            assert!(range.allocated_min_bytes <= stats.allocated_bytes);
            assert!(stats.allocated_bytes <= range.allocated_max_bytes);
            assert!(range.reserved_min_bytes <= stats.reserved_bytes);
            assert!(stats.reserved_bytes <= range.reserved_max_bytes);
            point_floor = point_floor.min(stats.allocated_bytes);
            range_floor = range_floor.min(range.allocated_min_bytes);
        }
        // The lowest of four phases a quarter apart lies within a quarter
        // step of the trough; the one phase a point sees may lie anywhere.
        let trough = job.memory(630.0, 0.0, 0.0).expect("running").allocated;
        let peak = job.memory(630.0, job.peak_phase, 0.0).expect("running").allocated;
        assert!(range_floor <= point_floor);
        assert!(range_floor < trough + (peak - trough) / 2, "{range_floor} vs {trough}..{peak}");
    }

    #[test]
    fn reports_meet_a_step_as_long_as_the_sampling_at_phases_that_do_not_drift() {
        // The sampler reads every second, on a grid; the Python reporter
        // draws each gap from 0.5-1.5 s. Its reports seen by a minute of
        // samples must land at many phases of a 1 s step, where point
        // figures taken at the samples' own instants see one.
        let run = (1..20)
            .flat_map(|seed| stepped_runs(seed, 16))
            .find(|run| run.step_period == Some(1.0) && run.jobs[0].reports)
            .expect("a reporting job stepping every second");
        let job = &run.jobs[0];
        let trough = job.memory(630.0, 0.0, 0.0).expect("running").allocated;
        let peak = job.memory(630.0, job.peak_phase, 0.0).expect("running").allocated;
        let middle = trough + (peak - trough) / 2;
        // How many of a minute's reports caught the step's lower half.
        let low = |run: &CorpusRun| -> usize {
            (600..660)
                .filter_map(|second| {
                    let at = GOLDEN_ORIGIN.saturating_add(Duration::from_secs(second));
                    let processes = run.slow_at(at).processes?;
                    let process = processes.into_iter().find(|p| p.pid == job.pid)?;
                    Some(process.allocator?.allocated_bytes)
                })
                .filter(|&allocated| allocated < middle)
                .count()
        };
        let (jittered, fixed) = (low(&run), low(&run.clone().point_reports()));
        assert!((10..=50).contains(&jittered), "{jittered} of 60 reports in the lower half");
        assert!(fixed <= 3 || fixed >= 57, "one phase, one half: {fixed} of 60");
    }

    #[test]
    fn warm_up_runs_level_off_below_the_capacity_and_are_played_in_full() {
        for run in warmup_runs(5, 6) {
            let Label::Warmup { tau, climb_bytes } = run.label else { panic!("{:?}", run.label) };
            assert!((60.0..=600.0).contains(&tau.as_secs_f64()), "{run:?}");
            assert!(climb_bytes > 0, "{run:?}");
            assert_eq!(run.duration, BENIGN_RUN, "not cut: the plateau fits");
            let capacity = H100_80GB.capacity_bytes();
            assert!(run.peak_demand(run.duration.as_secs_f64() - 1.0) < capacity / 10 * 9 + MIB);
        }
    }

    #[test]
    fn stepped_runs_leak_every_other_run_at_every_period() {
        let runs = stepped_runs(5, 24);
        let leaks = runs.iter().filter(|run| matches!(run.label, Label::Leak { .. })).count();
        assert_eq!(leaks, 12);
        for period in STEP_PERIODS {
            assert!(runs.iter().any(|run| run.step_period == Some(period)), "{period}");
        }
    }

    #[test]
    fn dipping_runs_leak_through_evaluations_and_running_maxima_step_up_unseen() {
        for run in dipping_runs(5, 4) {
            assert!(matches!(run.label, Label::Leak { .. }), "{run:?}");
            let eval = run.jobs.first().and_then(|job| job.eval).expect("evaluations");
            assert!((900.0..=1_200.0).contains(&eval.period_s), "{eval:?}");
        }
        for run in running_max_runs(5, 4) {
            assert_eq!(run.label, Label::Benign);
            let primary = run.jobs.first().expect("a job");
            assert!(!primary.reports && (3..=6).contains(&primary.cache_steps.len()));
            // Reserved holds each step once taken: NVML usage only grows.
            let at = |s: f64| primary.memory(s, 0.0, 0.0).map_or(0, |m| m.nvml_used);
            let last = primary.cache_steps.last().map_or(0.0, |&(t, _)| t);
            if last + 60.0 < primary.end_s {
                assert!(at(last + 60.0) > at(250.0), "{run:?}");
            }
        }
    }

    #[test]
    fn growth_runs_fill_the_device_and_record_when() {
        for run in growth_runs(5, 4) {
            let Label::Growth { onset, full, .. } = run.label else { panic!("{:?}", run.label) };
            assert!(full > onset && full == run.duration, "{run:?}");
        }
    }
}
