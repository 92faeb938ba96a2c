//! Growth whose rate keeps falling: the curve a warm-up follows towards
//! its plateau, read from a window's floor.
//!
//! Owns: the floor's rate over each half of a window (the median of local
//! slopes, so a single step does not move it), its noise, whether the rate
//! fell by more than the scatter, and the saturating exponential through
//! the two rates with the rise it still has to go. Depends on the median
//! beside it; no I/O, no clocks, no allocation beyond a caller's buffer.
//!
//! Why an exponential: loading a model, filling the allocator's cache or
//! ramping a curriculum approaches a level at a rate proportional to what
//! is left, so its rate falls by the same factor over every equal span.
//! Two rates (each half's) fix that factor and so the time constant and the
//! rise to come; a line (rate constant) is the limit of an infinite time
//! constant. A leak keeps its rate; a warm-up of any length does not, and
//! the evidence against it grows with the span seen, not with a tuned
//! constant for its length.

use super::median;

/// A window's floor as two halves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Halves {
    /// Rate of the older half's floor, bytes per second.
    pub first_rate: f64,
    /// Rate of the newer half's floor, bytes per second.
    pub second_rate: f64,
    /// The span of each half, seconds.
    pub half_seconds: f64,
    /// Scatter of one floor point about the curve (≈ one σ, bytes), from
    /// second differences, which a line or a gentle curve leaves at zero.
    pub noise: f64,
    /// Where the floor stands at the window's end, bytes: the median of
    /// the newer half's points carried to the end at that half's rate, so
    /// one low or high bucket does not move it.
    pub end_level: f64,
    /// Where it stood at the window's start, from the older half alike.
    pub start_level: f64,
}

/// Fewer floor points than this in a half give no rate.
const MIN_HALF_POINTS: usize = 3;
/// Scales the median absolute deviation to a standard deviation.
const MAD_TO_SIGMA: f64 = 1.4826;

/// The halves of `points` (seconds since the window's start and bytes,
/// oldest first: a floor's bucket minima). `None` with too few points.
pub fn halves(points: &[(f64, f64)], buffer: &mut Vec<f64>) -> Option<Halves> {
    let (&(start, _), &(end, _)) = (points.first()?, points.last()?);
    let middle = (start + end) / 2.0;
    let split = points.partition_point(|&(x, _)| x < middle);
    let (older, newer) = points.split_at(split);
    if older.len() < MIN_HALF_POINTS || newer.len() < MIN_HALF_POINTS {
        return None;
    }
    let first_rate = local_rate(older, buffer)?;
    let second_rate = local_rate(newer, buffer)?;
    buffer.clear();
    buffer.extend(newer.iter().map(|&(x, y)| y + second_rate * (end - x)));
    let end_level = median(buffer)?;
    buffer.clear();
    buffer.extend(older.iter().map(|&(x, y)| y - first_rate * (x - start)));
    let start_level = median(buffer)?;
    buffer.clear();
    // A second difference of three neighbours is (a - 2b + c), whose σ is
    // √6 times one point's.
    buffer.extend(points.windows(3).map(|w| (w[0].1 - 2.0 * w[1].1 + w[2].1).abs()));
    let noise = MAD_TO_SIGMA * median(buffer)? / 6.0_f64.sqrt();
    let half_seconds = (end - start) / 2.0;
    Some(Halves { first_rate, second_rate, half_seconds, noise, end_level, start_level })
}

/// The median slope between neighbouring floor points up to a quarter of
/// the points apart: a step straddles few such pairs.
fn local_rate(points: &[(f64, f64)], buffer: &mut Vec<f64>) -> Option<f64> {
    let lag = (points.len() / 4).max(1);
    buffer.clear();
    for (index, &(x0, y0)) in points.iter().enumerate() {
        for &(x1, y1) in points.iter().skip(index + 1).take(lag) {
            if x1 > x0 {
                buffer.push((y1 - y0) / (x1 - x0));
            }
        }
    }
    median(buffer)
}

