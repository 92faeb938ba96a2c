//! `vramd analyze --replay` streams the trace (read and parsed on a thread
//! of its own, never held whole): its timeline must be the one the
//! whole-trace replay gives, in process and through the command.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::Path;
use std::time::Duration;

use vramd::analyze::{self, AnalyzeReport};
use vramd::app::Config;
use vramd::clock::ScaledClock;
use vramd::model::ScenarioKind;
use vramd::play::{Schedule, record_simulator};
use vramd::source::simulator::{GOLDEN_ORIGIN, Simulator, SimulatorSpec};
use vramd::source::trace::{Replay, StreamOptions, TraceStream};

/// A simulated trace of `scenario` on two GPUs, as the recorder writes it.
fn simulated_trace(scenario: ScenarioKind, minutes: u64, path: &Path) {
    let spec = SimulatorSpec { scenario, gpus: 2, seed: 7 };
    let clock = ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0);
    let simulator = Simulator::with_origin(spec, clock, GOLDEN_ORIGIN).unwrap();
    let schedule = Schedule {
        from: GOLDEN_ORIGIN,
        duration: Duration::from_secs(minutes * 60),
        fast: Duration::from_millis(250),
        slow: Duration::from_secs(1),
    };
    record_simulator(simulator, schedule, path).unwrap();
}

fn whole(path: &Path) -> AnalyzeReport {
    let settings = vramd::app::analyze_settings(&Config::default());
    let trace = Replay::open_bounded(path, 1 << 20, u64::MAX).unwrap();
    analyze::replay(&settings, &trace)
}

fn streamed(path: &Path) -> AnalyzeReport {
    let settings = vramd::app::analyze_settings(&Config::default());
    let options = StreamOptions { max_line_bytes: 1 << 20, reorder_records: 4096 };
    analyze::replay_stream(&settings, TraceStream::open(path, options).unwrap()).unwrap()
}

#[test]
fn a_streamed_replay_alerts_exactly_as_the_whole_trace_replay() {
    let dir = tempfile::tempdir().unwrap();
    for (scenario, minutes) in [(ScenarioKind::TrainingFragmentation, 20), (ScenarioKind::Leak, 25)]
    {
        let path = dir.path().join(format!("{}.ndjson", scenario.name()));
        simulated_trace(scenario, minutes, &path);
        let whole = whole(&path);
        assert!(!whole.timeline.is_empty(), "{scenario:?}: the trace should alert");
        let streamed = streamed(&path);
        assert_eq!(streamed.late_records, Some(0), "{scenario:?}");
        assert_eq!(
            AnalyzeReport { late_records: None, ..streamed },
            whole,
            "{scenario:?}: the streamed replay differs"
        );
    }
}

#[test]
fn vramd_analyze_replay_prints_the_timeline_of_the_whole_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.ndjson");
    simulated_trace(ScenarioKind::TrainingFragmentation, 20, &path);
    let output = support::run(&["analyze", "--replay", path.to_str().unwrap(), "--json"], &[]);
    assert!(output.status.success(), "{}", output.stderr);
    let printed: serde_json::Value = serde_json::from_str(&output.stdout).unwrap();
    let expected = serde_json::to_value(whole(&path)).unwrap();
    assert_eq!(printed["timeline"], expected["timeline"]);
    assert_eq!(printed["samples"], expected["samples"]);
    assert_eq!(printed["evaluations"], expected["evaluations"]);
    assert_eq!(printed["late_records"], 0);
}
