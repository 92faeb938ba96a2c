//! Robust linear trends of memory series and the time left before memory
//! runs out.
//!
//! Owns: the Theil–Sen estimator (median of pairwise slopes), the
//! goodness of fit, time to exhaustion (`exhaustion`), and the forecast's
//! choice of which window calls growth sustained and which sets its rate
//! (`ForecastParams::trend`). Depends on: `model::Timestamp` and the floor
//! lines of `analysis::floor`; callers extract series with
//! `analysis::series`. No I/O, no clocks: time is the series'
//! own timestamps.
//!
//! Why Theil–Sen and not least squares: one allocation spike (a checkpoint
//! save, an eval batch) drags a least-squares line far off, while the
//! median of pairwise slopes ignores up to ~29 % outliers. Its cost is
//! O(n²) in the points it sees, so it only ever sees a window's floor
//! (`analysis::floor`, a few dozen bucket minima): with 30 buckets a call
//! costs a few microseconds whatever the window length.

use crate::model::Timestamp;

/// A fitted line `value(t) = intercept + slope_per_second · (t − origin)`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Trend {
    /// Change per second, in the series' unit (bytes for memory).
    pub slope_per_second: f64,
    /// The line's value at `origin`.
    pub intercept: f64,
    /// The earliest timestamp of the series.
    pub origin: Timestamp,
    /// Coefficient of determination of the line on the (bucketed) points,
    /// clamped to 0..=1: 1 is a perfect line, ~0 is noise around a level.
    pub fit: f64,
    /// Time from the earliest to the latest sample.
    pub span_seconds: f64,
}

/// How the device's growth is estimated for the exhaustion forecast.
/// Defaults were tuned on the simulator's randomised corpus
/// (docs/alerts.md, "Detection benchmark"). Only `min_span` is a
/// configuration key (`analysis.forecast_min_span`: how long a job's start
/// looks like growth is the operator's knowledge); the bucket count is a
/// cost bound, and the share and peak window are the shape of the test,
/// tuned with the corpus.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForecastParams {
    /// Floor buckets the trend window is reduced to (30; the fit's cost is
    /// quadratic in them).
    pub buckets: usize,
    /// Share of the slope each of the last two quarters of the window must
    /// rise by for the growth to count as sustained (0.5): a warm-up that
    /// decelerates towards its plateau, or a single step such as a second
    /// job starting, falls short and gets no forecast.
    pub keep_rising_share: f64,
    /// Least span of samples before growth can count as sustained
    /// (`analysis.forecast_min_span`, 90 s):
    /// the first seconds of any job are all "growth".
    pub min_span: std::time::Duration,
    /// How far back the peak of used memory is taken from for the time to
    /// exhaustion (30 s, several training steps): memory runs out at the
    /// top of a step, and a sample caught at its bottom would add the
    /// step's size to the forecast.
    pub peak_window: std::time::Duration,
    /// How many newest parts of the window (half, quarter, …; at most 4)
    /// are judged besides the whole (1): growth that began minutes ago.
    /// Two (the quarter too) was tried: noisier slopes, TTE error p50 0.6 %
    /// → 5 % on the corpus, so the default stays at the half. With local
    /// slopes (`local_lag_share`) it gave every run with ≥ 15 min from onset
    /// to full a ≥ 10-minute lead at seeds 1–4, but TTE error p95 13.7 % at
    /// seed 4, and a 2.5-minute window's rate under a 6 GiB sawtooth is
    /// ±5 % (docs/alerts.md): still the half.
    pub recent_splits: u32,
    /// Least share of a shorter window's slope a longer one must keep to be
    /// preferred (1.0: the longer only when at least as steep, as before).
    pub consistent_share: f64,
    /// Once growth is sustained, its rate is the median slope between floor
    /// buckets at most this share of the buckets apart (0.25), not the
    /// Theil–Sen line of all pairs: a level step inside the window (a
    /// tenant's chunk, a checkpoint's cached buffers, an evaluation phase's
    /// end) moved that line by a fifth on the corpus (`exhaustion`). 0 keeps
    /// the line of all pairs.
    pub local_lag_share: f64,
    /// How many newest parts of the window (half, quarter, …; at most 4)
    /// may call growth sustained, counting the `recent_splits` ones (1: off).
    /// Those beyond `recent_splits` never set the rate: it comes from the
    /// longer windows' local slopes, and the fit from the best of the
    /// windows that called the growth. 2 (the quarter): growth that began
    /// a few minutes ago is called while the half's floor is still partly
    /// flat, so the forecast fires sooner (docs/alerts.md, "Detection
    /// benchmark").
    pub early_splits: u32,
    /// Least fit of an early window's floor line for its call to count
    /// (0.9). Without it the newest quarter called a second job's warm-up
    /// (a staircase under a tenant's chunks, R² 0.77–0.87) sustained growth
    /// and the forecast fired on a benign run; a line that clean is growth,
    /// not a step or a filling cache.
    pub early_min_fit: f64,
    /// Least share of the device's used memory its listed processes must
    /// hold for its growth to be read process by process (0.9;
    /// `analysis::process_growth`): what they leave out (unlisted
    /// contexts, the driver's own) is taken to be flat, and a CUDA context
    /// is 100–550 MiB, so a tenth of a busy device is room for several.
    pub process_share: f64,
    /// How long after its first list a process that joined inside the
    /// trend window (a second job starting) is judged on its own points
    /// (3 min, as `analysis.leak_warmup`): model load and the allocator's
    /// cache filling are growth that levels off, and a job's own trend over
    /// its first minutes calls it sustained (`analysis::process_growth`).
    pub joined_settle: std::time::Duration,
    /// How far, in the floor's noise, growth over the newer half of a
    /// window must fall short of the older half's for the forecast to
    /// follow a saturating curve instead of a line (4, the leak
    /// detector's `slowing_significance`: the same evidence).
    pub slowing_significance: f64,
}

