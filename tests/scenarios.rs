//! The labelled scenario suite: every simulated scenario runs through the
//! `vramd analyze` pipeline (the same analysis and alert engine as the daemon) with
//! the default configuration, and must raise exactly the alerts it declares
//! (`tests/support/expectations.rs`), each by its deadline.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use vramd::alerts::AlertState;
use vramd::analyze::{self, AnalyzeReport};
use vramd::app::Config;
use vramd::clock::ScaledClock;
use vramd::model::RuleId;
use vramd::source::simulator::{GOLDEN_ORIGIN, ScenarioKind, Simulator, SimulatorSpec};
use vramd::source::{Simulation, SimulatorConfig};

#[path = "support/expectations.rs"]
mod expectations;

use expectations::expected_alerts;

const PLAYED: Duration = Duration::from_secs(45 * 60);

fn play(scenario: ScenarioKind) -> AnalyzeReport {
    let config = Config::default();
    let simulator = Simulation {
        scenario,
        simulator: SimulatorConfig { gpus: 2, seed: 1, container_ids: false },
    };
    analyze::simulate(&vramd::app::analyze_settings(&config), &simulator, PLAYED).unwrap()
}

fn check(scenario: ScenarioKind) {
    let report = play(scenario);
    let firing: Vec<_> = report
        .timeline
        .iter()
        .filter(|entry| entry.transition.alert.state == AlertState::Firing)
        .collect();
    let expected = expected_alerts(scenario);
    for want in expected {
        let hit = firing.iter().find(|entry| {
            let alert = &entry.transition.alert;
            alert.key.rule == want.rule
                && alert.gpu == want.gpu
                && want.process.is_none_or(|name| alert.process.as_deref() == Some(name))
        });
        let Some(hit) = hit else {
            panic!(
                "{scenario}: {} on GPU {} never fired\n{}",
                want.rule,
                want.gpu,
                analyze::render_table(&report)
            );
        };
        let fired_at = Duration::from_secs_f64(hit.offset_seconds);
        assert!(
            fired_at <= want.by,
            "{scenario}: {} fired at {fired_at:?}, later than {:?}\n{}",
            want.rule,
            want.by,
            analyze::render_table(&report)
        );
        eprintln!(
            "{scenario:<24} {:<30} gpu {} onset {:>5.1} min  fired {:>5.1} min  latency {:>5.1} min",
            want.rule,
            want.gpu,
            want.onset.as_secs_f64() / 60.0,
            fired_at.as_secs_f64() / 60.0,
            fired_at.saturating_sub(want.onset).as_secs_f64() / 60.0
        );
    }
    for entry in &firing {
        let alert = &entry.transition.alert;
        let declared =
            expected.iter().any(|want| want.rule == alert.key.rule && want.gpu == alert.gpu);
        assert!(
            declared,
            "{scenario}: unexpected alert {} ({})\n{}",
            alert.id,
            alert.summary,
            analyze::render_table(&report)
        );
    }
}

#[test]
fn steady_inference_raises_nothing() {
    check(ScenarioKind::SteadyInference);
}

#[test]
fn idle_raises_nothing() {
    check(ScenarioKind::Idle);
}

#[test]
fn training_fragmentation_raises_its_alerts_in_order() {
    check(ScenarioKind::TrainingFragmentation);
}

#[test]
fn leak_raises_a_forecast_then_a_leak() {
    check(ScenarioKind::Leak);
}

#[test]
fn oom_spike_raises_retries_and_oom_but_not_memory_high() {
    check(ScenarioKind::OomSpike);
}

#[test]
fn multi_tenant_flags_the_growing_tenant() {
    check(ScenarioKind::MultiTenant);
}

#[test]
fn device_lost_raises_device_lost_for_that_gpu_only() {
    check(ScenarioKind::DeviceLost);
}

#[test]
fn every_scenario_is_labelled() {
    // A new scenario must declare its alerts (an empty list is a claim too):
    // this fails to compile-or-run only if a scenario is added without a
    // test above, so keep the list in step.
    assert_eq!(ScenarioKind::ALL.len(), 7);
}

