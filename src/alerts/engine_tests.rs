//! The engine's state machine: `for`, hysteresis, hand-over, bounds and
//! `keep_firing_for`.

use super::*;
use crate::model::RuleId;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_unix_millis(seconds * 1000)
}

fn observation(rule: RuleId, verdict: Verdict, for_seconds: u64) -> Observation {
    Observation {
        key: AlertKey { rule, uuid: "GPU-0".into(), pid: None },
        verdict,
        severity: Severity::Warning,
        for_duration: Duration::from_secs(for_seconds),
        keep_firing_for: Duration::ZERO,
        gpu: 0,
        process: None,
        value: 0.95,
        threshold: 0.92,
        unit: "ratio",
        summary: "memory high".into(),
        description: "used 95% of total".into(),
        remediation: "free memory",
    }
}

fn engine() -> Engine {
    Engine::new(EngineLimits { resolved_retention: Duration::from_secs(60), max_alerts: 3 })
}

fn states(transitions: &[Transition]) -> Vec<(Option<AlertState>, AlertState)> {
    transitions.iter().map(|t| (t.from, t.alert.state)).collect()
}

#[test]
fn pending_then_firing_after_the_for_duration_then_resolved() {
    let mut engine = engine();
    let fired =
        engine.evaluate(at(0), vec![observation(RuleId::MemoryHigh, Verdict::Breached, 60)]);
    assert_eq!(states(&fired), vec![(None, AlertState::Pending)]);
    assert!(
        engine
            .evaluate(at(30), vec![observation(RuleId::MemoryHigh, Verdict::Breached, 60)])
            .is_empty()
    );
    let fired =
        engine.evaluate(at(60), vec![observation(RuleId::MemoryHigh, Verdict::Breached, 60)]);
    assert_eq!(states(&fired), vec![(Some(AlertState::Pending), AlertState::Firing)]);
    let alert = &fired[0].alert;
    assert_eq!((alert.since, alert.firing_since), (at(0), Some(at(60))));

    assert!(
        engine
            .evaluate(at(70), vec![observation(RuleId::MemoryHigh, Verdict::Hysteresis, 60)])
            .is_empty(),
        "between clear and threshold a firing alert keeps firing"
    );
    let resolved =
        engine.evaluate(at(80), vec![observation(RuleId::MemoryHigh, Verdict::Clear, 60)]);
    assert_eq!(states(&resolved), vec![(Some(AlertState::Firing), AlertState::Resolved)]);
    assert_eq!(resolved[0].alert.resolved_at, Some(at(80)));
    assert_eq!(resolved[0].alert.id, "memory_high.GPU-0", "identity is stable");
}

#[test]
fn a_pending_alert_that_clears_early_is_forgotten_and_its_readers_told() {
    let mut engine = engine();
    engine.evaluate(at(0), vec![observation(RuleId::MemoryHigh, Verdict::Breached, 60)]);
    let transitions =
        engine.evaluate(at(10), vec![observation(RuleId::MemoryHigh, Verdict::Hysteresis, 60)]);
    assert_eq!(states(&transitions), vec![(Some(AlertState::Pending), AlertState::Resolved)]);
    let ended = &transitions[0].alert;
    assert_eq!((ended.firing_since, ended.resolved_at), (None, Some(at(10))));
    assert_eq!(engine.alerts().count(), 0, "not kept as a resolved alert");
    engine.evaluate(at(20), vec![observation(RuleId::MemoryHigh, Verdict::Breached, 60)]);
    let unseen = engine.evaluate(at(30), vec![]);
    assert_eq!(states(&unseen), vec![(Some(AlertState::Pending), AlertState::Resolved)]);
}

