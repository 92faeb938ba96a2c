//! The floor of a memory series: its lower envelope, and whether that floor
//! rises steadily.
//!
//! Owns: the per-bucket minimum that turns a sawtoothing series into its
//! floor, the robust line through that floor and its residual spread, and
//! the "still growing" test shared by leak detection and the exhaustion
//! forecast, and the dips (an evaluation phase's fall and step back) that
//! leak detection may leave out of a floor; the forecast never does. Depends on: `model::Timestamp` and `analysis::trend` (the
//! Theil–Sen fit). Pure; no I/O, no clocks.
//!
//! Why the floor: a training loop's memory rises through the forward pass
//! and falls at the end of every step, so samples taken at random phases of
//! a step scatter by the activation size (often gigabytes). What a leak
//! changes is the bottom of that sawtooth. The minimum over a bucket that
//! spans several steps sits near that bottom whatever the activation size,
//! so a line through the bucket minima sees a 0.25 MiB/s leak under an
//! 8 GiB sawtooth.
//!
//! Why "still growing" is judged on quarter medians: a step (a second job
//! starting, a checkpoint buffer that stays) puts all of a window's rise
//! into one place, and a warm-up that levels off puts it at the start.
//! Sustained growth is the only shape whose last two quarters each rise by
//! a fair share of the fitted slope; medians of a quarter's floors stay
//! steady under the sawtooth where slopes of a few points would not.

use crate::model::Timestamp;

use super::trend::{Trend, fit_line, median};

mod line;
pub use line::FloorLine;

/// Fewer floor points than this say nothing.
const MIN_POINTS: usize = 6;
/// Scales the median absolute deviation to a standard deviation.
const MAD_TO_SIGMA: f64 = 1.4826;

/// Reusable buffers, so a pass over many processes allocates once.
#[derive(Clone, Debug, Default)]
pub struct FloorScratch {
    /// Floor points: (seconds since the window start, bytes).
    points: Vec<(f64, f64)>,
    values: Vec<f64>,
    /// The Theil–Sen fit's pairwise slopes and residuals, as order keys.
    keys: Vec<i64>,
    /// The floor values' bit patterns, to count distinct levels.
    levels: Vec<u64>,
    /// Epoch milliseconds of the last line's first sample.
    origin_ms: i64,
    /// A longer window's floor kept for comparison: (epoch ms, bytes).
    prior: Vec<(i64, f64)>,
    /// A copy of `points` to try leaving dips out of.
    trial: Vec<(f64, f64)>,
    /// Whether the last line left a dip's points out.
    dips_left_out: bool,
}

/// Dips to leave out of a floor (`FloorScratch::line_without_dips`): the
/// floor falling by at least `depth` bytes within a bucket or two, then
/// stepping back, within `longest_seconds`, to where it stood before or
/// above. An evaluation phase frees a training step's
/// buffers and takes them back; memory that comes back stays down, and a
/// climb that returns each epoch climbs back gradually, so neither is one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dips {
    /// Least fall, bytes.
    pub depth: f64,
    /// Longest time from the fall to the step back, seconds.
    pub longest_seconds: f64,
    /// Also leave out a fall at the window's end that has not stepped back
    /// yet (or only at its last point), while it is younger than
    /// `longest_seconds`: for holding a leak already suspected, whose
    /// evaluation phase must not resolve it the minute it starts. A fall
    /// that stays down longer is a return, and resolves it then.
    pub open_at_end: bool,
}

/// What [`FloorScratch::prior_high`] reads on the prior floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Highest {
    /// Its single highest point.
    Point,
    /// Its highest level, a level being the lower of two neighbouring
    /// points as for dips: one bucket minimum that missed the bottom of
    /// the sawtooth stands high alone.
    Level,
}

impl FloorScratch {
    /// The floor of the part of `series` (oldest first) at or after `from`,
    /// reduced to at most `buckets` equal-time bucket minima, and its line.
    /// `None` when fewer than 6 buckets hold a sample.
    pub fn line(
        &mut self,
        series: &[(Timestamp, u64)],
        from: Timestamp,
        buckets: usize,
    ) -> Option<FloorLine> {
        self.line_without_dips(series, from, buckets, None)
    }

