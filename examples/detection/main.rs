//! The detection benchmark: plays the labelled, randomised corpus
//! (`crates/corpus`, the `vramd-corpus` crate) through the real analysis, rules
//! and state machine, as `vramd analyze` does, and prints detection latency
//! per leak rate, false alarms per device-day on benign runs, forecast lead
//! time and time-to-exhaustion error, and offline throughput.
//!
//! `cargo run --release --example detection -- --runs 200 --growth-runs 24 --seed 1`
//! (figures and their reading in docs/alerts.md, "Detection benchmark").
//! `--help` lists the flags (`args.rs`); the configuration keys they set
//! (sampling intervals, the `leak_suspected` threshold and `for`) are read
//! and refused by the daemon's own loader (`sampling.rs`). `--seeds 1-6`
//! plays several seeds' corpora and prints figures pooled over all of them
//! (`pooled.rs`); `--jobs N` plays N seeds side by side (default 1: the
//! figures are CPU-bound and the machine is shared).

// An example, not the daemon: a bad argument ends it with a message and
// exit status 2 (`args::refuse`); what is left to `expect` are its own
// invariants (a seed's thread that panicked, the leak rule on by default).
#![allow(clippy::expect_used)]

mod args;
mod explain;
mod forecast;
mod play;
mod pooled;
mod sampling;
mod stepped;

use std::time::Duration;

use args::{Args, refuse};
use vramd::app::Config;
use vramd_corpus::{self as corpus, CorpusRun, LEAK_RATES, Label};

const MIB: f64 = 1_048_576.0;

/// Applies `--param` values (seconds for durations, bytes for sizes).
fn tweak(settings: &mut vramd::analyze::AnalyzeSettings, params: &[(String, f64)]) {
    let seconds = |value: f64| Duration::from_secs_f64(value);
    for (name, value) in params {
        let value = *value;
        let forecast = &mut settings.analysis.forecast;
        if let Some((_, leak)) = settings.analysis.leak.as_mut() {
            match name.as_str() {
                "leak.shortest_window" => leak.shortest_window = seconds(value),
                "leak.buckets" => leak.buckets = value as usize,
                "leak.min_significance" => leak.min_significance = value,
                "leak.keep_rising_share" => leak.keep_rising_share = value,
                "leak.return_share" => leak.return_share = value,
                "leak.return_evidence_share" => leak.return_evidence_share = value,
                "leak.noise_floor" => leak.noise_floor_bytes = value,
                "leak.staircase_levels" => leak.staircase_levels = value as usize,
                "leak.warmup" => leak.warmup = seconds(value),
                "leak.sequential_bound" => leak.sequential_bound = value,
                "leak.sequential_allowance" => leak.sequential_allowance = value,
                "leak.sequential_min_significance" => leak.sequential_min_significance = value,
                "leak.sequential_override" => leak.sequential_override = value,
                "leak.dip_depth" => leak.dip_depth_bytes = value,
                "leak.dip_longest" => leak.dip_longest = seconds(value),
                "leak.new_ground_spreads" => leak.new_ground_spreads = value,
                "leak.dips_shortest_window" => leak.dips_shortest_window = seconds(value),
                "leak.slowing_significance" => leak.slowing_significance = value,
                _ => {}
            }
        }
        match name.as_str() {
            "leak_check_interval" => settings.analysis.config.leak_check_interval = seconds(value),
            "forecast.buckets" => forecast.buckets = value as usize,
            "forecast.keep_rising_share" => forecast.keep_rising_share = value,
            "forecast.min_span" => forecast.min_span = seconds(value),
            "forecast.peak_window" => forecast.peak_window = seconds(value),
            "forecast.recent_splits" => forecast.recent_splits = value as u32,
            "forecast.consistent_share" => forecast.consistent_share = value,
            "forecast.local_lag_share" => forecast.local_lag_share = value,
            "forecast.early_splits" => forecast.early_splits = value as u32,
            "forecast.early_min_fit" => forecast.early_min_fit = value,
            "forecast.process_share" => forecast.process_share = value,
            "forecast.slowing_significance" => forecast.slowing_significance = value,
            "forecast.joined_settle" => forecast.joined_settle = seconds(value),
            "trend_window" => settings.analysis.config.trend_window = seconds(value),
            "forecast.min_fit" => settings.analysis.exhaustion_min_fit = value,
            "forecast.for" => {
                settings.alerts.rules.exhaustion_forecast.rule.for_duration = seconds(value);
            }
            name if name.starts_with("leak.") => {}
            other => refuse(&format!("unknown --param {other}")),
        }
    }
}

/// One seed's corpus and what the rules said on each run.
pub struct Played {
    pub seed: u64,
    pub runs: Vec<CorpusRun>,
    pub outcomes: Vec<play::Outcome>,
    /// On-CPU seconds of the playing thread (corpus generation included).
    pub cpu_s: Option<f64>,
}

