//! Figures pooled over several seeds' corpora (`--seeds`): one seed holds
//! about six runs per leak group, so its "p95" is that group's slowest run
//! and swings on one draw; pooling gives quantiles that mean something.
//! The report opens with one row per class of run (benign, slow warm-ups,
//! each leak rate, linear growth): latency, misses, resolves per leak,
//! false alarms per device-day of each rule, forecast lead and error.
//! Reads what `main.rs` played; plays nothing itself.

use std::time::Duration;

use vramd_corpus::{LEAK_RATES, Label};

use crate::{MIB, Played, minutes, quantile};

/// A run named across seeds: `seed:index`.
fn name(seed: u64, index: usize) -> String {
    format!("{seed}:{index}")
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |share| format!("{:.1} %", share * 100.0))
}

fn max(values: &[f64]) -> Option<f64> {
    values.iter().copied().reduce(f64::max)
}

fn min(values: &[f64]) -> Option<f64> {
    values.iter().copied().reduce(f64::min)
}

pub fn report(played: &[Played], verbose: bool) {
    classes(played);
    leaks(played, verbose);
    false_alarms(played, verbose);
    forecasts(played, verbose);
    let samples: u64 = played.iter().flat_map(|p| &p.outcomes).map(|o| o.samples).sum();
    let cpu: Option<f64> = played.iter().map(|p| p.cpu_s).sum();
    match cpu {
        Some(cpu) => println!(
            "\nthroughput: {samples} samples in {cpu:.2} s of CPU = {:.2} M samples/s (corpus generation included)",
            samples as f64 / cpu / 1e6
        ),
        None => println!("\nthroughput: {samples} samples (no /proc/thread-self/schedstat)"),
    }
}

/// The corpus's classes of run, as the figures ask for them.
#[derive(Clone, Copy, PartialEq)]
enum Class {
    Benign,
    Warmup,
    Leak(f64),
    Growth,
}

impl Class {
    fn of(label: &Label) -> Self {
        match *label {
            Label::Benign => Class::Benign,
            Label::Warmup { .. } => Class::Warmup,
            Label::Leak { bytes_per_second, .. } => Class::Leak(bytes_per_second),
            Label::Growth { .. } => Class::Growth,
        }
    }

    fn name(self) -> String {
        match self {
            Class::Benign => "benign".to_owned(),
            Class::Warmup => "warm-up, τ 1–10 min, below capacity".to_owned(),
            Class::Leak(rate) => format!("leak {:.2} MiB/s", rate / MIB),
            Class::Growth => "linear growth to full, 20–80 MiB/s".to_owned(),
        }
    }
}