impl Default for ForecastParams {
    fn default() -> Self {
        Self {
            buckets: 30,
            keep_rising_share: 0.5,
            min_span: std::time::Duration::from_secs(90),
            peak_window: std::time::Duration::from_secs(30),
            recent_splits: 1,
            consistent_share: 1.0,
            local_lag_share: 0.25,
            early_splits: 2,
            early_min_fit: 0.9,
            process_share: 0.9,
            joined_settle: std::time::Duration::from_secs(3 * 60),
            slowing_significance: 4.0,
        }
    }
}

impl ForecastParams {
    /// The trend of the floor of `series` (bucket minima, so memory
    /// released every step, `empty_cache()` included, does not hide the
    /// growth underneath) and whether it is sustained growth.
    ///
    /// The newest half, quarter, … of the window (`recent_splits` of them)
    /// are judged too. Growth that began a few minutes ago is forecast at
    /// its own rate, not diluted by the flat part before it: from the
    /// shortest recent window whose growth is sustained, longer windows are
    /// taken while their slope stays within `consistent_share` of it (they
    /// then saw the same growth, with more points to fit it).
    ///
    /// The newer windows up to `early_splits` may call growth sustained
    /// but never set its rate (see [`ForecastParams::early_splits`]).
    pub fn trend(
        &self,
        scratch: &mut super::floor::FloorScratch,
        series: &[(Timestamp, u64)],
    ) -> Option<(Trend, bool)> {
        let full = self.judge(scratch, series)?;
        // Shortest last; at most a handful (the split count is bounded).
        let mut recent: [Option<Judged>; MAX_SPLITS] = [None; MAX_SPLITS];
        let splits = (self.recent_splits as usize).min(MAX_SPLITS);
        let judged = (self.early_splits as usize).clamp(splits, MAX_SPLITS);
        for (index, slot) in recent.iter_mut().take(judged).enumerate() {
            let share = 0.5_f64.powi(index as i32 + 1);
            let from = full.trend.origin.saturating_add(std::time::Duration::from_secs_f64(
                (full.trend.span_seconds * (1.0 - share)).max(0.0),
            ));
            let window = series.get(series.partition_point(|&(at, _)| at < from)..).unwrap_or(&[]);
            *slot = self.judge(scratch, window);
        }
        let sustained_rate_windows =
            || recent.iter().take(splits).flatten().filter(|j| j.sustained);
        // From the shortest sustained window towards the full one.
        let mut chosen: Option<Judged> = None;
        for late in sustained_rate_windows().rev() {
            chosen = match chosen {
                None => Some(*late),
                Some(shorter) if self.consistent(&late.trend, &shorter.trend) => Some(*late),
                Some(shorter) => Some(shorter),
            };
        }
        let early = recent
            .iter()
            .take(judged)
            .skip(splits)
            .flatten()
            .filter(|j| j.sustained && j.trend.fit >= self.early_min_fit);
        let called_early = early.clone().next().is_some();
        // The longest recent window, steeper than the whole: growth that
        // began inside the whole window, seen with less of its flat start.
        let steeper_recent = splits
            .checked_sub(1)
            .and_then(|index| recent.get(index).copied().flatten())
            .filter(|late| !late.levelling && !self.consistent(&full.trend, &late.trend));
        let (rate, sustained) = match chosen {
            Some(late) if full.sustained && self.consistent(&full.trend, &late.trend) => {
                (full, true)
            }
            Some(late)
                if late.trend.slope_per_second > full.trend.slope_per_second || !full.sustained =>
            {
                (late, true)
            }
            Some(_) => (full, true),
            // Growth called by the whole window or early by the newest,
            // none of the recent windows judged for the rate agreeing: the
            // rate is still that of the one with the least flat start (a
            // tenant's chunk freed inside the half flickers its verdict,
            // and the whole window's local slopes are then mostly flat).
            None if full.sustained || called_early => (steeper_recent.unwrap_or(full), true),
            None => (full, false),
        };
        // The early call: the newest windows see only the growth, so their
        // verdict and fit come minutes before the longer windows', whose
        // start is still flat; their rate, from a few minutes of floor
        // under the sawtooth, is not trusted (±5 %; the steeper of them
        // was chosen as often as not), so it comes from the windows above.
        // The fit is the best of the line that gives the rate and of those
        // that called the growth: a level step (a tenant's chunk) lowers
        // one window's R² while another sees a clean line.
        let called = std::iter::once(&full).chain(recent.iter().take(splits).flatten());
        let fit = called
            .filter(|j| j.sustained)
            .chain(early)
            .map(|j| j.trend.fit)
            .fold(rate.trend.fit, f64::max);
        // Only sustained growth (slope > 0) is forecast, so only its rate is
        // refined: the verdict itself stays that of the floor line. The
        // scratch holds the floor of the window judged last, whether or not
        // it gave a line; another window's floor is reduced again (one
        // pass, only for growth).
        if sustained && self.local_lag_share > 0.0 && rate.trend.slope_per_second > 0.0 {
            let last = match judged.checked_sub(1) {
                Some(newest) => recent.get(newest).copied().flatten(),
                None => Some(full),
            };
            let floor_ready = last.is_some_and(|last| last.trend.origin == rate.trend.origin)
                || scratch.line(series, rate.trend.origin, self.buckets).is_some();
            let local = floor_ready
                .then(|| {
                    exhaustion::local_slope(scratch.points(), &rate.trend, self.local_lag_share)
                })
                .flatten();
            return Some((Trend { fit, ..local.unwrap_or(rate.trend) }, true));
        }
        Some((Trend { fit, ..rate.trend }, sustained))
    }