impl Halves {
    /// Whether the floor grows more slowly in its newer half by more than
    /// `significance` times its noise over a half: the rise its slowing
    /// cost stands out of the scatter as growth itself must.
    pub fn slowing(&self, significance: f64, noise_floor: f64) -> bool {
        let lost = (self.first_rate - self.second_rate) * self.half_seconds;
        self.first_rate > 0.0 && lost >= significance * self.noise.max(noise_floor)
    }

    /// Whether the floor grows faster in its newer half by as much: new
    /// growth (a leak beginning) on whatever came before.
    pub fn speeding(&self, significance: f64, noise_floor: f64) -> bool {
        let gained = (self.second_rate - self.first_rate) * self.half_seconds;
        gained >= significance * self.noise.max(noise_floor)
    }

    /// Whether the newer half grows faster than `rate` by as much as
    /// [`Halves::speeding`] asks: growth beyond what a curve followed so
    /// far still adds.
    pub fn rises_above(&self, rate: f64, significance: f64, noise_floor: f64) -> bool {
        let gained = (self.second_rate - rate) * self.half_seconds;
        gained >= significance * self.noise.max(noise_floor)
    }

    /// The rate at the window's end: the saturating curve's where the rate
    /// fell (nothing where it fell to nothing), the newer half's otherwise.
    pub fn rate_at_end(&self) -> f64 {
        match self.plateau() {
            Some((tau, remaining)) => remaining / tau,
            None if self.second_rate <= 0.0 && self.first_rate > 0.0 => 0.0,
            None => self.second_rate,
        }
    }

    /// The curve's rate `before_end` seconds before the window's end (at
    /// most the window's span): the saturating curve's where the rate
    /// fell, the newer half's otherwise.
    pub fn rate_before_end(&self, before_end: f64) -> f64 {
        let back = before_end.clamp(0.0, 2.0 * self.half_seconds);
        match self.plateau() {
            Some((tau, remaining)) => remaining / tau * (back / tau).exp(),
            None => self.rate_at_end(),
        }
    }

    /// What the curve rose by from `from_end` to `to_end` seconds before
    /// the window's end (each at most the window's span): the saturating
    /// curve's rise where the rate fell, the rate at the end times the
    /// span otherwise. A curve's rate falls over any span, so its rate at
    /// the end times the span understates what it rose by there.
    pub fn rise_before_end(&self, from_end: f64, to_end: f64) -> f64 {
        let span = 2.0 * self.half_seconds;
        let (from, to) = (from_end.clamp(0.0, span), to_end.clamp(0.0, span));
        match self.plateau() {
            Some((tau, remaining)) => remaining * ((from / tau).exp() - (to / tau).exp()),
            None => self.rate_at_end() * (from - to),
        }
    }

    /// The saturating curve from the window's end: (time constant in
    /// seconds, rise still to come in bytes; nothing where the rate fell to
    /// nothing). `None` for a rate that did not fall.
    pub fn curve_at_end(&self) -> Option<(f64, f64)> {
        match self.plateau() {
            Some(curve) => Some(curve),
            None if self.second_rate <= 0.0 && self.first_rate > 0.0 => {
                Some((self.half_seconds, 0.0))
            }
            None => None,
        }
    }

    /// The saturating exponential through the two rates, where the rate
    /// fell: (time constant in seconds, rise still to come from the
    /// window's end in bytes). `None` for a rate that did not fall.
    pub fn plateau(&self) -> Option<(f64, f64)> {
        let (older, newer) = (self.first_rate, self.second_rate);
        if !(newer > 0.0 && older > newer && self.half_seconds > 0.0) {
            return None;
        }
        // The rates stand for the halves' middles, a half apart; the
        // window ends half a half after the newer one's.
        let tau = self.half_seconds / (older / newer).ln();
        let rate_at_end = newer * (-self.half_seconds / 2.0 / tau).exp();
        Some((tau, rate_at_end * tau))
    }
}

/// Seconds until a curve with `remaining` bytes still to rise at time
/// constant `tau` climbs `headroom` bytes; `None` where its plateau stays
/// below (it levels off with memory to spare).
pub fn seconds_to_rise((tau, remaining): (f64, f64), headroom: f64) -> Option<f64> {
    if headroom <= 0.0 {
        return Some(0.0);
    }
    (headroom < remaining).then(|| -tau * (1.0 - headroom / remaining).ln())
}
