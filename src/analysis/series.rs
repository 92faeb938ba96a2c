//! Time series pulled out of history snapshots for the analyzer.
//!
//! Owns: turning a `Snapshot` window into `(Timestamp, value)` pairs (device
//! used), gathering every process's allocator and NVML figures of a window
//! in one pass, and the step of a monotonic counter across restarts.
//! Depends on: `model`, `history` (read-only snapshots). No I/O, no clocks:
//! windows are bounded by sample timestamps the caller passes.
//!
//! A sample that lacks a value contributes no point: absent is left out,
//! never read as zero, so a failed read cannot look like a drop to 0 bytes.

use std::collections::VecDeque;

use crate::history::{FastPoint, FigureRow, FigureSample, ProcessFigure, SlowPoint, Snapshot};
use crate::model::Timestamp;

use figure::{DecodeScratch, FigureSeries};

pub(crate) mod figure;

/// Which per-process figure a series follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ProcessMetric {
    /// `allocated_bytes.all.current`: live tensors.
    AllocatorAllocated,
    /// What NVML attributes to the process.
    NvmlUsed,
}

impl ProcessMetric {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Device `used` bytes for samples with `from <= at <= to`, oldest first,
/// into a caller's buffer (cleared first), so a periodic analysis pass can
/// reuse one allocation.
pub fn device_used_into(
    snapshot: &Snapshot<FastPoint>,
    from: Timestamp,
    to: Timestamp,
    out: &mut Vec<(Timestamp, u64)>,
) {
    out.clear();
    // Slice by slice, room made once per slice: this copies the whole trend
    // window (7 200 points at 4 Hz) at every trend check, and growing the
    // buffer point by point through the ring's chained iterator cost more
    // than the copy.
    for slice in snapshot.range_slices(from, to) {
        out.reserve(slice.len());
        for point in slice {
            if let Some(used) = point.used_bytes() {
                out.push((point.at(), used));
            }
        }
    }
}

/// Device `used` over the trend window, kept between trend checks: each
/// check reads only the samples that arrived since the previous one and
/// drops those that left the window. Copying the whole window (7 200
/// points at 4 Hz) at every check was the largest part of an offline
/// replay's trend work. The points are always exactly those of
/// [`device_used_into`] over the same window; where that cannot be known
/// (the window grew, time went back, the ring no longer reaches back to
/// the window's start, or no longer holds the newest point kept), the
/// window is read whole again.
#[derive(Clone, Debug, Default)]
pub struct UsedWindow {
    /// Oldest first; those before `start` have left the window.
    points: Vec<(Timestamp, u64)>,
    start: usize,
    /// The start of the window last read.
    from: Option<Timestamp>,
}

impl UsedWindow {
    /// The window's points, oldest first.
    pub fn points(&self) -> &[(Timestamp, u64)] {
        self.points.get(self.start..).unwrap_or(&[])
    }

