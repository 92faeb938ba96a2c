//! The leak rules on one window's floor line: rules 1-5 (`judge`), rule
//! 2's second way (`sequential`), and whether a suspected leak still holds.
//!
//! Owns: the tests each window is put to. Depends on: `analysis::floor`
//! (the line and its quarters), `leak::sequential` (the CUSUM) and the
//! parameters. Pure; no I/O, no clocks, no allocation. Which windows are
//! judged, and in what order, is `leak::assess`.

use std::time::Duration;

use super::super::floor::{Dips, FloorLine, FloorScratch};
use super::sequential::{Climb, climb_returns, level_cusum};
use super::{LeakEvidence, LeakParams, NotALeak};

/// Rule 2's second way (`leak::sequential`), on the window whose floor
/// `scratch` just reduced to `line`, where rules 1-5 alone did not pass
/// it: the CUSUM of the floor above its first quarter reaches
/// `sequential_bound` with the line's rise at least
/// `sequential_min_significance` spreads, and rules 3 to 5 hold, rule 3's last quarter
/// allowed to pause ([`FloorLine::rises`]) where the CUSUM reaches
/// `sequential_override` bounds. It only ever adds a leak: where it fails, the window's own
/// reason stands. The shortest window's narrow buckets are left to rule 2
/// (their minima scatter most).
pub(super) fn sequential(
    scratch: &FloorScratch,
    line: &FloorLine,
    window: Duration,
    params: &LeakParams,
) -> Option<LeakEvidence> {
    let bound = params.sequential_bound;
    let eligible = window > params.shortest_window
        && bound.is_finite()
        && at_least(line.slope, params.min_slope_bytes_per_second)
        && at_least(
            line.significance(params.noise_floor_bytes),
            params.sequential_min_significance,
        );
    if !eligible {
        return None;
    }
    let points = scratch.points();
    let start = line.quarters[0];
    let spread = line.spread.max(params.noise_floor_bytes);
    let Climb { cusum, .. } = level_cusum(points, start, spread, params.sequential_allowance)?;
    let may_pause = at_least(cusum, params.sequential_override * bound);
    let rising = line.rises(params.keep_rising_share, may_pause);
    // Rule 4 on the whole window, not only on the climb: a floor back from
    // a dip (an evaluation phase ending) is a climb from the dip, and with
    // rule 4 on the climb alone such recoveries called benign runs (4, 3
    // and 6 alarms at seeds 1–3 with a bound of 20).
    let climbed = at_least(cusum, bound)
        && rising
        && !line.returns_to_baseline(params.return_share)
        && !line.is_staircase(params.staircase_levels);
    climbed.then(|| LeakEvidence::from_line(line))
}

/// Whether the newest climb of a window's floor (the CUSUM's run,
/// `leak::sequential`) stands out of the scatter and has not come back,
/// though the window as a whole "returned to its baseline": rule 4 reads
/// a leak that began after the window's middle as a return, its second
/// half starting at the old level. Such a window does not stop shorter
/// ones from judging the climb. Off with the sequential test.
pub(super) fn climbing_still(points: &[(f64, f64)], line: &FloorLine, params: &LeakParams) -> bool {
    if !params.sequential_bound.is_finite() {
        return false;
    }
    let (start, spread) = (line.quarters[0], line.spread.max(params.noise_floor_bytes));
    level_cusum(points, start, spread, params.sequential_allowance).is_some_and(|climb| {
        at_least(climb.cusum, params.sequential_bound)
            && !climb_returns(points, climb.from, start, line.quarters[3], params.return_share)
    })
}

/// The dips to leave out of the floor, if that is on; `held` (a leak
/// already suspected) also leaves out one still open at the window's end.
pub(super) fn dips(params: &LeakParams, held: bool) -> Option<Dips> {
    let dips = Dips {
        depth: params.dip_depth_bytes,
        longest_seconds: params.dip_longest.as_secs_f64(),
        open_at_end: held,
    };
    (dips.depth.is_finite() && dips.depth > 0.0).then_some(dips)
}

/// Rules 1–5 on the window whose floor `scratch` just reduced to `line`,
/// or failing them rule 2's second way ([`sequential`]); the window's own
/// reason where neither calls it.
pub(super) fn judge_window(
    scratch: &FloorScratch,
    line: &FloorLine,
    window: Duration,
    params: &LeakParams,
) -> Result<LeakEvidence, NotALeak> {
    judge(line, params).or_else(|reason| sequential(scratch, line, window, params).ok_or(reason))
}

/// Rules 1–5 on one window's floor.
pub(super) fn judge(line: &FloorLine, params: &LeakParams) -> Result<LeakEvidence, NotALeak> {
    if !at_least(line.slope, params.min_slope_bytes_per_second) {
        return Err(NotALeak::SlowGrowth);
    }
    if !at_least(line.significance(params.noise_floor_bytes), params.min_significance) {
        return Err(NotALeak::PoorFit);
    }
    if !line.keeps_rising(params.keep_rising_share) {
        return Err(NotALeak::LevelsOff);
    }
    if line.returns_to_baseline(params.return_share) {
        return Err(NotALeak::ReturnsToBaseline);
    }
    if line.is_staircase(params.staircase_levels) {
        return Err(NotALeak::Staircase);
    }
    Ok(LeakEvidence::from_line(line))
}

/// `value >= min`, false when either is NaN, so a NaN parameter rejects
/// rather than accepts.
pub(super) fn at_least(value: f64, min: f64) -> bool {
    value >= min
}

/// Whether a suspected leak still holds on the longest covered window:
/// its floor still rises over the second half by what the hold slope
/// predicts plus the floor's spread (a leak that stopped does not), and has
/// not come back down.
pub(super) fn holds(line: &FloorLine, params: &LeakParams) -> bool {
    still_rising(line, params) && !line.returns_to_baseline(params.return_share)
}

/// The rise [`holds`] asks of a suspected leak's floor.
pub(super) fn still_rising(line: &FloorLine, params: &LeakParams) -> bool {
    let [_, second, _, fourth] = line.quarters;
    let expected = params.hold_slope_bytes_per_second * line.span_seconds / 2.0;
    line.slope >= params.hold_slope_bytes_per_second && fourth - second >= expected + line.spread
}

/// Whether a suspected leak still holds on the longest covered window
/// whose rule 4 reads a leak that began after the window's middle as a
/// return (its second half starts at the old level): the floor still
/// rises as [`holds`] asks, the last quarter's median (not the second
/// half's lowest bucket) stands above the baseline by all but
/// `return_share` of the growth, and the CUSUM reaches the bound. Memory
/// back at its baseline has its last quarter there. Without it a fast leak
/// first called on a short window lost its hold one check later, the
/// longest window not yet far enough past its onset, and `for` restarted.
/// Not on the shorter windows: their quarter medians under a sawtooth of
/// gigabytes line up so by chance once the leak stopped.
pub(super) fn holds_on_quarters(
    points: &[(f64, f64)],
    line: &FloorLine,
    params: &LeakParams,
) -> bool {
    let [first, _, _, fourth] = line.quarters;
    let rising = still_rising(line, params)
        && fourth - line.baseline >= (1.0 - params.return_share) * line.growth();
    // Quarter medians of a flat, scattered floor can line up like that;
    // the CUSUM says the floor truly left where the window began.
    let spread = line.spread.max(params.noise_floor_bytes);
    rising
        && level_cusum(points, first, spread, params.sequential_allowance)
            .is_some_and(|climb| at_least(climb.cusum, params.sequential_bound))
}
