//! `memory_high` on a GPU a preallocating allocator (JAX) holds.

use super::*;
use crate::alerts::engine::Verdict;
use crate::analysis::snapshot::DeviceFacts;
use crate::analysis::summary::DeviceAnalysis;

use crate::model::{AllocatorStats, Severity, Timestamp};

const GIB: u64 = 1 << 30;

fn process(allocated: u64, reserved: u64, pool_limit: Option<u64>) -> ProcessFacts {
    ProcessFacts {
        pid: 4242,
        name: Some("python3".into()),
        allocator: Some(AllocatorStats {
            allocated_bytes: allocated,
            reserved_bytes: reserved,
            active_bytes: allocated,
            inactive_split_bytes: 0,
            alloc_retries: 0,
            ooms: 0,
            interval: None,
        }),
        snapshot: None,
        pool_limit_bytes: pool_limit,
        retries_in_window: None,
        retries_from_driver: false,
        ooms_in_window: None,
        leak: None,
    }
}

/// An 80 GiB GPU with 76 GiB used (95 %), held by `holder`.
fn snapshot(holder: ProcessFacts) -> (DeviceSnapshot, MemoryInfo) {
    let memory = MemoryInfo {
        total_bytes: 80 * GIB,
        reserved_bytes: None,
        used_bytes: 76 * GIB,
        free_bytes: 4 * GIB,
    };
    let facts = DeviceFacts {
        info: DeviceInfo {
            index: 0,
            uuid: "GPU-0".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: None,
            driver_version: None,
            mig: None,
        },
        up: true,
        failure: None,
        memory: Some(memory),
        processes: vec![holder],
        xid_in_window: None,
        probe: None,
        oom_events: Vec::new(),
    };
    let analysis = DeviceAnalysis {
        at: Timestamp::from_unix_millis(1_767_225_600_000),
        growth_bytes_per_second: None,
        growth_fit: None,
        trend_window_seconds: 0.0,
        time_to_exhaustion_seconds: None,
        pressure_level: 0,
        pressure: "none",
        pressure_reasons: Vec::new(),
        allocator_cache_bytes: 0,
        allocator_fragmented_bytes: 0,
        leaks: Vec::new(),
    };
    (DeviceSnapshot { facts, analysis }, memory)
}

fn memory_high(holder: ProcessFacts) -> Observation {
    let (snapshot, memory) = snapshot(holder);
    let mut out = Observations::all();
    memory_rules(
        &crate::alerts::AlertsConfig::default().rules,
        &snapshot,
        "GPU 0",
        memory,
        &mut out,
    );
    out.into_vec()
        .into_iter()
        .find(|observation| observation.key.rule == RuleId::MemoryHigh)
        .unwrap()
}

#[test]
fn a_preallocated_pool_mostly_unused_is_not_memory_pressure() {
    let observation = memory_high(process(10 * GIB, 60 * GIB, Some(60 * GIB)));
    assert_eq!(observation.verdict, Verdict::Clear, "{observation:?}");
    assert!(observation.value < 0.35, "its 50 GiB unused count as free: {}", observation.value);
}

#[test]
fn a_preallocated_pool_near_its_limit_is_memory_pressure() {
    let observation = memory_high(process(58 * GIB, 60 * GIB, Some(60 * GIB)));
    assert_eq!(observation.verdict, Verdict::Breached, "{observation:?}");
    assert!(observation.value > 0.96, "judged by the pool's own fill: {}", observation.value);
    assert!(
        observation.description.contains("the fullest is 97% of its limit"),
        "{}",
        observation.description
    );
}

#[test]
fn a_caching_allocator_without_a_pool_limit_counts_its_cache_as_used() {
    let observation = memory_high(process(10 * GIB, 60 * GIB, None));
    assert_eq!(observation.verdict, Verdict::Breached, "{observation:?}");
    assert!(!observation.description.contains("Preallocated"));
}

