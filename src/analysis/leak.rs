//! Memory leak detection for one process: a floor that keeps rising.
//!
//! Owns: the leak rules below (each window's tests in `rules`), their
//! parameters and findings, which windows are judged and in what order,
//! and the choice of which figure to follow. Depends on: `model`,
//! `analysis::{series, floor, trend::saturation}` and its own `rules`,
//! `sequential`, `hold`, `trace` and `windows` (the judgement of one check,
//! window by window). Pure; no I/O, no clocks: windows are the
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
//! `window`) fails, it is judged once more on its floor with dips left out
//! (`floor::Dips`: the floor falling by `dip_depth_bytes` within a bucket
//! or two and stepping back, after at least two buckets and within
//! `dip_longest`, to where it stood before or above; also a window that
//! opens inside such a dip, for at most half of it). An evaluation phase
//! frees a training step's buffers and takes them back: its low is no
//! return (rule 4) and its steps are no levelling off (rule 3), while the
//! floor between dips is what a leak raises. Memory freed for good stays
//! down, a climb that returns each epoch climbs back gradually, and a
//! single low bucket (everything gained freed for a moment) is still return
//! evidence, so none of them is left out. Not on windows under half the
//! full one: there the few buckets left between long dips lined up by
//! chance (three benign alarms at seeds 2 and 4), and every other path
//! still reads the whole floor.
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
//! Where every window fails a held leak (shown at two checks or more, or
//! at its call only where the floor since holds a dip), it is held
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

use super::floor::{FloorLine, FloorScratch};
use super::series::{PidSeries, ProcessMetric};

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
    let covered = windows::covered(series, start, params).unwrap_or_default();
    let (line, span, holds) =
        hold::bridge(scratch, series, &hold, covered, params).ok_or(reason)?;
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
    detect_held_leak(scratch, process, from, None, prior, params, None)
}

/// [`detect_process_leak`] for a process whose leak the previous check
/// found (`held`, with `prior` [`Prior::Held`]): where no window shows it
/// any more, it is held on what that finding carried ([`LeakFinding::hold`])
/// while its floor still rises and has not come back.
///
/// With `trace`, every window judged is recorded there, as
/// [`assess_leak_traced`] records them (the analyzer's traced process).
pub fn detect_held_leak(
    scratch: &mut FloorScratch,
    process: &PidSeries,
    from: Timestamp,
    held: Option<&LeakFinding>,
    prior: &mut Prior,
    params: &LeakParams,
    trace: Option<&mut Vec<WindowJudgement>>,
) -> Result<LeakFinding, NotALeak> {
    let Some((metric, values)) = process.preferred() else {
        let verdict = Err(NotALeak::NoTrend);
        *prior = prior.after(&verdict, None);
        return verdict;
    };
    let start = process.since.map_or(Start::Window(from), Start::Listed);
    let carried = held.map(|held| &held.hold);
    let (evidence, hold) =
        assess_carried(scratch, values, start, carried, prior, params, Trace(trace))?;
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
mod windows;

pub use hold::Hold;
pub use params::LeakParams;
use trace::Trace;
pub use trace::{LeakCheck, WindowJudgement};
pub use warmup::{Curve, Prior};
use windows::assess;

#[cfg(test)]
mod hold_tests;
#[cfg(test)]
mod shape_tests;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod trace_tests;
