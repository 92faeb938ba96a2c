//! The stepped class (`--stepped-runs`) by step period: steps commensurate
//! with the sampling fail, or not, at each period of their own, so the
//! issue's targets hold "at every step period" only if each row meets them.
//! Reads what `main.rs` played; plays nothing itself.

use vramd_corpus::{LEAK_RATES, Label, STEP_PERIODS};

use crate::{MIB, Played, minutes, quantile};

/// Per step period: the benign runs' false `leak_suspected` (alarms on
/// any process, and on leak runs' other processes or before the onset),
/// then each leak rate's latency p50 / p95 and misses. Nothing where no
/// stepped run was played.
pub fn report(played: &[Played]) {
    let stepped = || {
        played
            .iter()
            .flat_map(|seed| seed.runs.iter().zip(&seed.outcomes))
            .filter(|(run, _)| run.step_period.is_some())
    };
    if stepped().next().is_none() {
        return;
    }
    println!("\nstepped runs by step period, pooled");
    println!(
        "| step period | benign runs | false leak_suspected (benign / leak runs) | leak rate | leak runs | latency p50 / p95 | missed |"
    );
    println!("|---|---|---|---|---|---|---|");
    for period in STEP_PERIODS {
        let runs: Vec<_> = stepped().filter(|(run, _)| run.step_period == Some(period)).collect();
        let benign: Vec<_> = runs.iter().filter(|(run, _)| run.label == Label::Benign).collect();
        let benign_false: usize = benign.iter().map(|(_, outcome)| outcome.leak_false).sum();
        let leak_false: usize = runs
            .iter()
            .filter(|(run, _)| matches!(run.label, Label::Leak { .. }))
            .map(|(_, outcome)| outcome.leak_false)
            .sum();
        for (row, rate) in LEAK_RATES.into_iter().enumerate() {
            let leaks: Vec<_> = runs
                .iter()
                .filter_map(|(run, outcome)| match run.label {
                    Label::Leak { bytes_per_second, onset, .. } if bytes_per_second == rate => {
                        Some(outcome.leak_fired_s.map(|fired| fired - onset.as_secs_f64()))
                    }
                    _ => None,
                })
                .collect();
            let mut latencies: Vec<f64> = leaks.iter().flatten().copied().collect();
            let missed = leaks.len() - latencies.len();
            let (period_cell, benign_cells) = if row == 0 {
                (
                    format!("{period} s"),
                    (benign.len().to_string(), format!("{benign_false} / {leak_false}")),
                )
            } else {
                (String::new(), (String::new(), String::new()))
            };
            println!(
                "| {period_cell} | {} | {} | {:.2} MiB/s | {} | {} / {} | {missed} |",
                benign_cells.0,
                benign_cells.1,
                rate / MIB,
                leaks.len(),
                minutes(quantile(&mut latencies.clone(), 0.5)),
                minutes(quantile(&mut latencies, 0.95)),
            );
        }
    }
}
