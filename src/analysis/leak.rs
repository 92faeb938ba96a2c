//! Memory leak detection for one process: a floor that keeps rising.
//!
//! Owns: the leak rules below (each window's tests in `rules`), their
//! parameters and findings, which windows are judged and in what order,
//! and the choice of which figure to follow. Depends on: `model`,
//! `analysis::{series, floor, trend::saturation}` and its own `rules`,
//! `sequential`, `hold` and `trace`. Pure; no I/O, no clocks: windows are the
//! series' own timestamps.
//!
//! The detector judges the floor of the series (`analysis::floor`: bucket
//! minima), never raw samples, so a leak under a per-step sawtooth of
//! gigabytes is seen. It looks at several windows at once, ending at the
//! newest sample: `shortest_window`, then doubling up to `window`. A fast,
//! clean rise is called on the short window within minutes; a slow one only
//! stands out of the scatter on a long one. A window is judged only once the
//! process covers it, counted from the process's first listing plus a
//! `warmup` grace (its first sample in the window where the caller knows
//! no listing, and the window's start for a process already there then),
//! and only where its floor buckets hold enough observations
//! (`leak::density`: a sparse slow tier or report cadence leaves the short
//! windows unjudged).
//! A window shows a leak when all of these hold:
//!
//! 1. the floor's Theil–Sen slope is at least `min_slope_bytes_per_second`;
//! 2. the rise over the window is at least `min_significance` times the
//!    floor's robust spread around the line (at least `noise_floor_bytes`):
//!    growth, not scatter;
//! 3. each of the last two quarters' median floors rises by at least
//!    `keep_rising_share` of what the slope predicts: a step (a buffer that
//!    stays) or a warm-up that levels off puts its rise elsewhere;
//! 4. the second half's lowest floor stays above the baseline (the lowest
//!    floor of the first tenth) plus `return_share` of the growth: memory
//!    that comes back is not leaked;
//! 6. (before any window) the floor's rate does not fall over the life of
//!    a process that started inside the series, unless the longest covered
//!    window's rate rises (a leak setting in after the warm-up), and, where
//!    that window is not the whole series, rises above the rate the life's
//!    own saturating curve still has by now: the newer half's rate short
//!    of the older half's by `slowing_significance` times the floor's
//!    noise over a half, on a curve whose time constant is at most the full
//!    `window`, is a warm-up levelling off (`trend::saturation`). Where the
//!    previous check found a warm-up (`Prior::WarmingUp`) on a process
//!    older than the series, a fall of any size will do: a warm-up's tail,
//!    whose slowing fades into the scatter as it levels off, is held as
//!    one as a leak is held on less than called it. A suspected leak of a
//!    process whose whole life lies in the series is let go by the
//!    significant fall: called on a short window minutes into a warm-up, it
//!    was otherwise kept by the hold rules alone. The curve a significant
//!    fall over a whole life fits is carried in the prior
//!    (`leak::Curve`): on a process older than the series, a longest
//!    window that rose no more than that curve still rose over it and
//!    stays under its plateau is the warm-up's tail, whose halves no
//!    longer show the fall; the shorter windows are judged as ever.
//!
//! Rule 2 has a second way (`leak::sequential`, every window but the
//! shortest): the CUSUM of the floor's bucket minima above the window's
//! first quarter reaches `sequential_bound`, the line's rise standing at
//! least `sequential_min_significance` spreads. A slow leak whose line
//! stands short of `min_significance` spreads still puts bucket after
//! bucket above where the floor began. Where the longest window says "returns to
//! baseline" only because a leak began after its middle (its second half
//! starts at the old level) and the CUSUM's climb did not fall back, the
//! shorter windows are still judged. Where the CUSUM reaches
//! `sequential_override` times its bound, rule 3 on that window asks only
//! that the third quarter rose, the last stands above it and the rise does
//! not decelerate: a steep climb's quarter medians under a sawtooth of
//! gigabytes pause for a quarter.
//!
//! The shortest window alone sees only the newest climb, so it is judged
//! only where the floor before it (on the longest window) never fell back
//! by `return_evidence_share` of its rise: a leak never returns to its
//! baseline, while a climb that returns each epoch has done so before.
//!
//! Where a window of at least `dips_shortest_window` (half the full
//! `window`) fails, it is judged once more on its floor with dips left out (`floor::Dips`: the floor
//! falling by `dip_depth_bytes` within a bucket or two and stepping back,
//! after at least two buckets and within `dip_longest`, to where it stood
//! before or above; also a window that opens inside such a dip). An
//! evaluation phase frees a training step's buffers and takes them back:
//! its low is no return (rule 4) and its steps are no levelling off (rule
//! 3), while the floor between dips is what a leak raises. Memory freed for
//! good stays down, a climb that returns each epoch climbs back gradually,
//! and a single low bucket (everything gained freed for a moment) is
//! still return evidence, so none of them is left out. Not on windows
//! under half the full one: there the few buckets left between long dips
//! lined up by chance (three benign alarms at seeds 2 and 4), and every
//! other path still reads the whole floor.
//!
//! A leak already suspected is held, on the longest covered window or
//! failing that on a shorter one other than the shortest, while its floor
//! slope stays at least `hold_slope_bytes_per_second`, its second half
//! still rises by half that, and rule 4 holds (on the longest window, last
//! of all, its last quarter's median standing above the baseline by all
//! but `return_share` of the growth with its CUSUM at the bound also
//! does: a leak that began after that window's middle); so it resolves
//! once the leak stops (the slope falls away) or memory returns to its
//! baseline, without flapping in between.
//!
//! Where every window fails a leak held at two checks or more, it is held
//! on what those checks carried (`leak::hold`, [`Hold`]): within
//! `dip_longest` of the last check whose windows showed it, while its
//! floor with dips left out still rises at the hold slope and stands
//! above the carried baseline by more than `return_share` of the carried
//! growth. A young leak called on a short window is otherwise let go by
//! the first dip or kept step that breaks that window, the longer ones
//! not yet showing it (one alert resolved and raised again).
//!
//! Which figure: `allocated` (live tensors) for processes that report
//! allocator statistics, since their NVML usage includes a cache that grows
//! and stays by design; NVML usage otherwise ([`PidSeries::preferred`]).

