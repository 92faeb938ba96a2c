//! Reading a trace as a stream, for `vramd analyze --replay`: the file is
//! read, parsed and checked on a thread of its own while the caller plays
//! the records it has already been given, so memory is bounded by the
//! window and the hand-over, not by the trace's length, and parsing costs
//! no time on the caller's thread.
//!
//! Owns: [`TraceStream`] and [`StreamOptions`]. Depends only on `model` and
//! `source`; knows nothing of history, analysis or HTTP.
//!
//! The records come out in time order within `source.replay_reorder_records`
//! (see `reorder`); the files it accepts and its messages are those of the
//! whole-trace [`Replay`](super::Replay), except that a problem late in the
//! file is found when the stream reaches it.

use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use super::error::TraceError;
use super::format::{TraceHeader, TraceRecord};
use super::reader::{RecordCheck, TraceLines};
use super::reorder::Reorder;

/// Records handed over at once: few enough to stay small, enough that the
/// hand-over costs nothing per record.
const CHUNK_RECORDS: usize = 1024;
/// Chunks parsed ahead of the player.
const CHUNKS_AHEAD: usize = 4;

/// How a trace is streamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// `source.max_trace_line`.
    pub max_line_bytes: usize,
    /// `source.replay_reorder_records`: records held to put them in time
    /// order.
    pub reorder_records: usize,
}

enum Message {
    Records(Vec<TraceRecord>),
    /// The file was read to its end; how many records came later than the
    /// window could place.
    End {
        late: u64,
    },
    Failed(TraceError),
}

/// A trace read record by record, in time order within the window.
pub struct TraceStream {
    path: String,
    header: TraceHeader,
    receiver: Receiver<Message>,
    current: std::vec::IntoIter<TraceRecord>,
    late: Option<u64>,
}

impl TraceStream {
    /// Opens `path` and reads its header on the caller's thread (so a file
    /// that is no trace is refused at once), then starts the reading thread.
    pub fn open(path: &Path, options: StreamOptions) -> Result<TraceStream, TraceError> {
        // No size bound: nothing of the file is held.
        let mut lines = TraceLines::open(path, options.max_line_bytes, u64::MAX)?;
        let header = lines.header()?;
        let check = RecordCheck::new(&header);
        let shown = lines.path().to_owned();
        let (sender, receiver) = sync_channel(CHUNKS_AHEAD);
        let reorder = Reorder::new(options.reorder_records);
        std::thread::Builder::new()
            .name("vramd-trace-read".to_owned())
            .spawn(move || read_all(lines, check, reorder, &sender))
            .map_err(|source| TraceError::Thread { path: shown.clone(), source })?;
        Ok(TraceStream {
            path: shown,
            header,
            receiver,
            current: Vec::new().into_iter(),
            late: None,
        })
    }

    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// The next record; `Ok(None)` once the whole file was read and played.
    pub fn next_record(&mut self) -> Result<Option<TraceRecord>, TraceError> {
        loop {
            if let Some(record) = self.current.next() {
                return Ok(Some(record));
            }
            if self.late.is_some() {
                return Ok(None);
            }
            match self.receiver.recv() {
                Ok(Message::Records(records)) => self.current = records.into_iter(),
                Ok(Message::End { late }) => self.late = Some(late),
                Ok(Message::Failed(error)) => return Err(error),
                // The reading thread ended without saying why (it panicked).
                Err(_) => return Err(TraceError::ReaderStopped { path: self.path.clone() }),
            }
        }
    }

    /// Records that were further out of time order than the window holds,
    /// played when they came; `None` until the end of the file.
    pub fn late_records(&self) -> Option<u64> {
        self.late
    }
}

/// The reading thread: every record, checked, through the window, in
/// chunks; the first error ends it. A send fails only once the player is
/// gone, which ends the thread too.
fn read_all(
    mut lines: TraceLines,
    mut check: RecordCheck,
    mut reorder: Reorder,
    sender: &SyncSender<Message>,
) {
    let mut chunk = Vec::with_capacity(CHUNK_RECORDS);
    loop {
        let record = match lines.next_record() {
            Ok(Some(record)) => record,
            Ok(None) => break,
            Err(error) => {
                let _ = sender.send(Message::Failed(error));
                return;
            }
        };
        if let Err(reason) = check.check(&record) {
            let _ = sender.send(Message::Failed(lines.in_line(reason)));
            return;
        }
        if let Some(ready) = reorder.push(record) {
            chunk.push(ready);
        }
        if chunk.len() >= CHUNK_RECORDS {
            let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK_RECORDS));
            if sender.send(Message::Records(full)).is_err() {
                return;
            }
        }
    }
    while let Some(ready) = reorder.pop() {
        chunk.push(ready);
        if chunk.len() >= CHUNK_RECORDS {
            let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK_RECORDS));
            if sender.send(Message::Records(full)).is_err() {
                return;
            }
        }
    }
    if !chunk.is_empty() && sender.send(Message::Records(chunk)).is_err() {
        return;
    }
    let _ = sender.send(Message::End { late: reorder.late() });
}
