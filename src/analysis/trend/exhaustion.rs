//! The exhaustion forecast's own estimates, once growth is called
//! sustained: the growth rate of the floor by local slopes, and the peak of
//! used memory carried forward to the instant of the forecast.
//!
//! Owns: the step-robust slope (median of slopes between floor buckets a
//! few apart) and the projected peak. Depends on `model::Timestamp` and the
//! median beside it; no I/O, no clocks, no allocation (fixed arrays bounded
//! by [`MAX_BUCKETS`]).
//!
//! Why local slopes and not the Theil–Sen line of the whole window: a level
//! step inside the window (a notebook tenant grabbing a chunk, a
//! checkpoint's buffers that stay cached, an evaluation phase's floor
//! coming back) straddles up to half of all pairs of points, and the median
//! of all pairwise slopes moves with them: on the corpus a 5-minute window
//! read 25–27 MiB/s for 21–22 MiB/s of growth, and 62 for 50, and the
//! forecast was 17–21 % short. Pairs at most a quarter of the window apart
//! straddle one step in about one case in seven, so their median keeps the
//! rate of the growth itself; a growth that began inside the window is no
//! worse off, since the local slopes of its flat part are a minority once
//! the growth covers most of the window (it is judged sustained only then).
//!
//! Why the peak is carried forward: the top of a step sets when memory runs
//! out, and the highest sample of the last `peak_window` was taken up to
//! that long ago, when the floor was lower by the growth since; counted as
//! it was, it put the forecast late by up to `peak_window` (at 68 MiB/s,
//! 1–2 GiB of headroom that was not there).

use crate::model::Timestamp;

use super::{Trend, median};

/// Most floor points the local slopes are taken over (the forecast's
/// `buckets` is 30 by default; above this the line of all pairs stands).
pub const MAX_BUCKETS: usize = 64;
/// Most pairs: every bucket with the next `MAX_BUCKETS / 4`.
const MAX_PAIRS: usize = MAX_BUCKETS * MAX_BUCKETS / 4;

/// The median slope between floor points (`points`: seconds since the
/// window's first sample and bytes, oldest first, as
/// [`FloorScratch::points`](crate::analysis::floor::FloorScratch::points)
/// gives them) at most `lag_share` of the points apart, and the intercept
/// that goes with it, as a [`Trend`] over the same span as `trend` (whose
/// fit is kept). `None` for fewer than 6 points or more
/// than [`MAX_BUCKETS`].
pub fn local_slope(points: &[(f64, f64)], trend: &Trend, lag_share: f64) -> Option<Trend> {
    if points.len() < 6 || points.len() > MAX_BUCKETS {
        return None;
    }
    let lag = ((points.len() as f64 * lag_share).round() as usize).clamp(1, MAX_BUCKETS / 4);
    let mut slopes = [0.0; MAX_PAIRS];
    let mut pairs = 0;
    for (first, &(x0, y0)) in points.iter().enumerate() {
        for &(x1, y1) in points.iter().skip(first + 1).take(lag) {
            if let Some(slot) = slopes.get_mut(pairs) {
                *slot = (y1 - y0) / (x1 - x0);
                pairs += 1;
            }
        }
    }
    let slope = median(slopes.get_mut(..pairs)?)?;
    let mut residuals = [0.0; MAX_BUCKETS];
    for (slot, &(x, y)) in residuals.iter_mut().zip(points) {
        *slot = y - slope * x;
    }
    let intercept = median(residuals.get_mut(..points.len())?)?;
    Some(Trend { slope_per_second: slope, intercept, ..*trend })
}

/// The highest value of `series` (oldest first) within `window` of its
/// newest sample, each carried forward to that newest sample's time at
/// `slope_per_second`, with that time.
pub fn projected_peak(
    series: &[(Timestamp, u64)],
    window: std::time::Duration,
    slope_per_second: f64,
) -> Option<(Timestamp, f64)> {
    let &(newest, _) = series.last()?;
    let from = newest.saturating_sub(window);
    let start = series.partition_point(|&(at, _)| at < from);
    let slope = if slope_per_second.is_finite() { slope_per_second.max(0.0) } else { 0.0 };
    let peak = series
        .get(start..)?
        .iter()
        .map(|&(at, value)| {
            let age_s = newest.unix_millis().saturating_sub(at.unix_millis()) as f64 / 1000.0;
            value as f64 + slope * age_s
        })
        .max_by(f64::total_cmp)?;
    Some((newest, peak))
}

/// Seconds until the projected peak (`peak` at `peak_at`, carried on to
/// `now` at the trend's rate) reaches `capacity_bytes`: only for growth
/// whose fit is at least `min_fit`. Zero once the peak is at or past the
/// capacity. `None` where the floor follows a saturating `curve` (time
/// constant, rise still to come: `saturation`) whose plateau stays below
/// the capacity: a warm-up levelling off.
pub fn seconds_to_full(
    capacity_bytes: u64,
    (peak_at, peak): (Timestamp, f64),
    trend: &Trend,
    curve: Option<(f64, f64)>,
    now: Timestamp,
    min_fit: f64,
) -> Option<f64> {
    let slope = trend.slope_per_second;
    if !(slope.is_finite() && slope > 0.0 && trend.fit >= min_fit) {
        return None;
    }
    let since_s = now.unix_millis().saturating_sub(peak_at.unix_millis()).max(0) as f64 / 1000.0;
    let headroom = capacity_bytes as f64 - (peak + slope * since_s);
    // The line where the curve reaches the capacity too: sooner, and on
    // growth runs the curve's time constant is still unsteady when the
    // line's forecast is already within a few percent.
    let levels_off_below =
        curve.is_some_and(|curve| super::saturation::seconds_to_rise(curve, headroom).is_none());
    (!levels_off_below).then(|| (headroom / slope).max(0.0))
}