    /// One window's floor line and its verdicts: sustained (rising for at
    /// least `min_span`) and levelling off.
    fn judge(
        &self,
        scratch: &mut super::floor::FloorScratch,
        window: &[(Timestamp, u64)],
    ) -> Option<Judged> {
        let &(first, _) = window.first()?;
        let line = scratch.line(window, first, self.buckets)?;
        let trend = line.trend(first);
        let rising = line.keeps_rising(self.keep_rising_share);
        let sustained = rising && trend.span_seconds >= self.min_span.as_secs_f64();
        // The deceleration half of `keeps_rising` alone: a tenant's chunk
        // freed inside the window is not that shape.
        let levelling = line.decelerates(self.keep_rising_share);
        Some(Judged { trend, sustained, levelling })
    }

    /// The saturating curve the floor of `series` follows where its rate
    /// keeps falling: judged on the whole window, its newest half and
    /// quarter (a job's warm-up may fill only the newest minutes), the
    /// shortest whose newer half grows more slowly than its older by
    /// `slowing_significance` times the floor's noise gives the time
    /// constant and the rise still to come (`saturation`). `None` for
    /// growth that keeps its rate, which is forecast along its line.
    pub fn plateau(
        &self,
        scratch: &mut super::floor::FloorScratch,
        series: &[(Timestamp, u64)],
    ) -> Option<(f64, f64)> {
        let (&(first, _), &(last, _)) = (series.first()?, series.last()?);
        let span = last.duration_since(first)?;
        let mut buffer = Vec::new();
        (0..3).rev().find_map(|halvings| {
            let from = last.saturating_sub(span / (1 << halvings));
            let window = series.get(series.partition_point(|&(at, _)| at < from)..)?;
            scratch.line(window, from, self.buckets)?;
            let halves = saturation::halves(scratch.points(), &mut buffer)?;
            halves
                .slowing(self.slowing_significance, SLOWING_NOISE_FLOOR)
                .then(|| halves.plateau())
                .flatten()
        })
    }