use std::time::Duration;

use serde::Serialize;

use crate::model::Timestamp;

use super::floor::{FloorLine, FloorScratch, Highest};
use super::series::{PidSeries, ProcessMetric};
use super::trend::saturation::halves;
use rules::{climbing_still, dips, holds, holds_on_quarters, judge_window};

/// A process whose first sample is this close to the window's start was
/// already running: no warm-up grace.
const PREDATES_TOLERANCE: Duration = Duration::from_secs(10);

/// Why a series is not a leak (rules numbered as in the module doc; for
/// several windows, the longest covered window's reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotALeak {
    /// The process does not cover even the shortest window yet.
    TooShort,
    /// Too few floor points, so no trend at all.
    NoTrend,
    /// Rule 1: the slope is below the minimum.
    SlowGrowth,
    /// Rule 2: the rise does not stand out of the floor's scatter.
    PoorFit,
    /// Rule 3: the rise is a step, or it levelled off.
    LevelsOff,
    /// Rule 4: it went back down near its baseline.
    ReturnsToBaseline,
    /// Rule 5: a few exact steps, not a ramp.
    Staircase,
    /// A younger process's longest window only regained where its floor
    /// stood before it (out of an evaluation dip, or back up a ramp).
    NoNewGround,
    /// Rule 6: the floor's rate keeps falling (over the process's life, or
    /// the longest window): a warm-up levelling off, however slowly.
    Slowing,
}

/// A leak in a series, before it is tied to a process.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LeakEvidence {
    /// Slope of the floor.
    pub slope_bytes_per_second: f64,
    /// R² of the line on the floor.
    pub fit: f64,
    /// The window that showed it.
    pub window_seconds: f64,
    /// `latest − baseline`.
    pub growth_bytes: u64,
    /// Lowest floor in the window's first tenth.
    pub baseline_bytes: u64,
    /// The floor's line at the newest sample.
    pub latest_bytes: u64,
}

impl LeakEvidence {
    fn from_line(line: &FloorLine) -> Self {
        let latest = (line.intercept + line.slope * line.span_seconds).max(0.0);
        let baseline = line.baseline.max(0.0).min(latest);
        Self {
            slope_bytes_per_second: line.slope,
            fit: line.fit,
            window_seconds: line.span_seconds,
            growth_bytes: (latest - baseline) as u64,
            baseline_bytes: baseline as u64,
            latest_bytes: latest as u64,
        }
    }
}