fn corpus_of(seed: u64, args: &Args) -> Vec<CorpusRun> {
    corpus::corpus(seed, args.runs)
        .into_iter()
        .chain(corpus::growth_runs(seed, args.growth_runs))
        .chain(corpus::warmup_runs(seed, args.warmup_runs))
        .chain(corpus::stepped_runs(seed, args.stepped_runs))
        .chain(corpus::dipping_runs(seed, args.dipping_runs))
        .chain(corpus::running_max_runs(seed, args.running_max_runs))
        .map(|run| if args.point_reports { run.point_reports() } else { run })
        .collect()
}

fn play_seed(seed: u64, args: &Args, config: &Config) -> Played {
    let started = cpu_ns();
    let runs = corpus_of(seed, args);
    let outcomes = runs
        .iter()
        .map(|run| {
            play::play_with(run, config, args.report_interval, &|settings| {
                tweak(settings, &args.params)
            })
        })
        .collect();
    let cpu_s = started.zip(cpu_ns()).map(|(a, b)| b.saturating_sub(a) as f64 / 1e9);
    Played { seed, runs, outcomes, cpu_s }
}

/// Plays `seeds`, `jobs` at a time, in the order given.
fn play_seeds(seeds: &[u64], args: &Args, config: &Config) -> Vec<Played> {
    let mut played = Vec::with_capacity(seeds.len());
    for chunk in seeds.chunks(args.jobs) {
        std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&seed| scope.spawn(move || play_seed(seed, args, config)))
                .collect();
            for handle in handles {
                played.push(handle.join().expect("a seed's thread panicked"));
            }
        });
    }
    played
}

/// The runs of one leak group (rate, `empty_cache()` or not) among
/// `outcomes`: each run's index and its latency after the onset (`None`:
/// missed).
pub fn leak_group(
    outcomes: &[play::Outcome],
    rate: f64,
    empty: bool,
) -> impl Iterator<Item = (usize, Option<f64>)> + '_ {
    outcomes.iter().enumerate().filter_map(move |(index, outcome)| {
        let Label::Leak { onset, bytes_per_second, empty_cache, .. } = outcome.label else {
            return None;
        };
        let latency = outcome.leak_fired_s.map(|fired| fired - onset.as_secs_f64());
        (bytes_per_second == rate && empty_cache == empty).then_some((index, latency))
    })
}

/// The benign runs' alarms per rule and device-day, and the leak runs'
/// alarms outside their leak, over `outcomes` (one seed's runs, or every
/// seed's with `pooled` naming it in the heading).
pub fn print_false_alarms<'a>(
    outcomes: impl Iterator<Item = &'a play::Outcome> + Clone,
    pooled: &str,
) {
    let benign_and_more = outcomes.clone();
    let benign: Vec<_> = outcomes.clone().filter(|o| o.label == Label::Benign).collect();
    let hours: f64 = benign.iter().map(|o| o.played_s).sum::<f64>() / 3600.0;
    let leak_false: usize = benign.iter().map(|o| o.leak_false).sum();
    let forecast_false: usize = benign.iter().map(|o| o.forecast_false).sum();
    let leak_runs_false: usize = outcomes
        .filter(|o| matches!(o.label, Label::Leak { .. }))
        .map(|o| o.leak_false + o.forecast_false)
        .sum();
    println!("\nfalse alarms on {} benign runs ({hours:.0} device-hours){pooled}", benign.len());
    println!("| rule | alarms | per device-day |");
    println!("|---|---|---|");
    for (rule, count) in [("leak_suspected", leak_false), ("exhaustion_forecast", forecast_false)] {
        println!("| {rule} | {count} | {:.2} |", count as f64 / hours.max(1e-9) * 24.0);
    }
    println!("(leak runs: {leak_runs_false} alarms on other processes or before the onset)");
    let warmups: Vec<_> = outcomes_of_warmups(benign_and_more.clone()).collect();
    let hours: f64 = warmups.iter().map(|o| o.played_s).sum::<f64>() / 3600.0;
    let leak: usize = warmups.iter().map(|o| o.leak_false).sum();
    let forecast: usize = warmups.iter().map(|o| o.forecast_false).sum();
    let alarmed = warmups.iter().filter(|o| o.leak_false + o.forecast_false > 0).count();
    println!(
        "warm-ups of 1-10 min below capacity ({} runs, {hours:.0} device-hours): leak_suspected {leak}, exhaustion_forecast {forecast} ({:.2} per device-day; {alarmed} runs alarmed)",
        warmups.len(),
        (leak + forecast) as f64 / hours.max(1e-9) * 24.0
    );
}

