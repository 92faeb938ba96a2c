//! What each scenario must make vramd's default rules say, and by when:
//! the labels of the scenario suite (`tests/scenarios.rs`). Any alert that
//! fires and is not listed here is a false alarm.
//!
//! Data only: rules are named by `model::RuleId`. Kept with the suite, not
//! in the simulator: the daemon never reads them.

use std::time::Duration;

use vramd::model::{RuleId, ScenarioKind};

/// An alert a scenario must raise (reach `firing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectedAlert {
    pub rule: RuleId,
    pub gpu: u32,
    /// Process name, for process alerts.
    pub process: Option<&'static str>,
    /// When the situation starts in the scenario (for detection latency).
    pub onset: Duration,
    /// Latest acceptable time of firing, since the scenario start.
    pub by: Duration,
}

const fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

const fn expect(
    rule: RuleId,
    gpu: u32,
    process: Option<&'static str>,
    onset: u64,
    by: u64,
) -> ExpectedAlert {
    ExpectedAlert { rule, gpu, process, onset: minutes(onset), by: minutes(by) }
}

/// The alerts `kind` must raise with default configuration on a host of at
/// least two GPUs within 45 simulated minutes; nothing else may fire.
pub fn expected_alerts(kind: ScenarioKind) -> &'static [ExpectedAlert] {
    const TRAINING: &[ExpectedAlert] = &[
        // Reserved grows from the start; free runs out at ~10–11 min.
        expect(RuleId::ExhaustionForecast, 0, None, 0, 5),
        expect(RuleId::MemoryHigh, 0, None, 9, 12),
        expect(RuleId::AllocatorFragmentationHigh, 0, Some("pt_main_thread"), 9, 16),
        expect(RuleId::AllocatorRetries, 0, Some("pt_main_thread"), 12, 14),
        expect(RuleId::AllocatorOom, 0, Some("pt_main_thread"), 20, 21),
    ];
    const LEAK: &[ExpectedAlert] = &[
        expect(RuleId::ExhaustionForecast, 0, None, 2, 10),
        // The floor's shortest window (4 min) after a 3-minute warm-up
        // grace from the process's first sample, plus the rule's 5-min `for`.
        expect(RuleId::LeakSuspected, 0, Some("python3"), 2, 15),
        expect(RuleId::MemoryHigh, 0, None, 28, 33),
    ];
    const SPIKE: &[ExpectedAlert] = &[
        expect(RuleId::AllocatorRetries, 0, Some("pt_main_thread"), 10, 11),
        expect(RuleId::AllocatorOom, 0, Some("pt_main_thread"), 10, 11),
    ];
    const TENANTS: &[ExpectedAlert] = &[expect(RuleId::LeakSuspected, 0, Some("python3"), 1, 15)];
    const LOST: &[ExpectedAlert] = &[expect(RuleId::DeviceLost, 1, None, 5, 6)];
    match kind {
        ScenarioKind::SteadyInference | ScenarioKind::Idle => &[],
        ScenarioKind::TrainingFragmentation => TRAINING,
        ScenarioKind::Leak => LEAK,
        ScenarioKind::OomSpike => SPIKE,
        ScenarioKind::MultiTenant => TENANTS,
        ScenarioKind::DeviceLost => LOST,
    }
}
