//! Tests that `Replay::open` refuses every kind of bad trace with an error
//! naming the file and the 1-based line, and accepts what the format allows.

use super::*;
use crate::model::Timestamp;
use crate::source::{DeviceSource, SourceError, Tier};

const HEADER: &str = r#"{"format":"vramd-trace","version":1,"source":"simulator","devices":[{"index":0,"uuid":"GPU-0","name":"Fake"},{"index":3,"uuid":"GPU-3","name":"Fake"}]}"#;

fn fast(device: u32, at: i64) -> String {
    format!(r#"{{"record":"fast","device":{device},"at":{at}}}"#)
}

fn open(text: &str, max: usize) -> Result<Replay, TraceError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.ndjson");
    std::fs::write(&path, text).unwrap();
    Replay::open(&path, max)
}

/// Opens `lines` (joined with newlines, plus a final one) and returns the
/// reason, checking that the error is about `line` and says so.
fn refused(lines: &[&str], line: u64) -> LineError {
    let text = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    refused_text(&text, 4096, line)
}

fn refused_text(text: &str, max: usize, line: u64) -> LineError {
    let err = open(text, max).unwrap_err();
    let message = err.to_string();
    assert!(message.contains(&format!("trace.ndjson line {line}: ")), "{message}");
    assert_eq!(err.line(), Some(line), "{message}");
    match err {
        TraceError::Line { reason, .. } => reason,
        other => panic!("not a line error: {other:?}"),
    }
}

#[test]
fn a_trace_with_only_a_header_has_its_devices_and_no_records() {
    let replay = open(&format!("{HEADER}\n"), 4096).unwrap();
    assert_eq!(replay.header().source, "simulator");
    assert_eq!(replay.devices().unwrap().iter().map(|d| d.index).collect::<Vec<_>>(), [0, 3]);
    assert!(replay.records().is_empty());
    assert_eq!(
        replay.read_slow(3, 64),
        Err(SourceError::TraceEnded { index: 3, tier: Tier::Slow })
    );
    // No trailing newline is fine too.
    assert!(open(HEADER, 4096).is_ok());
}

#[test]
fn an_empty_file_is_refused() {
    let err = open("", 4096).unwrap_err();
    assert!(matches!(err, TraceError::Empty { .. }), "{err}");
    assert!(err.to_string().contains("trace.ndjson"), "{err}");
}

#[test]
fn a_missing_file_is_refused_naming_it() {
    let err = Replay::open(std::path::Path::new("/nonexistent/t.ndjson"), 4096).unwrap_err();
    assert!(matches!(err, TraceError::Open { .. }));
    assert!(err.to_string().contains("/nonexistent/t.ndjson"), "{err}");
}

#[test]
fn a_record_where_the_header_belongs_is_refused() {
    let reason = refused(&[&fast(0, 1)], 1);
    assert_eq!(reason, LineError::RecordBeforeHeader { record: "fast".into() });
}

