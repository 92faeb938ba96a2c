//! The forecast's verdict and rate when growth began inside the window:
//! which window calls it, which sets the rate (issue 13, lead time).

use super::*;
use crate::analysis::floor::FloorScratch;

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1024.0 * MIB;

fn at(seconds: f64) -> Timestamp {
    Timestamp::from_unix_millis(1_767_225_600_000 + (seconds * 1000.0).round() as i64)
}

/// 10 minutes at 4 Hz of a device's used memory: flat at 20 GB until
/// `onset`, then `growth(t − onset)` on top, under a sawtooth of
/// `sawtooth` bytes sampled at random phases (deterministic xorshift),
/// plus level steps `(from second, bytes)` (a tenant's chunks).
fn series(
    onset: f64,
    growth: impl Fn(f64) -> f64,
    sawtooth: f64,
    steps: &[(f64, f64)],
) -> Vec<(Timestamp, u64)> {
    let mut state = 0x2545_F491_4F6C_DD1D_u64;
    (0..=2_400)
        .map(|i| {
            let t = f64::from(i) * 0.25;
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let phase = (state >> 11) as f64 / (1u64 << 53) as f64;
            let grown = if t > onset { growth(t - onset) } else { 0.0 };
            let stepped: f64 = steps.iter().filter(|&&(from, _)| t >= from).map(|&(_, b)| b).sum();
            (at(t), (20.0e9 + grown + sawtooth * phase + stepped).round() as u64)
        })
        .collect()
}

fn forecast(params: ForecastParams, series: &[(Timestamp, u64)]) -> (Trend, bool) {
    let mut scratch = FloorScratch::default();
    params.trend(&mut scratch, series).unwrap_or_else(|| panic!("no trend"))
}

#[test]
fn growth_whose_half_flickers_on_a_freed_chunk_keeps_the_half_rate() {
    // 60 MiB/s from 5 minutes in; a tenant frees 4 GiB 50 s before the
    // newest half's third quarter ends, so the half's quarters do not keep
    // rising while the whole window's do. The whole window's local slopes
    // are half flat: its rate alone read a fraction of the growth.
    let rate = 60.0 * MIB;
    let series = series(300.0, |d| rate * d, 4.0 * GIB, &[(470.0, -4.0 * GIB)]);
    let mut scratch = FloorScratch::default();
    let (_, whole_rising) = scratch.trend(&series, 30, 0.5).unwrap_or_else(|| panic!("whole"));
    let (_, half_rising) =
        scratch.trend(&series[1_200..], 30, 0.5).unwrap_or_else(|| panic!("half"));
    assert!(whole_rising && !half_rising, "the shape this test is about");
    let (trend, sustained) = forecast(ForecastParams::default(), &series);
    assert!(sustained);
    assert!(((trend.slope_per_second - rate) / rate).abs() < 0.1, "{trend:?}");
    assert!(trend.fit >= 0.8, "{trend:?}");
}

#[test]
fn a_warm_up_levelling_off_is_not_forecast_at_its_newest_half_rate() {
    // 8 GiB of warm-up (τ 60 s) from 350 s in: the whole window still
    // rises by its quarters, the newest half is steeper but levelling off.
    let series = series(350.0, |d| 8.0 * GIB * (1.0 - (-d / 60.0).exp()), 4.0 * GIB, &[]);
    let mut scratch = FloorScratch::default();
    let (half, _) = scratch.trend(&series[1_200..], 30, 0.5).unwrap_or_else(|| panic!("half"));
    let (trend, _) = forecast(ForecastParams::default(), &series);
    assert!(half.slope_per_second > 20.0 * MIB, "{half:?}");
    assert!(trend.slope_per_second < 0.25 * half.slope_per_second, "{trend:?}");
}

#[test]
fn the_newest_quarter_calls_growth_early_without_setting_its_rate() {
    // 60 MiB/s for the last two minutes only: the half's floor is still
    // mostly flat, the quarter's is all growth.
    let rate = 60.0 * MIB;
    let series = series(480.0, |d| rate * d, 4.0 * GIB, &[]);
    let half_only = ForecastParams { early_splits: 1, ..ForecastParams::default() };
    let (_, off) = forecast(half_only, &series);
    assert!(!off, "the half alone does not call it yet");
    let (trend, sustained) = forecast(ForecastParams::default(), &series);
    assert!(sustained);
    assert!(trend.fit >= 0.8, "the quarter's line fits: {trend:?}");
    // The rate is the longer window's (mostly flat yet, so low: a later
    // forecast, never a sooner one), not the quarter's own.
    assert!(trend.slope_per_second < 0.5 * rate, "{trend:?}");
}

#[test]
fn the_newest_quarter_does_not_call_growth_early_on_a_line_that_fits_poorly() {
    // 30 MiB/s for the last two minutes under sawtooths of growing size:
    // the quarter's bucket minima scatter more and more around its line. The
    // first size at which the quarter still keeps rising, but its line
    // fits below `early_min_fit`, and nothing longer calls the growth, is
    // the case: a call that rests on so loose a line is not made early.
    let rate = 30.0 * MIB;
    let defaults = ForecastParams::default();
    let half_only = ForecastParams { early_splits: 1, ..defaults };
    let ungated = ForecastParams { early_min_fit: 0.0, ..defaults };
    let mut scratch = FloorScratch::default();
    let poor = (1..=48).map(|gib| f64::from(gib) * 0.5 * GIB).find_map(|sawtooth| {
        let series = series(480.0, |d| rate * d, sawtooth, &[]);
        let (quarter, rising) = scratch.trend(&series[1_800..], defaults.buckets, 0.5)?;
        let loose = rising && quarter.fit < defaults.early_min_fit;
        (loose && !forecast(half_only, &series).1 && forecast(ungated, &series).1)
            .then_some((sawtooth, series))
    });
    let Some((sawtooth, series)) = poor else {
        panic!("no sawtooth up to 24 GiB gave a rising quarter that fits poorly")
    };
    let (trend, sustained) = forecast(defaults, &series);
    assert!(!sustained, "{:.1} GiB sawtooth: {trend:?}", sawtooth / GIB);
}

#[test]
fn a_newest_quarter_without_a_line_leaves_the_rate_on_its_own_window_floor() {
    // 60 MiB/s from 250 s in: the newest half (300–600 s) is all growth
    // and sets the rate. A 45 s sampling gap leaves the newest quarter's
    // third quarter empty, so the quarter has no line, though its floor
    // was reduced: the rate's line must still be read on the half's floor,
    // its intercept the half's floor at the half's start.
    let rate = 60.0 * MIB;
    let series: Vec<_> = series(250.0, |d| rate * d, GIB, &[])
        .into_iter()
        .filter(|&(time, _)| !(at(520.0)..at(565.0)).contains(&time))
        .collect();
    let mut scratch = FloorScratch::default();
    let newest_quarter = series.partition_point(|&(time, _)| time < at(450.0));
    let quarter = ForecastParams::default().judge(&mut scratch, &series[newest_quarter..]);
    assert!(quarter.is_none(), "the shape this test is about");
    let (trend, sustained) = forecast(ForecastParams::default(), &series);
    assert!(sustained);
    let origin_s = (trend.origin.unix_millis() - 1_767_225_600_000) as f64 / 1000.0;
    let floor_at_origin = 20.0e9 + rate * (origin_s - 250.0).max(0.0);
    assert!((trend.intercept - floor_at_origin).abs() < GIB, "{trend:?} at {origin_s} s");
}
