//! A line through a window's floor, and the judgements read off it: how
//! much it rose, whether it keeps rising, levels off, moves between exact
//! levels or comes back to its baseline. Depends on: `model::Timestamp` and
//! `analysis::trend::Trend`. Pure.

use crate::model::Timestamp;

use super::super::trend::Trend;

/// A line through a window's floor and how it rises.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloorLine {
    /// Theil–Sen slope of the floor, bytes per second.
    pub slope: f64,
    /// The line's value at the window's first sample.
    pub intercept: f64,
    /// Coefficient of determination of the line on the floor points.
    pub fit: f64,
    /// The window's span in seconds (first to last sample).
    pub span_seconds: f64,
    /// Robust spread of the floor around the line (bytes, ≈ one σ).
    pub spread: f64,
    /// Quarter medians of the floor, oldest first.
    pub quarters: [f64; 4],
    /// Lowest floor in the window's first tenth (holding a leak: of its
    /// kept floor), bytes.
    pub baseline: f64,
    /// Lowest floor in the window's second half, bytes.
    pub late_low: f64,
    /// Distinct values among the floor points: a few for a floor that
    /// moves between exact levels, one per point for a ramp.
    pub levels: usize,
}

impl FloorLine {
    /// Rise from the line's slope over the span.
    pub fn growth(&self) -> f64 {
        self.slope * self.span_seconds
    }

    /// Growth measured against the floor's spread (at least `noise_floor`):
    /// how many "σ" the rise stands above the sawtooth's scatter.
    pub fn significance(&self, noise_floor: f64) -> f64 {
        self.growth() / self.spread.max(noise_floor).max(f64::MIN_POSITIVE)
    }

    /// Whether each of the last two quarter steps rises by at least `share`
    /// of what the slope predicts (a step puts its whole rise into one),
    /// and the last one by at least `share` of the first, give or take the
    /// floor's spread (a warm-up decelerates towards its plateau, so its
    /// last step is a fraction of its first; a leak's are alike).
    pub fn keeps_rising(&self, share: f64) -> bool {
        self.rises(share, false)
    }

    /// [`FloorLine::keeps_rising`], or with `last_may_pause` its last
    /// quarter step relaxed to "still higher than the third": a steep
    /// climb's quarter medians under a sawtooth of gigabytes pause for a
    /// quarter when a few buckets catch the bottom of the step late (the
    /// leak detector allows that only on a CUSUM several times its bound).
    /// A warm-up still decelerates, and a step that stays has its last
    /// quarter level with the third.
    pub fn rises(&self, share: f64, last_may_pause: bool) -> bool {
        let per_quarter = share * self.slope * self.span_seconds / 4.0;
        let [_, second, third, fourth] = self.quarters;
        let last_step = fourth - third;
        let last_rises = last_step >= per_quarter || (last_may_pause && last_step > 0.0);
        third - second >= per_quarter && last_rises && !self.decelerates(share)
    }

    /// Whether the last quarter step falls short of `share` of the first,
    /// give or take the spread: a warm-up levelling off towards its plateau.
    pub fn decelerates(&self, share: f64) -> bool {
        let [first, second, third, fourth] = self.quarters;
        fourth - third < share * (second - first) - self.spread
    }

    /// The line as a [`Trend`] (the forecast's currency), `origin` being
    /// the window's first sample.
    pub fn trend(&self, origin: Timestamp) -> Trend {
        Trend {
            slope_per_second: self.slope,
            intercept: self.intercept,
            origin,
            fit: self.fit,
            span_seconds: self.span_seconds,
        }
    }

    /// Whether the floor moves between at most `levels` exact values
    /// rather than a little at every bucket: a notebook grabbing whole
    /// chunks by hand, not a leak. A leak whose steps are coarser than the
    /// buckets looks so too on a short window, and is judged on a longer
    /// one, whose wider buckets each see a step.
    pub fn is_staircase(&self, levels: usize) -> bool {
        self.levels <= levels
    }

    /// Whether the second half fell back to within `share` of the growth
    /// above the baseline: memory that comes back is not leaked.
    pub fn returns_to_baseline(&self, share: f64) -> bool {
        self.late_low <= self.baseline + share * (self.quarters[3] - self.baseline).max(0.0)
    }
}
