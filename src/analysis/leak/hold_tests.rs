//! One alert per leak: a running leak judged check by check, as the
//! analyzer does every `leak_check_interval`, is held through the
//! evaluation dips that break its floor for a minute or two.

use super::tests::{GIB, MIB, at, sawtooth};
use super::*;

/// Every check over `values` (1 Hz from `at(0)`) from `first` to `last`
/// seconds, each on the window ending there, carrying whether the leak is
/// held; the verdicts in order.
fn checks(values: &[(Timestamp, u64)], first: usize, last: usize) -> Vec<bool> {
    let params = LeakParams::default();
    let window = params.window.as_secs() as usize;
    let mut scratch = FloorScratch::default();
    let mut held = false;
    (first..=last)
        .step_by(30)
        .map(|end| {
            let from = end.saturating_sub(window);
            let slice = &values[from..=end];
            held = assess_leak(&mut scratch, slice, at(from), held, &params).is_ok();
            held
        })
        .collect()
}

/// How many times a leak first called was let go again while it ran.
fn resolves(verdicts: &[bool]) -> usize {
    let called = verdicts.iter().position(|&held| held).unwrap_or(verdicts.len());
    verdicts[called..].windows(2).filter(|pair| pair[0] && !pair[1]).count()
}

/// A 90-second evaluation every 20 minutes, freeing `depth` of a training
/// step's buffers and taking them back.
fn evaluation(t: f64, depth: f64) -> f64 {
    if t % 1_200.0 >= 1_110.0 { depth } else { 0.0 }
}

#[test]
fn a_slow_leak_is_held_through_its_evaluation_dips() {
    // Flat for 30 minutes, then 0.25 MiB/s for 100 under a 2 GiB sawtooth,
    // an evaluation every 20 minutes freeing 1 GiB for 90 s.
    let onset = 1_800.0;
    let values = sawtooth(130 * 60, 2.0 * GIB, |t| {
        20.0 * GIB + 0.25 * MIB * (t - onset).max(0.0) - evaluation(t, GIB)
    });
    let verdicts = checks(&values, 1_800, 130 * 60);
    assert!(verdicts.iter().any(|&held| held), "never called: {verdicts:?}");
    assert_eq!(resolves(&verdicts), 0, "let go while leaking: {verdicts:?}");
}

#[test]
fn a_leak_is_held_through_long_evaluation_dips() {
    // 1 MiB/s with a 3-minute evaluation every 15 minutes freeing 2 GiB.
    let values = sawtooth(130 * 60, 2.0 * GIB, |t| {
        let evaluating = t % 900.0 >= 720.0;
        20.0 * GIB + MIB * (t - 1_800.0).max(0.0) - if evaluating { 2.0 * GIB } else { 0.0 }
    });
    let verdicts = checks(&values, 1_800, 130 * 60);
    assert!(verdicts.iter().any(|&held| held), "never called: {verdicts:?}");
    assert_eq!(resolves(&verdicts), 0, "let go while leaking: {verdicts:?}");
}

#[test]
fn a_held_leak_that_stops_is_let_go_despite_its_dips() {
    // The slow leak of the first test stops after 60 minutes: held, then
    // let go within the window once its floor between dips is flat.
    let (onset, stop) = (1_800.0, 5_400.0);
    let values = sawtooth(130 * 60, 2.0 * GIB, |t| {
        20.0 * GIB + 0.25 * MIB * (t.min(stop) - onset).max(0.0) - evaluation(t, GIB)
    });
    let verdicts = checks(&values, 1_800, 130 * 60);
    assert!(verdicts.iter().any(|&held| held), "never called: {verdicts:?}");
    assert_eq!(verdicts.last(), Some(&false), "held 40 minutes after it stopped: {verdicts:?}");
}

#[test]
fn a_called_leak_is_never_demoted_to_cache_growth_but_may_be_upgraded() {
    let evidence = LeakEvidence {
        slope_bytes_per_second: MIB,
        fit: 0.9,
        window_seconds: 1_800.0,
        growth_bytes: 1 << 30,
        baseline_bytes: 10 << 30,
        latest_bytes: 11 << 30,
    };
    let leak = LeakFinding { evidence, metric: ProcessMetric::NvmlUsed, cache_or_leak: false };
    let steps = LeakFinding { cache_or_leak: true, ..leak };
    // A held leak keeps its name when a later window rose in steps.
    assert!(!steps.after(Some(&leak)).cache_or_leak);
    // Growth first said to be cache or a leak becomes a leak on a ramp.
    assert!(!leak.after(Some(&steps)).cache_or_leak);
    // Steps stay steps while nothing stronger was said, held or new.
    assert!(steps.after(Some(&steps)).cache_or_leak);
    assert!(steps.after(None).cache_or_leak);
}
