//! The `probe` record of a trace: one CUDA probe outcome (docs/trace-format.md).
//!
//! Owns: its line mirror (integer-millisecond `at`, exact floats, like the
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
    #[serde(
        serialize_with = "super::float::serialize",
        deserialize_with = "super::float::deserialize"
    )]
    context_create_seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    context_bytes: Option<u64>,
    alloc_block_bytes: u64,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::float::serialize_option",
        deserialize_with = "super::float::deserialize_option"
    )]
    alloc_latency_seconds: Option<f64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::float::serialize_option",
        deserialize_with = "super::float::deserialize_option"
    )]
    free_latency_seconds: Option<f64>,
    alloc_samples: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    headroom: Option<HeadroomSearch>,
    #[serde(
        serialize_with = "super::float::serialize",
        deserialize_with = "super::float::deserialize"
    )]
    duration_seconds: f64,
}

impl From<&ProbeReading> for ProbeReadingLine {
    fn from(reading: &ProbeReading) -> Self {
        let ProbeReading {
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
        } = reading;
        Self {
            at: *at,
            cuda_free_bytes: *cuda_free_bytes,
            cuda_total_bytes: *cuda_total_bytes,
            nvml_free_bytes: *nvml_free_bytes,
            context_create_seconds: *context_create_seconds,
            context_bytes: *context_bytes,
            alloc_block_bytes: *alloc_block_bytes,
            alloc_latency_seconds: *alloc_latency_seconds,
            free_latency_seconds: *free_latency_seconds,
            alloc_samples: *alloc_samples,
            headroom: headroom.clone(),
            duration_seconds: *duration_seconds,
        }
    }
}

impl From<ProbeReadingLine> for ProbeReading {
    fn from(line: ProbeReadingLine) -> Self {
        let ProbeReadingLine {
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
        } = line;
        Self {
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
        }
    }
}

/// A probe outcome as one line, newline included.
pub(super) fn encode_probe(
    device: u32,
    outcome: &Result<ProbeReading, ProbeFailure>,
) -> Result<Vec<u8>, serde_json::Error> {
    let (reading, failure) = match outcome {
        Ok(reading) => (Some(ProbeReadingLine::from(reading)), None),
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
