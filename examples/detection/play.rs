//! Plays corpus runs through the real history, analysis, rules and state
//! machine, as `vramd analyze` does (source time, as fast as the CPU
//! allows), and scores what fired against each run's label. Shared by the
//! detection benchmark (`examples/detection`) and `tests/detection.rs`.

use std::time::Duration;

use vramd::alerts::AlertState;
use vramd::alerts::evaluator::{Evaluator, SourceState};
use vramd::analysis::analyzer::Analyzer;
use vramd::analysis::leak::LeakCheck;
use vramd::app::Config;
use vramd::history::HistoryStore;
use vramd::model::RuleId;
use vramd::source::simulator::GOLDEN_ORIGIN;
use vramd::source::simulator::noise::{self, Stream};
use vramd_corpus::{CorpusRun, Label};

/// What one run made the rules say.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub label: Label,
    /// Seconds played.
    pub played_s: f64,
    /// Fast plus slow readings stored.
    pub samples: u64,
    /// First `leak_suspected` firing for the labelled leaking process,
    /// seconds since the run's start (at or after the onset); a
    /// `reserved_growth` for it counts too (NVML alone cannot say more than
    /// "cache growth or a leak", which is what the issue asks it to say).
    pub leak_fired_s: Option<f64>,
    /// Times the labelled leak's firing alert resolved with no other alert
    /// for it taking over (the leak runs to the end of the run, so each is
    /// a let-go: a page lost and resent).
    pub leak_resolves: usize,
    /// Times its `reserved_growth` resolved as `leak_suspected` took over
    /// in the same evaluation (pending or firing): the same growth said
    /// more strongly, not a let-go.
    pub leak_upgrades: usize,
    /// `leak_suspected` firings that are not the labelled leak.
    pub leak_false: usize,
    /// `reserved_growth` (info: "cache growth or a leak", NVML only)
    /// firings that are not the labelled leak after its onset.
    pub reserved_growth: usize,
    /// First `exhaustion_forecast` firing and its forecast (seconds left).
    pub forecast: Option<(f64, f64)>,
    /// `exhaustion_forecast` firings on runs that do not grow (benign and
    /// leak runs before their onset).
    pub forecast_false: usize,
    /// When the first of those fired, seconds since the run's start.
    pub first_false_forecast_s: Option<f64>,
    /// What each false alarm was, for `--verbose`.
    pub false_alarms: Vec<String>,
}

/// Plays `run` with `config`'s sampling intervals and rules.
// The benchmark calls `play_with`; `tests/detection.rs` calls this.
#[allow(dead_code)]
pub fn play(run: &CorpusRun, config: &Config) -> Outcome {
    play_with(run, config, None, &|_| {})
}

/// [`play`] with the analysis settings changed by `tweak` first (the
/// benchmark's `--param`: the code constants of the tests, for tuning), and
/// allocator statistics refreshed only every `reports` (`--report-interval`;
/// `None`: at every slow sample, as the corpus draws them).
pub fn play_with(
    run: &CorpusRun,
    config: &Config,
    reports: Option<Duration>,
    tweak: &dyn Fn(&mut vramd::analyze::AnalyzeSettings),
) -> Outcome {
    play_traced(run, config, reports, tweak, None).0
}

