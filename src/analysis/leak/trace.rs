//! What `assess_leak` judged, window by window, for whoever asks why a
//! leak is (not yet) called: the benchmark's `--explain` and tests.
//!
//! Owns: [`WindowJudgement`], one record per window the detector looked
//! at, in the order it looked. Depends on: `analysis::floor` (the line)
//! and `leak::sequential` (the CUSUM). Pure; recording is off (one branch
//! per window) unless a caller passes a trace, so the analyzer pays nothing.
//!
//! Why records of the real code and not a replay of its rules: a copy of
//! the rules beside the detector drifts from it (the benchmark's explain
//! once did), and then says why about a detector that no longer exists.

use std::time::Duration;

use serde::Serialize;

use super::super::floor::{FloorLine, FloorScratch};
use super::super::series::ProcessMetric;
use super::{LeakFinding, LeakParams, NotALeak, Prior, sequential::level_cusum};
use crate::model::Timestamp;

/// One window as [`super::assess_leak_traced`] judged it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WindowJudgement {
    /// The window's length (ending at the newest sample).
    pub window: Duration,
    /// Judged on the floor with evaluation dips left out (the full
    /// window's second look, `floor::Dips`).
    pub dips_left_out: bool,
    /// The hold carried from the last check that showed the leak
    /// (`leak::hold::bridge`), judged where every window failed.
    pub carried: bool,
    /// Slope of the floor, bytes/s.
    pub slope_bytes_per_second: f64,
    /// The rise over the window in spreads of the floor (rule 2).
    pub significance: f64,
    /// The CUSUM of the floor above its first quarter, in spreads (rule
    /// 2's second way); `None` with too few points.
    pub cusum: Option<f64>,
    /// Quarter medians of the floor, bytes above the first.
    pub quarters_above_first: [f64; 4],
    /// Distinct floor levels (rule 5).
    pub levels: usize,
    /// Rule 3 holds.
    pub keeps_rising: bool,
    /// Rule 4 fails: the floor came back towards its baseline.
    pub returns_to_baseline: bool,
    /// Shorter windows only: the floor takes new ground from where the
    /// longest window's floor already stood.
    pub new_ground: Option<bool>,
    /// The shortest window only: the floor before it once fell back by
    /// `return_evidence_share` of its rise, so it is not judged alone.
    pub returned_before: Option<bool>,
    /// Rules 1-5 or the sequential test: a leak (`Ok`) or why not;
    /// `None` where the detector did not judge the window (no new ground,
    /// a history of returns).
    pub verdict: Option<Result<(), NotALeak>>,
}

impl WindowJudgement {
    /// The record of `line`, the floor `scratch` holds now.
    pub(super) fn of(
        scratch: &FloorScratch,
        line: &FloorLine,
        window: Duration,
        params: &LeakParams,
    ) -> Self {
        let spread = line.spread.max(params.noise_floor_bytes);
        let cusum =
            level_cusum(scratch.points(), line.quarters[0], spread, params.sequential_allowance)
                .map(|climb| climb.cusum);
        Self {
            window,
            dips_left_out: false,
            carried: false,
            slope_bytes_per_second: line.slope,
            significance: line.significance(params.noise_floor_bytes),
            cusum,
            quarters_above_first: line.quarters.map(|quarter| quarter - line.quarters[0]),
            levels: line.levels,
            keeps_rising: line.keeps_rising(params.keep_rising_share),
            returns_to_baseline: line.returns_to_baseline(params.return_share),
            new_ground: None,
            returned_before: None,
            verdict: None,
        }
    }
}

/// One leak check of the process the analyzer was asked to trace
/// (`Analyzer::trace_leaks_of`): what the check was handed, what it read,
/// every window it judged and its verdict. The benchmark's `--explain`
/// prints these, so it explains the alert the rules saw, samples, check
/// times and carried state included, and not a replay beside it.
#[derive(Clone, Debug)]
pub struct LeakCheck {
    /// The check's time (the pass's).
    pub at: Timestamp,
    /// What the check before handed this one.
    pub prior: Prior,
    /// The figure judged and its series over the window (the process's
    /// life where it began inside it); `None` where neither was reported.
    pub series: Option<(ProcessMetric, Vec<(Timestamp, u64)>)>,
    /// Every window judged, in order.
    pub windows: Vec<WindowJudgement>,
    /// The finding, as the alert rules read it, or why there is none.
    pub verdict: Result<LeakFinding, NotALeak>,
}

/// Where `assess_leak_traced` writes, if anywhere.
pub(super) struct Trace<'a>(pub(super) Option<&'a mut Vec<WindowJudgement>>);

impl Trace<'_> {
    /// The same trace, lent to a callee.
    pub(super) fn reborrow(&mut self) -> Trace<'_> {
        Trace(self.0.as_deref_mut())
    }

    /// Records the window `scratch` holds now, built by `fill` from its
    /// plain record; nothing (not even the CUSUM) is computed when off.
    pub(super) fn window(
        &mut self,
        scratch: &FloorScratch,
        line: &FloorLine,
        window: Duration,
        params: &LeakParams,
        fill: impl FnOnce(&mut WindowJudgement),
    ) {
        if let Some(records) = self.0.as_deref_mut() {
            let mut record = WindowJudgement::of(scratch, line, window, params);
            fill(&mut record);
            records.push(record);
        }
    }
}
