//! Shapes of growth that are not a leak whatever their length: a warm-up
//! whose rate keeps falling (rule 6), and NVML usage risen in a few large
//! steps (the cache following the largest batch so far).

use super::tests::{GIB, MIB, at, sawtooth};
use super::*;

/// A process started at `at(0)`, judged at `minutes` of its life.
fn judged_at(values: &[(Timestamp, u64)], minutes: usize) -> Result<LeakEvidence, NotALeak> {
    judged_after(values, minutes * 60, Prior::Nothing)
}

/// A process started at `at(0)`, judged at second `end` of its life after
/// a check that said `prior`.
fn judged_after(
    values: &[(Timestamp, u64)],
    end: usize,
    prior: Prior,
) -> Result<LeakEvidence, NotALeak> {
    let params = LeakParams::default();
    let from = end.saturating_sub(params.window.as_secs() as usize);
    let mut scratch = FloorScratch::default();
    assess_leak_traced(
        &mut scratch,
        &values[from..=end],
        Start::Listed(at(0)),
        prior,
        &params,
        &mut Vec::new(),
    )
}

#[test]
fn warm_ups_whose_rate_keeps_falling_are_never_a_leak() {
    // +10 or +30 GiB approached with a time constant of 1 to 10 minutes,
    // under a 2 GiB sawtooth, judged every minute of the first hour.
    for climb in [10.0, 30.0] {
        for tau in [60.0, 150.0, 300.0, 600.0] {
            let values =
                sawtooth(3_600, 2.0 * GIB, |t| 20.0 * GIB + climb * GIB * (1.0 - (-t / tau).exp()));
            for minutes in 5..=60 {
                let verdict = judged_at(&values, minutes);
                assert!(
                    verdict.is_err(),
                    "+{climb} GiB, tau {tau} s, minute {minutes}: {verdict:?}"
                );
            }
        }
    }
}

#[test]
fn a_warm_up_judged_check_by_check_stays_one_through_its_tail() {
    // Judged every 30 s as the analyzer judges it, each check knowing what
    // the last said, through the first half hour (the process's whole life
    // in the window): under a 4 GiB sawtooth a young process's short
    // window "speeding up" by its scatter is no leak. (The tail beyond,
    // judged on a window that no longer holds the warm-up's start, still
    // raised a 0.2 MiB/s leak at minute 59 of a +6 GiB, 10-minute warm-up:
    // docs/alerts.md, "Warm-ups".)
    for climb in [6.0, 20.0] {
        for tau in [120.0, 300.0, 480.0, 600.0] {
            let values =
                sawtooth(1_800, 4.0 * GIB, |t| 20.0 * GIB + climb * GIB * (1.0 - (-t / tau).exp()));
            // `leak_suspected` fires on a finding kept for its `for` (60 s):
            // three checks in a row.
            let (mut prior, mut kept) = (Prior::Nothing, 0);
            for end in (300..=1_800).step_by(30) {
                let verdict = judged_after(&values, end, prior);
                kept = if verdict.is_ok() { kept + 1 } else { 0 };
                assert!(kept < 3, "+{climb} GiB, tau {tau} s, second {end}: {verdict:?}");
                prior = prior.after(&verdict);
            }
        }
    }
}

#[test]
fn a_warm_up_stays_one_until_a_leak_is_called() {
    let warming = Prior::Nothing.after::<()>(&Err(NotALeak::Slowing));
    assert_eq!(warming, Prior::WarmingUp);
    // A check that found no growth at all does not end it.
    assert_eq!(warming.after::<()>(&Err(NotALeak::SlowGrowth)), Prior::WarmingUp);
    assert_eq!(warming.after(&Ok(())), Prior::Held);
    assert_eq!(Prior::Held.after::<()>(&Err(NotALeak::LevelsOff)), Prior::Nothing);
}

#[test]
fn a_leak_keeps_its_rate_and_is_called_young() {
    // 4 MiB/s from the start, under the same sawtooth: not slowing.
    let values = sawtooth(3_600, 2.0 * GIB, |t| 20.0 * GIB + 4.0 * MIB * t);
    let called = (5..=15).find(|&minutes| judged_at(&values, minutes).is_ok());
    assert!(called.is_some(), "not called by minute 15");
}

#[test]
fn a_floor_risen_in_a_few_jumps_rises_in_steps_and_a_ramp_does_not() {
    let ramp: Vec<(f64, f64)> = (0..24).map(|i| (f64::from(i), f64::from(i) * MIB)).collect();
    assert!(!rises_in_steps(&ramp, 6));
    let jumps = [0.0, 0.0, 0.0, 1.5, 1.5, 1.5, 2.25, 2.25, 2.25, 2.25, 4.75, 4.75, 5.25, 5.25];
    let stairs: Vec<(f64, f64)> =
        jumps.iter().enumerate().map(|(i, &gib)| (i as f64, gib * GIB + 20.0 * GIB)).collect();
    assert!(rises_in_steps(&stairs, 6));
}
