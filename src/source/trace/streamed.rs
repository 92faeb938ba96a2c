//! The daemon's replay of a recorded trace (`vramd --replay`), streamed:
//! the file is checked once at start-up, then read again on a thread of its
//! own that hands each record to a bounded queue per lane (see `queues`),
//! so memory is bounded by `source.replay_queue_records`, not by the trace.
//!
//! Owns: [`StreamedReplay`] (a [`DeviceSource`] and [`Prober`]),
//! [`ReplayOptions`] and [`OomFeed`]. Depends only on `model` and `source`;
//! knows nothing of history, sampler or HTTP.
//!
//! Each `read_fast(i)` returns the next fast record of device `i` in file
//! order (a recorded error as the `Err` it was), whatever the time between
//! calls, as the whole-trace [`Replay`](super::Replay) does: a replay
//! reproduces the recorded sequence exactly; pacing is the sampler's
//! business and timestamps come from the records.
//!
//! The check at start-up is a full reading of the file that keeps nothing
//! but how many records each lane has (so a lane is known to be at its end
//! when its last record is handed out, not only once the file is read to
//! its end, as a device lost part-way needs): a bad line still stops
//! the daemon before it serves, naming the line, as it did when the whole
//! trace was loaded. The streaming reading can then fail only if the file
//! changes or cannot be read part-way; that is logged once and every
//! later read of a lane it fed answers `Unavailable`, as a driver that went
//! away would (see docs/trace-format.md).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::error::TraceError;
use super::feeders::{LaneKey, Shared, feed_main, start_own};
use super::format::{TraceHeader, TraceRecord};
use super::queues::{Feeder, Queues, Taken};
use super::reader::{RecordCheck, TraceLines};
use crate::model::{
    DeviceInfo, FastReading, OomEvent, ProbeFailure, ProbeFailureKind, ProbeReading, SlowReading,
};
use crate::source::probe::{ProbeRequest, Prober};
use crate::source::{DeviceSource, SourceError, Tier};

/// How a trace is replayed by the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// `source.max_trace_line`.
    pub max_line_bytes: usize,
    /// `source.max_trace_size`.
    pub max_file_bytes: u64,
    /// `source.replay_queue_records`: records read ahead per lane.
    pub queue_records: usize,
    /// Whether probe outcomes are handed out (`probe.enabled`); when not,
    /// they are read past rather than queued for nobody.
    pub answer_probes: bool,
    /// `sampler.max_devices`: the sampler keeps the first this many devices
    /// the header lists; the others' records are read past, not queued.
    pub max_devices: usize,
}

/// A trace replayed as a [`DeviceSource`], read as the sampler asks.
pub struct StreamedReplay {
    header: TraceHeader,
    has_probe_records: bool,
    shared: Arc<Shared>,
}

impl StreamedReplay {
    /// Checks the whole trace at `path` (any problem is an error naming the
    /// line, so a bad trace stops the daemon at start-up), then starts the
    /// thread that streams it.
    pub fn open(path: &Path, options: ReplayOptions) -> Result<StreamedReplay, TraceError> {
        let survey = survey(path, &options)?;
        let mut keys = Vec::new();
        for device in survey.header.devices.iter().take(options.max_devices) {
            keys.push(LaneKey::Tier(device.index, Tier::Fast));
            keys.push(LaneKey::Tier(device.index, Tier::Slow));
            if options.answer_probes {
                keys.push(LaneKey::Probe(device.index));
            }
        }
        let count = |key: &LaneKey| survey.counts.get(key).copied().unwrap_or(0);
        if count(&LaneKey::Oom) > 0 {
            keys.push(LaneKey::Oom);
        }
        // A probe is answered with the device's next outcome whenever it is
        // asked, wherever the replay is in the file, so its lane is read on
        // its own from the start rather than made to wait on the others.
        let feeder = |key: &LaneKey| match key {
            LaneKey::Probe(_) => Feeder::Own,
            LaneKey::Tier(..) | LaneKey::Oom => Feeder::Main,
        };
        let totals: Vec<_> = keys.iter().map(|key| (count(key), feeder(key))).collect();
        let has_probe_records = survey.counts.keys().any(|key| matches!(key, LaneKey::Probe(_)));
        let lanes: HashMap<_, _> =
            keys.into_iter().enumerate().map(|(at, key)| (key, at)).collect();
        let queues = Queues::new(&totals, options.queue_records);
        let shared = Arc::new(Shared { path: path.to_owned(), options, lanes, queues });
        let mut lines = TraceLines::open(path, options.max_line_bytes, options.max_file_bytes)?;
        let header = lines.header()?;
        let past_header = lines.position();
        let check = RecordCheck::new(&header);
        let feeding = shared.clone();
        std::thread::Builder::new()
            .name("vramd-replay-read".to_owned())
            .spawn(move || feed_main(lines, check, &feeding))
            .map_err(|source| TraceError::Thread { path: path.display().to_string(), source })?;
        for (&key, &lane) in &shared.lanes {
            if feeder(&key) == Feeder::Own {
                start_own(&shared, lane, None, past_header);
            }
        }
        Ok(StreamedReplay { header, has_probe_records, shared })
    }

    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// Whether the trace holds any probe record (recorded with the CUDA
    /// probe on); only then does the replay answer the probe.
    pub fn has_probe_records(&self) -> bool {
        self.has_probe_records
    }

