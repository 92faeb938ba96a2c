//! Memory leak detection for one process: steady growth that never goes
//! back down.
//!
//! Owns: the leak rules below, their parameters and findings, and the
//! choice of which figure to follow. Depends on: `model`, `history`
//! (read-only snapshots), `analysis::{series, trend, remediation}`. Pure; no
//! I/O, no clocks: the window is the series' own timestamps.
//!
//! A series (oldest first) is a leak when all of these hold:
//!
//! 1. it covers at least `min_span` (by default 80 % of the window), so a
//!    process that just started warming up is not judged on a few minutes;
//! 2. its Theil–Sen slope is at least `min_slope_bytes_per_second` with a
//!    fit of at least `min_fit`: growth, steady rather than noisy;
//! 3. it ends above where it started (`growth = latest − baseline > 0`,
//!    with the baseline the lowest value in the first 10 % of the span);
//! 4. the lowest value in the second half stays above
//!    `baseline + 25 % of growth`: memory that a training epoch frees again
//!    returns near its baseline and is not a leak (steady linear growth sits
//!    at 50 % there, so 25 % leaves room for noise);
//! 5. the second half grows on its own at ≥ half the minimum slope: a step
//!    up or a warm-up that then levels off is a new plateau, not a leak.
//!
//! Which figure: `allocated` (live tensors) for processes that report
//! allocator statistics, since their NVML usage includes a cache that grows
//! and stays by design; NVML usage otherwise ([`preferred_metric`]).

use std::time::Duration;

use serde::Serialize;

use crate::history::{ProcessPoint, SlowPoint, Snapshot};
use crate::model::Timestamp;

use super::remediation;
use super::series::{self, ProcessMetric};
use super::trend::TrendScratch;

/// Share of the span at the start the baseline is taken from.
const BASELINE_SHARE: f64 = 0.10;
/// Share of the growth the second half's minimum must stay above.
const RETURN_SHARE: f64 = 0.25;
/// Share of `min_slope` the second half must keep growing at.
const SECOND_HALF_SLOPE_SHARE: f64 = 0.5;

/// What counts as a leak.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LeakParams {
    /// Default 256 KiB/s (~0.9 GiB/h), the `leak_suspected` rule's.
    pub min_slope_bytes_per_second: f64,
    /// Least R² of the trend; default 0.8.
    pub min_fit: f64,
    /// Least time the series must cover; default 80 % of the window.
    pub min_span: Duration,
    /// Points the trend is fitted on (see `trend::theil_sen`); default 30.
    pub max_points: usize,
}

impl LeakParams {
    /// Defaults for a window of `window`: the series must cover 80 % of it.
    pub fn for_window(window: Duration) -> Self {
        Self {
            min_slope_bytes_per_second: 262_144.0,
            min_fit: 0.8,
            min_span: window.mul_f64(0.8),
            max_points: 30,
        }
    }
}

impl Default for LeakParams {
    /// For the default 30-minute `leak_window`.
    fn default() -> Self {
        Self::for_window(Duration::from_secs(30 * 60))
    }
}

/// Why a series is not a leak (rules numbered as in the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotALeak {
    /// Rule 1: the series covers less than `min_span`.
    TooShort,
    /// Fewer than 3 usable points, so no trend at all.
    NoTrend,
    /// Rule 2: the slope is below the minimum.
    SlowGrowth,
    /// Rule 2: the line does not describe the series well.
    PoorFit,
    /// Rule 3: it ends no higher than it started.
    NoGrowth,
    /// Rule 4: it went back down near its baseline.
    ReturnsToBaseline,
    /// Rule 5: the second half stopped growing.
    LevelsOff,
}

/// A leak in a series, before it is tied to a process.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LeakEvidence {
    pub slope_bytes_per_second: f64,
    pub fit: f64,
    /// Time the series covers.
    pub window_seconds: f64,
    /// `latest − baseline`.
    pub growth_bytes: u64,
    /// Lowest value in the first 10 % of the span.
    pub baseline_bytes: u64,
    /// The newest value.
    pub latest_bytes: u64,
}

impl LeakEvidence {
    pub fn into_finding(self, pid: u32, metric: ProcessMetric) -> LeakFinding {
        LeakFinding {
            pid,
            slope_bytes_per_second: self.slope_bytes_per_second,
            fit: self.fit,
            window_seconds: self.window_seconds,
            growth_bytes: self.growth_bytes,
            baseline_bytes: self.baseline_bytes,
            latest_bytes: self.latest_bytes,
            metric,
            remediation: remediation::LEAK,
        }
    }
}