#[test]
fn an_upgrade_takes_over_its_alert_without_a_gap_or_a_second_alert() {
    // `reserved_growth` firing; the same process's growth then reads as
    // a leak: the rules say `leak_suspected` (for 60 s) instead.
    let mut engine = engine();
    let process = |rule, verdict| Observation {
        key: AlertKey { rule, uuid: "GPU-0".into(), pid: Some(7) },
        ..observation(rule, verdict, 60)
    };
    engine.evaluate(at(0), vec![process(RuleId::ReservedGrowth, Verdict::Breached)]);
    engine.evaluate(at(60), vec![process(RuleId::ReservedGrowth, Verdict::Breached)]);
    let firing =
        |engine: &Engine| -> Vec<RuleId> { engine.firing().map(|alert| alert.key.rule).collect() };
    assert_eq!(firing(&engine), [RuleId::ReservedGrowth]);
    let pending = engine.evaluate(at(90), vec![process(RuleId::LeakSuspected, Verdict::Breached)]);
    assert_eq!(states(&pending), [(None, AlertState::Pending)]);
    assert_eq!(firing(&engine), [RuleId::ReservedGrowth], "no gap while the upgrade waits");
    let upgraded =
        engine.evaluate(at(150), vec![process(RuleId::LeakSuspected, Verdict::Breached)]);
    let rules: Vec<_> = upgraded.iter().map(|t| (t.alert.key.rule, t.alert.state)).collect();
    assert_eq!(
        rules,
        [
            (RuleId::LeakSuspected, AlertState::Firing),
            (RuleId::ReservedGrowth, AlertState::Resolved)
        ],
        "handed over in one evaluation"
    );
    assert!(upgraded[1].alert.description.contains("Superseded by leak_suspected"));
    assert_eq!(firing(&engine), [RuleId::LeakSuspected]);
    // An upgrade that never fires leaves nothing behind it: the growth
    // stopped, and the alert resolves as any other.
    let mut engine = super::tests::engine();
    engine.evaluate(at(0), vec![process(RuleId::ReservedGrowth, Verdict::Breached)]);
    engine.evaluate(at(60), vec![process(RuleId::ReservedGrowth, Verdict::Breached)]);
    engine.evaluate(at(90), vec![process(RuleId::LeakSuspected, Verdict::Breached)]);
    let ended = engine.evaluate(at(120), vec![]);
    let rules: Vec<_> = ended.iter().map(|t| (t.alert.key.rule, t.alert.state)).collect();
    assert!(rules.contains(&(RuleId::ReservedGrowth, AlertState::Resolved)), "{rules:?}");
    assert!(firing(&engine).is_empty());
}

#[test]
fn zero_for_fires_at_once_and_an_unseen_subject_resolves() {
    let mut engine = engine();
    let fired =
        engine.evaluate(at(0), vec![observation(RuleId::AllocatorOom, Verdict::Breached, 0)]);
    assert_eq!(states(&fired), vec![(None, AlertState::Firing)]);
    let resolved = engine.evaluate(at(5), vec![]);
    assert_eq!(states(&resolved), vec![(Some(AlertState::Firing), AlertState::Resolved)]);
}

#[test]
fn resolved_alerts_stay_visible_for_the_retention_then_go() {
    let mut engine = engine();
    engine.evaluate(at(0), vec![observation(RuleId::XidError, Verdict::Breached, 0)]);
    engine.evaluate(at(1), vec![]);
    engine.evaluate(at(60), vec![]);
    assert_eq!(engine.alerts().count(), 1, "still visible at 59 s");
    engine.evaluate(at(61), vec![]);
    assert_eq!(engine.alerts().count(), 0);
}

#[test]
fn a_resolved_alert_that_breaches_again_starts_a_new_cycle() {
    let mut engine = engine();
    engine.evaluate(at(0), vec![observation(RuleId::XidError, Verdict::Breached, 0)]);
    engine.evaluate(at(1), vec![observation(RuleId::XidError, Verdict::Clear, 0)]);
    let again = engine.evaluate(at(2), vec![observation(RuleId::XidError, Verdict::Breached, 0)]);
    assert_eq!(states(&again), vec![(Some(AlertState::Resolved), AlertState::Firing)]);
    assert_eq!(again[0].alert.since, at(2));
    assert_eq!(again[0].alert.resolved_at, None);
}

#[test]
fn the_bound_evicts_resolved_first_then_counts_what_it_drops() {
    let mut engine = engine();
    let rules = [
        RuleId::MemoryHigh,
        RuleId::ExhaustionForecast,
        RuleId::LeakSuspected,
        RuleId::AllocatorRetries,
    ];
    engine.evaluate(at(0), vec![observation(rules[0], Verdict::Breached, 0)]);
    engine.evaluate(at(1), vec![]);
    let firing: Vec<Observation> =
        rules[1..].iter().map(|&rule| observation(rule, Verdict::Breached, 0)).collect();
    engine.evaluate(at(2), firing.clone());
    assert_eq!(engine.alerts().count(), 3, "the resolved one made room");
    assert!(engine.alerts().all(|alert| alert.state == AlertState::Firing));
    let mut more = firing;
    more.push(observation(RuleId::AllocatorOom, Verdict::Breached, 0));
    engine.evaluate(at(3), more);
    assert_eq!(engine.alerts().count(), 3);
    assert_eq!(engine.dropped(), 1);
}

