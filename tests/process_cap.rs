//! The per-device process cap (`sampler.max_processes_per_device`) is the
//! source's to apply, before its per-process work: which processes a source
//! keeps, what a join then sees, and what a trace records and replays.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use vramd::clock::ScaledClock;
use vramd::model::{ProcessInfo, ScenarioKind};
use vramd::source::DeviceSource;
use vramd::source::join::Joiner;
use vramd::source::simulator::{GOLDEN_ORIGIN, Simulator, SimulatorSpec};
use vramd::source::trace::{RecordMode, RecordOptions, Recorder, Replay};

fn simulator() -> Simulator {
    let spec = SimulatorSpec { scenario: ScenarioKind::MultiTenant, gpus: 2, seed: 3 };
    let clock = ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0);
    Simulator::with_origin(spec, clock, GOLDEN_ORIGIN).unwrap()
}

fn pids(processes: &[ProcessInfo]) -> Vec<u32> {
    processes.iter().map(|process| process.pid).collect()
}

#[test]
fn the_simulator_keeps_the_processes_the_cap_order_picks_and_counts_the_rest() {
    let simulator = simulator();
    let capped = simulator.read_slow(0, 2).unwrap();
    // The whole list at the same instant.
    let mut all = simulator.slow_at(0, capped.at).unwrap().processes.unwrap();
    assert!(all.len() > 2, "the scenario lists more processes than the cap");
    all.sort_by(ProcessInfo::cap_order);
    assert_eq!(pids(capped.processes.as_deref().unwrap()), pids(&all[..2]));
    assert_eq!(capped.processes_left_out, all.len() - 2);

    let uncapped = simulator.read_slow(0, usize::MAX).unwrap();
    assert_eq!(uncapped.processes_left_out, 0, "nothing left out under a cap never reached");
}

#[test]
fn a_join_sees_only_the_processes_the_cap_kept() {
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let joined = seen.clone();
    let joiner = Joiner::new(
        simulator(),
        Box::new(move |_, reading| {
            let listed = reading.processes.as_ref().map_or(0, Vec::len);
            joined.store(listed, Ordering::SeqCst);
        }),
    );
    joiner.devices().unwrap();
    let reading = joiner.read_slow(1, 2).unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    assert!(reading.processes_left_out > 0);
}

#[test]
fn a_trace_replays_what_the_cap_left_out_and_a_lower_cap_leaves_out_more() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("capped.ndjson");
    let options = RecordOptions { mode: RecordMode::Overwrite, keep: 1, protect: None };
    let recorder = Recorder::create(simulator(), &path, &options).unwrap();
    recorder.devices().unwrap();
    let first = recorder.read_slow(0, 2).unwrap();
    let second = recorder.read_slow(0, 2).unwrap();
    drop(recorder);
    assert!(first.processes_left_out > 0);

    let replay = Replay::open_bounded(&path, 1 << 20, u64::MAX).unwrap();
    assert_eq!(replay.read_slow(0, usize::MAX).unwrap(), first, "recorded as the cap left it");
    let lower = replay.read_slow(0, 1).unwrap();
    assert_eq!(pids(lower.processes.as_deref().unwrap()), pids(&second.processes.unwrap()[..1]));
    assert_eq!(lower.processes_left_out, second.processes_left_out + 1);
}