#[test]
fn bad_headers_are_refused_on_line_1() {
    let reason = refused(&[r#"{"format":"other-trace","version":1}"#], 1);
    assert_eq!(reason, LineError::NotATrace { found: r#""other-trace""#.into() });
    let reason = refused(&[r#"{"version":1,"devices":[]}"#], 1);
    assert!(matches!(reason, LineError::NotATrace { .. }), "{reason}");
    let reason = refused(&[r#"{"format":"vramd-trace","version":1,"source":"s"}"#], 1);
    assert!(matches!(&reason, LineError::BadHeader { reason } if reason.contains("devices")));
    let reason = refused(&[r#"[1,2]"#], 1);
    assert!(matches!(reason, LineError::BadHeader { .. }), "{reason}");
    let duplicate = r#"{"format":"vramd-trace","version":1,"source":"s","devices":[{"index":1,"uuid":"a","name":"n"},{"index":1,"uuid":"b","name":"n"}]}"#;
    assert_eq!(refused(&[duplicate], 1), LineError::DuplicateDevice { index: 1 });
}

#[test]
fn an_unsupported_version_is_refused_before_any_other_check() {
    let reason = refused(&[r#"{"format":"vramd-trace","version":2,"whatever":true}"#], 1);
    assert_eq!(reason, LineError::UnsupportedVersion { found: "2".into(), supported: 1 });
    assert!(reason.to_string().contains("unsupported trace version 2"), "{reason}");
}

#[test]
fn corrupt_json_is_refused_with_its_line() {
    let reason = refused(&[HEADER, &fast(0, 1), r#"{"record":"fast","device":0,,}"#], 3);
    assert!(matches!(&reason, LineError::Json { reason } if reason.contains("column")));
    assert!(!reason.to_string().contains("line 1"), "no misleading inner line: {reason}");
}

#[test]
fn a_cut_off_last_line_is_named_as_such() {
    let text = format!("{HEADER}\n{}\n{{\"record\":\"fa", fast(0, 1));
    let reason = refused_text(&text, 4096, 3);
    assert!(matches!(reason, LineError::Truncated { .. }), "{reason}");
    assert!(reason.to_string().contains("delete that line"), "{reason}");
}

#[test]
fn unknown_and_malformed_records_are_refused() {
    let reason = refused(&[HEADER, r#"{"record":"medium","device":0}"#], 2);
    assert_eq!(reason, LineError::UnknownRecord { record: "medium".into() });
    // The refusal names every record a trace may hold, so a user knows
    // what to write instead.
    let message = reason.to_string();
    for kind in super::line::RECORD_KINDS {
        assert!(message.contains(&format!("\"{kind}\"")), "{kind} missing: {message}");
    }
    let reason = refused(&[HEADER, r#"{"device":0,"at":5}"#], 2);
    assert!(matches!(reason, LineError::NotARecord { .. }), "{reason}");
    // A misspelt field is refused, not silently dropped.
    let typo = r#"{"record":"fast","device":0,"at":5,"gpu_utilisation":0.5}"#;
    let reason = refused(&[HEADER, typo], 2);
    assert!(
        matches!(&reason, LineError::BadRecord { record: "fast", reason } if reason.contains("gpu_utilisation"))
    );
    // Inside a process too: a driver object written beside `details`
    // instead of in it must not vanish.
    let typo = r#"{"record":"slow","device":0,"at":5,"processes":[{"pid":7,"driver":{}}]}"#;
    let reason = refused(&[HEADER, typo], 2);
    assert!(
        matches!(&reason, LineError::BadRecord { record: "slow", reason } if reason.contains("driver")),
        "{reason}"
    );
    let reason = refused(&[HEADER, r#"{"record":"slow","device":0}"#], 2);
    assert!(
        matches!(&reason, LineError::BadRecord { record: "slow", reason } if reason.contains("at"))
    );
    let error = r#"{"record":"error","device":0,"tier":"fast","kind":"gremlins","message":"m"}"#;
    let reason = refused(&[HEADER, error], 2);
    assert!(
        matches!(&reason, LineError::BadRecord { record: "error", reason } if reason.contains("gremlins"))
    );
}

#[test]
fn a_record_for_a_device_the_header_lacks_is_refused() {
    let reason = refused(&[HEADER, &fast(0, 1), &fast(1, 1)], 3);
    assert_eq!(reason, LineError::UnknownDevice { index: 1 });
    let error = r#"{"record":"error","device":2,"tier":"slow","kind":"unavailable","message":"m"}"#;
    assert_eq!(refused(&[HEADER, error], 2), LineError::UnknownDevice { index: 2 });
}

#[test]
fn an_earlier_timestamp_in_the_same_device_and_tier_is_refused() {
    let start = 1_767_225_600_000;
    let other_tier = format!(r#"{{"record":"slow","device":0,"at":{start}}}"#);
    let lines = [
        HEADER,
        &fast(0, start + 500),
        &fast(3, start),       // another device may be earlier
        &other_tier,           // so may another tier
        &fast(0, start + 500), // equal is fine
        &fast(0, start + 250),
    ];
    let reason = refused(&lines, 6);
    assert_eq!(
        reason,
        LineError::OutOfOrder {
            tier: Some(Tier::Fast),
            device: 0,
            at: Timestamp::from_unix_millis(start + 250),
            previous: Timestamp::from_unix_millis(start + 500),
        }
    );
    let text = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    assert!(open(&text, 4096).unwrap_err().to_string().ends_with(
        "trace.ndjson line 6: fast record for device 0 at 1767225600250 is earlier than the \
         previous one at 1767225600500"
    ));
}

#[test]
fn a_line_of_exactly_the_limit_is_accepted_and_one_byte_more_is_refused() {
    // A record longer than the header, padded with JSON whitespace.
    let long = format!(r#"{{"record":"fast","device":0,"at":1{}}}"#, " ".repeat(300));
    let max = long.len();
    assert!(max > HEADER.len());
    let text = format!("{HEADER}\n{long}\n");
    let replay = open(&text, max).unwrap();
    assert_eq!(replay.records().len(), 1);
    assert_eq!(refused_text(&text, max - 1, 2), LineError::TooLong { max: max - 1 });
    // Also when the over-long line is the last and has no newline.
    assert_eq!(
        refused_text(&format!("{HEADER}\n{long}"), max - 1, 2),
        LineError::TooLong { max: max - 1 }
    );
    assert!(open(&format!("{HEADER}\n{long}"), max).is_ok());
}

#[test]
fn blank_lines_are_refused_but_a_final_newline_is_not_a_line() {
    assert_eq!(refused_text(&format!("{HEADER}\n\n{}\n", fast(0, 1)), 4096, 2), LineError::Blank);
    assert_eq!(
        refused_text(&format!("{HEADER}\n{}\n \r\n", fast(0, 1)), 4096, 3),
        LineError::Blank
    );
    assert!(open(&format!("{HEADER}\n{}\n", fast(0, 1)), 4096).is_ok());
}

#[test]
fn invalid_utf8_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.ndjson");
    let mut bytes = format!("{HEADER}\n").into_bytes();
    bytes.extend_from_slice(b"{\"record\":\"fast\",\"device\":0,\"at\":1,\"x\":\"\xff\"}\n");
    std::fs::write(&path, bytes).unwrap();
    let err = Replay::open(&path, 4096).unwrap_err();
    assert!(matches!(err, TraceError::Line { line: 2, reason: LineError::NotUtf8, .. }), "{err}");
}

#[test]
fn a_trace_larger_than_max_trace_size_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.ndjson");
    let text = format!("{HEADER}\n{}\n{}\n", fast(0, 1), fast(0, 2));
    std::fs::write(&path, &text).unwrap();
    let size = text.len() as u64;
    let err = Replay::open_bounded(&path, 4096, size - 1).unwrap_err();
    assert!(
        matches!(err, TraceError::TooLarge { size: s, max, .. } if s == size && max == size - 1),
        "{err}"
    );
    assert!(err.to_string().contains("source.max_trace_size"), "{err}");
    assert_eq!(err.line(), None);
    // Exactly at the limit is fine.
    let replay = Replay::open_bounded(&path, 4096, size).unwrap();
    assert_eq!(replay.records().len(), 2);
}
