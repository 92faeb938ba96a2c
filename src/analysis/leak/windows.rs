//! The window-by-window judgement of one check: which windows are judged
//! and in what order, the floor with dips left out, new ground, and the
//! warm-up's rule 6 across them (the rules themselves are in
//! `leak::rules`, the warm-up's evidence in `leak::warmup`; see the
//! `leak` module doc for what each rule asks). Depends on `analysis::floor`
//! and `analysis::trend::saturation` like its parent; pure.

use std::time::Duration;

use crate::model::Timestamp;

use super::super::floor::{FloorLine, FloorScratch, Highest};
use super::super::trend::saturation::halves;
use super::density;
use super::rules::{climbing_still, dips, holds, holds_on_quarters, judge_window};
use super::trace::Trace;
use super::warmup::{Proof, falls, follows, new_growth};
use super::{Curve, LeakEvidence, LeakParams, NotALeak, PREDATES_TOLERANCE, Prior, Start};

/// The rules, with `prior` replaced by what this check hands the next
/// (`Prior::after`, with the warm-up curve this check fitted).
pub(super) fn assess(
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
    let (started, tolerance) = started(series, start);
    let covered = covered_since(started, now, params);
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
        && life.is_some_and(|life| {
            new_growth(scratch, &longest, &life, (life_is_window, proof), params, &mut buffer)
        });
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

/// How much of the window ending at `series`' newest sample the process
/// covers ([`covered_since`] its start). `None` for an empty series.
pub(super) fn covered(
    series: &[(Timestamp, u64)],
    start: Start,
    params: &LeakParams,
) -> Option<Duration> {
    let &(now, _) = series.last()?;
    Some(covered_since(started(series, start).0, now, params))
}

/// Where the process of `series` started, where that lies inside it: its
/// first listing, or its first sample where that lies past the window's
/// start by more than the returned tolerance. `None` for a process there
/// when the window began.
fn started(series: &[(Timestamp, u64)], start: Start) -> (Option<Timestamp>, Duration) {
    let (Some(&(first, _)), Some(&(now, _))) = (series.first(), series.last()) else {
        return (None, PREDATES_TOLERANCE);
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
    (started, tolerance)
}

/// How much of a window ending at `now` a process that `started` then
/// covers: from its start plus the `warmup` grace; the full window for one
/// there when the window began.
fn covered_since(started: Option<Timestamp>, now: Timestamp, params: &LeakParams) -> Duration {
    started.map_or(params.window, |started| {
        now.duration_since(started.saturating_add(params.warmup)).unwrap_or_default()
    })
}
