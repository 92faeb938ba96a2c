//! The exhaustion forecast's growth read process by process, on a device
//! whose listed processes account for its memory.
//!
//! Owns: every listed process's NVML usage over the trend window, slid
//! check by check from the slow tier; the rule that says when those
//! processes account for the device (`ProcessGrowth::rate`); which of them
//! grow; and the device's use without those that do not. Depends on: `history` (read-only slow
//! samples), `model::Timestamp`, `analysis::trend` and `analysis::floor`.
//! Knows nothing of alert rules or configuration; no I/O, no clocks: time
//! is the samples' own.
//!
//! Why: on a shared device a notebook tenant takes and frees gigabyte
//! chunks every minute or two. Each chunk lifts a few buckets of the
//! *device* floor, which holds the line's fit below the forecast's
//! `min_fit` and flickers the "sustained" verdicts of its windows, and a
//! chunk freed inside the newest half hands the rate to the whole window,
//! half of which may predate the growth. A tenant whose chunk comes and
//! goes has no sustained growth of its own, and the job that grows has a
//! clean floor of its own.
//!
//! How: each process whose usage moved in the window is judged on its own
//! floor by the same `ForecastParams::trend` as the device (a warm-up
//! levelling off or a step is not sustained). Where none grows, no growth
//! is forecast. Where some do, the processes that do not grow are taken
//! out of the device's used memory at the fast tier's rate, and that
//! series is judged and its rate read exactly as the device's is: the
//! growing jobs' floor at the fast tier's rate, without the tenants'
//! steps. (Adding up the processes' own rates, read from the slow tier's
//! lists, was tried first: the same leads on the corpus, but a lone job's
//! rate from 1 Hz lists was noisier than its device floor's at 4 Hz;
//! docs/detection-history.md, ninth pass.)
//!
//! When the processes account for the device (otherwise the caller keeps
//! the device-floor forecast): the device is not a MIG instance (NVML's
//! per-process usage there is not the instance's; the caller checks), no
//! process list in the window was cut by the process cap, every process
//! listed now reports its usage, together they hold at least
//! [`ForecastParams::process_share`] of the device's used memory (what
//! they leave out, unlisted contexts and the driver's own, is taken to be
//! flat), and more than one of them moved (one alone is the device floor
//! already, read at the fast tier's rate).
//!
//! A process that joined inside the window (a second job starting, or a
//! PID listed again after a gap, which may be another process) held
//! nothing before its first list: its start is a step of the device's
//! use, and its warm-up a rise that levels off, which the device floor's
//! newest quarter read as sustained growth (a benign alarm at seed 28).
//! It is judged on its own points like any other, but only on those
//! [`ForecastParams::joined_settle`] after its first (a job's first minutes
//! are all growth); where it does not grow it is taken out whole, and where
//! it does, only the step it joined with.

use std::collections::VecDeque;
use std::time::Duration;

use crate::history::{DeviceHistory, FigureSample, ProcessFigure};
use crate::model::Timestamp;

use super::floor::FloorScratch;
use super::series::figure::{DecodeScratch, FigureSeries};
use super::trend::{ForecastParams, Trend};

/// The most process lists the reading holds for one device: one point per
/// process and list (a few bits each in sealed chunks, 16 bytes while a
/// check decodes them: 1.8 MiB at 64 processes). A trend window of
/// more lists (`analysis.trend_window` of over 30 min at a 1 s slow tier)
/// leaves the forecast on the device floor.
pub const MAX_LISTS: usize = 1_800;

/// How far back new lists are read under the ring's lock (which holds the
/// sampler's writes back); a longer read takes a snapshot.
const LOCKED_READ: Duration = Duration::from_secs(60);

/// Every listed process's NVML usage over one device's trend window, kept
/// between checks: each check reads only the slow-tier samples that
/// arrived since the last one and drops those that left the window
/// (reading the whole window's lists at every check was a tenth of an
/// offline run of 8 shared GPUs). Bounded by the window: one point per
/// process and list, kept in the leak windows' compact series (a process
/// whose usage moves every list costs about a byte a point, not 16) and
/// decoded for the check that reads them.
#[derive(Debug, Default)]
pub struct ProcessGrowth {
    /// The newest sample read.
    scanned_to: Option<Timestamp>,
    /// Every process list in the window, oldest first: its time and
    /// whether the process cap cut it.
    lists: VecDeque<(Timestamp, bool)>,
    /// The number of `lists[0]`; lists are numbered as read.
    first_list: u64,
    series: Vec<ProcessSeries>,
    scratch: DecodeScratch,
}