    /// Moves the window to `from <= at <= to` of `snapshot`.
    pub fn slide(&mut self, snapshot: &Snapshot<FastPoint>, from: Timestamp, to: Timestamp) {
        // Samples older than the ring's oldest were dropped from it: where
        // the ring still reaches before `from`, none of the window's were.
        let reaches_back = snapshot
            .range(Timestamp::EARLIEST, Timestamp::LATEST)
            .next()
            .is_some_and(|oldest| oldest.at() < from);
        let resume = self.points().last().map(|&(at, _)| at).filter(|&newest| {
            reaches_back
                && newest <= to
                && self.from.is_some_and(|previous| previous <= from)
                && snapshot.count_in(newest, newest) > 0
        });
        self.from = Some(from);
        let Some(newest) = resume else {
            self.start = 0;
            device_used_into(snapshot, from, to, &mut self.points);
            return;
        };
        // History takes no sample older than its newest, so what arrived
        // since is at or after the newest point kept; samples at that very
        // time are read again, in case more came at it.
        let kept = self.points.partition_point(|&(at, _)| at < newest);
        self.points.truncate(kept);
        for slice in snapshot.range_slices(newest, to) {
            self.points.reserve(slice.len());
            self.points.extend(
                slice.iter().filter_map(|point| point.used_bytes().map(|used| (point.at(), used))),
            );
        }
        let start = self.points.partition_point(|&(at, _)| at < from);
        // Moved down once half the buffer has left the window: a copy per
        // half window, not per check.
        if start > self.points.len() / 2 {
            self.points.drain(..start);
            self.start = 0;
        } else {
            self.start = start;
        }
    }
}

/// The figures the leak windows keep of each process, in
/// [`FigureRow::values`] order: allocator `allocated` (present exactly
/// when the sample has allocator statistics) and NVML usage.
pub const LEAK_FIGURES: [ProcessFigure; 2] =
    [ProcessFigure::AllocatedFloor, ProcessFigure::NvmlUsed];

/// Every process's leak figures over a sliding window, kept between
/// passes: each pass appends only the slow-tier samples that arrived since
/// the previous one and drops those that left the window, rather than
/// re-reading the whole window per process. Per process both figures are
/// kept, allocator `allocated` and NVML usage, because which one a leak
/// follows depends on the whole window ([`PidSeries::preferred`]).
///
/// Stored compactly because this is most of what 8 GPUs × 64 processes
/// cost: a sample's time is kept once for every process in it, and a
/// process's figure as runs of one value over consecutive samples (the
/// common case: the same size sample after sample, or between two
/// allocator reports), older runs sealed into encoded chunks (`figure`):
/// a figure that moves on every sample costs a few bytes a sample, not the
/// 16 of a point. The detector reads plain points, rebuilt per process by
/// [`ProcessWindows::visit_processes`].
#[derive(Debug, Default)]
pub struct ProcessWindows {
    /// The newest sample added.
    scanned_to: Option<Timestamp>,
    /// The time of every sample in the window, oldest first.
    times: VecDeque<Timestamp>,
    /// The sequence number of `times[0]`; samples are numbered as added.
    first_seq: u32,
    /// A handful of PIDs per device: a linear search beats hashing.
    pids: Vec<PidRuns>,
    /// The sequence number of the newest sample whose process list was
    /// read whole (not cut by the process cap): a process it left out had
    /// exited.
    last_whole_list: Option<u32>,
    scratch: DecodeScratch,
}

/// One process's figures in the window, oldest first; a sample that did
/// not report a figure adds no point to it.
#[derive(Debug, Default)]
pub struct PidSeries {
    pub pid: u32,
    /// When the process was first listed in its current life (a PID left
    /// out of a whole list starts a new one), however long ago: its age,
    /// which the window's own first sample cannot tell.
    pub since: Option<Timestamp>,
    allocated: Vec<(Timestamp, u64)>,
    used: Vec<(Timestamp, u64)>,
}

impl PidSeries {
    /// The figure a leak follows, and its series: allocator `allocated`
    /// when any sample reports allocator statistics (NVML usage includes a
    /// cache that grows and stays by design), NVML usage when any reports
    /// that, `None` when neither is known.
    pub fn preferred(&self) -> Option<(ProcessMetric, &[(Timestamp, u64)])> {
        if !self.allocated.is_empty() {
            Some((ProcessMetric::AllocatorAllocated, &self.allocated))
        } else if !self.used.is_empty() {
            Some((ProcessMetric::NvmlUsed, &self.used))
        } else {
            None
        }
    }
}

/// [`PidSeries`] as stored: runs and chunks instead of points.
#[derive(Debug, Default)]
struct PidRuns {
    pid: u32,
    /// When its current life was first listed (kept as the window slides).
    since: Option<Timestamp>,
    /// The sequence number of the newest sample that listed the process.
    listed: u32,
    allocated: FigureSeries,
    used: FigureSeries,
}

impl ProcessWindows {
    /// Where the samples to add next begin: just after the newest one
    /// added, or `from` for a window never filled (or left behind).
    pub fn resume_at(&self, from: Timestamp) -> Timestamp {
        self.scanned_to
            .map_or(from, |scanned| scanned.saturating_add(std::time::Duration::from_millis(1)))
            .max(from)
    }

    /// Adds one slow-tier sample newer than every one added before. A
    /// sample whose process list could not be read adds nothing.
    pub fn add(&mut self, sample: &SlowPoint) {
        let rows: Option<Vec<FigureRow<2>>> = sample.processes().map(|list| {
            let row = |process| LEAK_FIGURES.map(|figure: ProcessFigure| figure.of(process));
            list.iter()
                .map(|process| FigureRow { pid: process.pid, values: row(process) })
                .collect()
        });
        self.add_figures(&FigureSample {
            at: sample.at(),
            capped: sample.capped(),
            processes: rows.as_deref(),
        });
    }