/// A process that appears to leak: the evidence, and the figure that grows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeakFinding {
    pub evidence: LeakEvidence,
    pub metric: ProcessMetric,
    /// NVML usage only, risen in a few large steps ([`rises_in_steps`]):
    /// the caching allocator following the largest batch so far looks
    /// just so, and without allocator statistics it cannot be told from a
    /// leak.
    pub cache_or_leak: bool,
    /// What the next check holds it on where no window shows it
    /// ([`hold::bridge`]).
    pub hold: Hold,
}

impl LeakFinding {
    /// This check's finding for a process whose leak `held` was found by the
    /// last one: once called a leak, it is not demoted to "cache growth or
    /// a leak" by a later window's shape, which would resolve one alert and
    /// raise another (`reserved_growth`) for the same growth. The other way
    /// is an upgrade, and happens at most once.
    pub fn after(mut self, held: Option<&LeakFinding>) -> Self {
        if held.is_some_and(|held| !held.cache_or_leak) {
            self.cache_or_leak = false;
        }
        self
    }
}

/// The rules applied window by window, saying why the longest covered one
/// failed. `window_start` is where the caller's window began (a first sample
/// later than that is the process's start); `held` says the leak is already
/// suspected. Reuses `scratch` so a pass over many processes allocates once.
pub fn assess_leak(
    scratch: &mut FloorScratch,
    series: &[(Timestamp, u64)],
    window_start: Timestamp,
    held: bool,
    params: &LeakParams,
) -> Result<LeakEvidence, NotALeak> {
    let mut prior = if held { Prior::Held } else { Prior::Nothing };
    assess(scratch, series, Start::Window(window_start), &mut prior, params, Trace(None))
}

/// Where a process's windows are covered from.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    /// The process was first listed then, however long before the window:
    /// its warm-up counts from there.
    Listed(Timestamp),
    /// Only the window's start is known: a first sample there (within one
    /// observation interval) was a process already running.
    Window(Timestamp),
}

/// [`assess_leak`], recording into `trace` every window it judged, in the
/// order it judged them ([`WindowJudgement`]): why a leak is or is not
/// called, from the detector itself (the benchmark's `--explain`).
/// `prior` is replaced by what this check hands the next.
pub fn assess_leak_traced(
    scratch: &mut FloorScratch,
    series: &[(Timestamp, u64)],
    start: Start,
    prior: &mut Prior,
    params: &LeakParams,
    trace: &mut Vec<WindowJudgement>,
) -> Result<LeakEvidence, NotALeak> {
    assess(scratch, series, start, prior, params, Trace(Some(trace)))
}

/// [`assess_leak_traced`] for a leak the previous check held with `held`
/// (the analyzer's judgement, which the benchmark's `--explain` follows):
/// where no window shows it, it is still held on the carried evidence
/// ([`hold::bridge`], recorded as a window with dips left out). The hold
/// the next check carries comes with the evidence.
pub fn assess_held_traced(
    scratch: &mut FloorScratch,
    series: &[(Timestamp, u64)],
    start: Start,
    held: Option<&Hold>,
    prior: &mut Prior,
    params: &LeakParams,
    trace: &mut Vec<WindowJudgement>,
) -> Result<(LeakEvidence, Hold), NotALeak> {
    assess_carried(scratch, series, start, held, prior, params, Trace(Some(trace)))
}

