//! The trace file format: the header, the four record types, and how each
//! is written as one JSON line and parsed back (docs/trace-format.md).
//!
//! Owns: [`TraceHeader`], [`TraceRecord`] and the line encoders/decoders.
//! Depends only on `model` and `source`; knows nothing of history, sampler or
//! HTTP.
//!
//! Records are written from private mirror structs rather than from the model
//! types with `#[serde(flatten)]`: the trace spells some fields its own way
//! (finite floats only, see `float`; the probe's integer-millisecond `at`),
//! and a field added to the model must not enter or leave the format
//! unnoticed. The conversions destructure the model types without `..`, so
//! such a field fails to compile here.

use serde::{Deserialize, Serialize};

use super::error::LineError;
use super::error_record::ErrorLine;
use crate::model::{
    DeviceInfo, FastReading, MemoryInfo, ProbeFailure, ProbeReading, ProcessInfo, SlowDetails,
    SlowReading, Timestamp,
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
}

impl TraceRecord {
    pub fn device(&self) -> u32 {
        match self {
            TraceRecord::Fast { device, .. }
            | TraceRecord::Slow { device, .. }
            | TraceRecord::Error { device, .. }
            | TraceRecord::Probe { device, .. } => *device,
        }
    }

    /// The sampling tier of a reading or error; `None` for a probe.
    pub fn tier(&self) -> Option<Tier> {
        match self {
            TraceRecord::Fast { .. } => Some(Tier::Fast),
            TraceRecord::Slow { .. } => Some(Tier::Slow),
            TraceRecord::Error { tier, .. } => Some(*tier),
            TraceRecord::Probe { .. } => None,
        }
    }

    /// The reading's timestamp; `None` for errors.
    pub fn at(&self) -> Option<Timestamp> {
        match self {
            TraceRecord::Fast { reading, .. } => Some(reading.at),
            TraceRecord::Slow { reading, .. } => Some(reading.at),
            TraceRecord::Probe { outcome: Ok(reading), .. } => Some(reading.at),
            TraceRecord::Error { .. } | TraceRecord::Probe { outcome: Err(_), .. } => None,
        }
    }
}

/// The `record` tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RecordKind {
    Fast,
    Slow,
    Error,
    Probe,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FastLine {
    record: RecordKind,
    device: u32,
    at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memory: Option<MemoryInfo>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::float::serialize_option",
        deserialize_with = "crate::model::ratio::option"
    )]
    gpu_utilization: Option<f64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::float::serialize_option",
        deserialize_with = "crate::model::ratio::option"
    )]
    memory_bandwidth_utilization: Option<f64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SlowLine {
    record: RecordKind,
    device: u32,
    at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    processes: Option<Vec<ProcessInfo>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::float::serialize_option"
    )]
    temperature_celsius: Option<f64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::float::serialize_option"
    )]
    power_usage_watts: Option<f64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::float::serialize_option"
    )]
    power_limit_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "SlowDetails::is_empty")]
    details: SlowDetails,
}

/// The header as one line, newline included.
pub(super) fn encode_header(header: &TraceHeader) -> Result<Vec<u8>, serde_json::Error> {
    finish_line(serde_json::to_vec(header))
}

/// A fast reading as one line, newline included.
pub(super) fn encode_fast(
    device: u32,
    reading: &FastReading,
) -> Result<Vec<u8>, serde_json::Error> {
    let FastReading { at, memory, gpu_utilization, memory_bandwidth_utilization } = reading;
    finish_line(serde_json::to_vec(&FastLine {
        record: RecordKind::Fast,
        device,
        at: *at,
        memory: *memory,
        gpu_utilization: *gpu_utilization,
        memory_bandwidth_utilization: *memory_bandwidth_utilization,
    }))
}

/// A slow reading as one line, newline included.
pub(super) fn encode_slow(
    device: u32,
    reading: &SlowReading,
) -> Result<Vec<u8>, serde_json::Error> {
    let SlowReading {
        at,
        processes,
        temperature_celsius,
        power_usage_watts,
        power_limit_watts,
        details,
    } = reading;
    finish_line(serde_json::to_vec(&SlowLine {
        record: RecordKind::Slow,
        device,
        at: *at,
        processes: processes.clone(),
        temperature_celsius: *temperature_celsius,
        power_usage_watts: *power_usage_watts,
        power_limit_watts: *power_limit_watts,
        details: details.clone(),
    }))
}

/// An error as one line, newline included; `None` for errors that are never
/// recorded (`TraceEnded`).
pub(super) fn encode_error(
    device: u32,
    tier: Tier,
    error: &SourceError,
) -> Option<Result<Vec<u8>, serde_json::Error>> {
    ErrorLine::from_error(device, tier, error).map(|line| finish_line(serde_json::to_vec(&line)))
}

pub(super) fn finish_line(
    encoded: Result<Vec<u8>, serde_json::Error>,
) -> Result<Vec<u8>, serde_json::Error> {
    encoded.map(|mut line| {
        line.push(b'\n');
        line
    })
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

/// The `record` field alone; other fields are ignored at this step.
#[derive(Deserialize)]
struct Tag {
    record: Option<serde_json::Value>,
}

/// Parses one record line (after the header).
pub(super) fn parse_record(line: &str) -> Result<TraceRecord, LineError> {
    let tag: Tag = serde_json::from_str(line).map_err(|err| match err.classify() {
        serde_json::error::Category::Data => {
            LineError::NotARecord { reason: "expected a JSON object".to_owned() }
        }
        _ => LineError::Json { reason: json_reason(&err) },
    })?;
    let kind = match tag.record {
        Some(serde_json::Value::String(kind)) => kind,
        Some(other) => return Err(LineError::UnknownRecord { record: other.to_string() }),
        None => {
            return Err(LineError::NotARecord { reason: "no \"record\" field".to_owned() });
        }
    };
    let bad = |record: &'static str| {
        move |err: serde_json::Error| LineError::BadRecord { record, reason: json_reason(&err) }
    };
    match kind.as_str() {
        "fast" => {
            let FastLine {
                record: _,
                device,
                at,
                memory,
                gpu_utilization,
                memory_bandwidth_utilization,
            } = serde_json::from_str(line).map_err(bad("fast"))?;
            let reading = FastReading { at, memory, gpu_utilization, memory_bandwidth_utilization };
            Ok(TraceRecord::Fast { device, reading })
        }
        "slow" => {
            let SlowLine {
                record: _,
                device,
                at,
                processes,
                temperature_celsius,
                power_usage_watts,
                power_limit_watts,
                details,
            } = serde_json::from_str(line).map_err(bad("slow"))?;
            let reading = SlowReading {
                at,
                processes,
                temperature_celsius,
                power_usage_watts,
                power_limit_watts,
                details,
            };
            Ok(TraceRecord::Slow { device, reading: Box::new(reading) })
        }
        "error" => {
            let error_line: ErrorLine = serde_json::from_str(line).map_err(bad("error"))?;
            let (device, tier) = (error_line.device, error_line.tier);
            let error = error_line
                .into_error()
                .map_err(|reason| LineError::BadRecord { record: "error", reason })?;
            Ok(TraceRecord::Error { device, tier, error })
        }
        "probe" => super::probe_line::parse(line),
        _ => Err(LineError::UnknownRecord { record: kind }),
    }
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
