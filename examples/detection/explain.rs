//! `--explain RUN`: why the leak of one labelled run is called when it is.
//! The run is played through the real history, analyzer and rules, as the
//! benchmark plays it (the same jittered slow samples, the allocator
//! reports joined onto them, the analyzer's own check times and the state
//! it hands from check to check), with the analyzer recording every leak
//! check of the process (`Analyzer::trace_leaks_of`). Printed for each
//! check after the onset: what the check before handed it (a warm-up's
//! curve as its time constant and the plateau it heads for), its verdict,
//! rule 6's evidence on the whole series judged (`life`: each half's rate,
//! the noise, the slowing in noises) and every window judged, in order,
//! as the detector recorded them. The benchmark's firing time comes last.
//!
//! (An earlier version replayed the run's figures beside the analyzer: it
//! read the samples unjittered and the allocator's point figure, and kept
//! its own carried state, so it could explain checks the alert never saw.)

use std::time::Duration;

use vramd::analysis::floor::FloorScratch;
use vramd::analysis::leak::{LeakCheck, NotALeak, Prior, WindowJudgement};
use vramd::source::simulator::GOLDEN_ORIGIN;

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1_073_741_824.0;

/// Prints `checks` (the analyzer's leak checks of `pid`) from `onset`.
pub fn explain(
    checks: &[LeakCheck],
    pid: u32,
    onset: Duration,
    buckets: usize,
    fired_s: Option<f64>,
) {
    if checks.is_empty() {
        println!("the analyzer made no leak check of PID {pid}");
    }
    let onset_s = onset.as_secs_f64();
    let mut scratch = FloorScratch::default();
    for check in checks {
        let second = check.at.duration_since(GOLDEN_ORIGIN).unwrap_or_default().as_secs_f64();
        if second < onset_s {
            continue;
        }
        let handed = match check.prior {
            Prior::Nothing => "-".to_owned(),
            Prior::Held => "held".to_owned(),
            Prior::WarmingUp(None) => "warming".to_owned(),
            // The curve's time constant and the plateau it heads for.
            Prior::WarmingUp(Some(curve)) => {
                format!("τ{:.0}s→{:.2}G", curve.tau, curve.plateau() / GIB)
            }
        };
        let mut lines = match &check.series {
            Some((_, series)) => life_halves(&mut scratch, series, buckets),
            None => String::new(),
        };
        for record in &check.windows {
            lines.push_str(&describe(record));
        }
        // The hold is confirmed at the newest sample's time, not the pass's.
        let newest = check.series.as_ref().and_then(|(_, series)| series.last()).map(|&(at, _)| at);
        let verdict = match check.verdict {
            Ok(finding) if Some(finding.hold.confirmed_at) != newest => "HELD (carried)".to_owned(),
            Ok(finding) => format!("LEAK {:.0}s", finding.evidence.window_seconds),
            Err(reason) => format!("{reason:?}"),
        };
        println!("{:6.1} min {handed:<15} {verdict:<18}{lines}", (second - onset_s) / 60.0);
    }
    match fired_s {
        Some(fired) => println!(
            "leak_suspected fired in the benchmark {:.1} min after the onset",
            (fired - onset_s) / 60.0
        ),
        None => println!("the labelled leak's leak_suspected did not fire in the benchmark"),
    }
}

/// One window's record: its span (`*` where judged with evaluation dips
/// left out, `~` the hold carried from the last check, `leak::hold`), rules 3 and 4 and the new-ground and history-of-returns
/// tests, upper case where they pass (R keeps rising, B not back at its
/// baseline, N new ground, H no history of returns; `-` where the test
/// does not apply to the window), the verdict (`LEAK`, why not, or `skip`
/// where the window was not judged), then slope (MiB/s), significance,
/// CUSUM, quarter medians above the first (MiB) and distinct levels.
fn describe(record: &WindowJudgement) -> String {
    let flag = |pass: Option<bool>, letter: char| match pass {
        Some(true) => letter,
        Some(false) => letter.to_ascii_lowercase(),
        None => '-',
    };
    let verdict = match record.verdict {
        Some(Ok(())) => "LEAK",
        Some(Err(reason)) => short(reason),
        None => "skip",
    };
    let [q0, q1, q2, q3] = record.quarters_above_first.map(|q| q / MIB);
    format!(
        " [{}s{} {}{}{}{} {verdict} slope {:.2} sig {:.1} cu {:.1} q {q0:.0}/{q1:.0}/{q2:.0}/{q3:.0} lv {}]",
        record.window.as_secs(),
        if record.carried {
            "~"
        } else if record.dips_left_out {
            "*"
        } else {
            ""
        },
        flag(Some(record.keeps_rising), 'R'),
        flag(Some(!record.returns_to_baseline), 'B'),
        flag(record.new_ground, 'N'),
        flag(record.returned_before.map(|returned| !returned), 'H'),
        record.slope_bytes_per_second / MIB,
        record.significance,
        record.cusum.unwrap_or(f64::NAN),
        record.levels
    )
}

fn short(reason: NotALeak) -> &'static str {
    match reason {
        NotALeak::TooShort => "short",
        NotALeak::NoTrend => "notrend",
        NotALeak::SlowGrowth => "slow",
        NotALeak::PoorFit => "fit",
        NotALeak::LevelsOff => "levels",
        NotALeak::ReturnsToBaseline => "returns",
        NotALeak::Staircase => "stairs",
        NotALeak::NoNewGround => "regained",
        NotALeak::Slowing => "slowing",
    }
}

/// Rule 6's evidence on the whole series judged (the process's life where
/// it began inside the window): each half's rate (MiB/s), the floor's
/// noise (MiB) and the slowing in noises.
fn life_halves(
    scratch: &mut FloorScratch,
    window: &[(vramd::model::Timestamp, u64)],
    buckets: usize,
) -> String {
    let Some(&(first, _)) = window.first() else { return String::new() };
    if scratch.line(window, first, buckets).is_none() {
        return String::new();
    }
    let mut buffer = Vec::new();
    let Some(halves) = vramd::analysis::trend::saturation::halves(scratch.points(), &mut buffer)
    else {
        return String::new();
    };
    let lost = (halves.first_rate - halves.second_rate) * halves.half_seconds;
    format!(
        " life {:.2}->{:.2} noise {:.0} slow {:.1}",
        halves.first_rate / MIB,
        halves.second_rate / MIB,
        halves.noise / MIB,
        lost / halves.noise.max(2.0 * MIB)
    )
}