    /// The trace's OOM events in file order, or `None` when it has none.
    pub fn oom_feed(&self) -> Option<OomFeed> {
        let lane = *self.shared.lanes.get(&LaneKey::Oom)?;
        Some(OomFeed { shared: self.shared.clone(), lane })
    }

    /// Records read ahead of the sampler now, over every queue.
    pub fn buffered_records(&self) -> usize {
        self.shared.queues.buffered()
    }

    /// The most records ever read ahead at once, over every queue: at most
    /// `queue_records` per lane, whatever the trace's length.
    pub fn peak_buffered_records(&self) -> usize {
        self.shared.queues.peak_buffered()
    }

    #[cfg(test)]
    pub(super) fn queues(&self) -> &Queues {
        &self.shared.queues
    }

    #[cfg(test)]
    pub(super) fn lane_count(&self) -> usize {
        self.shared.lanes.len()
    }

    #[cfg(test)]
    pub(super) fn lane(&self, index: u32, tier: Tier) -> Option<usize> {
        self.shared.lanes.get(&LaneKey::Tier(index, tier)).copied()
    }

    /// The next record of `key`'s lane; `Ok(None)` once it is used up,
    /// `Err(reason)` when reading the trace failed before its end.
    fn take(&self, key: LaneKey) -> Result<Option<TraceRecord>, String> {
        let Some(&lane) = self.shared.lanes.get(&key) else { return Ok(None) };
        match self.shared.queues.take(lane) {
            Taken::Record(record) => Ok(Some(record)),
            Taken::Failed(reason) => Err(reason),
            Taken::Ended | Taken::NotYet => Ok(None),
        }
    }

    fn take_tier(&self, index: u32, tier: Tier) -> Result<Option<TraceRecord>, SourceError> {
        if !self.shared.lanes.contains_key(&LaneKey::Tier(index, tier)) {
            return Err(SourceError::UnknownDevice { index });
        }
        self.take(LaneKey::Tier(index, tier)).map_err(|reason| SourceError::Unavailable {
            reason: format!("the replayed trace could not be read further: {reason}"),
        })
    }
}

impl Drop for StreamedReplay {
    fn drop(&mut self) {
        self.shared.queues.close();
    }
}

impl std::fmt::Debug for StreamedReplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamedReplay").field("path", &self.shared.path).finish_non_exhaustive()
    }
}

impl DeviceSource for StreamedReplay {
    fn name(&self) -> &'static str {
        "replay"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        Ok(self.header.devices.clone())
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        fast_answer(self.take_tier(index, Tier::Fast)?, index)
    }

    fn read_slow(&self, index: u32, max_processes: usize) -> Result<SlowReading, SourceError> {
        slow_answer(self.take_tier(index, Tier::Slow)?, index, max_processes)
    }
}

