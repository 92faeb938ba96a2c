//! Tests of the record lines: errors and floats through the `Line` enum.

use super::format::encode;
use super::line::{Line, MAX_CALL_NAME_BYTES, parse_record};
use super::*;
use crate::model::{FastReading, HeadroomSearch, HeadroomStop, ProbeReading, Timestamp};
use crate::source::{SourceError, Tier};

fn round_trip(device: u32, error: SourceError) {
    let text = encode(&Line::error(device, Tier::Slow, &error).unwrap()).unwrap();
    let text = std::str::from_utf8(&text).unwrap();
    let back = parse_record(text.trim_end()).unwrap();
    assert_eq!(back, TraceRecord::Error { device, tier: Tier::Slow, error }, "{text}");
}

#[test]
fn every_recordable_error_comes_back_equal() {
    round_trip(1, SourceError::DeviceLost { index: 1, reason: "GPU_IS_LOST".into() });
    round_trip(1, SourceError::DeviceLost { index: 4, reason: "other".into() });
    round_trip(2, SourceError::UnknownDevice { index: 2 });
    round_trip(2, SourceError::UnknownDevice { index: 9 });
    round_trip(0, SourceError::Unavailable { reason: "no libnvidia-ml".into() });
    let call = "nvmlDeviceGetPowerUsage".into();
    round_trip(0, SourceError::Driver { index: 0, call, reason: "x".into() });
    let call = "nvmlX".into();
    round_trip(0, SourceError::Driver { index: 3, call, reason: String::new() });
    round_trip(0, SourceError::Record { path: "/t.ndjson".into(), reason: "full".into() });
}

#[test]
fn trace_ended_is_never_written() {
    let ended = SourceError::TraceEnded { index: 0, tier: Tier::Fast };
    assert!(Line::error(0, Tier::Fast, &ended).is_none());
}

#[test]
fn inconsistent_error_lines_are_refused_with_a_reason() {
    let parse = |text: &str| match parse_record(text) {
        Err(LineError::BadRecord { record: "error", reason }) => reason,
        other => panic!("{other:?}"),
    };
    let head = r#"{"record":"error","device":0,"tier":"fast","message":"m","#;
    let err = parse(&format!(r#"{head}"kind":"driver"}}"#));
    assert!(err.contains("needs the field `call`"), "{err}");
    let err = parse(&format!(r#"{head}"kind":"unavailable","path":"p"}}"#));
    assert!(err.contains("`path` does not apply"), "{err}");
    let err = parse(&format!(r#"{head}"kind":"gremlins"}}"#));
    assert!(err.contains("unknown error kind \"gremlins\""), "{err}");
    let err = parse(&format!(r#"{head}"kind":"trace_ended"}}"#));
    assert!(err.contains("never recorded"), "{err}");
    let err = parse(&format!(r#"{head}"kind":"timeout"}}"#));
    assert!(err.contains("never recorded"), "{err}");
    let long = "n".repeat(MAX_CALL_NAME_BYTES + 1);
    let err = parse(&format!(r#"{head}"kind":"driver","call":"{long}"}}"#));
    assert!(err.contains("longer than"), "{err}");
}

fn fast_with(gpu_utilization: Option<f64>) -> FastReading {
    let at = Timestamp::from_unix_millis(1);
    FastReading { at, memory: None, gpu_utilization, memory_bandwidth_utilization: None }
}

fn fast_back(text: &str) -> Result<Option<f64>, LineError> {
    match parse_record(text)? {
        TraceRecord::Fast { reading, .. } => Ok(reading.gpu_utilization),
        other => panic!("{other:?}"),
    }
}

/// serde_json's `float_roundtrip` feature (Cargo.toml) parses decimals
/// with correct rounding; without it about one value in ten comes back
/// one unit in the last place off, through the flattened reading too.
#[test]
fn values_the_default_serde_json_parser_rounds_wrongly_round_trip_exactly() {
    let mut state: u64 = 0x1234_5678_9abc_def1;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Any mantissa, every exponent below 1 and subnormals: a ratio is
        // refused outside 0..1 when read, so the patterns stay inside it.
        let value = f64::from_bits(state & 0x3FEF_FFFF_FFFF_FFFF);
        let text = encode(&Line::fast(0, &fast_with(Some(value)))).unwrap();
        let back = fast_back(std::str::from_utf8(&text).unwrap().trim_end()).unwrap();
        assert_eq!(back.map(f64::to_bits), Some(value.to_bits()));
    }
    // Known to come back one ulp off through serde_json's default parser.
    let line = r#"{"record":"fast","device":0,"at":1,"gpu_utilization":0.9941414234139935}"#;
    assert_eq!(fast_back(line), Ok(Some(0.994_141_423_413_993_5)));
}

#[test]
fn null_and_absent_are_none_and_non_numbers_are_refused() {
    let head = r#"{"record":"fast","device":0,"at":1"#;
    assert_eq!(fast_back(&format!("{head}}}")), Ok(None));
    assert_eq!(fast_back(&format!(r#"{head},"gpu_utilization":null}}"#)), Ok(None));
    assert!(fast_back(&format!(r#"{head},"gpu_utilization":"0.5"}}"#)).is_err());
    assert!(fast_back(&format!(r#"{head},"gpu_utilization":1e400}}"#)).is_err());
}

#[test]
fn non_finite_values_are_not_written_at_any_depth() {
    for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let err = encode(&Line::fast(0, &fast_with(Some(value)))).unwrap_err();
        assert!(err.to_string().contains("non-finite"), "{err}");
    }
    let reading = ProbeReading {
        at: Timestamp::from_unix_millis(1),
        cuda_free_bytes: 1,
        cuda_total_bytes: 2,
        nvml_free_bytes: None,
        context_create_seconds: 0.1,
        context_bytes: None,
        alloc_block_bytes: 1,
        alloc_latency_seconds: None,
        free_latency_seconds: None,
        alloc_samples: 0,
        headroom: Some(HeadroomSearch {
            largest_block_bytes: 0,
            margin_bytes: 0,
            attempts: 0,
            stopped: HeadroomStop::Margin,
            seconds: f64::NAN,
        }),
        duration_seconds: 0.2,
    };
    assert!(encode(&Line::probe(0, Ok(&reading))).is_err());
}

#[test]
fn an_oom_event_line_comes_back_equal_and_is_read_strictly() {
    let text = r#"{"record":"oom","device":0,"event":{"id":3,"uuid":"GPU-a","index":0,"reporter_pid":42,"hostname":"h","pid":4242,"at":"2026-01-01T00:00:01.000Z","received_at":"2026-01-01T00:00:02.000Z","requested_bytes":1073741824,"device_free_bytes":104857600,"snapshot_path":"/tmp/s.pickle"}}"#;
    let record = parse_record(text).unwrap();
    let TraceRecord::Oom { device: 0, event } = &record else { panic!("{record:?}") };
    assert_eq!((event.id, event.pid, event.requested_bytes), (3, Some(4242), 1 << 30));
    assert_eq!(record.at(), Some(Timestamp::parse_rfc3339("2026-01-01T00:00:02Z").unwrap()));
    let written = encode(&Line::of(&record).unwrap()).unwrap();
    let back = parse_record(std::str::from_utf8(&written).unwrap().trim_end()).unwrap();
    assert_eq!(back, record);
    let misspelt = text.replace("\"requested_bytes\"", "\"requested\"");
    assert!(matches!(parse_record(&misspelt), Err(LineError::BadRecord { record: "oom", .. })));
}