/// One row per class: latency after the onset (leaks), misses, resolves
/// per called leak, false alarms per device-day of each rule (alarms not
/// about the labelled leak or growth), and the forecast's lead and
/// time-to-exhaustion error (growth).
fn classes(played: &[Played]) {
    println!("\nper class, pooled");
    println!(
        "| class | runs | device-hours | latency p50 / p95 | missed | resolves per leak | upgrades per leak | false leak_suspected per day | false exhaustion_forecast per day | reserved_growth (info) per day | forecast lead p50 / min | TTE error p50 / p95 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut order = vec![Class::Benign, Class::Warmup];
    order.extend(LEAK_RATES.map(Class::Leak));
    order.push(Class::Growth);
    for class in order {
        let outcomes: Vec<_> = played
            .iter()
            .flat_map(|seed| &seed.outcomes)
            .filter(|outcome| Class::of(&outcome.label) == class)
            .collect();
        if outcomes.is_empty() {
            continue;
        }
        let hours: f64 = outcomes.iter().map(|o| o.played_s).sum::<f64>() / 3600.0;
        let per_day = |count: usize| count as f64 / hours.max(1e-9) * 24.0;
        let leak_false = outcomes.iter().map(|o| o.leak_false).sum();
        let forecast_false = outcomes.iter().map(|o| o.forecast_false).sum();
        let reserved_growth = outcomes.iter().map(|o| o.reserved_growth).sum();
        let (mut latencies, mut missed, mut resolves, mut called) = (Vec::new(), 0, 0, 0);
        let mut upgrades = 0;
        let (mut leads, mut errors) = (Vec::new(), Vec::new());
        for outcome in &outcomes {
            match outcome.label {
                Label::Leak { onset, .. } => match outcome.leak_fired_s {
                    Some(fired) => {
                        latencies.push(fired - onset.as_secs_f64());
                        resolves += outcome.leak_resolves;
                        upgrades += outcome.leak_upgrades;
                        called += 1;
                    }
                    None => missed += 1,
                },
                Label::Growth { full, .. } => match outcome.forecast {
                    Some((fired, forecast)) => {
                        let lead = full.as_secs_f64() - fired;
                        leads.push(lead);
                        errors.push((forecast - lead).abs() / lead.max(1.0));
                    }
                    None => missed += 1,
                },
                Label::Benign | Label::Warmup { .. } => {}
            }
        }
        let leak = matches!(class, Class::Leak(_));
        let growth = class == Class::Growth;
        println!(
            "| {} | {} | {hours:.0} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} |",
            class.name(),
            outcomes.len(),
            if leak {
                format!(
                    "{} / {}",
                    minutes(quantile(&mut latencies.clone(), 0.5)),
                    minutes(quantile(&mut latencies, 0.95))
                )
            } else {
                "—".to_owned()
            },
            if leak || growth { missed.to_string() } else { "—".to_owned() },
            if leak {
                format!("{:.2}", resolves as f64 / called.max(1) as f64)
            } else {
                "—".to_owned()
            },
            if leak {
                format!("{:.2}", upgrades as f64 / called.max(1) as f64)
            } else {
                "—".to_owned()
            },
            per_day(leak_false),
            per_day(forecast_false),
            per_day(reserved_growth),
            if growth {
                format!("{} / {}", minutes(quantile(&mut leads.clone(), 0.5)), minutes(min(&leads)))
            } else {
                "—".to_owned()
            },
            if growth {
                format!(
                    "{} / {}",
                    percent(quantile(&mut errors.clone(), 0.5)),
                    percent(quantile(&mut errors, 0.95))
                )
            } else {
                "—".to_owned()
            },
        );
    }
}

fn leaks(played: &[Played], verbose: bool) {
    println!(
        "\nleak detection, pooled (latency after onset; missed = not fired within 45 min or before the device filled)"
    );
    println!(
        "| rate | empty_cache | runs | p50 | p95 | max | missed | resolves per leak | upgrades per leak | slowest | per-seed p95 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for rate in LEAK_RATES {
        for empty in [false, true] {
            let (mut pooled, mut count, mut per_seed, mut slowest) =
                (Vec::new(), 0, Vec::new(), None::<(f64, String)>);
            let mut missed_runs = Vec::new();
            let (mut resolves, mut upgrades, mut called) = (0, 0, 0);
            for seed in played {
                for outcome in seed.outcomes.iter().filter(|outcome| {
                    matches!(outcome.label, Label::Leak { bytes_per_second, empty_cache, .. }
                        if bytes_per_second == rate && empty_cache == empty)
                }) {
                    resolves += outcome.leak_resolves;
                    upgrades += outcome.leak_upgrades;
                    called += usize::from(outcome.leak_fired_s.is_some());
                }
                let mut latencies = Vec::new();
                for (index, latency) in crate::leak_group(&seed.outcomes, rate, empty) {
                    let (resolves, upgrades) = seed
                        .outcomes
                        .get(index)
                        .map_or((0, 0), |o| (o.leak_resolves, o.leak_upgrades));
                    count += 1;
                    let Some(latency) = latency else {
                        missed_runs.push(name(seed.seed, index));
                        continue;
                    };
                    latencies.push(latency);
                    if slowest.as_ref().is_none_or(|(worst, _)| latency > *worst) {
                        slowest = Some((latency, name(seed.seed, index)));
                    }
                    if verbose {
                        println!(
                            "leak run {}: latency {}, resolved {resolves} times, upgraded {upgrades}",
                            name(seed.seed, index),
                            minutes(Some(latency))
                        );
                    }
                }
                per_seed.push(minutes(quantile(&mut latencies.clone(), 0.95)));
                pooled.append(&mut latencies);
            }
            let slowest_name = slowest.map_or_else(|| "—".to_owned(), |(_, run)| run);
            println!(
                "| {:.2} MiB/s | {} | {} | {} | {} | {} | {}{} | {:.2} | {:.2} | {} | {} |",
                rate / MIB,
                if empty { "every step" } else { "no" },
                count,
                minutes(quantile(&mut pooled.clone(), 0.5)),
                minutes(quantile(&mut pooled.clone(), 0.95)),
                minutes(max(&pooled)),
                missed_runs.len(),
                if missed_runs.is_empty() { String::new() } else { format!(" {missed_runs:?}") },
                resolves as f64 / called.max(1) as f64,
                upgrades as f64 / called.max(1) as f64,
                slowest_name,
                per_seed.join(", ")
            );
        }
    }
}

fn false_alarms(played: &[Played], verbose: bool) {
    crate::print_false_alarms(played.iter().flat_map(|seed| &seed.outcomes), ", pooled");
    if verbose {
        for seed in played {
            for (index, outcome) in seed.outcomes.iter().enumerate() {
                for alarm in &outcome.false_alarms {
                    println!("run {} ({:?}): {alarm}", name(seed.seed, index), outcome.label);
                }
            }
        }
    }
}

fn forecasts(played: &[Played], verbose: bool) {
    let (mut leads, mut errors, mut clean_errors, mut long_leads) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut runs, mut missed, mut short) = (0, Vec::new(), Vec::new());
    let mut per_seed = Vec::new();
    for seed in played {
        let mut seed_errors = Vec::new();
        for (index, (outcome, run)) in seed.outcomes.iter().zip(&seed.runs).enumerate() {
            let Label::Growth { onset, full, .. } = outcome.label else { continue };
            runs += 1;
            let Some((fired, forecast)) = outcome.forecast else {
                missed.push(name(seed.seed, index));
                continue;
            };
            let lead = full.as_secs_f64() - fired;
            let error = (forecast - lead).abs() / lead.max(1.0);
            leads.push(lead);
            errors.push(error);
            seed_errors.push(error);
            // A second job that starts after the forecast fired makes the
            // device fill sooner than any forecast could know.
            if !run.second_job_start().is_some_and(|start| start.as_secs_f64() >= fired) {
                clean_errors.push(error);
            }
            if full.saturating_sub(onset) >= Duration::from_secs(15 * 60) {
                long_leads.push(lead);
                if lead < 600.0 {
                    short.push(format!("{} {}", name(seed.seed, index), minutes(Some(lead))));
                }
            }
            if verbose {
                println!(
                    "growth run {}: lead {} forecast {} error {}",
                    name(seed.seed, index),
                    minutes(Some(lead)),
                    minutes(Some(forecast)),
                    percent(Some(error))
                );
            }
        }
        per_seed.push(percent(quantile(&mut seed_errors, 0.95)));
    }
    println!("\nexhaustion forecast on linear growth ≥ 20 MiB/s, pooled ({runs} runs)");
    println!(
        "lead p5 {}, p50 {}, min {}; TTE error p50 {}, p95 {}, max {}; missed {}{}",
        minutes(quantile(&mut leads.clone(), 0.05)),
        minutes(quantile(&mut leads.clone(), 0.5)),
        minutes(min(&leads)),
        percent(quantile(&mut errors.clone(), 0.5)),
        percent(quantile(&mut errors.clone(), 0.95)),
        percent(max(&errors)),
        missed.len(),
        if missed.is_empty() { String::new() } else { format!(" {missed:?}") }
    );
    println!(
        "without runs whose second job started after firing: TTE error p50 {}, p95 {}, max {}",
        percent(quantile(&mut clean_errors.clone(), 0.5)),
        percent(quantile(&mut clean_errors.clone(), 0.95)),
        percent(max(&clean_errors))
    );
    println!(
        "runs with >= 15 min from onset to full ({}): lead p5 {}, p50 {}, min {}; under 10 min: {} {short:?}",
        long_leads.len(),
        minutes(quantile(&mut long_leads.clone(), 0.05)),
        minutes(quantile(&mut long_leads.clone(), 0.5)),
        minutes(min(&long_leads)),
        short.len()
    );
    println!("per-seed TTE error p95: {}", per_seed.join(", "));
}
