//! `--explain RUN`: why the leak of one labelled run is called when it is.
//! Replays the leaking process's preferred figure (allocated with reports,
//! NVML usage without) at the slow tier's 1 Hz and prints, at every leak
//! check after the onset, the verdict and every window the detector judged,
//! in its order, as it recorded them (`leak::assess_leak_traced`: the real
//! code's judgements, not a copy of its rules), after rule 6's evidence on
//! the whole series judged (`life`: each half's rate, the noise, the
//! slowing in noises). The checks fall where the
//! analyzer's do in the benchmark (the first evaluation, then every check
//! interval), so the verdicts are the ones the alert saw; the benchmark's
//! own firing time is printed last.

use std::time::Duration;

use vramd::analysis::floor::FloorScratch;
use vramd::analysis::leak::{
    Hold, LeakParams, NotALeak, Prior, Start, WindowJudgement, assess_held_traced,
};
use vramd::source::simulator::GOLDEN_ORIGIN;
use vramd_corpus::{CorpusRun, Label};

const MIB: f64 = 1_048_576.0;

pub fn explain(
    run: &CorpusRun,
    pid: Option<u32>,
    params: &LeakParams,
    check: Duration,
    first_check: Duration,
    fired_s: Option<f64>,
) {
    // A false alarm is explained from the run's start, for the process
    // `--pid` names (on a leak run, the leaking one before its onset too).
    let (pid, onset) = match (run.label, pid) {
        (_, Some(pid)) => (pid, Duration::ZERO),
        (Label::Leak { pid, onset, .. }, None) => (pid, onset),
        (label, None) => {
            println!("not a leak run ({label:?}): name the process with --pid");
            return;
        }
    };
    println!("{run:?}");
    let mut series = Vec::new();
    let mut scratch = FloorScratch::default();
    let mut prior = Prior::Nothing;
    let mut held: Option<Hold> = None;
    let mut judged = Vec::new();
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
        if second < first_s || !(second - first_s).is_multiple_of(check_s) {
            continue;
        }
        let from = at.saturating_sub(params.window);
        let start = series.partition_point(|&(t, _)| t < from);
        let window = series.get(start..).unwrap_or(&[]);
        judged.clear();
        // The analyzer knows when the process was first listed: so does this.
        let start =
            series.first().map_or(Start::Window(from), |&(listed, _)| Start::Listed(listed));
        // Judged before the onset too: each check hands its verdict and a
        // held leak's carried hold to the next, as the analyzer's do
        // (`leak::Prior`, `leak::Hold`).
        let verdict = assess_held_traced(
            &mut scratch,
            window,
            start,
            held.as_ref(),
            &mut prior,
            params,
            &mut judged,
        );
        held = verdict.as_ref().ok().map(|&(_, hold)| hold);
        if second < onset_s {
            continue;
        }
        let mut lines = life_halves(&mut scratch, window, params.buckets);
        for record in &judged {
            lines.push_str(&describe(record));
        }
        let verdict = match verdict {
            Ok((_, hold)) if hold.confirmed_at != at => "HELD (carried)".to_owned(),
            Ok((evidence, _)) => format!("LEAK {:.0}s", evidence.window_seconds),
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
