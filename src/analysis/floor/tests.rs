use super::*;
use proptest::prelude::*;

const START_MS: i64 = 1_767_225_600_000;

/// A series from gaps (ms, 0 for two samples at one instant) and values.
fn series(gaps: &[(u16, u64)]) -> Vec<(Timestamp, u64)> {
    let mut at = START_MS;
    gaps.iter()
        .map(|&(gap, value)| {
            at += i64::from(gap);
            (Timestamp::from_unix_millis(at), value)
        })
        .collect()
}

/// The points `reduce` and the straightforward classification give for
/// the window of `series` at or after `from`.
fn both(
    series: &[(Timestamp, u64)],
    from: Timestamp,
    buckets: usize,
) -> Option<[Vec<(f64, f64)>; 2]> {
    let start = series.partition_point(|&(at, _)| at < from);
    let window = series.get(start..)?;
    let origin = window.first()?.0.unix_millis();
    let span_ms = window.last()?.0.unix_millis() - origin;
    if span_ms <= 0 {
        return None;
    }
    let mut scratch = FloorScratch::default();
    scratch.reduce(window, origin, span_ms, buckets);
    let fast = scratch.points.clone();
    scratch.reduce_by_sample(window, origin, span_ms, buckets);
    Some([fast, scratch.points.clone()])
}

#[test]
fn a_sawtooth_on_a_rising_floor_reduces_to_the_floor() {
    // 1 Hz for 10 minutes; every 10 s step the memory climbs 1 GiB above a
    // floor that rises 1 MiB a second.
    let gaps: Vec<(u16, u64)> =
        (0..600u64).map(|t| (1000, (1 << 30) + t * (1 << 20) + (t % 10) * (1 << 27))).collect();
    let series = series(&gaps);
    let [fast, oracle] = both(&series, series[0].0, 24).unwrap();
    assert_eq!(fast, oracle);
    assert_eq!(fast.len(), 24);
    let line = FloorScratch::default().line(&series, series[0].0, 24).unwrap();
    assert!((line.slope - 1_048_576.0).abs() < 1.0e4, "slope {}", line.slope);
}

proptest! {
    #[test]
    fn reduced_floor_equals_the_per_sample_reduction(
        gaps in prop::collection::vec((prop_oneof![Just(0u16), 1u16..2_000, 1u16..60_000], any::<u64>()), 1..3_000),
        from_share in 0.0f64..1.0,
        buckets in 6usize..200,
    ) {
        let series = series(&gaps);
        let span = series.last().map_or(0, |&(at, _)| at.unix_millis() - START_MS);
        let from = Timestamp::from_unix_millis(START_MS + (span as f64 * from_share) as i64);
        if let Some([fast, oracle]) = both(&series, from, buckets) {
            prop_assert_eq!(&fast, &oracle);
            // Distinct levels counted on bit patterns, as by float order.
            let mut values: Vec<f64> = oracle.iter().map(|&(_, y)| y).collect();
            values.sort_unstable_by(f64::total_cmp);
            values.dedup();
            let mut scratch = FloorScratch { points: fast, ..FloorScratch::default() };
            prop_assert_eq!(scratch.distinct_levels(), values.len());
        }
    }

    #[test]
    fn regular_sampling_reduces_like_the_per_sample_reduction(
        count in 2usize..4_000,
        step_ms in prop_oneof![Just(250u16), Just(1_000u16), 1u16..10_000],
        values in prop::collection::vec(0u64..(1 << 40), 1..64),
        buckets in 6usize..64,
    ) {
        let gaps: Vec<(u16, u64)> =
            (0..count).map(|i| (step_ms, values[i % values.len()])).collect();
        let series = series(&gaps);
        let from = series[0].0;
        if let Some([fast, oracle]) = both(&series, from, buckets) {
            prop_assert_eq!(fast, oracle);
        }
    }
}