#[derive(Debug, Default)]
struct ProcessSeries {
    pid: u32,
    /// Number of the first list of the process's unbroken run of
    /// listings, and of the newest list that listed it.
    since: u64,
    listed: u64,
    /// Whether its own floor shows sustained growth (set by `rate`).
    growing: bool,
    /// Whether it joined inside the window (set by `rate`): a second job
    /// starting, or a PID listed again after a gap.
    joined: bool,
    /// Its usage by list number, kept between checks.
    usage: FigureSeries,
    /// Its usage decoded with the lists' times, only while `rate` runs.
    points: Vec<(Timestamp, u64)>,
}

impl ProcessSeries {
    /// Whether its usage changed in the window: one that did not (an
    /// inference server's pool, a monitor) is not judged.
    fn varies(&self) -> bool {
        let first = self.points.first().map(|&(_, used)| used);
        self.points.iter().any(|&(_, used)| Some(used) != first)
    }

    /// Its points from when it is judged on: all of them, but for a
    /// process that joined inside the window, those from
    /// `joined_settle` after its first on.
    fn settled(&self, params: &ForecastParams) -> &[(Timestamp, u64)] {
        let Some(&(first, _)) = self.points.first().filter(|_| self.joined) else {
            return &self.points;
        };
        let from = first.saturating_add(params.joined_settle);
        self.points.get(self.points.partition_point(|&(at, _)| at < from)..).unwrap_or(&[])
    }

    /// Whether any of its usage is taken out of the device's (set by
    /// `rate`): it moved, and does not grow or joined inside the window.
    fn taken_out(&self) -> bool {
        self.moved() && (!self.growing || self.joined)
    }

    /// Whether it changed the device's use in the window: its usage
    /// varied, or it joined (from nothing) inside it.
    fn moved(&self) -> bool {
        self.joined || self.varies()
    }
}

impl ProcessGrowth {
    /// Brings the processes' usage up to date with `device`'s slow tier
    /// over `from..=to`: the samples newer than the last one read, or the
    /// whole window when the last one read has left it.
    pub fn gather(&mut self, device: &DeviceHistory, from: Timestamp, to: Timestamp) {
        // Numbered afresh long before a list number outgrows a series'
        // `u32` (once in 13 years at a 100 ms slow interval): the window is
        // then read again whole.
        let next = self.first_list + self.lists.len() as u64;
        if next > u64::from(u32::MAX) - 4 * MAX_LISTS as u64 {
            *self = Self::default();
        }
        let resume = match self.scanned_to {
            Some(scanned) if scanned >= from => {
                Some(scanned.saturating_add(Duration::from_millis(1)))
            }
            _ => None,
        };
        match resume {
            // What arrived since the last check: a few lists, read under
            // the ring's lock (only copies out).
            Some(resume) if to.duration_since(resume).is_none_or(|span| span <= LOCKED_READ) => {
                device.visit_recent_slow_figures(resume, to, [ProcessFigure::NvmlUsed], |sample| {
                    self.add(sample)
                });
            }
            // The whole window, or the lists since a flat spell: from a
            // snapshot, so the sampler's writes are not held up meanwhile.
            _ => {
                let snapshot = device.slow_snapshot();
                let too_many = snapshot.count_in(from, to) > MAX_LISTS;
                if resume.is_none() || too_many {
                    *self = Self::default();
                }
                if too_many {
                    return;
                }
                // Only the processes' NVML usage is decoded, not whole lists.
                snapshot.visit_figures(
                    resume.unwrap_or(from),
                    to,
                    [ProcessFigure::NvmlUsed],
                    |sample| self.add(sample),
                );
            }
        }
        while self.lists.front().is_some_and(|&(at, _)| at < from) {
            self.lists.pop_front();
            self.first_list += 1;
        }
        let first_list = self.first_list;
        self.series.retain(|entry| entry.listed >= first_list);
        for entry in &mut self.series {
            entry.usage.trim(list_number(first_list));
        }
        // Lists grew denser since the window was counted (a reload of the
        // slow interval): let go, and the next check counts again.
        if self.lists.len() > MAX_LISTS {
            *self = Self::default();
        }
    }

