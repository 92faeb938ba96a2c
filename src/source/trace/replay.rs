//! A recorded trace loaded whole, for the offline tools and tests that want
//! every record at once (`vramd play`, a trace's records compared); the
//! daemon's `--replay` streams instead ([`StreamedReplay`](super::StreamedReplay)).
//!
//! Owns: [`Replay`]: loading and validating a whole trace up front, and
//! handing out its records one per call, with the same answers as the
//! streamed replay. Depends only on `model` and `source`; knows nothing of
//! history, sampler or HTTP.
//!
//! Each `read_fast(i)` returns the next fast record of device `i` in file
//! order (a recorded error as the `Err` it was), whatever the time between
//! calls, so a replay reproduces the recorded sequence exactly; pacing is the
//! sampler's business and timestamps come from the records.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::error::{LineError, TraceError};
use super::format::{TraceHeader, TraceRecord};
use super::reader::{RecordCheck, TraceLines};
use super::streamed::{fast_answer, probe_answer, slow_answer};
use crate::model::{DeviceInfo, FastReading, OomEvent, ProbeFailure, ProbeReading, SlowReading};
use crate::source::probe::{ProbeRequest, Prober};
use crate::source::{DeviceSource, SourceError, Tier};

/// A trace loaded into memory, read back as a [`DeviceSource`].
#[derive(Debug)]
pub struct Replay {
    header: TraceHeader,
    /// Parsed records in file order (not the lines: a parsed reading is
    /// several times smaller than its JSON).
    records: Vec<TraceRecord>,
    /// Per device listed in the header and tier (`None`: probe outcomes).
    lanes: HashMap<(u32, Option<Tier>), Lane>,
    /// Positions of the OOM event records, in file order.
    ooms: Vec<u32>,
}

/// The records of one (device, tier), as positions into `records`, and the
/// cursor of the next one to hand out. `u32` positions halve the index.
#[derive(Debug, Default)]
struct Lane {
    positions: Vec<u32>,
    next: AtomicUsize,
}

impl Replay {
    /// [`Replay::open_bounded`] without a size limit, for tests.
    #[cfg(test)]
    pub fn open(path: &Path, max_line_bytes: usize) -> Result<Replay, TraceError> {
        Self::open_bounded(path, max_line_bytes, u64::MAX)
    }

    /// Reads and validates the whole trace at `path`; no line may be longer
    /// than `max_line_bytes` (its newline not counted) and the file no
    /// larger than `max_file_bytes` (`source.max_trace_size`): all its
    /// records are held in memory. The size is checked before reading and
    /// again as lines are read, in case the file grows meanwhile. Any
    /// problem is an error naming the line, so a bad trace stops the daemon
    /// at start-up.
    pub fn open_bounded(
        path: &Path,
        max_line_bytes: usize,
        max_file_bytes: u64,
    ) -> Result<Replay, TraceError> {
        let mut lines = TraceLines::open(path, max_line_bytes, max_file_bytes)?;
        let header = lines.header()?;
        let mut check = RecordCheck::new(&header);
        let mut loader = Loader::new(header);
        while let Some(record) = lines.next_record()? {
            check.check(&record).map_err(|reason| lines.in_line(reason))?;
            loader.accept(record).map_err(|reason| lines.in_line(reason))?;
        }
        Ok(loader.finish())
    }

    /// The trace's header line.
    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// Every record, in file order, independent of the replay cursors.
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// The next record of `device`'s `lane`, advancing its cursor; `None`
    /// once it is exhausted (the cursor then stays put rather than counting
    /// on), `Err` for a device the header does not list.
    fn take(&self, index: u32, lane: Option<Tier>) -> Result<Option<&TraceRecord>, SourceError> {
        let lane = self.lanes.get(&(index, lane)).ok_or(SourceError::UnknownDevice { index })?;
        let len = lane.positions.len();
        let slot = lane
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < len).then_some(n + 1));
        let position = slot.ok().and_then(|slot| lane.positions.get(slot));
        Ok(position.and_then(|&position| self.records.get(usize::try_from(position).ok()?)))
    }

    /// Every recorded OOM event with its device index, in file order.
    pub fn oom_events(&self) -> Vec<(u32, OomEvent)> {
        self.ooms
            .iter()
            .filter_map(|&position| match self.records.get(usize::try_from(position).ok()?) {
                Some(TraceRecord::Oom { device, event }) => Some((*device, event.as_ref().clone())),
                _ => None,
            })
            .collect()
    }

    /// Whether the trace holds any probe record (recorded with the CUDA
    /// probe on); only then does the replay answer the probe.
    pub fn has_probe_records(&self) -> bool {
        self.lanes.iter().any(|((_, tier), lane)| tier.is_none() && !lane.positions.is_empty())
    }
}

impl DeviceSource for Replay {
    fn name(&self) -> &'static str {
        "replay"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        Ok(self.header.devices.clone())
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        fast_answer(self.take(index, Some(Tier::Fast))?.cloned(), index)
    }

    fn read_slow(&self, index: u32, max_processes: usize) -> Result<SlowReading, SourceError> {
        slow_answer(self.take(index, Some(Tier::Slow))?.cloned(), index, max_processes)
    }
}

/// Hands out each device's recorded probe outcomes in file order, one per
/// call, as the scheduler asks (the recording's skips are decided again).
impl Prober for Replay {
    fn name(&self) -> &'static str {
        "replay"
    }

    fn probe(
        &self,
        device: &DeviceInfo,
        _request: &ProbeRequest,
    ) -> Result<ProbeReading, ProbeFailure> {
        probe_answer(self.take(device.index, None).ok().flatten().cloned(), device.index)
    }
}

/// The trace while its file is read, its records checked already.
struct Loader(Replay);

impl Loader {
    fn new(header: TraceHeader) -> Self {
        let tiers = [Some(Tier::Fast), Some(Tier::Slow), None];
        let lanes = header
            .devices
            .iter()
            .flat_map(|device| tiers.map(|tier| ((device.index, tier), Lane::default())))
            .collect();
        Loader(Replay { header, records: Vec::new(), lanes, ooms: Vec::new() })
    }

    fn accept(&mut self, record: TraceRecord) -> Result<(), LineError> {
        let replay = &mut self.0;
        let (device, tier) = (record.device(), record.tier());
        let position = u32::try_from(replay.records.len())
            .map_err(|_| LineError::TooManyRecords { max: u64::from(u32::MAX) })?;
        let positions = if let TraceRecord::Oom { .. } = record {
            // No lane: events are handed out by `oom_events`, not one per
            // call.
            &mut replay.ooms
        } else {
            let lane = replay
                .lanes
                .get_mut(&(device, tier))
                .ok_or(LineError::UnknownDevice { index: device })?;
            &mut lane.positions
        };
        positions.push(position);
        replay.records.push(record);
        Ok(())
    }

    fn finish(self) -> Replay {
        let mut replay = self.0;
        replay.records.shrink_to_fit();
        replay.lanes.values_mut().for_each(|lane| lane.positions.shrink_to_fit());
        replay
    }
}
