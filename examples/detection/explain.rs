//! `--explain RUN`: why the leak of one labelled run is called when it is.
//! Replays the leaking process's preferred figure (allocated with reports,
//! NVML usage without) at the slow tier's 1 Hz and prints, at every leak
//! check after the onset, each window's floor line and the verdict. The
//! checks fall where the analyzer's do in the benchmark (the first
//! evaluation, then every check interval), so the verdicts are the ones
//! the alert saw; the benchmark's own firing time is printed last.

use std::time::Duration;

use vramd::analysis::floor::FloorScratch;
use vramd::analysis::leak::sequential::level_cusum;
use vramd::analysis::leak::{LeakParams, assess_leak};
use vramd::source::simulator::GOLDEN_ORIGIN;
use vramd::source::simulator::corpus::{CorpusRun, Label};

const MIB: f64 = 1_048_576.0;

pub fn explain(
    run: &CorpusRun,
    params: &LeakParams,
    check: Duration,
    first_check: Duration,
    fired_s: Option<f64>,
) {
    let Label::Leak { pid, onset, .. } = run.label else {
        println!("not a leak run: {:?}", run.label);
        return;
    };
    println!("{run:?}");
    let mut series = Vec::new();
    let mut scratch = FloorScratch::default();
    let mut held = false;
    let (check_s, onset_s) = (check.as_secs().max(1), onset.as_secs());
    let first_s = first_check.as_secs();
    for second in 0..=run.duration.as_secs() {
        let at = GOLDEN_ORIGIN.saturating_add(Duration::from_secs(second));
        let slow = run.slow_at(at);
        let process = slow.processes.iter().flatten().find(|process| process.pid == pid);
        let value = process.and_then(|p| p.allocator.map(|a| a.allocated_bytes).or(p.used_bytes));
        if let Some(value) = value {
            series.push((at, value));
        }
        if second < onset_s || second < first_s || !(second - first_s).is_multiple_of(check_s) {
            continue;
        }
        let from = at.saturating_sub(params.window);
        let start = series.partition_point(|&(t, _)| t < from);
        let window = series.get(start..).unwrap_or(&[]);
        let verdict = assess_leak(&mut scratch, window, from, held, params);
        held = verdict.is_ok();
        let mut lines = String::new();
        // The longest window's floor, for the shorter ones' new-ground test.
        let covered = window.first().map_or(Duration::ZERO, |&(first, _)| {
            let predates = first <= from.saturating_add(Duration::from_secs(10));
            let judged = if predates { first } else { first.saturating_add(params.warmup) };
            at.duration_since(judged).unwrap_or_default()
        });
        let mut longest = params.shortest_window;
        while longest < params.window && longest.saturating_mul(2).min(params.window) <= covered {
            longest = longest.saturating_mul(2).min(params.window);
        }
        if scratch.line(window, at.saturating_sub(longest), params.buckets).is_some() {
            scratch.keep_as_prior();
        }
        let mut span = params.shortest_window;
        while span <= params.window {
            let start = at.saturating_sub(span);
            if let Some(line) = scratch.line(window, start, params.buckets) {
                let [q0, q1, q2, q3] = line.quarters.map(|q| (q - line.quarters[0]) / MIB);
                let drift = level_cusum(
                    scratch.points(),
                    line.quarters[0],
                    line.spread.max(params.noise_floor_bytes),
                    params.sequential_allowance,
                );
                // Rules 3 and 4 and the new-ground and return-history
                // tests, upper case where they pass: R keeps rising, B not
                // back at its baseline, N new ground, H no history of returns.
                let end = line.intercept + line.slope * line.span_seconds;
                let slack = params.return_share * line.growth().max(0.0);
                let new_ground = scratch.prior_high(start).is_none_or(|high| {
                    end > high + params.noise_floor_bytes && line.baseline >= high - slack
                });
                let history = scratch.prior_drawdown(start)
                    < (params.return_evidence_share * line.growth()).max(params.noise_floor_bytes);
                let flag = |pass: bool, letter: char| {
                    if pass { letter } else { letter.to_ascii_lowercase() }
                };
                lines.push_str(&format!(
                    " [{}s {}{}{}{} slope {:.2} sig {:.1} cu {:.1} q {:.0}/{:.0}/{:.0}/{:.0} lv {}]",
                    span.as_secs(),
                    flag(line.keeps_rising(params.keep_rising_share), 'R'),
                    flag(!line.returns_to_baseline(params.return_share), 'B'),
                    flag(new_ground, 'N'),
                    flag(history, 'H'),
                    line.slope / MIB,
                    line.significance(params.noise_floor_bytes),
                    drift.map_or(f64::NAN, |climb| climb.cusum),
                    q0,
                    q1,
                    q2,
                    q3,
                    line.levels
                ));
            }
            if span >= params.window {
                break;
            }
            span = span.saturating_mul(2).min(params.window);
        }
        let verdict = match verdict {
            Ok(evidence) => format!("LEAK {:.0}s", evidence.window_seconds),
            Err(reason) => format!("{reason:?}"),
        };
        println!("{:6.1} min {verdict:<18}{lines}", (second - onset_s) as f64 / 60.0);
    }
    match fired_s {
        Some(fired) => println!(
            "leak_suspected fired in the benchmark {:.1} min after the onset",
            (fired - onset.as_secs_f64()) / 60.0
        ),
        None => println!("leak_suspected did not fire in the benchmark"),
    }
}
