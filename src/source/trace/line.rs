//! One trace record as one JSON line: the [`Line`] enum, internally tagged
//! by `record`, is both what the recorder writes and what replay parses
//! (docs/trace-format.md).
//!
//! Owns: [`Line`], its conversions from and to [`TraceRecord`], and
//! [`parse_record`]. Depends only on `model`, `source` and `format`.
//!
//! Readings are the model types themselves, flattened next to `device`, so
//! a field added to a model type enters the format with it: a format change
//! that docs/trace-format.md must then describe. `Cow` lets the
//! recorder write what it borrows and replay own what it reads. A new record
//! type is one more variant here and in [`TraceRecord`].

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::error::LineError;
use super::format::{TraceRecord, json_reason};
use crate::model::{
    ErrorKind, FastReading, HeadroomSearch, OomEvent, ProbeFailure, ProbeReading, SlowReading,
    Timestamp,
};
use crate::source::{SourceError, Tier};

/// A record line. `deny_unknown_fields` applies to each variant, flattened
/// readings included: a misspelt field must not silently vanish.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum Line<'a> {
    Fast {
        device: u32,
        #[serde(flatten)]
        reading: Cow<'a, FastReading>,
    },
    Slow {
        device: u32,
        #[serde(flatten)]
        reading: Cow<'a, SlowReading>,
    },
    /// `index` only when the error names a device other than `device`;
    /// `call` only for `driver` and `path` only for `record` errors.
    Error {
        device: u32,
        tier: Tier,
        kind: Cow<'a, str>,
        message: Cow<'a, str>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call: Option<Cow<'a, str>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<Cow<'a, str>>,
    },
    /// Exactly one of `reading` and `failure`.
    Probe {
        device: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reading: Option<ProbeReadingLine>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<Cow<'a, ProbeFailure>>,
    },
    /// An allocator OOM event, nested (not flattened): its times are RFC
    /// 3339 text, as the REST API shows them.
    Oom { device: u32, event: Cow<'a, OomEvent> },
}

/// Longest driver call name a trace may carry: real names are NVML function
/// names, and a replay holds every recorded one in memory.
pub(super) const MAX_CALL_NAME_BYTES: usize = 128;

/// Every `record` tag a trace may hold (`LineError::UnknownRecord` lists
/// them; a test keeps the two equal).
pub(super) const RECORD_KINDS: [&str; 5] = ["fast", "slow", "error", "probe", "oom"];

impl<'a> Line<'a> {
    pub fn fast(device: u32, reading: &'a FastReading) -> Self {
        Line::Fast { device, reading: Cow::Borrowed(reading) }
    }

    pub fn slow(device: u32, reading: &'a SlowReading) -> Self {
        Line::Slow { device, reading: Cow::Borrowed(reading) }
    }

    pub fn oom(device: u32, event: &'a OomEvent) -> Self {
        Line::Oom { device, event: Cow::Borrowed(event) }
    }

    pub fn probe(device: u32, outcome: Result<&ProbeReading, &'a ProbeFailure>) -> Self {
        match outcome {
            Ok(reading) => Line::Probe {
                device,
                reading: Some(ProbeReadingLine(reading.clone())),
                failure: None,
            },
            Err(failure) => {
                Line::Probe { device, reading: None, failure: Some(Cow::Borrowed(failure)) }
            }
        }
    }

    /// The line for `error`, or `None` for `TraceEnded`, which describes the
    /// end of a replay rather than anything that happened to a device. The
    /// mapping is lossless for every other variant, so a replayed error
    /// compares equal to the recorded one.
    pub fn error(device: u32, tier: Tier, error: &'a SourceError) -> Option<Self> {
        let other_index = |index: u32| (index != device).then_some(index);
        let (index, message, call, path): (_, Cow<'a, str>, _, _) = match error {
            SourceError::DeviceLost { index, reason } => {
                (other_index(*index), reason.into(), None, None)
            }
            // No reason to carry; the message is for people reading the file.
            SourceError::UnknownDevice { index } => {
                (other_index(*index), error.to_string().into(), None, None)
            }
            SourceError::Unavailable { reason } => (None, reason.into(), None, None),
            SourceError::Driver { index, call, reason } => {
                (other_index(*index), reason.into(), Some(call.as_ref().into()), None)
            }
            SourceError::Record { path, reason } => (None, reason.into(), None, Some(path.into())),
            SourceError::TraceEnded { .. } => return None,
        };
        let kind = error.kind().as_str().into();
        Some(Line::Error { device, tier, kind, message, index, call, path })
    }