    /// Whether `longer`'s slope is within `consistent_share` of
    /// `shorter`'s (both growing).
    fn consistent(&self, longer: &Trend, shorter: &Trend) -> bool {
        longer.slope_per_second >= self.consistent_share * shorter.slope_per_second
    }
}

/// Noise below which a device's floor counts as this noisy anyway (2 MiB,
/// as the leak detector's `noise_floor_bytes`): a perfectly quiet floor
/// does not make a few KiB of slowing a curve.
const SLOWING_NOISE_FLOOR: f64 = 2.0 * 1_048_576.0;

/// The most recent windows [`ForecastParams::trend`] judges.
const MAX_SPLITS: usize = 4;

/// One window as [`ForecastParams::trend`] weighs it.
#[derive(Clone, Copy, Debug)]
struct Judged {
    /// The Theil–Sen line of the window's floor.
    trend: Trend,
    /// Rising by the share, over at least `min_span`.
    sustained: bool,
    /// Its floor's last quarter step falls short of its first: levelling
    /// off towards a plateau.
    levelling: bool,
}

/// Slope, intercept and fit of the Theil–Sen line through `points`.
///
/// The pairwise slopes are selected as [`order_key`]s: a window's line
/// takes the median of a few hundred of them, and comparing integers
/// instead of `f64::total_cmp` (which re-derives both keys at every
/// comparison) is most of that selection's cost. Same order, same median.
pub(super) fn fit_line(points: &[(f64, f64)], keys: &mut Vec<i64>) -> Option<(f64, f64, f64)> {
    let (low, high) = points
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(_, y)| (lo.min(y), hi.max(y)));
    if low == high {
        // Flat: every residual is 0 and SS_tot is 0, so 1 − SS_res/SS_tot
        // is undefined; a constant is perfectly described by a flat line.
        return Some((0.0, low, 1.0));
    }
    keys.clear();
    let mut rest = points;
    while let Some((&(x0, y0), tail)) = rest.split_first() {
        for &(x1, y1) in tail {
            let dx = x1 - x0;
            if dx != 0.0 {
                keys.push(order_key((y1 - y0) / dx));
            }
        }
        rest = tail;
    }
    let slope = median_of_keys(keys)?;
    keys.clear();
    keys.extend(points.iter().map(|&(x, y)| order_key(y - slope * x)));
    let intercept = median_of_keys(keys)?;

    let mean = points.iter().map(|&(_, y)| y).sum::<f64>() / points.len() as f64;
    let (ss_res, ss_tot) = points.iter().fold((0.0, 0.0), |(res, tot), &(x, y)| {
        let residual = y - (intercept + slope * x);
        (res + residual * residual, tot + (y - mean) * (y - mean))
    });
    let fit = if ss_tot > 0.0 { (1.0 - ss_res / ss_tot).clamp(0.0, 1.0) } else { 1.0 };
    Some((slope, intercept, fit))
}

/// An integer that orders as `f64::total_cmp` orders `value`, equal only
/// for the same bit pattern: the sign bit kept, the other bits of a
/// negative value flipped. The map is its own inverse ([`from_order_key`]).
fn order_key(value: f64) -> i64 {
    flip_negative(value.to_bits() as i64)
}

/// The value whose [`order_key`] is `key`.
fn from_order_key(key: i64) -> f64 {
    f64::from_bits(flip_negative(key) as u64)
}

/// Flips every bit but the sign of a negative pattern: its own inverse.
fn flip_negative(bits: i64) -> i64 {
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

/// [`median`] of values given as [`order_key`]s.
fn median_of_keys(keys: &mut [i64]) -> Option<f64> {
    let count = keys.len();
    if count == 0 {
        return None;
    }
    let (lower, upper, _) = keys.select_nth_unstable(count / 2);
    let upper = from_order_key(*upper);
    if count % 2 == 1 {
        return Some(upper);
    }
    let lower = from_order_key(*lower.iter().max()?);
    Some((lower + upper) / 2.0)
}

/// Median by selection (O(n), no full sort); `None` when empty.
pub(super) fn median(values: &mut [f64]) -> Option<f64> {
    let count = values.len();
    if count == 0 {
        return None;
    }
    let (lower, upper, _) = values.select_nth_unstable_by(count / 2, f64::total_cmp);
    let upper = *upper;
    if count % 2 == 1 {
        return Some(upper);
    }
    // Even count: the other middle value is the largest of the lower part.
    let lower = lower.iter().copied().max_by(f64::total_cmp)?;
    Some((lower + upper) / 2.0)
}

pub mod exhaustion;
pub mod saturation;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod lead_tests;
