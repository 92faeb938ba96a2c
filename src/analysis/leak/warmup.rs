//! Rule 6 of the leak detector: growth whose rate keeps falling is a
//! warm-up, not a leak, and what the previous check said of it.
//!
//! Owns: [`Prior`] (the verdict a check hands the next) and the warm-up
//! [`Curve`] it carries, how much of a fall rule 6 asks for ([`Proof`]),
//! whether a window's growth is new on top of a warm-up, and whether a
//! window past the warm-up's start still follows its curve (its tail). Depends on `analysis::{floor, trend::saturation}`
//! and the leak parameters. Pure; no I/O, no clocks.
//!
//! Why a prior: a warm-up's slowing stands out of the floor's scatter
//! while it is steep and fades into it as it levels off, so a test of the
//! newest window alone calls its tail a leak once its slowing no longer
//! stands out; a leak's hold asks less than its call for the same reason.

use super::super::floor::{FloorLine, FloorScratch};
use super::super::trend::saturation::{Halves, halves};
use super::{LeakParams, NotALeak};
use crate::model::Timestamp;

/// What the previous check said of a process: the evidence it has to
/// overturn.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Prior {
    /// Nothing, or no leak for another reason.
    #[default]
    Nothing,
    /// A leak, suspected or already alerted on: kept by the hold rules.
    Held,
    /// A warm-up levelling off (rule 6): still one while its rate keeps
    /// falling, however little that now stands out of the scatter, or
    /// while its floor stays under the plateau of the slowest curve fitted
    /// to it (`None` until a check fitted one).
    WarmingUp(Option<Curve>),
}

/// The saturating curve a warm-up followed, as a check whose slowing
/// stood out of the scatter fitted it (of several, the slowest): the tail
/// beyond, whose slowing no longer does, still follows it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Curve {
    /// The check that fitted it.
    pub fitted_at: Timestamp,
    /// Where the floor stood then, bytes.
    pub level: f64,
    /// The rise it still had to go then, bytes.
    pub remaining: f64,
    /// Its time constant, seconds.
    pub tau: f64,
    /// The floor's noise when it was fitted (one point's σ, bytes).
    pub noise: f64,
}

impl Curve {
    /// The curve through `halves`' rates, from the end of a window ending
    /// at `now`; `None` where the rate did not fall.
    pub(super) fn fitted(halves: &Halves, now: Timestamp) -> Option<Self> {
        let (tau, remaining) = halves.curve_at_end()?;
        let (level, noise) = (halves.end_level, halves.noise);
        Some(Curve { fitted_at: now, level, remaining, tau: tau.max(1.0), noise })
    }

    /// The level it heads for, bytes.
    pub fn plateau(&self) -> f64 {
        self.level + self.remaining
    }

    /// The rise it has left at `at`, bytes: its remaining rise then, at
    /// most what lies between `level` (where the floor stood then) and its
    /// plateau.
    fn left_at(&self, at: Timestamp, level: f64) -> f64 {
        let after = match at.duration_since(self.fitted_at) {
            Some(later) => later.as_secs_f64(),
            None => -self.fitted_at.duration_since(at).unwrap_or_default().as_secs_f64(),
        };
        let left = self.remaining * (-after / self.tau).exp();
        left.min((self.plateau() - level).max(0.0))
    }
}

impl Prior {
    /// The prior for the next check after `verdict` on one that had
    /// `self`, where this check fitted `fitted` (a significant fall): a
    /// warm-up stays one until a leak is called (a check that found no
    /// growth at all is no evidence that it ended), with the slowest curve a
    /// significant fall showed.
    pub fn after<T>(self, verdict: &Result<T, NotALeak>, fitted: Option<Curve>) -> Self {
        let kept = match self {
            Prior::WarmingUp(curve) => curve,
            Prior::Nothing | Prior::Held => None,
        };
        match (verdict, self) {
            (Ok(_), _) => Prior::Held,
            (Err(NotALeak::Slowing), _) => Prior::WarmingUp(slower_curve(fitted, kept)),
            (Err(_), Prior::WarmingUp(_)) => Prior::WarmingUp(kept),
            (Err(_), Prior::Nothing | Prior::Held) => Prior::Nothing,
        }
    }

    /// Whether this is a warm-up's prior, with or without a plateau.
    pub fn warming_up(&self) -> bool {
        matches!(self, Prior::WarmingUp(_))
    }
}

/// Of two fitted curves, the slower (the longer time constant): the
/// component of a warm-up its tail follows. Successive fits of one warm-up
/// scatter (time constants of 353-577 s and plateaus 1 GiB apart over ten
/// minutes of checks at seed 13, warm-up run 19; NVML only), and the
/// newest draw's plateau lay 0.2 GiB under where the floor levelled off,
/// which the tail past the half hour then read as a leak. Not the highest
/// plateau: a fit of the model's load in the first minutes (49 s) heads
/// highest of all where the job frees its cache at evaluations, and held
/// a 0.25 MiB/s leak as its tail until it was missed (seed 28, run 112).
fn slower_curve(fitted: Option<Curve>, kept: Option<Curve>) -> Option<Curve> {
    match (fitted, kept) {
        (Some(new), Some(old)) if old.tau > new.tau => Some(old),
        (new, old) => new.or(old),
    }
}

