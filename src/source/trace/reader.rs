//! Reading a trace file's lines and checking its records, shared by the
//! whole-trace [`Replay`](super::Replay) and the streamed
//! [`TraceStream`](super::TraceStream), so both accept exactly the same
//! files with the same messages.
//!
//! Owns: [`TraceLines`] (line numbers, the line and file size bounds, the
//! header, each record parsed) and [`RecordCheck`] (devices the header
//! lists, each lane's time order). Depends only on `model` and `source`.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use super::error::{LineError, TraceError};
use super::format::{self, TraceHeader, TraceRecord};
use super::line;
use super::lines::{BoundedLines, LineReadError};
use crate::model::Timestamp;
use crate::source::Tier;

/// Read-ahead of the file: a few hundred lines at a time.
const READ_BUFFER_BYTES: usize = 256 * 1024;

/// A trace file read line by line, each line counted and bounded.
pub(super) struct TraceLines {
    path: String,
    lines: BoundedLines<BufReader<File>>,
    max_line_bytes: usize,
    max_file_bytes: u64,
    /// 1-based number of the latest line read.
    number: u64,
    read: u64,
    /// Whether the latest line ended with a newline.
    terminated: bool,
}

impl TraceLines {
    /// Opens `path`; no line may be longer than `max_line_bytes` (its
    /// newline not counted) and the file no larger than `max_file_bytes`,
    /// checked before reading and again as lines are read, in case the
    /// file grows meanwhile.
    pub fn open(
        path: &Path,
        max_line_bytes: usize,
        max_file_bytes: u64,
    ) -> Result<TraceLines, TraceError> {
        let shown = path.display().to_string();
        let file =
            File::open(path).map_err(|source| TraceError::Open { path: shown.clone(), source })?;
        let size = file.metadata().map(|metadata| metadata.len()).unwrap_or(0);
        if size > max_file_bytes {
            return Err(TraceError::TooLarge { path: shown, size, max: max_file_bytes });
        }
        let reader = BufReader::with_capacity(READ_BUFFER_BYTES, file);
        Ok(TraceLines {
            path: shown,
            lines: BoundedLines::new(reader, max_line_bytes),
            max_line_bytes,
            max_file_bytes,
            number: 0,
            read: 0,
            terminated: true,
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The header line, or `Empty` for a file with no line at all.
    pub fn header(&mut self) -> Result<TraceHeader, TraceError> {
        let Some(parsed) = self.next_parsed(|bytes| {
            let text = std::str::from_utf8(bytes).map_err(|_| LineError::NotUtf8)?;
            if text.trim_ascii().is_empty() {
                return Err(LineError::Blank);
            }
            format::parse_header(text)
        })?
        else {
            return Err(TraceError::Empty { path: self.path.clone() });
        };
        parsed.map_err(|reason| self.in_line(reason))
    }

    /// The next record, `Ok(None)` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<TraceRecord>, TraceError> {
        match self.next_parsed(line::parse_line)? {
            Some(parsed) => parsed.map(Some).map_err(|reason| self.in_line(reason)),
            None => Ok(None),
        }
    }

    /// Where the next line starts: its byte offset and the number of the
    /// line before it, for [`TraceLines::open_at`]. Exact while every line
    /// read so far ended with a newline.
    pub fn position(&self) -> (u64, u64) {
        (self.read, self.number)
    }

    /// Opens `path` at `position` (from [`TraceLines::position`] of an
    /// earlier reading of the same file), past its header, to read on
    /// from there with the same bounds.
    pub fn open_at(
        path: &Path,
        max_line_bytes: usize,
        max_file_bytes: u64,
        position: (u64, u64),
    ) -> Result<TraceLines, TraceError> {
        let mut lines = Self::open(path, max_line_bytes, max_file_bytes)?;
        let (offset, number) = position;
        std::io::Seek::seek(lines.lines.get_mut(), std::io::SeekFrom::Start(offset)).map_err(
            |source| TraceError::Read { path: lines.path.clone(), line: number, source },
        )?;
        (lines.read, lines.number) = (offset, number);
        Ok(lines)
    }

    /// [`TraceLines::next_record`], passing over without parsing every line
    /// `skip` says is of no interest (from its raw bytes).
    pub fn next_record_unless(
        &mut self,
        mut skip: impl FnMut(&[u8]) -> bool,
    ) -> Result<Option<TraceRecord>, TraceError> {
        loop {
            let parsed = self.next_parsed(|bytes| match skip(bytes) {
                true => Ok(None),
                false => line::parse_line(bytes).map(Some),
            })?;
            match parsed {
                None => return Ok(None),
                Some(Ok(None)) => {}
                Some(Ok(Some(record))) => return Ok(Some(record)),
                Some(Err(reason)) => return Err(self.in_line(reason)),
            }
        }
    }

    /// `reason` about the latest line, as the error naming it.
    pub fn in_line(&self, reason: LineError) -> TraceError {
        let reason = match reason {
            LineError::Json { reason } if !self.terminated => LineError::Truncated { reason },
            reason => reason,
        };
        TraceError::Line { path: self.path.clone(), line: self.number, reason }
    }

    /// The next line given to `parse`; `Ok(None)` at the end of the file,
    /// `Err` when it could not be read, `Ok(Some(Err))` when it was read
    /// and `parse` refused it.
    fn next_parsed<T>(
        &mut self,
        parse: impl FnOnce(&mut [u8]) -> Result<T, LineError>,
    ) -> Result<Option<Result<T, LineError>>, TraceError> {
        self.number = self.number.saturating_add(1);
        let line = match self.lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => return Ok(None),
            Err(LineReadError::TooLong) => {
                let reason = LineError::TooLong { max: self.max_line_bytes };
                return Err(TraceError::Line {
                    path: self.path.clone(),
                    line: self.number,
                    reason,
                });
            }
            Err(LineReadError::Io(source)) => {
                return Err(TraceError::Read {
                    path: self.path.clone(),
                    line: self.number,
                    source,
                });
            }
        };
        self.read = self.read.saturating_add(line.bytes.len() as u64 + 1);
        if self.read > self.max_file_bytes.saturating_add(1) {
            let (path, size, max) = (self.path.clone(), self.read, self.max_file_bytes);
            return Err(TraceError::TooLarge { path, size, max });
        }
        self.terminated = line.terminated;
        Ok(Some(parse(line.bytes)))
    }
}

/// What every record must satisfy beyond its own line: a device the header
/// lists, and no reading earlier than the previous one of its device and
/// tier (or of its device's probe outcomes).
pub(super) struct RecordCheck {
    /// The newest time of each (device, tier) lane; `None` tier: probes.
    latest: HashMap<(u32, Option<Tier>), Option<Timestamp>>,
}

impl RecordCheck {
    pub fn new(header: &TraceHeader) -> Self {
        let tiers = [Some(Tier::Fast), Some(Tier::Slow), None];
        let latest = header
            .devices
            .iter()
            .flat_map(|device| tiers.map(|tier| ((device.index, tier), None)))
            .collect();
        Self { latest }
    }

    pub fn check(&mut self, record: &TraceRecord) -> Result<(), LineError> {
        let (device, tier) = (record.device(), record.tier());
        let unknown = LineError::UnknownDevice { index: device };
        if let TraceRecord::Oom { .. } = record {
            // No order: events arrive over HTTP, in the order they were
            // written rather than strictly by time.
            return match self.latest.contains_key(&(device, Some(Tier::Fast))) {
                true => Ok(()),
                false => Err(unknown),
            };
        }
        let latest = self.latest.get_mut(&(device, tier)).ok_or(unknown)?;
        if let Some(at) = record.at() {
            if let Some(previous) = *latest
                && at < previous
            {
                return Err(LineError::OutOfOrder { tier, device, at, previous });
            }
            *latest = Some(at);
        }
        Ok(())
    }
}
