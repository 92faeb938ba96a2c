//! Shapes of growth that are not a leak whatever their length: a warm-up
//! whose rate keeps falling (rule 6), and NVML usage risen in a few large
//! steps (the cache following the largest batch so far).

use super::tests::{GIB, MIB, at, sawtooth};
use super::*;

/// A process started at `at(0)`, judged at `minutes` of its life.
fn judged_at(values: &[(Timestamp, u64)], minutes: usize) -> Result<LeakEvidence, NotALeak> {
    let params = LeakParams::default();
    let end = minutes * 60;
    let from = end.saturating_sub(params.window.as_secs() as usize);
    let mut scratch = FloorScratch::default();
    assess_leak_traced(
        &mut scratch,
        &values[from..=end],
        Start::Listed(at(0)),
        false,
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