    /// [`FloorScratch::line`] with the floor points inside recognised
    /// `dips` left out of the line, quarters, lows and
    /// [`FloorScratch::points`]: the floor between dips is what a leak
    /// raises, while a dip's low says nothing about memory kept.
    pub fn line_without_dips(
        &mut self,
        series: &[(Timestamp, u64)],
        from: Timestamp,
        buckets: usize,
        dips: Option<Dips>,
    ) -> Option<FloorLine> {
        // Never left from an earlier line when this one reads nothing.
        self.dips_left_out = false;
        let start = series.partition_point(|&(at, _)| at < from);
        let window = series.get(start..)?;
        let (&(first, _), &(last, _)) = (window.first()?, window.last()?);
        let origin = first.unix_millis();
        self.origin_ms = origin;
        let span_ms = last.unix_millis().checked_sub(origin).filter(|&span| span > 0)?;
        self.reduce(window, origin, span_ms, buckets.max(MIN_POINTS));
        self.dips_left_out = dips.is_some_and(|dips| mask_dips(&mut self.points, dips));
        if self.points.len() < MIN_POINTS {
            return None;
        }
        let (slope, intercept, fit) = fit_line(&self.points, &mut self.keys)?;
        self.values.clear();
        self.values.extend(self.points.iter().map(|&(x, y)| (y - intercept - slope * x).abs()));
        let spread = MAD_TO_SIGMA * median(&mut self.values)?;
        let span_seconds = span_ms as f64 / 1000.0;
        let mut quarters = [0.0; 4];
        // Points in time order (the series is) have their shares in order
        // too, so each quarter is one run of them, found by bisection.
        let in_order = self.points.is_sorted_by(|a, b| a.0 <= b.0);
        for (index, quarter) in quarters.iter_mut().enumerate() {
            let (low, high) = (index as f64 / 4.0, (index + 1) as f64 / 4.0);
            self.values.clear();
            if in_order {
                let from = self.points.partition_point(|&(x, _)| x / span_seconds < low);
                let to = match index {
                    3 => self.points.len(),
                    _ => self.points.partition_point(|&(x, _)| x / span_seconds < high),
                };
                let run = self.points.get(from..to.max(from)).unwrap_or_default();
                self.values.extend(run.iter().map(|&(_, y)| y));
            } else {
                self.values.extend(self.points.iter().filter_map(|&(x, y)| {
                    let share = x / span_seconds;
                    (share >= low && (share < high || index == 3)).then_some(y)
                }));
            }
            *quarter = median(&mut self.values)?;
        }
        let lowest = |keep: &dyn Fn(f64) -> bool| {
            self.points
                .iter()
                .filter(|&&(x, _)| keep(x / span_seconds))
                .map(|&(_, y)| y)
                .fold(f64::INFINITY, f64::min)
        };
        // Holding a leak, the first tenth of what is left: with a dip the
        // window opened in left out, the floor begins where the dip ends.
        // (The raising judgement keeps the window's first tenth, which
        // such a window leaves empty, so it reads as a return: tuned so.)
        let kept_from = match dips {
            Some(dips) if dips.open_at_end => {
                self.points.first().map_or(0.0, |&(x, _)| x / span_seconds)
            }
            _ => 0.0,
        };
        let baseline = lowest(&|share| share <= kept_from + 0.1);
        let late_low = lowest(&|share| share >= 0.5);
        let levels = self.distinct_levels();
        Some(FloorLine {
            slope,
            intercept,
            fit,
            span_seconds,
            spread,
            quarters,
            baseline,
            late_low,
            levels,
        })
    }

    /// Whether `dips` would leave any point out of the floor held now (the
    /// last line's), found without reading its samples again: where none
    /// would, [`FloorScratch::line_without_dips`] gives that same line.
    pub fn holds_dips(&mut self, dips: Dips) -> bool {
        self.trial.clear();
        self.trial.extend_from_slice(&self.points);
        mask_dips(&mut self.trial, dips)
    }

    /// Whether the last [`FloorScratch::line_without_dips`] left any
    /// point out as a dip's.
    pub fn left_out_dips(&self) -> bool {
        self.dips_left_out
    }

    /// The floor points of the last [`FloorScratch::line`]: (seconds since
    /// the window's first sample, bytes), oldest first. For tests on the
    /// floor other than the line's (the leak detector's sequential test).
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// How many distinct values the current points take.
    ///
    /// Sorted as integers: the points are minima of byte counts, so never
    /// negative, NaN or -0.0, and for such values the bit patterns order
    /// and compare equal exactly as the values do, at a fraction of the
    /// cost of a float comparison (this runs for every window's line).
    fn distinct_levels(&mut self) -> usize {
        self.levels.clear();
        self.levels.extend(self.points.iter().map(|&(_, y)| y.to_bits()));
        self.levels.sort_unstable();
        self.levels.dedup();
        self.levels.len()
    }

    /// Keeps the floor of the last [`FloorScratch::line`] for
    /// [`FloorScratch::prior_high`].
    pub fn keep_as_prior(&mut self) {
        let origin = self.origin_ms;
        self.prior.clear();
        self.prior.extend(
            self.points.iter().map(|&(x, y)| (origin.saturating_add((x * 1000.0) as i64), y)),
        );
    }

