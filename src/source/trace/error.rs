//! Errors of trace files: creating a recording, opening and validating a
//! replay.
//!
//! Owns: [`TraceError`] and [`LineError`]. Depends only on `model` and
//! `source` (for [`Tier`]); knows nothing of history, sampler or HTTP.
//!
//! Every message names the file and, for content problems, the 1-based line,
//! so an operator can open the trace at the offending line.

use crate::model::Timestamp;
use crate::source::Tier;

/// Why a trace could not be created or replayed.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The recording file could not be created or truncated.
    #[error("cannot create the trace {path}: {source}")]
    Create {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// `source.record_mode = "refuse"` and the file exists.
    #[error(
        "the trace {path} already exists; refusing to overwrite it (source.record_mode = \"refuse\"; \"rotate\" keeps it as {path}.1)"
    )]
    Exists { path: String },
    /// The file to record into is the one being replayed (by any path).
    #[error("refusing to record into {path}: it is the trace being replayed ({replayed})")]
    SameFile { path: String, replayed: String },
    /// Earlier recordings could not be moved aside.
    #[error("cannot rotate the earlier recording {path} to {path}.1: {source}")]
    Rotate {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The replay file could not be opened.
    #[error("cannot open the trace {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Reading the replay file failed part-way (an I/O error, not bad content).
    #[error("{path} line {line}: reading failed: {source}")]
    Read {
        path: String,
        line: u64,
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than `source.max_trace_size` (the daemon reads
    /// it through at start-up to check it; `Replay` holds its records).
    #[error(
        "{path}: the trace is {size} bytes, more than source.max_trace_size ({max} bytes); \
         raise the limit or replay a shorter trace"
    )]
    TooLarge { path: String, size: u64, max: u64 },
    /// The thread that reads a streamed trace could not be started.
    #[error("cannot start the thread reading the trace {path}: {source}")]
    Thread {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The thread reading a streamed trace ended without finishing it.
    #[error("{path}: the thread reading the trace stopped before its end")]
    ReaderStopped { path: String },
    /// Records of a trace written in one go that could not be written.
    #[error("{path}: {failed} records could not be written")]
    Incomplete { path: String, failed: u64 },
    /// The file has no lines at all, so not even a header.
    #[error("{path}: the file is empty; a trace starts with a header line")]
    Empty { path: String },
    /// One line of the file is not acceptable.
    #[error("{path} line {line}: {reason}")]
    Line {
        path: String,
        /// 1-based line number.
        line: u64,
        reason: LineError,
    },
}

impl TraceError {
    /// The 1-based line the error is about, when it is about one.
    #[cfg(test)]
    pub fn line(&self) -> Option<u64> {
        match self {
            TraceError::Read { line, .. } | TraceError::Line { line, .. } => Some(*line),
            TraceError::Create { .. }
            | TraceError::Exists { .. }
            | TraceError::SameFile { .. }
            | TraceError::Rotate { .. }
            | TraceError::Open { .. }
            | TraceError::Empty { .. }
            | TraceError::Thread { .. }
            | TraceError::Incomplete { .. }
            | TraceError::ReaderStopped { .. }
            | TraceError::TooLarge { .. } => None,
        }
    }
}

/// What is wrong with one line of a trace.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LineError {
    #[error("the line is longer than the limit of {max} bytes")]
    TooLong { max: usize },
    #[error("the line is not valid UTF-8")]
    NotUtf8,
    /// Blank lines are rejected rather than skipped: the recorder never
    /// writes them, so one means the file was edited or damaged.
    #[error("empty line; a trace has one JSON object per line and no blank lines")]
    Blank,
    #[error("not valid JSON: {reason}")]
    Json { reason: String },
    /// A record whose last line lacks its newline and does not parse: the
    /// recording was cut short (crash, full disk). Said explicitly because
    /// the remedy differs from a corrupt line in the middle.
    #[error(
        "the last line is incomplete (no newline, not valid JSON: {reason}); the recording was \
         probably cut short: delete that line to replay the rest"
    )]
    Truncated { reason: String },
    #[error("expected the trace header first, but found a {record:?} record")]
    RecordBeforeHeader { record: String },
    #[error("not a vramd trace: format is {found}, expected \"vramd-trace\"")]
    NotATrace { found: String },
    #[error("unsupported trace version {found}; this build reads version {supported}")]
    UnsupportedVersion { found: String, supported: u32 },
    #[error("bad header: {reason}")]
    BadHeader { reason: String },
    #[error("the header lists device {index} more than once")]
    DuplicateDevice { index: u32 },
    #[error("not a trace record: {reason}")]
    NotARecord { reason: String },
    #[error(
        "unknown record type {record:?} (expected \"fast\", \"slow\", \"error\", \"probe\" or \"oom\")"
    )]
    UnknownRecord { record: String },
    #[error("bad {record} record: {reason}")]
    BadRecord { record: &'static str, reason: String },
    #[error("record for device {index}, which the header does not list")]
    UnknownDevice { index: u32 },
    /// `tier` is `None` for a probe record.
    #[error(
        "{} record for device {device} at {at} is earlier than the previous one at {previous}",
        tier.map_or("probe", Tier::as_str),
        at = at.unix_millis(),
        previous = previous.unix_millis()
    )]
    OutOfOrder { tier: Option<Tier>, device: u32, at: Timestamp, previous: Timestamp },
    /// Replay keeps record positions as `u32` to stay compact.
    #[error("the trace has more than {max} records")]
    TooManyRecords { max: u64 },
}