    /// The line of a parsed record, for writing it back.
    #[cfg(test)]
    pub fn of(record: &'a TraceRecord) -> Option<Self> {
        match record {
            TraceRecord::Fast { device, reading } => Some(Line::fast(*device, reading)),
            TraceRecord::Slow { device, reading } => Some(Line::slow(*device, reading)),
            TraceRecord::Error { device, tier, error } => Line::error(*device, *tier, error),
            TraceRecord::Probe { device, outcome } => {
                Some(Line::probe(*device, outcome.as_ref().map(AsRef::as_ref)))
            }
            TraceRecord::Oom { device, event } => Some(Line::oom(*device, event)),
        }
    }

    /// The record this line holds, or why its fields are inconsistent.
    fn into_record(self) -> Result<TraceRecord, String> {
        match self {
            Line::Fast { device, reading } => {
                Ok(TraceRecord::Fast { device, reading: reading.into_owned() })
            }
            Line::Slow { device, reading } => {
                Ok(TraceRecord::Slow { device, reading: Box::new(reading.into_owned()) })
            }
            Line::Error { device, tier, kind, message, index, call, path } => {
                let error = source_error(device, &kind, message.into_owned(), index, call, path)?;
                Ok(TraceRecord::Error { device, tier, error })
            }
            Line::Probe { device, reading, failure } => {
                let outcome = match (reading, failure) {
                    (Some(ProbeReadingLine(reading)), None) => Ok(Box::new(reading)),
                    (None, Some(failure)) => Err(failure.into_owned()),
                    _ => return Err("needs exactly one of `reading` and `failure`".to_owned()),
                };
                Ok(TraceRecord::Probe { device, outcome })
            }
            Line::Oom { device, event } => {
                Ok(TraceRecord::Oom { device, event: Box::new(event.into_owned()) })
            }
        }
    }
}

/// The error an `error` line records. Fields a kind does not carry are
/// refused rather than dropped, so a hand-edited trace cannot silently mean
/// something else.
fn source_error(
    device: u32,
    kind: &str,
    reason: String,
    index: Option<u32>,
    call: Option<Cow<'_, str>>,
    path: Option<Cow<'_, str>>,
) -> Result<SourceError, String> {
    let known = ErrorKind::ALL.iter().copied().find(|known| known.as_str() == kind);
    let Some(known) = known else {
        return Err(format!(
            "unknown error kind {kind:?} (expected device_lost, unknown_device, unavailable, \
             driver or record)"
        ));
    };
    // Which of `index`, `call` and `path` the kind carries; the kinds no
    // recorder writes are refused below whatever their fields.
    let takes = match known {
        ErrorKind::DeviceLost | ErrorKind::UnknownDevice => [true, false, false],
        ErrorKind::Unavailable => [false, false, false],
        ErrorKind::Driver => [true, true, false],
        ErrorKind::Record => [false, false, true],
        _ => [true, true, true],
    };
    let present = [("index", index.is_some()), ("call", call.is_some()), ("path", path.is_some())];
    if let Some(((field, _), _)) =
        present.into_iter().zip(takes).find(|((_, present), takes)| *present && !takes)
    {
        return Err(format!("field `{field}` does not apply to kind {kind:?}"));
    }
    let index = index.unwrap_or(device);
    match (known, call, path) {
        (ErrorKind::DeviceLost, ..) => Ok(SourceError::DeviceLost { index, reason }),
        (ErrorKind::UnknownDevice, ..) => Ok(SourceError::UnknownDevice { index }),
        (ErrorKind::Unavailable, ..) => Ok(SourceError::Unavailable { reason }),
        (ErrorKind::Driver, Some(call), _) if call.len() > MAX_CALL_NAME_BYTES => {
            Err(format!("the driver call name is longer than {MAX_CALL_NAME_BYTES} bytes"))
        }
        (ErrorKind::Driver, Some(call), _) => {
            Ok(SourceError::Driver { index, call: Cow::Owned(call.into_owned()), reason })
        }
        (ErrorKind::Driver, None, _) => Err("kind \"driver\" needs the field `call`".to_owned()),
        (ErrorKind::Record, _, Some(path)) => {
            Ok(SourceError::Record { path: path.into_owned(), reason })
        }
        (ErrorKind::Record, _, None) => Err("kind \"record\" needs the field `path`".to_owned()),
        _ => Err(format!("kind {kind:?} is never recorded")),
    }
}