    /// The highest kept floor before `at`: what memory already held once.
    /// A floor climbing back to where it has been (a per-epoch ramp, out
    /// of an evaluation dip) is not the new ground a leak keeps taking.
    /// `highest` says whether that is the highest point or level.
    pub fn prior_high(&self, at: Timestamp, highest: Highest) -> Option<f64> {
        let before = at.unix_millis();
        let prior = &self.prior[..self.prior.partition_point(|&(x, _)| x < before)];
        if highest == Highest::Level && prior.len() > 1 {
            prior.windows(2).map(|pair| pair[0].1.min(pair[1].1)).max_by(f64::total_cmp)
        } else {
            prior.iter().map(|&(_, y)| y).max_by(f64::total_cmp)
        }
    }

    /// The deepest fall of the kept floor before `before` below a level it
    /// had reached earlier: how far this process's memory has ever come back down. A
    /// leak's floor never falls back further than its scatter; a per-epoch
    /// climb falls back by most of its climb every epoch.
    pub fn prior_drawdown(&self, before: Timestamp) -> f64 {
        let before = before.unix_millis();
        let mut high = f64::NEG_INFINITY;
        let mut deepest = 0.0_f64;
        for &(_, y) in self.prior.iter().take_while(|&&(at, _)| at < before) {
            high = high.max(y);
            deepest = deepest.max(high - y);
        }
        deepest
    }

    /// [`FloorScratch::line`] as a [`Trend`] (the forecast's currency), with
    /// whether the floor keeps rising by `share` of its slope.
    pub fn trend(
        &mut self,
        series: &[(Timestamp, u64)],
        buckets: usize,
        share: f64,
    ) -> Option<(Trend, bool)> {
        let &(first, _) = series.first()?;
        let line = self.line(series, first, buckets)?;
        Some((line.trend(first), line.keeps_rising(share)))
    }

    /// Bucket minima, each placed at its bucket's centre: the minimum's own
    /// time would pull the points towards the step phase it was caught in.
    ///
    /// Why bucket ends are found first: this runs for every window of every
    /// check (five leak windows per process, five trend windows per
    /// device), and turning each sample's time into a bucket number (two
    /// conversions and a multiplication) was most of an offline run's
    /// analysis. The bucket formula is monotonic in the time, so each
    /// bucket's end is one integer offset, found once per bucket with the
    /// very same formula; a sample then costs one integer comparison and
    /// one minimum. The points are exactly those of classifying each sample
    /// (`reduce_by_sample`, the tests' oracle): same buckets, same minima,
    /// since converting to `f64` keeps the order. The series is in time
    /// order (history refuses older samples); a sample out of order is
    /// still put in its own bucket.
    fn reduce(&mut self, window: &[(Timestamp, u64)], origin: i64, span_ms: i64, buckets: usize) {
        self.points.clear();
        let per_ms = buckets as f64 / span_ms as f64;
        let width_s = span_ms as f64 / buckets as f64 / 1000.0;
        let last = buckets - 1;
        let bucket_of = |offset: i64| ((offset as f64 * per_ms) as usize).min(last);
        // The first offset past `bucket`'s end (`i64::MAX` for the last).
        let end_of = |bucket: usize| {
            if bucket >= last {
                return i64::MAX;
            }
            // Within a millisecond or two of the exact end; stepped onto it
            // with the formula itself. Bounded: the estimate is that close.
            let mut end = ((bucket + 1) as f64 / per_ms).ceil() as i64;
            for _ in 0..64 {
                if end > 0 && bucket_of(end - 1) > bucket {
                    end -= 1;
                } else if bucket_of(end) <= bucket {
                    end += 1;
                } else {
                    break;
                }
            }
            end
        };
        // A bucket is opened by its first sample and scanned to its end in
        // a loop of its own (no open-bucket state to test per sample).
        let mut rest = window;
        // The bucket found last and its end, which starts the next bucket:
        // each end is searched for once, not twice.
        let mut previous: Option<(usize, i64)> = None;
        while let Some((&(at, value), tail)) = rest.split_first() {
            let bucket = bucket_of(at.unix_millis().saturating_sub(origin));
            let start = match previous {
                _ if bucket == 0 => i64::MIN,
                Some((known, end)) if known + 1 == bucket => end,
                _ => end_of(bucket - 1),
            };
            let end = end_of(bucket);
            previous = Some((bucket, end));
            // The bounds as times, so that a sample costs no subtraction;
            // the same comparisons, times being far from `i64`'s ends.
            let (start_at, end_at) = (origin.saturating_add(start), origin.saturating_add(end));
            let (mut low, mut members) = (value, 0);
            for &(at, value) in tail {
                let at = at.unix_millis();
                if at >= end_at || at < start_at {
                    break;
                }
                low = low.min(value);
                members += 1;
            }
            self.points.push(((bucket as f64 + 0.5) * width_s, low as f64));
            rest = tail.get(members..).unwrap_or(&[]);
        }
    }