/// Whether a window from `from` to `now` (`window`: its halves) rose no
/// more than `curve` still rose over it, and stays under its plateau, each
/// within `slowing_significance` times the noise (the window's, or the
/// curve's own where less: evaluation dips scatter a later window by
/// gigabytes, and held a 0.25 MiB/s leak as a tail for 45 min at seed 28,
/// run 112), as much as a fall must stand out to be one: the tail of the
/// warm-up the curve follows. A leak after a warm-up rises where the curve has nothing left
/// to rise, and passes its plateau.
pub(super) fn follows(
    curve: &Curve,
    window: &Halves,
    (from, now): (Timestamp, Timestamp),
    params: &LeakParams,
) -> bool {
    let noise = window.noise.min(curve.noise).max(params.noise_floor_bytes);
    let margin = params.slowing_significance * noise;
    let expected = curve.left_at(from, window.start_level) - curve.left_at(now, window.end_level);
    window.end_level - window.start_level <= expected.max(0.0) + margin
        && window.end_level <= curve.plateau() + margin
}

/// How much of a fall rule 6 asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Proof {
    /// `slowing_significance` times the floor's noise over a half.
    Significant,
    /// Any fall to a curve that levels off within the window: growth not
    /// yet shown to keep its rate (a young process's, a warm-up's tail).
    AnyFall,
}

/// Rule 6 on a floor's `halves`: its newer half grows more slowly than
/// its older half, by `slowing_significance` times its noise over a half
/// (`trend::saturation`) or by any amount with [`Proof::AnyFall`], to a
/// curve whose time constant is no longer than the full `window`. A leak
/// keeps its rate.
pub(super) fn falls(halves: &Halves, params: &LeakParams, proof: Proof) -> bool {
    // A curve whose time constant outlasts the full window is a line to
    // this detector (a rate a percent lower over a precise floor). A rate
    // fallen to nothing has levelled off already.
    let levels_within_window = halves.first_rate > 0.0
        && (halves.second_rate <= 0.0
            || halves.plateau().is_some_and(|(tau, _)| tau <= params.window.as_secs_f64()));
    levels_within_window
        && match proof {
            Proof::Significant => {
                halves.slowing(params.slowing_significance, params.noise_floor_bytes)
            }
            Proof::AnyFall => true,
        }
}

/// Whether the floor `scratch` holds (the longest covered window, whose
/// line is `longest`) grows faster in its newer half than in its older one
/// and, where the window is not the whole series (`life_is_window`),
/// faster than the warm-up the process's `life` follows grows by now, each
/// by `slowing_significance` times the window's noise over a half, and
/// outgrows the life ([`outgrows_life`]): a leak setting in after a
/// warm-up. Judged against the window alone, a young process's 2- or
/// 4-minute window, most of its life, "sped up" by its scatter while its
/// life's rate fell by ten noises (seed 2, warm-up run 7).
///
/// `proof` is what the life's fall was asked for: with
/// [`Proof::AnyFall`] (a warm-up found at an earlier check, on a process
/// older than its series) the life's rates are a warm-up's, and what it
/// rose by is read off their curve where the window lies; otherwise they
/// may be a model's load and a leak after it, whose curve rises by what
/// the leak does, and the life's rate at its end stands for the window.
pub(super) fn new_growth(
    scratch: &FloorScratch,
    longest: &FloorLine,
    life: &Halves,
    (life_is_window, proof): (bool, Proof),
    params: &LeakParams,
    buffer: &mut Vec<f64>,
) -> bool {
    let Some(window) = halves(scratch.points(), buffer) else { return false };
    let (significance, floor) = (params.slowing_significance, params.noise_floor_bytes);
    // The window's newer half's rate stands for its middle, a quarter of
    // the window before the end.
    let life_rate = match proof {
        Proof::AnyFall => life.rate_before_end(window.half_seconds / 2.0),
        Proof::Significant => life.rate_at_end(),
    };
    window.speeding(significance, floor)
        && (life_is_window || window.rises_above(life_rate, significance, floor))
        && outgrows_life(longest, life, proof, params)
}

/// Whether the window `line` rose, from its first quarter's floor to its
/// last, by `slowing_significance` times the life's noise more than the
/// process's life says it rose by over that span: growth that outgrows
/// the warm-up. A window whose older half falls into an evaluation dip and
/// whose newer half climbs out of it speeds up by the dip's depth
/// (`new_growth`) yet ends where the warm-up's curve was heading (seed 34,
/// warm-up run 21; seed 22, run 15, NVML only). With a warm-up's rates
/// (`proof`, see [`new_growth`]) the life rose by what the curve through
/// them rose ([`Halves::rise_before_end`]): read as its rate at the end
/// times the span, a warm-up whose rate still halved within the window
/// outgrew itself (τ of 8-10 min, leaks called at minute 32: seeds 11 and
/// 66, NVML only, an evaluation dip in the window). Without, its rate at
/// the end: a load's curve reads a leak after it as its own rise (every
/// reading of the curve delayed 66 leaks of seeds 1-78 by up to 18 min).
fn outgrows_life(line: &FloorLine, life: &Halves, proof: Proof, params: &LeakParams) -> bool {
    // The quarters' floors stand for their middles.
    let (first, last) = (0.875 * line.span_seconds, 0.125 * line.span_seconds);
    let rise = line.quarters[3] - line.quarters[0];
    let expected = match proof {
        Proof::AnyFall => life.rise_before_end(first, last),
        Proof::Significant => life.rate_at_end() * (first - last),
    }
    .max(0.0);
    rise - expected >= params.slowing_significance * life.noise.max(params.noise_floor_bytes)
}