    /// [`ProcessWindows::add`] for a sample read with
    /// [`LEAK_FIGURES`], which is how the analyzer reads them: a first
    /// fill of the window then decodes only those two figures of the
    /// stored samples.
    pub fn add_figures(&mut self, sample: &FigureSample<'_, 2>) {
        let at = sample.at;
        let next =
            u32::try_from(self.times.len()).ok().and_then(|len| self.first_seq.checked_add(len));
        let Some(seq) = next else {
            // Sequence numbers ran out (4·10⁹ samples, years at the
            // fastest slow tier): start the window afresh rather than wrap.
            *self = Self::default();
            return self.add_figures(sample);
        };
        self.scanned_to = Some(self.scanned_to.map_or(at, |scanned| scanned.max(at)));
        let Some(processes) = sample.processes else { return };
        let whole_before = self.last_whole_list;
        if !sample.capped {
            self.last_whole_list = Some(seq);
        }
        self.times.push_back(at);
        for (position, process) in processes.iter().enumerate() {
            // Lists mostly keep their order from sample to sample: the same
            // position first, rather than a search per process.
            let found = match self.pids.get(position) {
                Some(entry) if entry.pid == process.pid => Some(position),
                _ => self.pids.iter().position(|entry| entry.pid == process.pid),
            };
            let slot = match found {
                Some(slot) => slot,
                None => {
                    let fresh = PidRuns {
                        pid: process.pid,
                        since: Some(at),
                        listed: seq,
                        ..PidRuns::default()
                    };
                    self.pids.push(fresh);
                    self.pids.len() - 1
                }
            };
            let Some(entry) = self.pids.get_mut(slot) else { continue };
            // Left out of a whole process list read in between: the
            // process exited and its PID was given to a new one (or it is
            // the same job back after a restart). Its figures start
            // afresh, so no slope spans the two lives' baselines and the
            // new life gets its own warm-up grace. A gap in sampling (no
            // list read at all) numbers no sample, so a process seen
            // across a daemon restart keeps its series; and a list the
            // process cap cut is no evidence (a process near the cap
            // drops in and out of it while it runs).
            if whole_before.is_some_and(|whole| entry.listed < whole) {
                entry.allocated.clear();
                entry.used.clear();
                entry.since = Some(at);
            }
            entry.listed = seq;
            // While a process has allocator points the leak follows them
            // (`preferred`), so its NVML series would never be read: not
            // keeping it halves what a reporting process costs (two series
            // of one window each, 512 of them at 8 × 64).
            let [allocated, used] = process.values;
            if let Some(allocated) = allocated {
                if entry.allocated.is_empty() {
                    entry.used.clear();
                }
                // `LEAK_FIGURES` reads the interval's lowest `allocated`
                // where the reporter sends it: a step as long as the
                // sampling period, seen at one phase, would otherwise set
                // the floor by luck.
                entry.allocated.push(seq, allocated);
            } else if entry.allocated.is_empty()
                && let Some(used) = used
            {
                entry.used.push(seq, used);
            }
        }
    }

    /// Drops the points older than `from`, and the processes left with
    /// none: what is kept stays bounded by one window.
    pub fn trim(&mut self, from: Timestamp) {
        let old = self.times.partition_point(|&at| at < from);
        self.times.drain(..old);
        // `old` is at most the number of samples numbered, which fit u32.
        self.first_seq = self.first_seq.saturating_add(u32::try_from(old).unwrap_or(u32::MAX));
        for entry in &mut self.pids {
            entry.allocated.trim(self.first_seq);
            entry.used.trim(self.first_seq);
        }
        self.pids.retain(|entry| !(entry.allocated.is_empty() && entry.used.is_empty()));
    }

    /// The processes with a figure in the window, in the order first seen,
    /// each rebuilt as fresh points: the straightforward rebuild, kept as
    /// the tests' oracle for [`ProcessWindows::visit_processes`], which the
    /// analyzer uses.
    #[cfg(test)]
    pub fn processes(&self) -> impl Iterator<Item = PidSeries> + '_ {
        let times: Vec<Timestamp> = self.times.iter().copied().collect();
        self.pids.iter().map(move |entry| {
            let mut scratch = DecodeScratch::default();
            let mut series =
                PidSeries { pid: entry.pid, since: entry.since, ..PidSeries::default() };
            entry.allocated.points_into(
                &times,
                self.first_seq,
                &mut scratch,
                &mut series.allocated,
            );
            entry.used.points_into(&times, self.first_seq, &mut scratch, &mut series.used);
            series
        })
    }

    /// [`ProcessWindows::processes`] rebuilt into one caller's buffer,
    /// process after process, for `visit`.
    ///
    /// Why a buffer: every leak check reads every process's window, and
    /// allocating a fresh series per process and check (a whole window of
    /// points each time) was most of what the compact runs cost an offline
    /// run. The buffer holds one process's window at most, as `processes`
    /// does at a time.
    pub fn visit_processes(&mut self, buffer: &mut PidSeries, mut visit: impl FnMut(&PidSeries)) {
        // One slice of times for every run: a run is often a single sample
        // (a figure that changes every second), and walking the ring's two
        // halves run by run cost more than copying the points.
        let times: &[Timestamp] = self.times.make_contiguous();
        let scratch = &mut self.scratch;
        for entry in &self.pids {
            buffer.pid = entry.pid;
            buffer.since = entry.since;
            entry.allocated.points_into(times, self.first_seq, scratch, &mut buffer.allocated);
            entry.used.points_into(times, self.first_seq, scratch, &mut buffer.used);
            visit(buffer);
        }
    }
}

/// What a monotonic counter gained from `previous` to `current`; a drop
/// means the process restarted its counters, so the new value counts in full.
pub fn counter_step(previous: u64, current: u64) -> u64 {
    if current >= previous { current - previous } else { current }
}

#[cfg(test)]
mod tests;
