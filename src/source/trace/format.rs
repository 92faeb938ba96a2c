//! The trace file format: its header, the records a trace holds, and how a
//! line is written (docs/trace-format.md; the record lines are `line`).
//!
//! Owns: [`TraceHeader`], [`TraceRecord`], the header's parser and the one
//! line encoder. Depends only on `model` and `source`; knows nothing of
//! history, sampler or HTTP.

use std::io;

use serde::{Deserialize, Serialize};

use super::error::LineError;
use crate::model::{
    DeviceInfo, FastReading, OomEvent, ProbeFailure, ProbeReading, SlowReading, Timestamp,
};
use crate::source::{SourceError, Tier};

/// The `format` value of every trace header.
pub const FORMAT: &str = "vramd-trace";
/// The one version this build writes and reads.
pub const VERSION: u32 = 1;

/// The first line of a trace: what it is and which devices it covers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceHeader {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`] in traces this build accepts.
    pub version: u32,
    /// The recorded source's name (`simulator`, `nvml`, …).
    pub source: String,
    /// The devices, as the recorded source listed them.
    pub devices: Vec<DeviceInfo>,
}

impl TraceHeader {
    pub fn new(source: &str, devices: Vec<DeviceInfo>) -> Self {
        Self { format: FORMAT.to_owned(), version: VERSION, source: source.to_owned(), devices }
    }
}

/// One recorded call: a reading, or the error a read returned.
#[derive(Clone, Debug, PartialEq)]
pub enum TraceRecord {
    Fast {
        device: u32,
        reading: FastReading,
    },
    Slow {
        device: u32,
        /// Boxed: a slow reading is several times the size of a fast one,
        /// and a replayed trace keeps every record.
        reading: Box<SlowReading>,
    },
    /// Errors carry no timestamp: the source produced no reading to stamp.
    Error {
        device: u32,
        tier: Tier,
        error: SourceError,
    },
    /// One CUDA probe's outcome: its reading, or why it produced none.
    Probe {
        device: u32,
        outcome: Result<Box<ProbeReading>, ProbeFailure>,
    },
    /// An allocator OOM event a workload posted while recording.
    Oom {
        device: u32,
        event: Box<OomEvent>,
    },
}

impl TraceRecord {
    pub fn device(&self) -> u32 {
        match self {
            TraceRecord::Fast { device, .. }
            | TraceRecord::Slow { device, .. }
            | TraceRecord::Error { device, .. }
            | TraceRecord::Probe { device, .. }
            | TraceRecord::Oom { device, .. } => *device,
        }
    }

    /// The sampling tier of a reading or error; `None` for a probe or an
    /// OOM event.
    pub fn tier(&self) -> Option<Tier> {
        match self {
            TraceRecord::Fast { .. } => Some(Tier::Fast),
            TraceRecord::Slow { .. } => Some(Tier::Slow),
            TraceRecord::Error { tier, .. } => Some(*tier),
            TraceRecord::Probe { .. } | TraceRecord::Oom { .. } => None,
        }
    }

    /// The reading's timestamp; `None` for errors.
    pub fn at(&self) -> Option<Timestamp> {
        match self {
            TraceRecord::Fast { reading, .. } => Some(reading.at),
            TraceRecord::Slow { reading, .. } => Some(reading.at),
            TraceRecord::Probe { outcome: Ok(reading), .. } => Some(reading.at),
            TraceRecord::Oom { event, .. } => Some(event.received_at),
            TraceRecord::Error { .. } | TraceRecord::Probe { outcome: Err(_), .. } => None,
        }
    }
}

/// Writes `value` as one line, newline included. NaN and infinities are
/// refused rather than written: JSON has no spelling for them and
/// serde_json would write `null`, which would replay as "absent", a silent
/// change.
pub(super) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut line = Vec::with_capacity(256);
    value.serialize(&mut serde_json::Serializer::with_formatter(&mut line, FiniteOnly))?;
    line.push(b'\n');
    Ok(line)
}

/// serde_json's compact output, except that `null` is an error. serde_json
/// writes `null` for a non-finite float, and for `None` and `()`; every
/// optional field of a trace is skipped when absent and no record holds a
/// unit, so on a trace line `null` can only mean a non-finite float, at
/// whatever depth (a nested one included).
struct FiniteOnly;

impl serde_json::ser::Formatter for FiniteOnly {
    fn write_null<W: ?Sized + io::Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "cannot record a non-finite number (NaN or an infinity), which JSON cannot spell",
        ))
    }
}

/// Parses and checks the first line. The format and version are checked
/// before the rest so that a newer or foreign file gets that message rather
/// than a complaint about some field.
pub(super) fn parse_header(line: &str) -> Result<TraceHeader, LineError> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).map_err(|err| match err.classify() {
            serde_json::error::Category::Data => {
                LineError::BadHeader { reason: "expected a JSON object".to_owned() }
            }
            _ => LineError::Json { reason: json_reason(&err) },
        })?;
    if let Some(record) = map.get("record") {
        let record = record.as_str().map_or_else(|| record.to_string(), str::to_owned);
        return Err(LineError::RecordBeforeHeader { record });
    }
    match map.get("format") {
        Some(serde_json::Value::String(format)) if format == FORMAT => {}
        Some(other) => return Err(LineError::NotATrace { found: other.to_string() }),
        None => return Err(LineError::NotATrace { found: "missing".to_owned() }),
    }
    match map.get("version") {
        Some(version) if version.as_u64() == Some(u64::from(VERSION)) => {}
        Some(other) => {
            return Err(LineError::UnsupportedVersion {
                found: other.to_string(),
                supported: VERSION,
            });
        }
        None => return Err(LineError::BadHeader { reason: "missing field `version`".to_owned() }),
    }
    let header: TraceHeader = serde_json::from_value(serde_json::Value::Object(map))
        .map_err(|err| LineError::BadHeader { reason: json_reason(&err) })?;
    let mut seen = std::collections::BTreeSet::new();
    if let Some(duplicate) = header.devices.iter().find(|device| !seen.insert(device.index)) {
        return Err(LineError::DuplicateDevice { index: duplicate.index });
    }
    Ok(header)
}

/// serde_json's message without its "at line 1 column N" suffix: each line
/// is parsed on its own, so its line is always 1 and would mislead next to
/// the file line the caller reports. The column is kept.
pub(super) fn json_reason(err: &serde_json::Error) -> String {
    let text = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    match text.strip_suffix(&suffix) {
        Some(message) if err.column() > 0 => format!("{message} (column {})", err.column()),
        Some(message) => message.to_owned(),
        None => text,
    }
}