/// [`play_with`], recording every leak check the analyzer makes of
/// process `traced` (`--explain`): the checks the alerts followed.
pub fn play_traced(
    run: &CorpusRun,
    config: &Config,
    reports: Option<Duration>,
    tweak: &dyn Fn(&mut vramd::analyze::AnalyzeSettings),
    traced: Option<u32>,
) -> (Outcome, Vec<LeakCheck>) {
    // Sized, analysed and judged exactly as `vramd analyze` does.
    let mut settings = vramd::app::analyze_settings(config);
    tweak(&mut settings);
    let store = HistoryStore::new(settings.sizing);
    let devices = store.set_devices(vec![run.device_info()]);
    let mut analyzer = Analyzer::new(settings.analysis.clone());
    if let Some(pid) = traced {
        analyzer.trace_leaks_of(pid);
    }
    let mut evaluator = Evaluator::new(&settings.alerts);
    let fast = config.sampler.fast_interval;
    let slow_every = (config.sampler.slow_interval.as_nanos() / fast.as_nanos().max(1)).max(1);
    let steps = run.duration.as_nanos() / fast.as_nanos().max(1);
    let jitter = config.sampler.slow_jitter.min(config.sampler.slow_interval);
    let interval = config.analysis.evaluation_interval;
    let mut next_evaluation = GOLDEN_ORIGIN.saturating_add(interval);
    let mut outcome = Outcome {
        label: run.label,
        played_s: run.duration.as_secs_f64(),
        samples: 0,
        leak_fired_s: None,
        leak_resolves: 0,
        leak_upgrades: 0,
        leak_false: 0,
        reserved_growth: 0,
        forecast: None,
        forecast_false: 0,
        first_false_forecast_s: None,
        false_alarms: Vec::new(),
    };
    let mut reporter = reports.map(Reporter::new);
    for step in 0..=steps {
        let at =
            GOLDEN_ORIGIN.saturating_add(Duration::from_nanos((fast.as_nanos() * step) as u64));
        for device in &devices {
            let _ = device.record_fast(run.fast_at(at));
            outcome.samples += 1;
            if step % slow_every == 0 {
                // Read as the sampler reads: up to `sampler.slow_jitter`
                // after its tick, at random, so a periodic job is seen at
                // every phase (the daemon's default, 1 s).
                let mut slow = run.slow_at(at.saturating_add(slow_jitter(run, step, jitter)));
                if let Some(reporter) = reporter.as_mut() {
                    reporter.join(&mut slow);
                }
                // Capped as the sampler caps it.
                let dropped = slow.cap_processes(settings.max_processes_per_device);
                let _ = device.record_slow(slow, dropped);
                outcome.samples += 1;
            }
        }
        while next_evaluation <= at {
            let now = next_evaluation;
            let seconds = now.duration_since(GOLDEN_ORIGIN).unwrap_or_default().as_secs_f64();
            let snapshot = analyzer.analyse(&store, now);
            let transitions = evaluator.evaluate(&snapshot, SourceState::Up, now).transitions;
            for transition in &transitions {
                match transition.alert.state {
                    AlertState::Firing => score(&mut outcome, &transition.alert, seconds),
                    // A pending alert dropped before its `for` was never
                    // heard of by a notifier: no resolve.
                    AlertState::Resolved if transition.from == Some(AlertState::Firing) => {
                        count_resolve(&mut outcome, &transition.alert, &transitions);
                    }
                    _ => {}
                }
            }
            next_evaluation = now.saturating_add(interval);
        }
    }
    (outcome, analyzer.take_leak_trace())
}

/// Allocator reports at a cadence of their own, as a workload's reporter
/// posts them (the Python reporter's default is every second) and the daemon
/// joins the latest one onto each slow sample: between two reports a
/// process carries the statistics of the last, taken at whatever phase of
/// the training step the report caught. Each process reports on its own
/// phase (from its PID), so reports of several processes do not line up.
struct Reporter {
    every_ms: i64,
    /// Per PID: the report slot last taken and its statistics.
    last: Vec<(u32, i64, vramd::model::AllocatorStats)>,
}

impl Reporter {
    fn new(every: Duration) -> Self {
        let every_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX).max(1);
        Self { every_ms, last: Vec::new() }
    }

    fn join(&mut self, slow: &mut vramd::model::SlowReading) {
        let at_ms = slow.at.unix_millis();
        for process in slow.processes.iter_mut().flatten() {
            let Some(fresh) = process.allocator else { continue };
            let phase =
                i64::from(process.pid.wrapping_mul(2_654_435_761) % 1_000) * self.every_ms / 1_000;
            let slot = (at_ms + phase).div_euclid(self.every_ms);
            match self.last.iter_mut().find(|(pid, _, _)| *pid == process.pid) {
                Some((_, taken, stats)) if *taken == slot => process.allocator = Some(*stats),
                Some(entry) => *entry = (process.pid, slot, fresh),
                None => self.last.push((process.pid, slot, fresh)),
            }
        }
    }
}