/// `memory_high` at `ratio` of an 80 GiB GPU, through `judge`.
fn observe_ratio(ratio: f64, out: &mut Observations<'_>) {
    let (snapshot, _) = snapshot(process(GIB, GIB, None));
    let mut rules = crate::alerts::AlertsConfig::default().rules;
    rules.memory_high.for_duration = std::time::Duration::from_secs(10);
    out.judge(Draft {
        device: &snapshot.facts.info,
        rule: RuleId::MemoryHigh,
        config: &rules.memory_high,
        process: None,
        value: ratio,
        text: &|| (format!("at {ratio}"), String::new()),
        remediation: "",
    });
}

#[test]
fn observations_that_cannot_change_an_alert_are_left_out_with_the_same_outcome() {
    use crate::alerts::engine::{Engine, EngineLimits};
    let limits =
        EngineLimits { resolved_retention: std::time::Duration::from_secs(60), max_alerts: 8 };
    let (mut filtered, mut full) = (Engine::new(limits), Engine::new(limits));
    let memory_high = crate::alerts::AlertsConfig::default().rules.memory_high;
    let (breach, between) =
        (memory_high.threshold, (memory_high.threshold + memory_high.clear) / 2.0);
    // Clear, between the thresholds with no alert, pending, dropped from
    // pending, firing, held between the thresholds, resolved, resolved
    // and between again, firing again; twice in one pass where it matters.
    let passes: &[&[f64]] = &[
        &[0.1],
        &[between],
        &[breach],
        &[between],
        &[breach],
        &[breach],
        &[breach],
        &[between],
        &[0.1],
        &[between],
        &[breach, between],
        &[breach],
        &[breach],
        &[between, 0.1],
    ];
    let (mut left_out, mut fired) = (0, false);
    for (index, pass) in passes.iter().enumerate() {
        let now = Timestamp::from_unix_millis(1_767_225_600_000 + index as i64 * 5_000);
        let mut some = Observations::against(filtered.alerts());
        let mut all = Observations::all();
        for &ratio in *pass {
            observe_ratio(ratio, &mut some);
            observe_ratio(ratio, &mut all);
        }
        let (some, all) = (some.into_vec(), all.into_vec());
        left_out += all.len() - some.len();
        let (a, b) = (filtered.evaluate(now, some), full.evaluate(now, all));
        assert_eq!(a, b, "pass {index}: the same transitions");
        assert_eq!(filtered.alerts().collect::<Vec<_>>(), full.alerts().collect::<Vec<_>>());
        fired |= filtered.firing().next().is_some();
    }
    assert!(fired, "the script reaches firing");
    assert!(left_out >= 3, "clear subjects without an alert are left out ({left_out})");
}

#[test]
fn spans_read_as_people_say_them_never_zero_minutes() {
    assert_eq!(super::minutes(26.0), "26 s");
    assert_eq!(super::minutes(89.0), "89 s");
    assert_eq!(super::minutes(90.0), "2 min");
    assert_eq!(super::minutes(720.0), "12 min");
    assert_eq!(super::minutes(5400.0), "1.5 h");
}

/// The rules a process with `leak` raises, with their severities.
fn process_observations(leak: crate::analysis::leak::LeakFinding) -> Vec<(RuleId, Severity)> {
    let (snapshot, _) = snapshot(ProcessFacts { leak: Some(leak), ..process(GIB, GIB, None) });
    let mut out = Observations::all();
    let rules = crate::alerts::AlertsConfig::default().rules;
    let holder = &snapshot.facts.processes[0];
    process_rules(&rules, &snapshot.facts.info, "GPU 0", holder, &[], &mut out);
    out.into_vec()
        .into_iter()
        .filter(|observation| observation.verdict == Verdict::Breached)
        .map(|observation| (observation.key.rule, observation.severity))
        .collect()
}

