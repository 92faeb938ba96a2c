//! The threads that read a replayed trace for the daemon's
//! [`StreamedReplay`](super::StreamedReplay): the main feeder, which reads
//! the whole file once and pushes each record onto its lane's queue, and a
//! lane's own feeder, which reads on by itself from where the lane was
//! detached (or, for a device's probe outcomes, from the start), passing
//! over other lanes' lines unparsed.
//!
//! Owns: [`LaneKey`] (which queue a record goes to), [`Shared`] (the file,
//! its lanes, their queues) and the feeders. Depends only on the trace's
//! own types; knows nothing of history, sampler or HTTP.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use tracing::{error, info};

use super::error::TraceError;
use super::format::TraceRecord;
use super::queues::{Feeder, Pushed, Queues};
use super::reader::{RecordCheck, TraceLines};
use super::streamed::ReplayOptions;
use crate::source::Tier;

/// Which queue a record goes to: one per device and tier, one per device
/// for probe outcomes, one for every OOM event (handed out in file order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum LaneKey {
    Tier(u32, Tier),
    Probe(u32),
    Oom,
}

impl LaneKey {
    pub fn of(record: &TraceRecord) -> LaneKey {
        let device = record.device();
        match record {
            TraceRecord::Fast { .. } => LaneKey::Tier(device, Tier::Fast),
            TraceRecord::Slow { .. } => LaneKey::Tier(device, Tier::Slow),
            TraceRecord::Error { tier, .. } => LaneKey::Tier(device, *tier),
            TraceRecord::Probe { .. } => LaneKey::Probe(device),
            TraceRecord::Oom { .. } => LaneKey::Oom,
        }
    }
}

/// What the reading threads share: the file, its lanes and their queues.
pub(super) struct Shared {
    pub path: PathBuf,
    pub options: ReplayOptions,
    pub lanes: HashMap<LaneKey, usize>,
    pub queues: Queues,
}

impl Shared {
    pub fn lane_of(&self, record: &TraceRecord) -> Option<usize> {
        self.lanes.get(&LaneKey::of(record)).copied()
    }
}

/// Ends the lanes a reading thread feeds as failed if it stops without
/// ending them (it panicked), so no reader waits for it forever.
struct EndOnDrop<'a> {
    shared: &'a Shared,
    feeder: Feeder,
    lane: Option<usize>,
}

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        let reason = "the thread reading the trace stopped before its end";
        self.shared.queues.end(self.feeder, self.lane, Some(reason));
    }
}

/// The main reading thread: every record, checked, onto its lane's queue;
/// a lane detached on the way gets a thread of its own.
pub(super) fn feed_main(mut lines: TraceLines, mut check: RecordCheck, shared: &Arc<Shared>) {
    let _guard = EndOnDrop { shared, feeder: Feeder::Main, lane: None };
    loop {
        let record = match lines.next_record() {
            Ok(Some(record)) => record,
            Ok(None) => return shared.queues.end(Feeder::Main, None, None),
            Err(failure) => return fail(shared, Feeder::Main, None, &failure),
        };
        if let Err(reason) = check.check(&record) {
            return fail(shared, Feeder::Main, None, &lines.in_line(reason));
        }
        let Some(lane) = shared.lane_of(&record) else { continue };
        match shared.queues.push(lane, record, Feeder::Main) {
            Pushed::Queued | Pushed::NotMine => {}
            Pushed::Closed => return,
            Pushed::Detached(record) => start_own(shared, lane, Some(*record), lines.position()),
        }
    }
}