#[test]
fn the_leak_forecast_is_close_to_the_real_exhaustion() {
    // The leak grows linearly until the device is full: compare the first
    // forecast with the moment the simulated device actually stops having
    // free memory to give.
    let report = play(ScenarioKind::Leak);
    let forecast = report
        .timeline
        .iter()
        .find(|entry| entry.transition.alert.key.rule == RuleId::ExhaustionForecast)
        .expect("a forecast");
    let predicted_full = forecast.offset_seconds + forecast.transition.alert.value;

    let spec = SimulatorSpec { scenario: ScenarioKind::Leak, gpus: 2, seed: 1 };
    let simulator =
        Simulator::with_origin(spec, ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0), GOLDEN_ORIGIN)
            .unwrap();
    let free_at = |second: u64| {
        let at = GOLDEN_ORIGIN.saturating_add(Duration::from_secs(second));
        simulator.fast_at(0, at).unwrap().memory.unwrap().free_bytes
    };
    let floor = free_at(3 * 3600);
    let actual_full = (0..3 * 3600).find(|&second| free_at(second) <= floor).unwrap() as f64;
    let horizon = actual_full - forecast.offset_seconds;
    let error = (predicted_full - actual_full).abs() / horizon;
    eprintln!(
        "leak: forecast at {:.1} min predicted exhaustion at {:.1} min; it came at {:.1} min (error {:.1}% of the horizon)",
        forecast.offset_seconds / 60.0,
        predicted_full / 60.0,
        actual_full / 60.0,
        error * 100.0
    );
    assert!(error < 0.25, "forecast off by {:.0}% of the horizon", error * 100.0);
}

/// A trace that stops 4 s after an evaluation boundary, its last reading an
/// OOM: `vramd analyze --replay` must evaluate those 4 s too, as the daemon
/// that recorded it did at its next tick.
#[test]
fn a_replay_evaluates_the_readings_after_its_last_boundary() {
    const HEADER: &str = r#"{"format":"vramd-trace","version":1,"source":"simulator","devices":[{"index":0,"uuid":"GPU-972aef12-9421-4446-c663-d8e89bade7ec","name":"NVIDIA H100 80GB HBM3","pci_bus_id":"00000000:18:00.0","driver_version":"570.124.06"}]}"#;
    let origin = GOLDEN_ORIGIN.unix_millis();
    let mut text = format!("{HEADER}\n");
    // Readings each second for 9 s; evaluations every 5 s, so the last
    // boundary is at 5 s and the OOM at 9 s comes after it.
    for second in 0..=9_i64 {
        let at = origin + second * 1000;
        let ooms = u64::from(second == 9);
        text.push_str(&format!(
            r#"{{"record":"fast","device":0,"at":{at},"memory":{{"total_bytes":85520809984,"used_bytes":10737418240,"free_bytes":74783391744}}}}"#
        ));
        text.push('\n');
        text.push_str(&format!(
            r#"{{"record":"slow","device":0,"at":{at},"processes":[{{"pid":4242,"name":"python3","used_bytes":10737418240,"allocator":{{"allocated_bytes":8589934592,"reserved_bytes":10737418240,"active_bytes":8589934592,"inactive_split_bytes":0,"alloc_retries":0,"ooms":{ooms}}}}}]}}"#
        ));
        text.push('\n');
    }
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
    let trace = vramd::source::trace::Replay::open_bounded(file.path(), 1 << 20, 1 << 24).unwrap();
    let config = Config::default();
    let report = analyze::replay(&vramd::app::analyze_settings(&config), &trace);
    let oom = report.timeline.iter().find(|entry| {
        entry.transition.alert.key.rule == RuleId::AllocatorOom
            && entry.transition.alert.state == AlertState::Firing
    });
    let oom =
        oom.unwrap_or_else(|| panic!("no allocator_oom:\n{}", analyze::render_table(&report)));
    assert_eq!(oom.offset_seconds, 9.0);
    assert_eq!(report.duration_seconds, 9.0);
    assert_eq!(report.evaluations, 2, "one at the 5 s boundary, one at the trace's end");
}