/// NVML-only growth of 1 MiB/s over 30 min, read as risen in a few
/// large steps ("cache or a leak").
fn stepped_growth() -> crate::analysis::leak::LeakFinding {
    use crate::analysis::leak::{Hold, LeakEvidence, LeakFinding};
    use crate::analysis::series::ProcessMetric;
    let evidence = LeakEvidence {
        slope_bytes_per_second: 1_048_576.0,
        fit: 0.9,
        window_seconds: 1_800.0,
        growth_bytes: 2 * GIB,
        baseline_bytes: 10 * GIB,
        latest_bytes: 12 * GIB,
    };
    let hold = Hold::confirmed(&evidence, Timestamp::from_unix_millis(0), None);
    LeakFinding { evidence, metric: ProcessMetric::NvmlUsed, cache_or_leak: true, hold }
}

#[test]
fn growth_in_a_few_steps_without_allocator_figures_is_reserved_growth_not_a_leak() {
    use crate::analysis::leak::LeakFinding;
    let steps = stepped_growth();
    assert_eq!(process_observations(steps), [(RuleId::ReservedGrowth, Severity::Info)]);
    let ramp = LeakFinding { cache_or_leak: false, ..steps };
    assert_eq!(process_observations(ramp), [(RuleId::LeakSuspected, Severity::Warning)]);
}

/// An engine whose leak alert for the test process (pid 4242 on GPU-0)
/// is firing.
fn firing_leak() -> crate::alerts::engine::Engine {
    use crate::alerts::engine::{Engine, EngineLimits};
    use std::time::Duration;
    let mut engine =
        Engine::new(EngineLimits { resolved_retention: Duration::ZERO, max_alerts: 8 });
    let breached = Observation {
        key: AlertKey { rule: RuleId::LeakSuspected, uuid: "GPU-0".into(), pid: Some(4242) },
        verdict: Verdict::Breached,
        severity: Severity::Warning,
        for_duration: Duration::ZERO,
        keep_firing_for: Duration::from_secs(600),
        gpu: 0,
        process: None,
        value: 1e6,
        threshold: 131_072.0,
        unit: "bytes_per_second",
        summary: "leak".into(),
        description: String::new(),
        remediation: "",
    };
    engine.evaluate(Timestamp::from_unix_millis(0), vec![breached]);
    engine
}

/// The leak rules' observations of `holder` against `engine`'s alerts.
fn leak_observations(
    engine: &crate::alerts::engine::Engine,
    holder: ProcessFacts,
) -> Vec<(RuleId, Verdict, std::time::Duration)> {
    let rules = crate::alerts::AlertsConfig::default().rules;
    let (snapshot, _) = snapshot(holder);
    let mut out = Observations::against(engine.alerts());
    let holder = &snapshot.facts.processes[0];
    process_rules(&rules, &snapshot.facts.info, "GPU 0", holder, &[], &mut out);
    out.into_vec()
        .into_iter()
        .filter(|o| matches!(o.key.rule, RuleId::LeakSuspected | RuleId::ReservedGrowth))
        .map(|o| (o.key.rule, o.verdict, o.keep_firing_for))
        .collect()
}

#[test]
fn a_process_with_a_firing_leak_alert_and_no_evidence_now_is_observed_clear() {
    use crate::alerts::engine::{Engine, EngineLimits};
    use std::time::Duration;
    // No alert held: a process without leak evidence costs no observation.
    let none = Engine::new(EngineLimits { resolved_retention: Duration::ZERO, max_alerts: 8 });
    assert_eq!(leak_observations(&none, process(GIB, GIB, None)), []);
    // A firing leak alert: the process is observed clear of it (so the
    // engine can keep it firing), not left unobserved as if it had exited.
    assert_eq!(
        leak_observations(&firing_leak(), process(GIB, GIB, None)),
        [(RuleId::LeakSuspected, Verdict::Clear, Duration::from_secs(600))]
    );
}

#[test]
fn growth_alerted_as_a_leak_is_not_downgraded_to_reserved_growth() {
    use std::time::Duration;
    let holder = ProcessFacts { leak: Some(stepped_growth()), ..process(GIB, GIB, None) };
    // Read as "cache or a leak" after the leak alert lapsed (an evaluation
    // dip): it goes on as the leak, not as a second, weaker alert.
    assert_eq!(
        leak_observations(&firing_leak(), holder),
        [(RuleId::LeakSuspected, Verdict::Breached, Duration::from_secs(600))]
    );
}