/// A process that appears to leak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LeakFinding {
    pub pid: u32,
    pub slope_bytes_per_second: f64,
    pub fit: f64,
    pub window_seconds: f64,
    pub growth_bytes: u64,
    pub baseline_bytes: u64,
    pub latest_bytes: u64,
    /// The figure that grows.
    pub metric: ProcessMetric,
    pub remediation: &'static str,
}

/// The leak in `series` (oldest first), if the module's rules all hold.
pub fn detect_leak(series: &[(Timestamp, u64)], params: &LeakParams) -> Option<LeakEvidence> {
    assess_leak(&mut TrendScratch::new(), series, params).ok()
}

/// The rules applied one by one, saying which one failed; reuses `scratch`
/// so a pass over many processes allocates once.
pub fn assess_leak(
    scratch: &mut TrendScratch,
    series: &[(Timestamp, u64)],
    params: &LeakParams,
) -> Result<LeakEvidence, NotALeak> {
    let (Some(&(first_at, _)), Some(&(last_at, latest))) = (series.first(), series.last()) else {
        return Err(NotALeak::NoTrend);
    };
    let span = last_at.duration_since(first_at).ok_or(NotALeak::NoTrend)?;
    if span < params.min_span {
        return Err(NotALeak::TooShort);
    }
    let trend = scratch.theil_sen_with(series, params.max_points).ok_or(NotALeak::NoTrend)?;
    if !at_least(trend.slope_per_second, params.min_slope_bytes_per_second) {
        return Err(NotALeak::SlowGrowth);
    }
    if !at_least(trend.fit, params.min_fit) {
        return Err(NotALeak::PoorFit);
    }

    let baseline_end = first_at.saturating_add(span.mul_f64(BASELINE_SHARE));
    let middle = first_at.saturating_add(span / 2);
    let baseline_len = series.partition_point(|&(at, _)| at <= baseline_end);
    let second_half = series.get(series.partition_point(|&(at, _)| at < middle)..).unwrap_or(&[]);
    let baseline = series.get(..baseline_len).unwrap_or(&[]).iter().map(|&(_, v)| v).min();
    let baseline = baseline.ok_or(NotALeak::NoTrend)?;
    let growth = latest.saturating_sub(baseline);
    if growth == 0 {
        return Err(NotALeak::NoGrowth);
    }

    let floor = baseline as f64 + RETURN_SHARE * growth as f64;
    let second_half_min = second_half.iter().map(|&(_, v)| v).min().ok_or(NotALeak::NoTrend)?;
    if second_half_min as f64 <= floor {
        return Err(NotALeak::ReturnsToBaseline);
    }
    let late = scratch.theil_sen_with(second_half, params.max_points).ok_or(NotALeak::LevelsOff)?;
    if !at_least(late.slope_per_second, SECOND_HALF_SLOPE_SHARE * params.min_slope_bytes_per_second)
    {
        return Err(NotALeak::LevelsOff);
    }

    Ok(LeakEvidence {
        slope_bytes_per_second: trend.slope_per_second,
        fit: trend.fit,
        window_seconds: trend.span_seconds,
        growth_bytes: growth,
        baseline_bytes: baseline,
        latest_bytes: latest,
    })
}

/// `value >= min`, false when either is NaN, so a NaN parameter rejects
/// rather than accepts.
fn at_least(value: f64, min: f64) -> bool {
    value >= min
}

/// The figure to follow for a process: allocator `allocated` when any of
/// its points reports allocator statistics, NVML usage when any reports
/// that, `None` when neither is known.
pub fn preferred_metric<'a>(
    points: impl IntoIterator<Item = &'a ProcessPoint>,
) -> Option<ProcessMetric> {
    let mut preferred = None;
    for point in points {
        if point.allocator().is_some() {
            return Some(ProcessMetric::AllocatorAllocated);
        }
        if point.used_bytes().is_some() {
            preferred = Some(ProcessMetric::NvmlUsed);
        }
    }
    preferred
}

/// Looks for a leak in process `pid` over `[from, to]` of a slow-tier
/// snapshot, following its [`preferred_metric`].
pub fn detect_process_leak(
    snapshot: &Snapshot<SlowPoint>,
    pid: u32,
    from: Timestamp,
    to: Timestamp,
    params: &LeakParams,
) -> Option<LeakFinding> {
    let metric =
        preferred_metric(series::process_points(snapshot, pid, from, to).map(|(_, point)| point))?;
    let values = series::process_series(snapshot, pid, from, to, metric);
    detect_leak(&values, params).map(|evidence| evidence.into_finding(pid, metric))
}

#[cfg(test)]
mod tests;