/// The slow warm-up runs among `outcomes`.
fn outcomes_of_warmups<'a>(
    outcomes: impl Iterator<Item = &'a play::Outcome>,
) -> impl Iterator<Item = &'a play::Outcome> {
    outcomes.filter(|o| matches!(o.label, Label::Warmup { .. }))
}

/// On-CPU nanoseconds of this thread: on a machine shared with builds,
/// wall time would count other processes' time.
fn cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

pub fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let index = ((values.len() - 1) as f64 * q).round() as usize;
    values.get(index).copied()
}

pub fn minutes(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |seconds| format!("{:.1} min", seconds / 60.0))
}

fn main() {
    let args = args::parse();
    let config = sampling::config(&args);
    // An unknown --param is refused here, before any run is played.
    tweak(&mut vramd::app::analyze_settings(&config), &args.params);
    let leak_rule = &config.alerts.rules.leak_suspected.rule;
    let custom = args.report_interval.is_some()
        || args.keys.iter().any(|(flag, ..)| flag.ends_with("-interval"));
    // Only when changed: the default run's output stays as it was.
    if custom {
        println!(
            "sampling: fast {:?}, slow {:?}, evaluation {:?}, allocator reports {}",
            config.sampler.fast_interval,
            config.sampler.slow_interval,
            config.analysis.evaluation_interval,
            args.report_interval
                .map_or_else(|| "every slow sample".to_owned(), |d| format!("every {d:?}"))
        );
    }
    if let Some(seeds) = &args.seeds {
        println!(
            "corpus seeds {seeds:?}, {} runs + {} growth runs each; leak_suspected threshold {:.0} B/s, for {} s",
            args.runs,
            args.growth_runs,
            leak_rule.threshold,
            leak_rule.for_duration.as_secs()
        );
        let played = play_seeds(seeds, &args, &config);
        pooled::report(&played, args.verbose);
        stepped::report(&played);
        return;
    }
    println!(
        "corpus seed {}, {} runs + {} growth runs; leak_suspected threshold {:.0} B/s, for {} s",
        args.seed,
        args.runs,
        args.growth_runs,
        leak_rule.threshold,
        leak_rule.for_duration.as_secs()
    );
    if let Some(index) = args.explain {
        let params = &args.params;
        let runs = corpus_of(args.seed, &args);
        let mut settings = vramd::app::analyze_settings(&config);
        tweak(&mut settings, params);
        let Some(run) = runs.get(index) else {
            refuse(&format!("--explain {index}: the corpus has {} runs", runs.len()))
        };
        // A false alarm is explained from the run's start, for the process
        // `--pid` names (on a leak run, the leaking one before its onset too).
        let (pid, onset) = match (run.label, args.explain_pid) {
            (_, Some(pid)) => (Some(pid), Duration::ZERO),
            (corpus::Label::Leak { pid, onset, .. }, None) => (Some(pid), onset),
            (_, None) => (None, Duration::ZERO),
        };
        let tweaked = |settings: &mut vramd::analyze::AnalyzeSettings| tweak(settings, params);
        let (outcome, checks) =
            play::play_traced(run, &config, args.report_interval, &tweaked, pid);
        // A growth run, or any run the forecast fired on falsely: the
        // forecast's checks; otherwise the leak's.
        let forecast_fired = match run.label {
            corpus::Label::Growth { .. } => Some(outcome.forecast.map(|(fired, _)| fired)),
            corpus::Label::Benign | corpus::Label::Warmup { .. } => {
                outcome.first_false_forecast_s.map(Some)
            }
            corpus::Label::Leak { .. } => None,
        };
        if let Some(fired) = forecast_fired
            && args.explain_pid.is_none()
        {
            forecast::explain(run, &settings, fired);
            return;
        }
        let Some(pid) = pid else {
            println!("not a leak run ({:?}): name the process with --pid", run.label);
            return;
        };
        let (_, leak) = settings.analysis.leak.expect("leak rule enabled");
        println!("{run:?}");
        explain::explain(&checks, pid, onset, leak.buckets, outcome.leak_fired_s);
        for alarm in &outcome.false_alarms {
            println!("false alarm in the benchmark: {alarm}");
        }
        return;
    }
    let Played { runs, outcomes, cpu_s, .. } = play_seed(args.seed, &args, &config);

    println!(
        "\nleak detection (latency after onset; missed = not fired within 45 min or before the device filled)"
    );
    println!("| rate | empty_cache | runs | p50 | p95 | max | missed |");
    println!("|---|---|---|---|---|---|---|");
    for rate in LEAK_RATES {
        for empty in [false, true] {
            let group: Vec<_> = leak_group(&outcomes, rate, empty).map(|(_, l)| l).collect();
            let count = group.len();
            let mut latencies: Vec<f64> = group.into_iter().flatten().collect();
            let missed = count - latencies.len();
            let max = latencies.iter().copied().reduce(f64::max);
            println!(
                "| {:.2} MiB/s | {} | {} | {} | {} | {} | {} |",
                rate / MIB,
                if empty { "every step" } else { "no" },
                count,
                minutes(quantile(&mut latencies.clone(), 0.5)),
                minutes(quantile(&mut latencies, 0.95)),
                minutes(max),
                missed
            );
        }
    }

    print_false_alarms(outcomes.iter(), "");

    println!("\nexhaustion forecast on linear growth ≥ 20 MiB/s");
    println!("| run | rate | onset | full | fired | lead | forecast | error |");
    println!("|---|---|---|---|---|---|---|---|");
    let (mut leads, mut errors, mut missed) = (Vec::new(), Vec::new(), 0);
    // Without runs whose second job started after the forecast fired, and
    // the leads of runs that leave ≥ 15 min between onset and full.
    let (mut clean_errors, mut left_out, mut long_leads) = (Vec::new(), Vec::new(), Vec::new());
    for (index, (outcome, run)) in outcomes.iter().zip(&runs).enumerate() {
        let Label::Growth { onset, bytes_per_second, full } = outcome.label else { continue };
        let Some((fired, forecast)) = outcome.forecast else {
            missed += 1;
            continue;
        };
        let lead = full.as_secs_f64() - fired;
        let error = (forecast - lead).abs() / lead.max(1.0);
        leads.push(lead);
        errors.push(error);
        match run.second_job_start() {
            Some(start) if start.as_secs_f64() >= fired => left_out.push(index),
            _ => clean_errors.push(error),
        }
        if full.saturating_sub(onset) >= Duration::from_secs(15 * 60) {
            long_leads.push(lead);
        }
        println!(
            "| {index} | {:.0} MiB/s | {} | {} | {} | {} | {} | {:.1} % |",
            bytes_per_second / MIB,
            minutes(Some(onset.as_secs_f64())),
            minutes(Some(full.as_secs_f64())),
            minutes(Some(fired)),
            minutes(Some(lead)),
            minutes(Some(forecast)),
            error * 100.0
        );
    }
    let min_lead = leads.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "lead p50 {}, min {}; TTE error p50 {:.1} %, p95 {:.1} %, max {:.1} %; missed {missed}",
        minutes(quantile(&mut leads, 0.5)),
        minutes(min_lead.is_finite().then_some(min_lead)),
        quantile(&mut errors.clone(), 0.5).unwrap_or(f64::NAN) * 100.0,
        quantile(&mut errors.clone(), 0.95).unwrap_or(f64::NAN) * 100.0,
        errors.iter().copied().fold(0.0, f64::max) * 100.0
    );
    let long_min = long_leads.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "without runs whose second job started after firing ({left_out:?}): TTE error p50 {:.1} %, p95 {:.1} %, max {:.1} %",
        quantile(&mut clean_errors.clone(), 0.5).unwrap_or(f64::NAN) * 100.0,
        quantile(&mut clean_errors.clone(), 0.95).unwrap_or(f64::NAN) * 100.0,
        clean_errors.iter().copied().fold(0.0, f64::max) * 100.0
    );
    println!(
        "runs with >= 15 min from onset to full ({}): lead p50 {}, min {}",
        long_leads.len(),
        minutes(quantile(&mut long_leads, 0.5)),
        minutes(long_min.is_finite().then_some(long_min))
    );

    if args.verbose {
        for (index, (outcome, run)) in outcomes.iter().zip(&runs).enumerate() {
            if let Label::Leak { onset, .. } = outcome.label {
                let latency = outcome.leak_fired_s.map(|fired| fired - onset.as_secs_f64());
                println!("leak run {index}: latency {}\n  {run:?}", minutes(latency));
            }
            if let (Label::Growth { full, .. }, Some((fired, forecast))) =
                (outcome.label, outcome.forecast)
            {
                let lead = full.as_secs_f64() - fired;
                println!(
                    "growth run {index}: lead {} forecast {}\n  {run:?}",
                    minutes(Some(lead)),
                    minutes(Some(forecast))
                );
            }
            for alarm in &outcome.false_alarms {
                println!("run {index} ({:?}): {alarm}\n  {run:?}", outcome.label);
            }
        }
    }
    let samples: u64 = outcomes.iter().map(|o| o.samples).sum();
    match cpu_s {
        Some(cpu) => println!(
            "\nthroughput: {samples} samples in {cpu:.2} s of CPU = {:.2} M samples/s (corpus generation included)",
            samples as f64 / cpu / 1e6
        ),
        None => println!("\nthroughput: {samples} samples (no /proc/thread-self/schedstat)"),
    }
}