    /// The floor points of `line`, classifying sample by sample: the
    /// straightforward reduction the search in `reduce` must reproduce.
    #[cfg(test)]
    fn reduce_by_sample(
        &mut self,
        window: &[(Timestamp, u64)],
        origin: i64,
        span_ms: i64,
        buckets: usize,
    ) {
        self.points.clear();
        let per_ms = buckets as f64 / span_ms as f64;
        let width_s = span_ms as f64 / buckets as f64 / 1000.0;
        let last = buckets - 1;
        let centre = |index: usize| (index as f64 + 0.5) * width_s;
        let mut open: Option<(usize, f64)> = None;
        for &(at, value) in window {
            let offset = at.unix_millis().saturating_sub(origin) as f64;
            let index = ((offset * per_ms) as usize).min(last);
            let value = value as f64;
            open = match open {
                Some((bucket, low)) if bucket == index => Some((bucket, low.min(value))),
                Some((bucket, low)) => {
                    self.points.push((centre(bucket), low));
                    Some((index, value))
                }
                None => Some((index, value)),
            };
        }
        if let Some((bucket, low)) = open {
            self.points.push((centre(bucket), low));
        }
    }
}

/// Removes from `points` (floor points, oldest first) the dips that
/// [`Dips`] describes, in one pass. Levels are the lower of two neighbouring
/// points: a bucket minimum that missed the bottom of the sawtooth stands
/// high alone, so a single point neither starts nor ends a dip. Whether it
/// removed any.
fn mask_dips(points: &mut Vec<(f64, f64)>, dips: Dips) -> bool {
    if !(dips.depth > 0.0 && dips.longest_seconds > 0.0) {
        return false;
    }
    let level = |points: &[(f64, f64)], index: usize| -> Option<f64> {
        Some(points.get(index)?.1.min(points.get(index + 1)?.1))
    };
    let mut removed = false;
    let mut index = 1;
    // A window that opens inside a dip has no level before it: its first
    // points stand `depth` below where the floor then steps up to at once.
    if let Some(&(_, start)) = points.first() {
        let mut back = 1;
        while level(points, back).is_some_and(|level| level < start + dips.depth / 2.0) {
            back += 1;
        }
        let stepped = level(points, back).is_some_and(|level| level >= start + dips.depth);
        // At most half the window: a floor that stood low for most of it
        // and then rose is a rise, not the tail of a dip before it (a leak
        // rising on a window no longer than `longest_seconds`).
        let span = points.last().map_or(0.0, |&(end, _)| end - points[0].0);
        let tail = points.get(back).map_or(f64::INFINITY, |&(at, _)| at - points[0].0);
        if stepped && tail <= dips.longest_seconds.min(span / 2.0) {
            for point in &mut points[..back] {
                point.1 = f64::NAN;
            }
            removed = true;
            index = back.max(1);
        }
    }
    while index < points.len() {
        let before = points[index.saturating_sub(2)].1.min(points[index - 1].1);
        if points[index].1 > before - dips.depth {
            index += 1;
            continue;
        }
        let fell_at = points[index].0;
        // The first point from which the floor stands above the dip again.
        let mut back = index + 1;
        while level(points, back).is_some_and(|level| level <= before - dips.depth) {
            back += 1;
        }
        let Some(mut after) = level(points, back) else {
            let open = points.last().is_some_and(|&(end, _)| end - fell_at <= dips.longest_seconds);
            if dips.open_at_end && open {
                for point in &mut points[index..] {
                    point.1 = f64::NAN;
                }
                removed = true;
            }
            break;
        };
        // The step back may leave one bucket half way: its minimum holds
        // the phase's tail or the climb out of it, below where the floor
        // stood, while the next one stands there again.
        if after < before
            && let Some(next) = level(points, back + 1)
            && next >= before
        {
            (back, after) = (back + 1, next);
        }
        // One bucket low is a moment's release of what was gained, which
        // says the memory can come back: return evidence, not a phase.
        let recovered = after >= before
            && back - index >= 2
            && points[back].0 - fell_at <= dips.longest_seconds;
        if recovered {
            for point in &mut points[index..back] {
                point.1 = f64::NAN;
            }
            removed = true;
        }
        index = back;
    }
    if removed {
        points.retain(|&(_, y)| !y.is_nan());
    }
    removed
}

#[cfg(test)]
mod tests;
