//! A training step exactly as long as the sampling period is seen at a
//! phase that only drifts, so point samples of `allocated` climb through
//! the step's sawtooth for many minutes, and fall back, over a floor that
//! never moves. With the reporter's interval minimum (issue 32), the floor
//! is the floor: no leak. The same trace with point samples alone shows
//! why the minimum is needed.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use vramd::alerts::AlertState;
use vramd::analyze::{self, AnalyzeReport};
use vramd::app::Config;
use vramd::model::RuleId;
use vramd::source::simulator::GOLDEN_ORIGIN;

const HEADER: &str = r#"{"format":"vramd-trace","version":1,"source":"nvml","devices":[{"index":0,"uuid":"GPU-972aef12-9421-4446-c663-d8e89bade7ec","name":"NVIDIA H100 80GB HBM3"}]}"#;
const TOTAL: u64 = 85_520_809_984;
const GIB: u64 = 1 << 30;
const FLOOR: u64 = 26 * GIB;
const SAWTOOTH: u64 = 7 * GIB;
const RESERVED: u64 = 34 * GIB;
const NVML_USED: u64 = RESERVED + 600 * (1 << 20);

/// One hour at 1 Hz; the step's phase at each sample drifts by `drift` of
/// a step per second, so the samples sweep the sawtooth once every
/// `1 / drift` seconds.
fn trace(drift: f64, with_range: bool) -> String {
    let origin = GOLDEN_ORIGIN.unix_millis();
    let mut text = format!("{HEADER}\n");
    for second in 0..3600_u32 {
        let at = origin + i64::from(second) * 1000;
        let phase = (f64::from(second) * drift).fract();
        let allocated = FLOOR + (SAWTOOTH as f64 * phase) as u64;
        let range = if with_range {
            // Each interval spans a whole step: its lowest point is the floor.
            format!(
                r#","interval":{{"allocated_min_bytes":{FLOOR},"allocated_max_bytes":{},"reserved_min_bytes":{RESERVED},"reserved_max_bytes":{RESERVED}}}"#,
                FLOOR + SAWTOOTH
            )
        } else {
            String::new()
        };
        let free = TOTAL - NVML_USED;
        text.push_str(&format!(
            r#"{{"record":"fast","device":0,"at":{at},"memory":{{"total_bytes":{TOTAL},"used_bytes":{NVML_USED},"free_bytes":{free}}}}}"#
        ));
        text.push('\n');
        text.push_str(&format!(
            r#"{{"record":"slow","device":0,"at":{at},"processes":[{{"pid":4242,"name":"python3","used_bytes":{NVML_USED},"allocator":{{"allocated_bytes":{allocated},"reserved_bytes":{RESERVED},"active_bytes":{allocated},"inactive_split_bytes":0,"alloc_retries":0,"ooms":0{range}}}}}]}}"#
        ));
        text.push('\n');
    }
    text
}

fn replay(text: &str) -> AnalyzeReport {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
    let trace = vramd::source::trace::Replay::open_bounded(file.path(), 1 << 20, 1 << 28).unwrap();
    analyze::replay(&vramd::app::analyze_settings(&Config::default()), &trace)
}

fn leak_fired(report: &AnalyzeReport) -> bool {
    report.timeline.iter().any(|entry| {
        entry.transition.alert.key.rule == RuleId::LeakSuspected
            && entry.transition.alert.state == AlertState::Firing
    })
}

#[test]
fn a_step_as_long_as_the_sampling_period_raises_no_leak_with_the_interval_minimum() {
    // A sweep of the sawtooth every 40 min: point samples climb 7 GiB in
    // 40 min over a floor that never moves.
    let drift = 1.0 / 2400.0;
    let points = replay(&trace(drift, false));
    assert!(
        leak_fired(&points),
        "point samples alone were expected to look like a leak:\n{}",
        analyze::render_table(&points)
    );
    let ranged = replay(&trace(drift, true));
    assert!(
        !leak_fired(&ranged),
        "the interval minimum is the floor, which never moves:\n{}",
        analyze::render_table(&ranged)
    );
}