/// Parses one record line (after the header). The `record` tag is looked at
/// first, so that a line of an unknown type, or no record at all, is named
/// as such rather than by serde's variant list.
pub(super) fn parse_record(line: &str) -> Result<TraceRecord, LineError> {
    /// The `record` field alone; other fields are ignored at this step.
    #[derive(Deserialize)]
    struct Tag {
        record: Option<serde_json::Value>,
    }
    let tag: Tag = serde_json::from_str(line).map_err(|err| match err.classify() {
        serde_json::error::Category::Data => {
            LineError::NotARecord { reason: "expected a JSON object".to_owned() }
        }
        _ => LineError::Json { reason: json_reason(&err) },
    })?;
    let record = match tag.record {
        Some(serde_json::Value::String(kind)) => RECORD_KINDS
            .into_iter()
            .find(|known| *known == kind)
            .ok_or(LineError::UnknownRecord { record: kind })?,
        Some(other) => return Err(LineError::UnknownRecord { record: other.to_string() }),
        None => return Err(LineError::NotARecord { reason: "no \"record\" field".to_owned() }),
    };
    let bad = |reason| LineError::BadRecord { record, reason };
    let line: Line<'_> = serde_json::from_str(line).map_err(|err| bad(json_reason(&err)))?;
    line.into_record().map_err(bad)
}

/// Parses one record line given as bytes: read by hand when it is a
/// reading in the recorder's exact layout (`by_hand`), else checked to be
/// UTF-8 and not blank, then read through [`parse_recorded_reading`] when it
/// has the recorder's layout, else through [`parse_record`]. All three give
/// the same record for a line they accept; a line a faster one cannot take
/// is left to the next, and only [`parse_record`]'s errors are reported.
pub(super) fn parse_line(line: &mut [u8]) -> Result<TraceRecord, LineError> {
    // A line read by hand is UTF-8 and not blank: its strings were checked,
    // and everything else in it is ASCII it matched.
    if let Some(record) = super::by_hand::parse_reading_line(line) {
        return Ok(record);
    }
    let text = std::str::from_utf8(line).map_err(|_| LineError::NotUtf8)?;
    if text.trim_ascii().is_empty() {
        return Err(LineError::Blank);
    }
    if let Some(record) = parse_recorded_reading(line) {
        return Ok(record);
    }
    let text = std::str::from_utf8(line).map_err(|_| LineError::NotUtf8)?;
    parse_record(text)
}

/// The reading of a `fast` or `slow` line that starts as the recorder
/// writes it, `{"record":"fast","device":N,`, parsed straight into the
/// model type; `None` for any other line, or one this way cannot read.
///
/// Why: the `Line` enum is internally tagged with the reading flattened,
/// which serde can only do by buffering the whole object into a tree of
/// owned values first, then reading that tree a second time (with the tag
/// read by a pass of its own before): most of a replay's time went there.
/// Here the comma after the device index is overwritten with `{` for the
/// parse, so the rest of the line is the reading's own object, read once
/// without a copy, and the byte is put back. The reading types refuse
/// unknown fields, as the flattened variant does.
fn parse_recorded_reading(line: &mut [u8]) -> Option<TraceRecord> {
    let (slow, start) = super::by_hand::recorded_reading_start(line)?;
    let rest = line.get(start..)?;
    let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
    // JSON has no leading zeros; such a line is the full parser's to refuse.
    if digits == 0 || (digits > 1 && rest.first() == Some(&b'0')) {
        return None;
    }
    let device: u32 = std::str::from_utf8(rest.get(..digits)?).ok()?.parse().ok()?;
    let comma = start + digits;
    let separator = line.get_mut(comma)?;
    if *separator != b',' {
        return None;
    }
    *separator = b'{';
    let body = line.get(comma..)?;
    let record = if slow {
        serde_json::from_slice::<SlowReading>(body)
            .ok()
            .map(|reading| TraceRecord::Slow { device, reading: Box::new(reading) })
    } else {
        serde_json::from_slice::<FastReading>(body)
            .ok()
            .map(|reading| TraceRecord::Fast { device, reading })
    };
    if let Some(separator) = line.get_mut(comma) {
        *separator = b',';
    }
    record
}

/// A [`ProbeReading`] as a trace writes it: with integer-millisecond `at`
/// like every other record (the model's serde form, used by the REST API and
/// the probe child, is RFC 3339).
#[derive(Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub(super) struct ProbeReadingLine(#[serde(with = "ProbeReadingFields")] ProbeReading);

/// The fields of [`ProbeReading`] (serde's remote derive: deserializing
/// builds the model struct, so a field added to it and not here fails to
/// compile).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize)]
#[serde(remote = "ProbeReading", deny_unknown_fields)]
struct ProbeReadingFields {
    at: Timestamp,
    cuda_free_bytes: u64,
    cuda_total_bytes: u64,
    nvml_free_bytes: Option<u64>,
    context_create_seconds: f64,
    context_bytes: Option<u64>,
    alloc_block_bytes: u64,
    alloc_latency_seconds: Option<f64>,
    free_latency_seconds: Option<f64>,
    alloc_samples: u32,
    headroom: Option<HeadroomSearch>,
    duration_seconds: f64,
}
