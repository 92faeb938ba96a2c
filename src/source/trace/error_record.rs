//! How a [`SourceError`] is written as an `error` record and read back.
//!
//! Owns: the mapping between error variants and the `kind` / `message` /
//! `index` / `call` / `path` fields. Depends only on `source`.
//!
//! The mapping is lossless for every variant a recorder writes, so a replayed
//! error compares equal to the recorded one; `TraceEnded` is never written.

use serde::{Deserialize, Serialize};

use super::format::RecordKind;
use crate::source::{SourceError, Tier};

/// One `error` line. `index` is written only when the error names a device
/// other than the one read (so it is normally absent); `call` only for
/// `driver` and `path` only for `record` errors.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ErrorLine {
    pub record: RecordKind,
    pub device: u32,
    pub tier: Tier,
    pub kind: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl ErrorLine {
    /// The line for `error`, or `None` for `TraceEnded`, which describes the
    /// end of a replay rather than anything that happened to a device.
    pub fn from_error(device: u32, tier: Tier, error: &SourceError) -> Option<Self> {
        let other_index = |index: u32| (index != device).then_some(index);
        let mut line = ErrorLine {
            record: RecordKind::Error,
            device,
            tier,
            kind: error.kind().as_str().to_owned(),
            message: String::new(),
            index: None,
            call: None,
            path: None,
        };
        match error {
            SourceError::DeviceLost { index, reason } => {
                line.index = other_index(*index);
                line.message = reason.clone();
            }
            SourceError::UnknownDevice { index } => {
                // No reason to carry; the message is for people reading the file.
                line.index = other_index(*index);
                line.message = error.to_string();
            }
            SourceError::Unavailable { reason } => line.message = reason.clone(),
            SourceError::Driver { index, call, reason } => {
                line.index = other_index(*index);
                line.call = Some(call.to_string());
                line.message = reason.clone();
            }
            SourceError::Record { path, reason } => {
                line.path = Some(path.clone());
                line.message = reason.clone();
            }
            SourceError::TraceEnded { .. } => return None,
        }
        Some(line)
    }

    /// The error this line records, or why the line is inconsistent.
    pub fn into_error(self) -> Result<SourceError, String> {
        let ErrorLine { record: _, device, tier: _, kind, message, index, call, path } = self;
        // Fields a kind does not carry are refused rather than dropped, so a
        // hand-edited trace cannot silently mean something else.
        let uses = |takes_index: bool, takes_call: bool, takes_path: bool| {
            [
                ("index", index.is_some() && !takes_index),
                ("call", call.is_some() && !takes_call),
                ("path", path.is_some() && !takes_path),
            ]
            .into_iter()
            .find_map(|(field, stray)| {
                stray.then(|| format!("field `{field}` does not apply to kind {kind:?}"))
            })
            .map_or(Ok(()), Err)
        };
        let index = index.unwrap_or(device);
        match kind.as_str() {
            "device_lost" => {
                uses(true, false, false)?;
                Ok(SourceError::DeviceLost { index, reason: message })
            }
            "unknown_device" => {
                uses(true, false, false)?;
                Ok(SourceError::UnknownDevice { index })
            }
            "unavailable" => {
                uses(false, false, false)?;
                Ok(SourceError::Unavailable { reason: message })
            }
            "driver" => {
                uses(true, true, false)?;
                let call = call.ok_or("kind \"driver\" needs the field `call`")?;
                if call.len() > MAX_CALL_NAME_BYTES {
                    return Err(format!(
                        "the driver call name is longer than {MAX_CALL_NAME_BYTES} bytes"
                    ));
                }
                Ok(SourceError::Driver { index, call: call.into(), reason: message })
            }
            "record" => {
                uses(false, false, true)?;
                let path = path.ok_or("kind \"record\" needs the field `path`")?;
                Ok(SourceError::Record { path, reason: message })
            }
            "trace_ended" => Err("kind \"trace_ended\" is never recorded".to_owned()),
            other => Err(format!(
                "unknown error kind {other:?} (expected device_lost, unknown_device, \
                 unavailable, driver or record)"
            )),
        }
    }
}

/// Longest driver call name a trace may carry: real names are NVML function
/// names, and a replay holds every recorded one in memory.
const MAX_CALL_NAME_BYTES: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(device: u32, error: SourceError) {
        let line = ErrorLine::from_error(device, Tier::Slow, &error).unwrap();
        let text = serde_json::to_string(&line).unwrap();
        let back: ErrorLine = serde_json::from_str(&text).unwrap();
        assert_eq!(back.into_error(), Ok(error), "{text}");
    }

    #[test]
    fn every_recordable_variant_comes_back_equal() {
        round_trip(1, SourceError::DeviceLost { index: 1, reason: "GPU_IS_LOST".into() });
        round_trip(1, SourceError::DeviceLost { index: 4, reason: "other".into() });
        round_trip(2, SourceError::UnknownDevice { index: 2 });
        round_trip(2, SourceError::UnknownDevice { index: 9 });
        round_trip(0, SourceError::Unavailable { reason: "no libnvidia-ml".into() });
        round_trip(
            0,
            SourceError::Driver {
                index: 0,
                call: "nvmlDeviceGetPowerUsage".into(),
                reason: "x".into(),
            },
        );
        round_trip(
            0,
            SourceError::Driver { index: 3, call: "nvmlX".into(), reason: String::new() },
        );
        round_trip(0, SourceError::Record { path: "/t.ndjson".into(), reason: "full".into() });
    }

    #[test]
    fn trace_ended_is_never_written() {
        let ended = SourceError::TraceEnded { index: 0, tier: Tier::Fast };
        assert!(ErrorLine::from_error(0, Tier::Fast, &ended).is_none());
    }

    #[test]
    fn inconsistent_lines_are_refused_with_a_reason() {
        let parse = |text: &str| {
            serde_json::from_str::<ErrorLine>(text).map_err(|e| e.to_string())?.into_error()
        };
        let head = r#"{"record":"error","device":0,"tier":"fast","message":"m","#;
        let err = parse(&format!(r#"{head}"kind":"driver"}}"#)).unwrap_err();
        assert!(err.contains("needs the field `call`"), "{err}");
        let err = parse(&format!(r#"{head}"kind":"unavailable","path":"p"}}"#)).unwrap_err();
        assert!(err.contains("`path` does not apply"), "{err}");
        let err = parse(&format!(r#"{head}"kind":"gremlins"}}"#)).unwrap_err();
        assert!(err.contains("unknown error kind \"gremlins\""), "{err}");
        let err = parse(&format!(r#"{head}"kind":"trace_ended"}}"#)).unwrap_err();
        assert!(err.contains("never recorded"), "{err}");
        let long = "n".repeat(MAX_CALL_NAME_BYTES + 1);
        let err = parse(&format!(r#"{head}"kind":"driver","call":"{long}"}}"#)).unwrap_err();
        assert!(err.contains("longer than"), "{err}");
    }
}