/// [`assess`] with what a held leak carried from the last check
/// (`held`): the window rules first, the carried hold where they fail.
/// `prior` is replaced by what this check hands the next: a leak held on
/// the carried evidence stays [`Prior::Held`].
fn assess_carried(
    scratch: &mut FloorScratch,
    series: &[(Timestamp, u64)],
    start: Start,
    held: Option<&Hold>,
    prior: &mut Prior,
    params: &LeakParams,
    mut trace: Trace<'_>,
) -> Result<(LeakEvidence, Hold), NotALeak> {
    let was_held = *prior == Prior::Held;
    let verdict = assess(scratch, series, start, prior, params, trace.reborrow());
    let now = series.last().map(|&(at, _)| at).ok_or(NotALeak::NoTrend)?;
    let reason = match verdict {
        Ok(evidence) => return Ok((evidence, Hold::confirmed(&evidence, now, held))),
        Err(reason) => reason,
    };
    // A warm-up's slowing (rule 6) lets a suspected leak go by design, and
    // a process too young or too sparsely seen has no floor to hold on.
    let bridgeable = !matches!(reason, NotALeak::Slowing | NotALeak::TooShort | NotALeak::NoTrend);
    let Some(&hold) = held.filter(|_| bridgeable && was_held) else {
        return Err(reason);
    };
    let (line, span, holds) = hold::bridge(scratch, series, &hold, params).ok_or(reason)?;
    trace.window(scratch, &line, span, params, |record| {
        record.dips_left_out = true;
        record.carried = true;
        record.verdict = Some(if holds { Ok(()) } else { Err(reason) });
    });
    if !holds {
        return Err(reason);
    }
    *prior = Prior::Held;
    Ok((LeakEvidence::from_line(&line), hold))
}

/// The rules, with `prior` replaced by what this check hands the next
/// (`Prior::after`, with the warm-up curve this check fitted).
fn assess(
    scratch: &mut FloorScratch,
    series: &[(Timestamp, u64)],
    start: Start,
    prior: &mut Prior,
    params: &LeakParams,
    trace: Trace<'_>,
) -> Result<LeakEvidence, NotALeak> {
    let mut fitted = None;
    let verdict = assess_once(scratch, series, start, *prior, params, trace, &mut fitted);
    *prior = prior.after(&verdict, fitted);
    verdict
}