/// Counts a resolve of the labelled leak's firing alert once it has
/// fired: an upgrade where `leak_suspected` for the same process starts or
/// fires in the same evaluation (`transitions`), a let-go otherwise.
fn count_resolve(
    outcome: &mut Outcome,
    alert: &vramd::alerts::Alert,
    transitions: &[vramd::alerts::Transition],
) {
    let Label::Leak { pid, .. } = outcome.label else { return };
    if !matches!(alert.key.rule, RuleId::LeakSuspected | RuleId::ReservedGrowth)
        || alert.key.pid != Some(pid)
        || outcome.leak_fired_s.is_none()
    {
        return;
    }
    let taken_over = alert.key.rule == RuleId::ReservedGrowth
        && transitions.iter().any(|other| {
            other.alert.key.rule == RuleId::LeakSuspected
                && other.alert.key.pid == Some(pid)
                && other.alert.key.uuid == alert.key.uuid
                && matches!(other.alert.state, AlertState::Pending | AlertState::Firing)
        });
    if taken_over {
        outcome.leak_upgrades += 1;
    } else {
        outcome.leak_resolves += 1;
    }
}

fn score(outcome: &mut Outcome, alert: &vramd::alerts::Alert, seconds: f64) {
    match alert.key.rule {
        RuleId::LeakSuspected => match outcome.label {
            Label::Leak { pid, onset, .. }
                if alert.key.pid == Some(pid) && seconds >= onset.as_secs_f64() =>
            {
                outcome.leak_fired_s.get_or_insert(seconds);
            }
            // Linear growth until the device is full is a leak too.
            Label::Growth { onset, .. } if seconds >= onset.as_secs_f64() => {}
            _ => {
                outcome.leak_false += 1;
                outcome.false_alarms.push(format!(
                    "{:.1} min leak_suspected pid {:?} {:?}: {}",
                    seconds / 60.0,
                    alert.key.pid,
                    alert.process,
                    alert.description
                ));
            }
        },
        RuleId::ReservedGrowth => {
            let the_leak = matches!(outcome.label, Label::Leak { pid, onset, .. }
                if alert.key.pid == Some(pid) && seconds >= onset.as_secs_f64());
            // Linear growth until the device is full is a leak too.
            let growing = matches!(outcome.label, Label::Growth { onset, .. }
                if seconds >= onset.as_secs_f64());
            if the_leak {
                outcome.leak_fired_s.get_or_insert(seconds);
            } else if !growing {
                outcome.reserved_growth += 1;
                outcome.false_alarms.push(format!(
                    "{:.1} min reserved_growth pid {:?}: {}",
                    seconds / 60.0,
                    alert.key.pid,
                    alert.description
                ));
            }
        }
        RuleId::ExhaustionForecast => {
            let growing_from = match outcome.label {
                Label::Growth { onset, .. } | Label::Leak { onset, .. } => Some(onset),
                Label::Benign | Label::Warmup { .. } => None,
            };
            if growing_from.is_some_and(|onset| seconds >= onset.as_secs_f64()) {
                outcome.forecast.get_or_insert((seconds, alert.value));
            } else {
                outcome.forecast_false += 1;
                outcome.first_false_forecast_s.get_or_insert(seconds);
                outcome.false_alarms.push(format!(
                    "{:.1} min exhaustion_forecast: {}",
                    seconds / 60.0,
                    alert.description
                ));
            }
        }
        _ => {}
    }
}

/// Where in `[0, jitter)` after its tick the slow read of `step` falls:
/// drawn per run and step, so runs stay reproducible.
fn slow_jitter(run: &CorpusRun, step: u128, jitter: Duration) -> Duration {
    let key = [run.key(), step as u64, SLOW_JITTER_KEY];
    jitter.mul_f64(noise::unit(run.seed, Stream::Corpus, &key))
}

/// Tells the slow-read jitter's draws from the corpus's own.
const SLOW_JITTER_KEY: u64 = 0x534c_4a54;
