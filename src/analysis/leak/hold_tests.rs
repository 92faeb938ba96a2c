//! One alert per leak: a running leak judged check by check, as the
//! analyzer does every `leak_check_interval`, is held through the
//! evaluation dips that break its floor for a minute or two.

use super::hold::bridge;
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
    // The hold carried from check to check lets it go too.
    let verdicts = carried_checks(&values, 1_800, 130 * 60, true);
    assert_eq!(verdicts.last(), Some(&false), "carried 40 minutes after it stopped: {verdicts:?}");
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
    let hold = Hold::confirmed(&evidence, at(0), None);
    let metric = ProcessMetric::NvmlUsed;
    let leak = LeakFinding { evidence, metric, cache_or_leak: false, hold };
    let steps = LeakFinding { cache_or_leak: true, ..leak };
    // A held leak keeps its name when a later window rose in steps.
    assert!(!steps.after(Some(&leak)).cache_or_leak);
    // Growth first said to be cache or a leak becomes a leak on a ramp.
    assert!(!leak.after(Some(&steps)).cache_or_leak);
    // Steps stay steps while nothing stronger was said, held or new.
    assert!(steps.after(Some(&steps)).cache_or_leak);
    assert!(steps.after(None).cache_or_leak);
}

/// [`checks`] as the analyzer makes them, each handing the next the hold
/// it carries (`carry`; without, only whether the leak was held).
fn carried_checks(
    values: &[(Timestamp, u64)],
    first: usize,
    last: usize,
    carry: bool,
) -> Vec<bool> {
    let params = LeakParams::default();
    let window = params.window.as_secs() as usize;
    let mut scratch = FloorScratch::default();
    let (mut prior, mut hold) = (Prior::Nothing, None::<Hold>);
    let mut trace = Vec::new();
    (first..=last)
        .step_by(30)
        .map(|end| {
            let from = end.saturating_sub(window);
            let slice = &values[from..=end];
            let start = Start::Listed(at(0));
            let carried = hold.as_ref().filter(|_| carry);
            let verdict = assess_held_traced(
                &mut scratch,
                slice,
                start,
                carried,
                &mut prior,
                &params,
                &mut trace,
            );
            hold = verdict.ok().map(|(_, hold)| hold);
            hold.is_some()
        })
        .collect()
}

#[test]
fn a_young_leak_called_on_a_short_window_is_held_through_a_dip() {
    // Flat for 40 minutes under a 2 GiB sawtooth, then 1 MiB/s; a 2-minute
    // evaluation frees 1.5 GiB 7 minutes in, when the leak was called on a
    // short window and the 30-minute one is still mostly flat.
    let onset = 2_400.0;
    let values = sawtooth(70 * 60, 2.0 * GIB, |t| {
        let evaluating = (onset + 420.0..onset + 540.0).contains(&t);
        20.0 * GIB + MIB * (t - onset).max(0.0) - if evaluating { 1.5 * GIB } else { 0.0 }
    });
    let verdicts = carried_checks(&values, 2_400, 70 * 60, true);
    assert!(verdicts.iter().any(|&held| held), "never called: {verdicts:?}");
    assert_eq!(resolves(&verdicts), 0, "let go while leaking: {verdicts:?}");
}

#[test]
fn memory_back_at_its_baseline_lets_a_carried_hold_go() {
    // 1 MiB/s for 20 minutes from minute 10, then freed back to its
    // baseline: let go within `dip_longest` and a check or two of the
    // fall, the carried hold included.
    let values = sawtooth(50 * 60, 2.0 * GIB, |t| {
        if (600.0..1_800.0).contains(&t) { 20.0 * GIB + MIB * (t - 600.0) } else { 20.0 * GIB }
    });
    let verdicts = carried_checks(&values, 600, 50 * 60, true);
    let at_minute = |minute: usize| verdicts[(minute * 60 - 600) / 30];
    assert!(at_minute(29), "never called: {verdicts:?}");
    assert!(!at_minute(40), "held 10 minutes after memory came back: {verdicts:?}");
}

/// A process that covers the full window (there long before it).
const LONG_LIFE: Duration = Duration::from_secs(30 * 60);

/// The hold a check at `called` seconds carried from a leak's call on
/// the 2-minute window: a call alone (`confirmed` equal) or one a later
/// check confirmed.
fn hold_of(values: &[(Timestamp, u64)], called: usize, confirmed: usize) -> Hold {
    let level = |t: usize| values[t - 60..=t].iter().map(|&(_, bytes)| bytes).min().unwrap_or(0);
    Hold {
        called_at: at(called),
        confirmed_at: at(confirmed),
        window: Duration::from_secs(120),
        baseline_bytes: level(called - 100),
        confirmed_bytes: level(confirmed),
    }
}

#[test]
fn a_leak_called_once_is_carried_across_a_dip_and_only_across_one() {
    // Flat for 20 minutes under a 2 GiB sawtooth, then 4 MiB/s; an
    // evaluation 45 s after the onset frees 1.5 GiB for 95 s. The call
    // came 3.5 minutes after the onset; at the next check every window
    // fails (the short ones climb out of the dip, the long ones read it
    // as a return), and the call alone is carried across the dip.
    let onset = 1_200.0;
    let leak = |t: f64| 20.0 * GIB + 4.0 * MIB * (t - onset).max(0.0);
    let dipping = sawtooth(1_500, 2.0 * GIB, |t| {
        let evaluating = (onset + 45.0..onset + 140.0).contains(&t);
        leak(t) - if evaluating { 1.5 * GIB } else { 0.0 }
    });
    let (called, now) = (1_410, 1_440);
    let params = LeakParams::default();
    let mut scratch = FloorScratch::default();
    let series = &dipping[..=now];
    let bridged =
        bridge(&mut scratch, series, &hold_of(series, called, called), LONG_LIFE, &params);
    assert!(bridged.is_some_and(|(_, _, holds)| holds), "not carried across the dip");
    // Nor on a span the process does not cover yet (four minutes past its
    // start and warm-up grace): its load would read as growth.
    let young = Duration::from_secs(240);
    let bridged = bridge(&mut scratch, series, &hold_of(series, called, called), young, &params);
    assert!(bridged.is_some_and(|(_, _, holds)| !holds), "carried on a span not covered");
    // The same floor without a dip: a call whose next check fails for
    // another reason is no evidence yet (a benign floor's chance call).
    let plain = sawtooth(1_500, 2.0 * GIB, leak);
    let series = &plain[..=now];
    let bridged =
        bridge(&mut scratch, series, &hold_of(series, called, called), LONG_LIFE, &params);
    assert!(bridged.is_some_and(|(_, _, holds)| !holds), "one call carried without a dip");
    // Confirmed by a second check, it is carried as before.
    let bridged =
        bridge(&mut scratch, series, &hold_of(series, called - 30, called), LONG_LIFE, &params);
    assert!(bridged.is_some_and(|(_, _, holds)| holds), "two calls not carried");
}