/// The rules; `fitted` is set to the curve of a warm-up whose slowing
/// this check found standing out of the scatter.
fn assess_once(
    scratch: &mut FloorScratch,
    series: &[(Timestamp, u64)],
    start: Start,
    prior: Prior,
    params: &LeakParams,
    mut trace: Trace<'_>,
    fitted: &mut Option<Curve>,
) -> Result<LeakEvidence, NotALeak> {
    let held = prior == Prior::Held;
    let (Some(&(first, _)), Some(&(now, _))) = (series.first(), series.last()) else {
        return Err(NotALeak::NoTrend);
    };
    // The first point of a process there all along lies within one
    // observation interval of the window's start: with process lists or
    // allocator reports every 12 s it may be 12 s in. The interval is the
    // window's mean spacing (a gap in a trace barely moves it); at one
    // observation a second the fixed tolerance stands.
    let span = now.duration_since(first).unwrap_or_default();
    let spacing = span.as_secs_f64() / series.len().saturating_sub(1).max(1) as f64;
    let tolerance = PREDATES_TOLERANCE.max(Duration::from_secs_f64(1.5 * spacing));
    // A process there when the window began covers every window, whatever
    // the slow tier's cadence puts its first and newest samples a few
    // seconds inside the window (at a 10 s slow tier, counting from those
    // left the longest window uncovered for ever). Where its first listing
    // is known it counts from there: one started just before the window
    // has its load and warm-up inside it (a benign alarm at seed 38, the
    // cache's warm-up and a checkpoint's kept buffers read as a climb the
    // check the 30-minute window was first judged).
    let started = match start {
        Start::Listed(listed) => Some(listed.min(first)),
        Start::Window(window_start) => {
            (first > window_start.saturating_add(tolerance)).then_some(first)
        }
    };
    let covered = started.map_or(params.window, |started| {
        now.duration_since(started.saturating_add(params.warmup)).unwrap_or_default()
    });
    let mut windows = Vec::with_capacity(8);
    let mut window = params.shortest_window.min(params.window);
    while !window.is_zero() && window <= covered && windows.len() < 8 {
        windows.push(window);
        if window >= params.window {
            break;
        }
        window = window.saturating_mul(2).min(params.window);
    }
    // The longest covered window first: its floor is what the shorter ones
    // are compared with (new ground, below), and what a held leak is kept on.
    let Some((&longest_window, shorter)) = windows.split_last() else {
        return Err(NotALeak::TooShort);
    };
    let longest_from = now.saturating_sub(longest_window);
    // A process younger than the full window has a floor from before its
    // longest covered window: what the windows are compared with (new
    // ground, below), the longest one too. An older one's longest window
    // is all there is, and is itself what the shorter ones are compared with.
    let prior_is_whole = first < longest_from.saturating_sub(params.window / 8)
        && density::buckets(series, first, params)
            .and_then(|buckets| scratch.line(series, first, buckets))
            .is_some();
    if prior_is_whole {
        scratch.keep_as_prior();
    }
    // Rule 6 on the whole life of a process that started inside the
    // series: a warm-up of minutes slows over its life long before a short
    // window sees it.
    // A warm-up found at the previous check is held as one while its
    // rate falls at all: the evidence that raised that verdict is not
    // asked of its hold (as a leak's hold asks less than its call), or a
    // warm-up's tail, whose slowing fades into the scatter as it levels
    // off, is read as a leak once it does. Not on a process whose whole
    // life lies in the series (its first sample is its first listing):
    // its life's early warm-up, the cache's included, kept a leak that set
    // in later from being called for minutes (16 MiB/s p95 3.7 -> 4.1 min,
    // seeds 1-6); there the significant fall lets a suspected leak go.
    let whole_life =
        started.is_some_and(|started| first.duration_since(started).is_none_or(|d| d <= tolerance));
    let proof = if prior.warming_up() && !whole_life { Proof::AnyFall } else { Proof::Significant };
    // A young process's leak is let go by rule 6 too (its life's rate
    // falling as a warm-up's must to be called one): one called on a short
    // window minutes into a warm-up whose slowing did not yet stand out
    // was otherwise kept by the hold rules alone (seed 5, warm-up run 17:
    // called at minute 5 of an 8-minute time constant, its slowing 1.7
    // noises, 6.8 a minute later).
    let mut buffer = Vec::new();
    let life = (!held || whole_life)
        && started.is_some()
        && density::buckets(series, first, params)
            .and_then(|buckets| scratch.line(series, first, buckets))
            .is_some();
    let life = life.then(|| halves(scratch.points(), &mut buffer)).flatten();
    // The curve a significant fall over the process's life fits, for the
    // checks after this one:
    // the tail's own halves soon measure equal rates (the scatter of
    // bucket minima under a sawtooth of gigabytes swamps a rate that falls
    // tenfold over the window; seed 1, warm-up run 2 at minute 64: 0.49 and
    // 0.47 MiB/s), while the floor still only follows that curve.
    // Fitted only over a whole life: a window of an older process that
    // reads as slowing (its halves under a dip or scatter, or a leak's
    // own) fits a curve that has a leak's rate left to rise by, and kept
    // a 0.25 MiB/s leak held as that curve's tail (seed 28, runs 112 and
    // 176).
    *fitted = life
        .filter(|life| whole_life && falls(life, params, Proof::Significant))
        .and_then(|life| Curve::fitted(&life, now));
    // A warm-up found before, on a process older than the series, whose
    // window rose no more than its curve still rose over it and stays
    // under its plateau: the longest window is the warm-up's tail. A leak
    // after it rises where the curve has nothing left (or speeds up,
    // `new_growth` below); the shorter windows are judged as ever, so a
    // fast leak is not held back by a curve an early fit got wrong (a
    // 16 MiB/s leak waited 7.6 min at seed 4, run 108, while only the
    // newest quarter of the full window had risen).
    let under = match prior {
        Prior::WarmingUp(Some(curve)) if !whole_life => {
            life.is_some_and(|life| follows(&curve, &life, (first, now), params))
        }
        _ => false,
    };
    let life_slowing = life.is_some_and(|life| falls(&life, params, proof));
    // Not judged where the window holds too few observations (`density`).
    let longest_buckets =
        density::buckets(series, longest_from, params).ok_or(NotALeak::NoTrend)?;
    let longest = scratch.line(series, longest_from, longest_buckets).ok_or(NotALeak::NoTrend)?;
    let longest_new_ground =
        prior_is_whole.then(|| new_ground(scratch, &longest, longest_from, longest_window, params));
    // A leak already suspected is let go by the hold rules, not by this.
    // Unless the longest window's own rate rises: growth begun after a
    // warm-up (a leak setting in) is judged on its own. An older process's
    // window alone is not judged so: evaluation dips and a leak's onset
    // inside it shape its halves more than any warm-up does.
    let life_is_window = first >= longest_from;
    let rises_anew = (life_slowing || under)
        && life.is_some_and(|life| new_growth(scratch, &life, life_is_window, params, &mut buffer));
    let slowing = life_slowing && !rises_anew;
    let tail = under && !life_slowing && !rises_anew;
    let verdict = if slowing || tail {
        Err(NotALeak::Slowing)
    } else if longest_new_ground == Some(false) {
        Err(NotALeak::NoNewGround)
    } else {
        judge_window(scratch, &longest, longest_window, params)
    };
    trace.window(scratch, &longest, longest_window, params, |record| {
        record.new_ground = longest_new_ground;
        record.verdict = Some(verdict.map(drop));
    });
    let longest_span =
        Span { from: longest_from, buckets: longest_buckets, window: longest_window };
    // Whether memory came back is read without the dips where any were
    // left out: a dip's low is no return, and the climb out of one no
    // climb that came back (seed 57, a leak held back four minutes).
    let mut came_back = None;
    if slowing {
        return verdict;
    }
    if let Err(reason) = verdict
        && reason != NotALeak::NoNewGround
        && !tail
    {
        let masked =
            match without_dips(scratch, series, longest_span, held, params, &mut trace, None) {
                Masked::Judged(Ok(evidence), _) => return Ok(evidence),
                // A suspected leak is held on the floor the raising judgement
                // read: an evaluation's low, in the second half of the window
                // for most of every cycle, is no return of what leaked.
                Masked::Judged(Err(_), masked)
                    if held
                        && (holds(&masked, params)
                            || holds_on_quarters(scratch.points(), &masked, params)) =>
                {
                    return Ok(LeakEvidence::from_line(&masked));
                }
                Masked::Judged(Err(reason), masked) => {
                    came_back = Some(
                        reason == NotALeak::ReturnsToBaseline
                            && !climbing_still(scratch.points(), &masked, params),
                    );
                    true
                }
                Masked::NoLine => true,
                Masked::NothingLeftOut => false,
            };
        if masked {
            // The rest reads the whole floor, dips and all: the same line
            // as `longest`, read again into the scratch.
            scratch.line(series, longest_from, longest_buckets).ok_or(NotALeak::NoTrend)?;
        }
    }
    let came_back = came_back.unwrap_or_else(|| {
        verdict == Err(NotALeak::ReturnsToBaseline)
            && !climbing_still(scratch.points(), &longest, params)
    });
    if verdict.is_ok() || came_back {
        // Memory that came back within the longest window is not leaked,
        // whatever a shorter window shows.
        return verdict;
    }
    // Judged now, while `scratch` still holds the longest window's points.
    let longest_holds_on_quarters = held && holds_on_quarters(scratch.points(), &longest, params);
    if !prior_is_whole {
        scratch.keep_as_prior();
    }
    // A shorter window on which a suspected leak still holds, for when the
    // longest one does not (yet) show it; see below.
    let mut held_on: Option<FloorLine> = None;
    for &window in shorter.iter().rev() {
        let from = now.saturating_sub(window);
        let buckets = density::buckets(series, from, params);
        let Some(line) = buckets.and_then(|buckets| scratch.line(series, from, buckets)) else {
            continue;
        };
        if held && held_on.is_none() && window > params.shortest_window {
            held_on = if holds(&line, params) {
                Some(line)
            } else {
                held_without_dips(scratch, series, (from, buckets, window), params, &mut trace)
            };
        }
        let new_ground = new_ground(scratch, &line, from, window, params);
        // The shortest window sees only the newest climb; the history
        // before it says whether climbs like it came back before. One that
        // fell back by more than this rise is an epoch pattern, which a leak's
        // floor never shows, so the shortest window alone cannot call it;
        // longer windows span the returns themselves (rules 2-4).
        let returned_before = window == params.shortest_window
            && scratch.prior_drawdown(from)
                >= (params.return_evidence_share * line.growth()).max(params.noise_floor_bytes);
        let judged =
            (new_ground && !returned_before).then(|| judge_window(scratch, &line, window, params));
        trace.window(scratch, &line, window, params, |record| {
            record.new_ground = Some(new_ground);
            record.returned_before = (window == params.shortest_window).then_some(returned_before);
            record.verdict = judged.map(|verdict| verdict.map(drop));
        });
        if let Some(Ok(evidence)) = judged {
            return Ok(evidence);
        }
        if let (Some(Err(_)), Some(buckets)) = (judged, buckets) {
            let span = Span { from, buckets, window };
            let masked =
                without_dips(scratch, series, span, false, params, &mut trace, Some(new_ground));
            if let Masked::Judged(Ok(evidence), _) = masked {
                return Ok(evidence);
            }
        }
    }
    if held && holds(&longest, params) {
        return Ok(LeakEvidence::from_line(&longest));
    }
    // A fast leak is first called on a short window, minutes before the
    // longest covered one rises enough to hold it; under a sawtooth of
    // gigabytes the short window's own rules flicker from check to check,
    // and each flicker restarted `for`. Holding it on any window longer
    // than the shortest (still rising, not back at its baseline) bridges
    // those checks; a leak that stops or returns fails `holds` everywhere.
    if let Some(line) = held_on {
        return Ok(LeakEvidence::from_line(&line));
    }
    // Last, as its slope may be below the threshold a shorter window's is
    // above, and a pending alert judges the slope against the threshold.
    if longest_holds_on_quarters {
        return Ok(LeakEvidence::from_line(&longest));
    }
    verdict
}

