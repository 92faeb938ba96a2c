//! Tests of `assess_leak_traced`: the record says what the detector
//! judged, and recording changes no verdict.

use super::tests::{GIB, MIB, SECONDS, assess, at, evaluating, sawtooth, series};
use super::*;

/// The verdict on `values` (sampled from time 0, no warm-up owed) and the
/// record of every window judged on the way to it.
fn traced(
    values: &[(Timestamp, u64)],
    params: &LeakParams,
) -> (Result<LeakEvidence, NotALeak>, Vec<WindowJudgement>) {
    let mut trace = Vec::new();
    let mut scratch = FloorScratch::default();
    let verdict = assess_leak_traced(
        &mut scratch,
        values,
        Start::Window(at(0)),
        &mut Prior::Nothing,
        params,
        &mut trace,
    );
    (verdict, trace)
}

#[test]
fn the_trace_shows_the_dip_masked_judgement_that_called_the_leak() {
    // The same slow leak between evaluation dips: what `--explain` shows
    // must be what the detector judged, its second look at the 30-minute
    // floor without the dips included.
    let values = sawtooth(SECONDS, 2.0 * GIB, |t| {
        20.0 * GIB + 0.25 * MIB * t - if evaluating(t) { GIB } else { 0.0 }
    });
    let params = LeakParams::default();
    let (traced, trace) = traced(&values, &params);
    assert_eq!(traced, assess(&values), "tracing changes no verdict");
    let [whole, masked] = trace.as_slice() else {
        panic!("two looks at the full window: {trace:?}")
    };
    assert_eq!(whole.window, params.window);
    assert!(!whole.dips_left_out && whole.verdict.is_some_and(|verdict| verdict.is_err()));
    assert!(masked.dips_left_out && masked.verdict == Some(Ok(())), "{masked:?}");
}

#[test]
fn the_trace_lists_every_window_judged_longest_first() {
    // A fast leak that began 3 minutes ago over a flat floor: the longest
    // window does not show it, the shorter ones are judged from the
    // longest down to the one that calls it.
    let values = series(SECONDS, 32.0 * MIB, |t| {
        8.0 * GIB + 16.0 * MIB * (t - (SECONDS - 180) as f64).max(0.0)
    });
    let params = LeakParams::default();
    let (verdict, trace) = traced(&values, &params);
    let evidence = verdict.unwrap();
    let windows: Vec<u64> = trace.iter().map(|record| record.window.as_secs()).collect();
    let last = trace.last().unwrap();
    assert_eq!(windows.first().copied(), Some(params.window.as_secs()), "{windows:?}");
    assert!(windows.windows(2).all(|pair| pair[0] > pair[1]), "{windows:?}");
    assert!((last.window.as_secs_f64() - evidence.window_seconds).abs() <= 2.0, "{evidence:?}");
    assert_eq!(last.verdict, Some(Ok(())));
    assert!(trace.iter().skip(1).all(|record| record.new_ground.is_some()));
}