    fn add(&mut self, sample: &FigureSample<'_, 1>) {
        let at = sample.at;
        self.scanned_to = Some(at);
        let Some(processes) = sample.processes else { return };
        let list = self.first_list + self.lists.len() as u64;
        self.lists.push_back((at, sample.capped));
        for (position, process) in processes.iter().enumerate() {
            // Lists keep their order from sample to sample: try the same
            // position first.
            let slot = match self.series.get(position) {
                Some(entry) if entry.pid == process.pid => position,
                _ => match self.series.iter().position(|entry| entry.pid == process.pid) {
                    Some(slot) => slot,
                    None => {
                        let fresh = ProcessSeries {
                            pid: process.pid,
                            since: list,
                            listed: list,
                            ..ProcessSeries::default()
                        };
                        self.series.push(fresh);
                        self.series.len() - 1
                    }
                },
            };
            let Some(entry) = self.series.get_mut(slot) else { continue };
            // Missing from a list in between: perhaps another process
            // under a reused PID, so its series starts afresh.
            if entry.listed + 1 < list {
                entry.usage.clear();
                entry.since = list;
            }
            entry.listed = list;
            if let [Some(used)] = process.values {
                entry.usage.push(list_number(list), used);
            }
        }
    }

    /// Whether the growth of `device` is worth reading process by process
    /// at a check whose device-floor estimate is `floor`: not on a MIG
    /// instance (its process figures are not its own), not with the
    /// reading turned off (a `process_share` above 1), and only where the
    /// floor's line rises at all. Processes that grow lift it, and a device
    /// that holds level (most checks) then costs no reading of its lists.
    pub fn worth_reading(
        device: &DeviceHistory,
        params: &ForecastParams,
        floor: Option<(Trend, bool)>,
    ) -> bool {
        device.info().mig.is_none()
            && params.process_share <= 1.0
            && floor.is_some_and(|(line, _)| line.slope_per_second > 0.0)
    }

    /// The device's growth from its processes' floors, as
    /// [`ForecastParams::trend`] gives it for the device floor (`device`,
    /// the device's trend, supplies the line when no process grows):
    /// `None` where the processes do not account for the device (the
    /// module's rule), so the caller keeps the device-floor forecast.
    /// `used` is the device's used memory over the window, oldest first.
    pub fn rate(
        &mut self,
        params: &ForecastParams,
        scratch: &mut FloorScratch,
        cleaned: &mut Vec<(Timestamp, u64)>,
        used: &[(Timestamp, u64)],
        device: Option<(Trend, bool)>,
    ) -> Option<Option<(Trend, bool)>> {
        if self.lists.iter().any(|&(_, capped)| capped) {
            return None;
        }
        let times: Vec<Timestamp> = self.lists.iter().map(|&(at, _)| at).collect();
        let first = list_number(self.first_list);
        for process in &mut self.series {
            process.usage.points_into(&times, first, &mut self.scratch, &mut process.points);
        }
        let rate = self.rate_decoded(Judging { params, scratch, cleaned, used, device });
        // Released, not kept: the decoded points are what the compact
        // series saves between checks.
        for process in &mut self.series {
            process.points = Vec::new();
        }
        rate
    }

    /// [`ProcessGrowth::rate`] once the points are decoded.
    fn rate_decoded(&mut self, judging: Judging<'_>) -> Option<Option<(Trend, bool)>> {
        let Judging { params, scratch, cleaned, used, device } = judging;
        let &(newest, _) = self.lists.back()?;
        let last_list = self.first_list + self.lists.len() as u64 - 1;
        let first_list = self.first_list;
        let &(window_start, _) = used.first()?;
        let &(device_end, _) = used.last()?;
        // One floor bucket of slack: the process series start with the
        // first list, up to a slow interval after the first fast sample.
        let span = device_end.duration_since(window_start)?;
        let slack = span.div_f64(params.buckets.max(1) as f64);
        let joined_by = window_start.saturating_add(slack);
        for process in &mut self.series {
            process.joined = process.since > first_list
                || process.points.first().is_none_or(|&(first, _)| first > joined_by);
        }
        let latest = || self.series.iter().filter(|s| s.listed == last_list);
        let mut held: u64 = 0;
        for process in latest() {
            // A process the newest list gave no usage for has no point there.
            if process.points.last().is_none_or(|&(at, _)| at != newest) {
                return None;
            }
            held = held.saturating_add(process.points.last().map_or(0, |&(_, used)| used));
        }
        // The device's use when the newest list was read.
        let at_list = used.partition_point(|&(at, _)| at <= newest);
        let &(_, device_used) = used.get(at_list.checked_sub(1)?)?;
        if (held as f64) < params.process_share * device_used as f64 {
            return None;
        }
        // One process whose usage moves beside others that hold still:
        // the device floor is that process's floor, read at the fast
        // tier's rate, so there is nothing to take apart.
        latest().filter(|process| process.moved()).nth(1)?;
        let mut growing = false;
        for process in &mut self.series {
            process.growing = process.listed == last_list
                && process.varies()
                && params
                    .trend(scratch, process.settled(params))
                    .is_some_and(|(trend, sustained)| sustained && trend.slope_per_second > 0.0);
            growing |= process.growing;
        }
        if !growing {
            return Some(device.map(|(line, _)| (line, false)));
        }
        let still = self.series.iter().filter(|s| s.listed == last_list);
        if !still.clone().any(ProcessSeries::taken_out) {
            // Only processes that hold still are left out: the device floor
            // is the growing processes' own, shifted by a constant.
            return Some(device);
        }
        // The device without what does not grow, at the fast tier's rate:
        // each process that does not grow is taken away at the lower of the
        // two lists around a sample, so a chunk taken or freed between them
        // leaves a short rise above the floor, never a dip into it; one
        // that joined inside the window, from nothing before its first
        // list, and where it grows, what it held until it settled.
        cleaned.clear();
        cleaned.extend_from_slice(used);
        for process in still {
            match (process.growing, process.joined) {
                (false, joined) if process.moved() => {
                    subtract_held(cleaned, &process.points, joined)
                }
                (true, true) => subtract_start(cleaned, &process.points, process.settled(params)),
                _ => {}
            }
        }
        Some(params.trend(scratch, cleaned))
    }
}