/// A shorter window on which a suspected leak holds once its dips, one
/// still open at its end too, are left out; the scratch holds `line`'s
/// points again afterwards (`from`, `buckets`, `window`: the window's).
fn held_without_dips(
    scratch: &mut FloorScratch,
    series: &[(Timestamp, u64)],
    (from, buckets, window): (Timestamp, Option<usize>, Duration),
    params: &LeakParams,
    trace: &mut Trace<'_>,
) -> Option<FloorLine> {
    let buckets = buckets?;
    let span = Span { from, buckets, window };
    let held = match without_dips(scratch, series, span, true, params, trace, None) {
        Masked::Judged(_, masked) => holds(&masked, params).then_some(masked),
        Masked::NothingLeftOut => return None,
        Masked::NoLine => None,
    };
    scratch.line(series, from, buckets);
    held
}

/// Where a window begins, how many floor buckets it holds, and its length.
#[derive(Clone, Copy)]
struct Span {
    from: Timestamp,
    buckets: usize,
    window: Duration,
}

/// What [`without_dips`] found.
enum Masked {
    /// Nothing would be left out: the scratch still holds the window's floor.
    NothingLeftOut,
    /// Too few floor points were left to judge; the scratch holds them.
    NoLine,
    /// The verdict on the floor without dips, and its line; the scratch
    /// holds its points.
    Judged(Result<LeakEvidence, NotALeak>, FloorLine),
}

