//! The `probe` record of a trace: one CUDA probe outcome (docs/trace-format.md).
//!
//! Owns: its line mirror (integer-millisecond `at`, finite floats, like the
//! other records) and its encoder and parser. Depends only on `model` and
//! the trace format's helpers.

use serde::{Deserialize, Serialize};

use super::error::LineError;
use super::format::{RecordKind, TraceRecord, finish_line, json_reason};
use crate::model::{HeadroomSearch, ProbeFailure, ProbeReading, Timestamp};

/// A probe record: exactly one of `reading` and `failure`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbeLine {
    record: RecordKind,
    device: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reading: Option<ProbeReadingLine>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure: Option<ProbeFailure>,
}

/// [`ProbeReading`] with the trace's integer-millisecond `at`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbeReadingLine {
    at: Timestamp,
    cuda_free_bytes: u64,
    cuda_total_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nvml_free_bytes: Option<u64>,
    #[serde(serialize_with = "super::float::serialize")]
    context_create_seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    context_bytes: Option<u64>,
    alloc_block_bytes: u64,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::float::serialize_option"
    )]
    alloc_latency_seconds: Option<f64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::float::serialize_option"
    )]
    free_latency_seconds: Option<f64>,
    alloc_samples: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    headroom: Option<HeadroomSearch>,
    #[serde(serialize_with = "super::float::serialize")]
    duration_seconds: f64,
}

/// Moves every field between a model struct and its line mirror, both ways.
/// Each side is destructured without `..` (see `format`), so a field added
/// to either and not listed here fails to compile.
macro_rules! mirror {
    ($model:ident <=> $line:ident { $($field:ident),* $(,)? }) => {
        impl From<$model> for $line {
            fn from(value: $model) -> Self {
                let $model { $($field),* } = value;
                Self { $($field),* }
            }
        }

        impl From<$line> for $model {
            fn from(value: $line) -> Self {
                let $line { $($field),* } = value;
                Self { $($field),* }
            }
        }
    };
}

mirror!(ProbeReading <=> ProbeReadingLine {
    at,
    cuda_free_bytes,
    cuda_total_bytes,
    nvml_free_bytes,
    context_create_seconds,
    context_bytes,
    alloc_block_bytes,
    alloc_latency_seconds,
    free_latency_seconds,
    alloc_samples,
    headroom,
    duration_seconds,
});

/// A probe outcome as one line, newline included.
pub(super) fn encode_probe(
    device: u32,
    outcome: &Result<ProbeReading, ProbeFailure>,
) -> Result<Vec<u8>, serde_json::Error> {
    let (reading, failure) = match outcome {
        Ok(reading) => (Some(ProbeReadingLine::from(reading.clone())), None),
        Err(failure) => (None, Some(failure.clone())),
    };
    finish_line(serde_json::to_vec(&ProbeLine {
        record: RecordKind::Probe,
        device,
        reading,
        failure,
    }))
}

/// Parses a line whose `record` is `"probe"`.
pub(super) fn parse(line: &str) -> Result<TraceRecord, LineError> {
    let bad = |reason: String| LineError::BadRecord { record: "probe", reason };
    let ProbeLine { record: _, device, reading, failure } =
        serde_json::from_str(line).map_err(|err| bad(json_reason(&err)))?;
    let outcome = match (reading, failure) {
        (Some(reading), None) => Ok(Box::new(ProbeReading::from(reading))),
        (None, Some(failure)) => Err(failure),
        _ => return Err(bad("needs exactly one of `reading` and `failure`".to_owned())),
    };
    Ok(TraceRecord::Probe { device, outcome })
}
