//! Whether a leak window holds enough observations for its floor to be
//! judged.
//!
//! Owns: the least observations per floor bucket a window must hold. Depends
//! on `model` only (and its parent's parameters). Pure.
//!
//! Why: a bucket minimum finds the bottom of a training step's sawtooth
//! only when the bucket holds several observations taken at different
//! phases of the step. The rules' bounds (significance, CUSUM, quarters,
//! levels) were validated on floors whose buckets hold at least 5
//! observations (the 2-minute window at one slow sample a second; the
//! longer windows hold more). A slower slow tier (`sampler.slow_interval`)
//! or a gap in a trace leaves fewer: bucket
//! minima then scatter more, and more skewed, than the spread the rules
//! measure (at a 10 s slow tier the 16-minute window, 4 samples a bucket,
//! gave 16 benign alarms on 1,800 device-hours). Fewer, wider buckets are
//! no cure: the rules need their 24 points (9 buckets of 10 samples gave 66).
//! So such a window is not judged, and a longer one, which holds more,
//! speaks instead. At one observation a second every window is judged, so
//! the default figures do not move.

use crate::model::Timestamp;

use super::LeakParams;

/// Least observations per floor bucket, on average over the window.
const PER_BUCKET: usize = 5;

/// Share of `PER_BUCKET` a window may fall short by: at one sample a
/// second the 2-minute window holds 120 or 121 samples depending on where
/// the clock's jitter puts its edges, and one late or missed tick must not
/// leave it unjudged; a 10 s slow tier's 16-minute window (97) still is.
const SLACK_PERCENT: usize = 10;

/// The buckets to judge the window of `series` (oldest first) from `from`
/// on: `params.buckets`, or `None` when the window holds too few
/// observations to fill them.
pub(super) fn buckets(
    series: &[(Timestamp, u64)],
    from: Timestamp,
    params: &LeakParams,
) -> Option<usize> {
    let observations = series.len() - series.partition_point(|&(at, _)| at < from);
    let needed = params.buckets.saturating_mul(PER_BUCKET);
    let needed = needed.saturating_mul(100 - SLACK_PERCENT).div_ceil(100);
    (observations >= needed).then_some(params.buckets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(every_ms: i64, count: i64) -> Vec<(Timestamp, u64)> {
        (0..count).map(|i| (Timestamp::from_unix_millis(i * every_ms), 1)).collect()
    }

    #[test]
    fn a_window_sampled_each_second_is_judged_and_a_sparse_one_is_not() {
        let params = LeakParams::default();
        let start = Timestamp::from_unix_millis(0);
        // One a second: 121 samples in 2 minutes.
        assert_eq!(buckets(&series(1_000, 121), start, &params), Some(params.buckets));
        // One every 10 s: 97 in 16 minutes, 4 a bucket; 181 in 30 do.
        assert_eq!(buckets(&series(10_000, 97), start, &params), None);
        let dense = buckets(&series(10_000, 181), start, &params);
        assert_eq!(dense, Some(params.buckets));
        // A tick or two short of 120 (clock jitter at the edges, a late
        // tick) is still judged; 107 (under 90 %) is not.
        assert_eq!(buckets(&series(1_000, 119), start, &params), Some(params.buckets));
        assert_eq!(buckets(&series(1_000, 108), start, &params), Some(params.buckets));
        assert_eq!(buckets(&series(1_000, 107), start, &params), None);
        // Only what lies from `from` on counts.
        let late = Timestamp::from_unix_millis(14_000);
        assert_eq!(buckets(&series(1_000, 121), late, &params), None);
    }

    #[test]
    fn a_process_there_all_along_covers_the_window_at_a_sparse_cadence() {
        // Lists every 12 s, the first 12 s after the window's start: the
        // process was there before it, so the 30-minute window is judged
        // (the 16-minute one holds too few lists to be).
        let params = LeakParams::default();
        let start = Timestamp::from_unix_millis(0);
        let series: Vec<(Timestamp, u64)> = (1..=150)
            .map(|i| (Timestamp::from_unix_millis(i * 12_000), 20 << 30 | (i as u64) << 22))
            .collect();
        let mut scratch = crate::analysis::floor::FloorScratch::default();
        let found = super::super::assess_leak(&mut scratch, &series, start, false, &params);
        let evidence = found.unwrap_or_else(|reason| panic!("not judged a leak: {reason:?}"));
        assert!(evidence.window_seconds > 1_700.0, "{evidence:?}");
    }
}