/// A window whose own judgement failed, judged again on its floor with
/// evaluation dips left out where it is long enough
/// (`dips_shortest_window`) and holds any: a dip's low is no return, and
/// the steps down into it and back up are no levelling off. `held` (a
/// leak already suspected, on the longest window) also leaves out a dip
/// still open at the window's end.
fn without_dips(
    scratch: &mut FloorScratch,
    series: &[(Timestamp, u64)],
    span: Span,
    held: bool,
    params: &LeakParams,
    trace: &mut Trace<'_>,
    new_ground: Option<bool>,
) -> Masked {
    let Some(dips) = dips(params, held).filter(|_| span.window >= params.dips_shortest_window)
    else {
        return Masked::NothingLeftOut;
    };
    // Where no dip would be left out, the floor between dips is the floor
    // just judged: nothing to judge again (most processes, most checks).
    if !scratch.holds_dips(dips) {
        return Masked::NothingLeftOut;
    }
    let Some(masked) = scratch.line_without_dips(series, span.from, span.buckets, Some(dips))
    else {
        return Masked::NoLine;
    };
    let rise = judge_window(scratch, &masked, span.window, params);
    trace.window(scratch, &masked, span.window, params, |record| {
        record.dips_left_out = true;
        record.new_ground = new_ground;
        record.verdict = Some(rise.map(drop));
    });
    Masked::Judged(rise, masked)
}