/// Hands out each device's recorded probe outcomes in file order, one per
/// call, as the scheduler asks (the recording's skips are decided again).
impl Prober for StreamedReplay {
    fn name(&self) -> &'static str {
        "replay"
    }

    fn probe(
        &self,
        device: &DeviceInfo,
        _request: &ProbeRequest,
    ) -> Result<ProbeReading, ProbeFailure> {
        match self.take(LaneKey::Probe(device.index)) {
            Ok(record) => probe_answer(record, device.index),
            Err(reason) => Err(ProbeFailure::new(
                ProbeFailureKind::TraceEnded,
                format!("the replayed trace could not be read further: {reason}"),
            )),
        }
    }
}

/// The answer to a fast read given the lane's next record (`None`: ended).
pub(super) fn fast_answer(
    record: Option<TraceRecord>,
    index: u32,
) -> Result<FastReading, SourceError> {
    match record {
        Some(TraceRecord::Fast { reading, .. }) => Ok(reading),
        Some(TraceRecord::Error { error, .. }) => Err(error),
        // Lanes hold only their own tier, so this is the end of the lane.
        _ => Err(SourceError::TraceEnded { index, tier: Tier::Fast }),
    }
}

/// The answer to a slow read. The cap is applied again: a trace recorded
/// under a higher cap (or before the source cut) replays as the sampler
/// would keep it.
pub(super) fn slow_answer(
    record: Option<TraceRecord>,
    index: u32,
    max_processes: usize,
) -> Result<SlowReading, SourceError> {
    match record {
        Some(TraceRecord::Slow { reading, .. }) => {
            let mut reading = *reading;
            reading.cap_processes(max_processes);
            Ok(reading)
        }
        Some(TraceRecord::Error { error, .. }) => Err(error),
        _ => Err(SourceError::TraceEnded { index, tier: Tier::Slow }),
    }
}

/// The answer to a probe given the device's next probe record.
pub(super) fn probe_answer(
    record: Option<TraceRecord>,
    index: u32,
) -> Result<ProbeReading, ProbeFailure> {
    match record {
        Some(TraceRecord::Probe { outcome, .. }) => outcome.map(|reading| *reading),
        _ => Err(ProbeFailure::new(
            ProbeFailureKind::TraceEnded,
            format!("the replayed trace has no more probe records for device {index}"),
        )),
    }
}

/// A replayed trace's OOM events, handed out in file order as the reading
/// thread reaches them, without waiting (the caller polls).
pub struct OomFeed {
    shared: Arc<Shared>,
    lane: usize,
}

/// The next OOM event, if the reading has reached one.
#[derive(Debug, PartialEq)]
pub enum NextOom {
    /// The device index and the event, boxed as the trace keeps it.
    Event(u32, Box<OomEvent>),
    NotYet,
    Ended,
}

impl OomFeed {
    pub fn try_next(&self) -> NextOom {
        loop {
            return match self.shared.queues.try_take(self.lane) {
                Taken::Record(TraceRecord::Oom { device, event }) => NextOom::Event(device, event),
                // Only OOM events are queued here.
                Taken::Record(_) => continue,
                Taken::NotYet => NextOom::NotYet,
                Taken::Ended | Taken::Failed(_) => NextOom::Ended,
            };
        }
    }
}

/// What the check at start-up found besides the header: how many records
/// each lane has (one count per lane, whatever the trace's length).
struct Survey {
    header: TraceHeader,
    counts: HashMap<LaneKey, u64>,
}

/// Reads and checks the whole file, keeping nothing of its records.
fn survey(path: &Path, options: &ReplayOptions) -> Result<Survey, TraceError> {
    let mut lines = TraceLines::open(path, options.max_line_bytes, options.max_file_bytes)?;
    let header = lines.header()?;
    let mut check = RecordCheck::new(&header);
    let mut counts = HashMap::new();
    while let Some(record) = lines.next_record()? {
        check.check(&record).map_err(|reason| lines.in_line(reason))?;
        let count: &mut u64 = counts.entry(LaneKey::of(&record)).or_default();
        *count = count.saturating_add(1);
    }
    Ok(Survey { header, counts })
}