/// Starts the own feeder of `lane`, to read on from `position`: detached
/// at `first` (its next record, read just before `position`), or, for a
/// lane fed by its own feeder from the start, with `first` `None`.
pub(super) fn start_own(
    shared: &Arc<Shared>,
    lane: usize,
    first: Option<TraceRecord>,
    position: (u64, u64),
) {
    let key = shared.lanes.iter().find_map(|(key, &at)| (at == lane).then_some(*key));
    if first.is_some() {
        info!(
            lane = ?key,
            line = position.1,
            "a replayed lane is read less often than the trace holds it: it reads the trace on its own"
        );
    }
    let feeding = shared.clone();
    let started = std::thread::Builder::new()
        .name("vramd-replay-lane".to_owned())
        .spawn(move || feed_own(&feeding, lane, first, position));
    if let Err(source) = started {
        let path = shared.path.display().to_string();
        fail(shared, Feeder::Own, Some(lane), &TraceError::Thread { path, source });
    }
}

/// A lane's own reading of the file: `first`, then the lane's records from
/// `position` on; other lanes' lines of the recorder's layout are passed
/// over unparsed (the start-up check and the main reading check them).
fn feed_own(shared: &Shared, lane: usize, first: Option<TraceRecord>, position: (u64, u64)) {
    let _guard = EndOnDrop { shared, feeder: Feeder::Own, lane: Some(lane) };
    if shared.queues.complete(lane) {
        return shared.queues.end(Feeder::Own, Some(lane), None);
    }
    if let Some(first) = first
        && !push_own(shared, lane, first)
    {
        return;
    }
    let options = &shared.options;
    let opened =
        TraceLines::open_at(&shared.path, options.max_line_bytes, options.max_file_bytes, position);
    let mut lines = match opened {
        Ok(lines) => lines,
        Err(failure) => return fail(shared, Feeder::Own, Some(lane), &failure),
    };
    let key = shared.lanes.iter().find_map(|(key, &at)| (at == lane).then_some(*key));
    let elsewhere = |bytes: &[u8]| sniff(bytes).is_some_and(|sniffed| Some(sniffed) != key);
    loop {
        let record = match lines.next_record_unless(elsewhere) {
            Ok(Some(record)) => record,
            Ok(None) => return shared.queues.end(Feeder::Own, Some(lane), None),
            Err(failure) => return fail(shared, Feeder::Own, Some(lane), &failure),
        };
        if shared.lane_of(&record) == Some(lane) && !push_own(shared, lane, record) {
            return;
        }
    }
}

/// Pushes an own feeder's record; false when it should stop (the replay
/// was dropped, or the lane has had all its records).
fn push_own(shared: &Shared, lane: usize, record: TraceRecord) -> bool {
    if shared.queues.push(lane, record, Feeder::Own) != Pushed::Queued {
        return false;
    }
    if shared.queues.complete(lane) {
        // The rest of the file has nothing for this lane.
        shared.queues.end(Feeder::Own, Some(lane), None);
        return false;
    }
    true
}

/// The lane of a line in the recorder's layout (`{"record":"fast","device":0,`),
/// read from its first bytes without parsing it; `None` when that is not
/// certain (another layout, or an error record, whose tier comes later).
pub(super) fn sniff(bytes: &[u8]) -> Option<LaneKey> {
    let rest = bytes.strip_prefix(b"{\"record\":\"")?;
    let quote = rest.iter().position(|&byte| byte == b'"')?;
    let (kind, rest) = rest.split_at(quote);
    let rest = rest.strip_prefix(b"\",\"device\":")?;
    let digits = rest.iter().position(|byte| !byte.is_ascii_digit())?;
    if rest.get(digits) != Some(&b',') {
        return None;
    }
    let device = std::str::from_utf8(rest.get(..digits)?).ok()?.parse().ok()?;
    match kind {
        b"fast" => Some(LaneKey::Tier(device, Tier::Fast)),
        b"slow" => Some(LaneKey::Tier(device, Tier::Slow)),
        b"probe" => Some(LaneKey::Probe(device)),
        b"oom" => Some(LaneKey::Oom),
        _ => None,
    }
}

fn fail(shared: &Shared, feeder: Feeder, lane: Option<usize>, failure: &TraceError) {
    error!(
        error = %failure,
        "the replayed trace could not be read further; the readings it has not reached are answered as errors"
    );
    shared.queues.end(feeder, lane, Some(&failure.to_string()));
}