/// Whether `line` (a `window` from `from`) takes new ground, reached from
/// where memory already stood on the kept prior floor: a climb back to
/// where it has been (out of an evaluation dip, or a per-epoch ramp) is
/// not what a leak does. Windows long enough to have their dips left out
/// compare with the prior floor's highest level, not its highest point: a
/// single high bucket minimum kept a slow leak's 16-minute window from
/// being judged for minutes (seed 65). A shorter window's climb out of a
/// dip, or a ramp's, ends near the single highest point (benign alarms at
/// seeds 14, 35 and 56 against levels).
fn new_ground(
    scratch: &FloorScratch,
    line: &FloorLine,
    from: Timestamp,
    window: Duration,
    params: &LeakParams,
) -> bool {
    let highest =
        if window >= params.dips_shortest_window { Highest::Level } else { Highest::Point };
    scratch.prior_high(from, highest).is_none_or(|high| {
        let end = line.intercept + line.slope * line.span_seconds;
        let slack = params.return_share * line.growth().max(0.0);
        let margin = (params.new_ground_spreads * line.spread).max(params.noise_floor_bytes);
        end > high + margin && line.baseline >= high - slack
    })
}

/// Looks for a leak in one process's window (`from` is where the window
/// began), following its [`PidSeries::preferred`] figure; `prior` is what
/// the previous check said of it (see the module doc), replaced by what
/// this one says for the next.
pub fn detect_process_leak(
    scratch: &mut FloorScratch,
    process: &PidSeries,
    from: Timestamp,
    prior: &mut Prior,
    params: &LeakParams,
) -> Result<LeakFinding, NotALeak> {
    detect_held_leak(scratch, process, from, None, prior, params)
}

/// [`detect_process_leak`] for a process whose leak the previous check
/// found (`held`, with `prior` [`Prior::Held`]): where no window shows it
/// any more, it is held on what that finding carried ([`LeakFinding::hold`])
/// while its floor still rises and has not come back.
pub fn detect_held_leak(
    scratch: &mut FloorScratch,
    process: &PidSeries,
    from: Timestamp,
    held: Option<&LeakFinding>,
    prior: &mut Prior,
    params: &LeakParams,
) -> Result<LeakFinding, NotALeak> {
    let Some((metric, values)) = process.preferred() else {
        let verdict = Err(NotALeak::NoTrend);
        *prior = prior.after(&verdict, None);
        return verdict;
    };
    let start = process.since.map_or(Start::Window(from), Start::Listed);
    let carried = held.map(|held| &held.hold);
    let (evidence, hold) =
        assess_carried(scratch, values, start, carried, prior, params, Trace(None))?;
    // Judged on the whole series (the full window, or the process's life):
    // its buckets hold many of the allocator's segments each, so a leak
    // rising segment by segment is a ramp there.
    let cache_or_leak = metric == ProcessMetric::NvmlUsed
        && values.first().is_some_and(|&(first, _)| {
            scratch.line(values, first, params.buckets).is_some()
                && rises_in_steps(scratch.points(), params.staircase_levels)
        });
    Ok(LeakFinding { evidence, metric, cache_or_leak, hold })
}

/// Whether a floor's rise came in a few steps: its `steps` largest
/// bucket-to-bucket rises make up three quarters of all its rises. A ramp
/// spreads its rise over every bucket (the largest quarter of them hold a
/// third of it); a cache growing to each new largest batch holds level
/// between a handful of jumps.
pub fn rises_in_steps(points: &[(f64, f64)], steps: usize) -> bool {
    let mut rises: Vec<f64> =
        points.windows(2).map(|pair| pair[1].1 - pair[0].1).filter(|&rise| rise > 0.0).collect();
    let total: f64 = rises.iter().sum();
    rises.sort_unstable_by(|a, b| b.total_cmp(a));
    let largest: f64 = rises.iter().take(steps).sum();
    total > 0.0 && largest >= 0.75 * total
}

mod density;
pub mod hold;
mod params;
mod rules;
pub mod sequential;
mod trace;
mod warmup;

pub use hold::Hold;
pub use params::LeakParams;
use trace::Trace;
pub use trace::WindowJudgement;
pub use warmup::{Curve, Prior};
use warmup::{Proof, falls, follows, new_growth};

#[cfg(test)]
mod hold_tests;
#[cfg(test)]
mod shape_tests;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod trace_tests;