/// A process's leak observation, kept firing for 10 min after it clears.
fn leak(verdict: Verdict) -> Observation {
    Observation {
        key: AlertKey { rule: RuleId::LeakSuspected, uuid: "GPU-0".into(), pid: Some(7) },
        keep_firing_for: Duration::from_secs(600),
        ..observation(RuleId::LeakSuspected, verdict, 60)
    }
}

#[test]
fn a_leak_whose_evidence_lapses_for_less_than_keep_firing_for_is_one_alert() {
    let mut engine = engine();
    engine.evaluate(at(0), vec![leak(Verdict::Breached)]);
    let fired = engine.evaluate(at(60), vec![leak(Verdict::Breached)]);
    assert_eq!(states(&fired), [(Some(AlertState::Pending), AlertState::Firing)]);
    // An evaluation dip: the evidence reads clear for 9 minutes, then the
    // growth is seen again. No resolve, no new pending alert, no new page.
    for minute in 2..=10 {
        let kept = engine.evaluate(at(minute * 60), vec![leak(Verdict::Clear)]);
        assert_eq!(states(&kept), [], "minute {minute}");
    }
    let back = engine.evaluate(at(11 * 60), vec![leak(Verdict::Breached)]);
    assert_eq!(states(&back), []);
    let alert = engine.firing().next().expect("still firing");
    assert_eq!(alert.firing_since, Some(at(60)), "the same alert, firing since it first fired");
    // A second lapse is timed from its own start, not the first's.
    for minute in 12..=21 {
        assert_eq!(states(&engine.evaluate(at(minute * 60), vec![leak(Verdict::Clear)])), []);
    }
    let resolved = engine.evaluate(at(22 * 60), vec![leak(Verdict::Clear)]);
    assert_eq!(states(&resolved), [(Some(AlertState::Firing), AlertState::Resolved)]);
    assert_eq!(resolved[0].alert.resolved_at, Some(at(22 * 60)));
}

#[test]
fn keep_firing_for_does_not_hold_an_alert_nobody_observes_or_one_never_fired() {
    let mut engine = engine();
    engine.evaluate(at(0), vec![leak(Verdict::Breached)]);
    engine.evaluate(at(60), vec![leak(Verdict::Breached)]);
    // The process exited: its alert is no longer observed at all.
    let gone = engine.evaluate(at(120), vec![]);
    assert_eq!(states(&gone), [(Some(AlertState::Firing), AlertState::Resolved)]);
    // A pending alert that clears before its `for` is dropped as ever.
    engine.evaluate(
        at(900),
        vec![Observation {
            key: AlertKey { pid: Some(8), ..leak(Verdict::Breached).key },
            ..leak(Verdict::Breached)
        }],
    );
    let dropped = engine.evaluate(
        at(930),
        vec![Observation {
            key: AlertKey { pid: Some(8), ..leak(Verdict::Clear).key },
            ..leak(Verdict::Clear)
        }],
    );
    assert_eq!(states(&dropped), [(Some(AlertState::Pending), AlertState::Resolved)]);
    assert_eq!(dropped[0].alert.firing_since, None);
}

#[test]
fn a_lapsing_growth_alert_still_hands_over_to_its_upgrade() {
    let mut engine = engine();
    let growth = |verdict| Observation {
        key: AlertKey { rule: RuleId::ReservedGrowth, ..leak(verdict).key },
        ..leak(verdict)
    };
    engine.evaluate(at(0), vec![growth(Verdict::Breached)]);
    engine.evaluate(at(60), vec![growth(Verdict::Breached)]);
    // The evidence now reads as a leak: reserved_growth clear, the leak
    // pending; the growth alert holds until the leak fires, then resolves
    // at once (superseded), not after its keep_firing_for.
    let pending = engine.evaluate(at(90), vec![growth(Verdict::Clear), leak(Verdict::Breached)]);
    assert_eq!(states(&pending), [(None, AlertState::Pending)]);
    let upgraded = engine.evaluate(at(150), vec![growth(Verdict::Clear), leak(Verdict::Breached)]);
    let rules: Vec<_> = upgraded.iter().map(|t| (t.alert.key.rule, t.alert.state)).collect();
    assert!(rules.contains(&(RuleId::ReservedGrowth, AlertState::Resolved)), "{rules:?}");
    assert!(rules.contains(&(RuleId::LeakSuspected, AlertState::Firing)), "{rules:?}");
}
