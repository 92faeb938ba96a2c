//! Tests that a streamed trace gives the records and the errors of the
//! whole-trace `Replay`, in time order within its window, and counts what
//! the window cannot place.

use super::*;
use crate::model::Timestamp;

const HEADER: &str = r#"{"format":"vramd-trace","version":1,"source":"simulator","devices":[{"index":0,"uuid":"GPU-0","name":"Fake"},{"index":3,"uuid":"GPU-3","name":"Fake"}]}"#;
const START: i64 = 1_767_225_600_000;

fn fast(device: u32, offset: i64) -> String {
    let at = START + offset;
    format!(
        r#"{{"record":"fast","device":{device},"at":{at},"memory":{{"total_bytes":100,"used_bytes":{used},"free_bytes":{free}}},"gpu_utilization":0.1}}"#,
        used = offset % 100,
        free = 100 - offset % 100
    )
}

fn slow(device: u32, offset: i64) -> String {
    format!(
        r#"{{"record":"slow","device":{device},"at":{},"processes":[{{"pid":7,"name":"python3","used_bytes":64,"allocator":{{"allocated_bytes":10,"reserved_bytes":20,"active_bytes":10,"inactive_split_bytes":0,"alloc_retries":0,"ooms":0}}}}],"temperature_celsius":40.5}}"#,
        START + offset
    )
}

fn error(device: u32) -> String {
    format!(
        r#"{{"record":"error","device":{device},"tier":"fast","kind":"device_lost","message":"gone"}}"#
    )
}

fn write(lines: &[String]) -> tempfile::TempPath {
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file.into_temp_path()
}

fn stream(path: &std::path::Path, window: usize) -> Result<(Vec<TraceRecord>, u64), TraceError> {
    let options = StreamOptions { max_line_bytes: 4096, reorder_records: window };
    let mut stream = TraceStream::open(path, options)?;
    let mut records = Vec::new();
    while let Some(record) = stream.next_record()? {
        records.push(record);
    }
    Ok((records, stream.late_records().unwrap()))
}

fn time_ordered() -> Vec<String> {
    let mut lines = vec![HEADER.to_owned()];
    for step in 0..3000 {
        let offset = step * 250;
        for device in [0, 3] {
            lines.push(fast(device, offset));
            if step % 4 == 0 {
                lines.push(slow(device, offset));
            }
        }
        if step == 1500 {
            lines.push(error(3));
        }
    }
    lines
}

#[test]
fn a_time_ordered_trace_streams_the_records_of_the_whole_trace_in_file_order() {
    let path = write(&time_ordered());
    let whole = Replay::open(&path, 4096).unwrap();
    for window in [1, 64, 4096] {
        let (streamed, late) = stream(&path, window).unwrap();
        assert_eq!(late, 0, "window {window}");
        assert_eq!(streamed.len(), whole.records().len(), "window {window}");
        assert!(streamed == whole.records(), "window {window}: the records differ");
    }
}

#[test]
fn devices_written_out_of_step_are_played_in_time_order_within_the_window() {
    // Device 3's readings written 2 s (8 fast steps) after device 0's.
    let mut lines = vec![HEADER.to_owned()];
    for step in 0..200 {
        lines.push(fast(0, step * 250));
        if step >= 8 {
            lines.push(fast(3, (step - 8) * 250));
        }
    }
    let path = write(&lines);
    let (records, late) = stream(&path, 64).unwrap();
    assert_eq!(late, 0);
    let times: Vec<Timestamp> = records.iter().filter_map(TraceRecord::at).collect();
    assert!(times.is_sorted(), "not in time order");
    assert_eq!(records.len(), 200 + 192);
    // A window too small to place them: every one is still played, in each
    // device's own order, and the late ones counted.
    let (records, late) = stream(&path, 2).unwrap();
    assert_eq!(records.len(), 200 + 192);
    assert!(late > 150, "{late} late");
    for device in [0, 3] {
        let own: Vec<Timestamp> =
            records.iter().filter(|r| r.device() == device).filter_map(TraceRecord::at).collect();
        assert!(own.is_sorted(), "device {device} out of its own order");
    }
}

#[test]
fn a_bad_line_part_way_is_the_error_the_whole_trace_gives() {
    let mut lines = time_ordered();
    let bad = [
        r#"{"record":"fast","device":0,"at":5,"gpu_utilisation":0.5}"#.to_owned(),
        r#"{"record":"fast","device":1,"at":5}"#.to_owned(),
        r#"{"record":"fast","device":01,"at":5}"#.to_owned(),
        r#"{"record":"slow","device":0,"at":5,"device":0}"#.to_owned(),
        fast(0, 0),
        "{not json".to_owned(),
        String::new(),
    ];
    for line in bad {
        lines.insert(4000, line.clone());
        let path = write(&lines);
        let whole = Replay::open(&path, 4096).unwrap_err().to_string();
        let streamed = stream(&path, 64).unwrap_err().to_string();
        assert_eq!(streamed, whole, "{line}");
        assert!(whole.contains("line 4001: "), "{whole}");
        lines.remove(4000);
    }
}