/// What [`ProcessGrowth::rate`] was handed, passed on once the points are
/// decoded.
struct Judging<'a> {
    params: &'a ForecastParams,
    scratch: &'a mut FloorScratch,
    cleaned: &'a mut Vec<(Timestamp, u64)>,
    used: &'a [(Timestamp, u64)],
    device: Option<(Trend, bool)>,
}

#[cfg(test)]
impl ProcessGrowth {
    /// Bytes its series hold between checks: sealed chunks, open runs
    /// (16 bytes each) and decoded points (none once a check is over).
    fn stored_bytes(&self) -> usize {
        let point = std::mem::size_of::<(Timestamp, u64)>();
        self.series
            .iter()
            .map(|process| {
                let (sealed, open) = process.usage.footprint();
                sealed + 16 * open + point * process.points.capacity()
            })
            .sum()
    }

    fn points(&self) -> usize {
        let times: Vec<Timestamp> = self.lists.iter().map(|&(at, _)| at).collect();
        let mut scratch = DecodeScratch::default();
        let mut points = Vec::new();
        let first = list_number(self.first_list);
        self.series
            .iter()
            .map(|process| {
                process.usage.points_into(&times, first, &mut scratch, &mut points);
                points.len()
            })
            .sum()
    }
}

/// A list's number in a process's series; `gather` numbers lists afresh
/// before they outgrow it.
fn list_number(list: u64) -> u32 {
    u32::try_from(list).unwrap_or(u32::MAX)
}

/// Takes from each point of `series` what `lists` (a process's usage,
/// oldest first) held around it: the lower of the newest list at or before
/// the point and the next one. Before the first list a process that
/// `joined` inside the window held nothing; one there all along held what
/// the first list says.
fn subtract_held(series: &mut [(Timestamp, u64)], lists: &[(Timestamp, u64)], joined: bool) {
    let mut next = 0;
    for (at, value) in series.iter_mut() {
        while lists.get(next).is_some_and(|&(listed, _)| listed <= *at) {
            next += 1;
        }
        let before = next.checked_sub(1).and_then(|index| lists.get(index));
        let after = lists.get(next);
        let held = match (before, after) {
            (Some(&(_, before)), Some(&(_, after))) => before.min(after),
            (Some(&(_, only)), None) => only,
            (None, Some(&(_, only))) => {
                if joined {
                    0
                } else {
                    only
                }
            }
            (None, None) => 0,
        };
        *value = value.saturating_sub(held);
    }
}

/// Takes from `series` what a growing process that joined inside the
/// window held until it settled (`settled`: its lists from then on): the
/// device keeps its growth since, not the step it joined with nor the
/// warm-up after it.
fn subtract_start(
    series: &mut [(Timestamp, u64)],
    lists: &[(Timestamp, u64)],
    settled: &[(Timestamp, u64)],
) {
    let Some(&(settled_at, start)) = settled.first() else { return };
    let split = series.partition_point(|&(at, _)| at < settled_at);
    let (before, after) = series.split_at_mut(split);
    subtract_held(before, lists, true);
    for (_, value) in after {
        *value = value.saturating_sub(start);
    }
}

#[cfg(test)]
mod tests;
