//! Tests of the daemon's streamed replay: it answers exactly as the
//! whole-trace `Replay` did, holds no more than its queues whatever the
//! trace's length, never stalls one reader behind another, and fails
//! clearly, at start-up when it can.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::Duration;

use super::feeders::{LaneKey, sniff};
use super::*;
use crate::model::ProbeFailureKind;
use crate::source::probe::{ProbeRequest, Prober};
use crate::source::{DeviceSource, SourceError, Tier};

const START: i64 = 1_767_225_600_000;
const HEADER: &str = r#"{"format":"vramd-trace","version":1,"source":"simulator","devices":[{"index":0,"uuid":"GPU-0","name":"Fake"},{"index":1,"uuid":"GPU-1","name":"Fake"}]}"#;
/// Long enough for a trace to outgrow the reading thread's read-ahead.
const STEPS: i64 = 6000;
/// Generous: every wait below ends in milliseconds unless the replay is
/// stuck, which is what these tests would catch.
const STUCK: Duration = Duration::from_secs(60);

fn options(queue_records: usize) -> ReplayOptions {
    ReplayOptions {
        max_line_bytes: 4096,
        max_file_bytes: u64::MAX,
        queue_records,
        answer_probes: true,
        max_devices: 64,
    }
}

fn fast(device: u32, step: i64) -> String {
    // Padded so that every line has the same length, whatever the step.
    format!(r#"{{"record":"fast","device":{device},"at":{at:>16}}}"#, at = START + 250 * step)
}

fn slow(device: u32, step: i64) -> String {
    format!(
        r#"{{"record":"slow","device":{device},"at":{at},"processes":[]}}"#,
        at = START + 1000 * (step / 4)
    )
}

/// Two devices, a fast record of each every step and a slow one every
/// fourth, as the recorder interleaves them.
fn long_trace() -> Vec<String> {
    let mut lines = vec![HEADER.to_owned()];
    for step in 0..STEPS {
        for device in 0..2 {
            lines.push(fast(device, step));
            if step % 4 == 0 {
                lines.push(slow(device, step));
            }
        }
    }
    lines
}

fn write(dir: &tempfile::TempDir, lines: &[String]) -> PathBuf {
    let path = dir.path().join("trace.ndjson");
    std::fs::write(&path, lines.iter().map(|line| format!("{line}\n")).collect::<String>())
        .unwrap();
    path
}

fn fast_times(replay: &StreamedReplay, device: u32) -> Vec<i64> {
    let mut times = Vec::new();
    loop {
        match replay.read_fast(device) {
            Ok(reading) => times.push(reading.at.unix_millis()),
            Err(SourceError::TraceEnded { .. }) => return times,
            Err(other) => panic!("device {device}: {other}"),
        }
    }
}

fn slow_count(replay: &StreamedReplay, device: u32) -> usize {
    let mut count = 0;
    while replay.read_slow(device, usize::MAX).is_ok() {
        count += 1;
    }
    count
}

/// Runs `work` on a thread of its own and fails the test if it is not done
/// within `STUCK`.
fn within_bound<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = channel();
    std::thread::spawn(move || done.send(work()));
    finished.recv_timeout(STUCK).expect("the replay is stuck")
}

fn expected_fast() -> Vec<i64> {
    (0..STEPS).map(|step| START + 250 * step).collect()
}

fn probe_request() -> ProbeRequest {
    ProbeRequest {
        block_bytes: 64 << 20,
        samples: 5,
        margin_bytes: 1 << 30,
        headroom_time_budget: None,
        timeout: Duration::from_secs(60),
        cuda_library: None,
        nvml_library: None,
    }
}

/// The example trace of docs/trace-format.md, written into `dir`.
fn documented_example(dir: &tempfile::TempDir) -> PathBuf {
    let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/trace-format.md"));
    let (_, after_marker) = doc.split_once("<!-- trace-example").unwrap();
    let (_, block) = after_marker.split_once("```json\n").unwrap();
    let (example, _) = block.split_once("```").unwrap();
    let path = dir.path().join("example.ndjson");
    std::fs::write(&path, example).unwrap();
    path
}

#[test]
fn a_trace_far_longer_than_the_queues_replays_whole_in_order_holding_only_the_queues() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, &long_trace());
    let replay = Arc::new(StreamedReplay::open(&path, options(4)).unwrap());
    let reader = replay.clone();
    let (zero, one, slow_zero, slow_one) = within_bound(move || {
        // One device to its end before the other, slow tiers last: every
        // queue but one is left full for a long time.
        let zero = fast_times(&reader, 0);
        let one = fast_times(&reader, 1);
        (zero, one, slow_count(&reader, 0), slow_count(&reader, 1))
    });
    assert_eq!(zero, expected_fast());
    assert_eq!(one, expected_fast());
    assert_eq!((slow_zero, slow_one), (STEPS as usize / 4, STEPS as usize / 4));
    // Four lanes (fast and slow of two devices) of at most 4 records, of a
    // trace of 15,000.
    assert!(replay.peak_buffered_records() <= 16, "{}", replay.peak_buffered_records());
    assert_eq!(replay.buffered_records(), 0);
    // The end stays the end.
    assert_eq!(replay.read_fast(0), Err(SourceError::TraceEnded { index: 0, tier: Tier::Fast }));
    assert_eq!(
        replay.read_slow(1, usize::MAX),
        Err(SourceError::TraceEnded { index: 1, tier: Tier::Slow })
    );
    assert_eq!(replay.read_fast(2), Err(SourceError::UnknownDevice { index: 2 }));
}

#[test]
fn a_lane_nobody_reads_does_not_hold_back_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, &long_trace());
    let replay = Arc::new(StreamedReplay::open(&path, options(2)).unwrap());
    let reader = replay.clone();
    // The slow tiers are never read (a slow tier far slower than the
    // recording's, or a device nobody samples).
    let (zero, one) = within_bound(move || (fast_times(&reader, 0), fast_times(&reader, 1)));
    assert_eq!(zero, expected_fast());
    assert_eq!(one, expected_fast());
    let slow_lane = replay.lane(0, Tier::Slow).unwrap();
    assert!(replay.queues().detached(slow_lane), "the full slow lane was given its own reading");
    assert!(replay.peak_buffered_records() <= 8);
}

#[test]
fn readers_at_different_paces_on_their_own_threads_each_get_their_whole_lane() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, &long_trace());
    let replay = Arc::new(StreamedReplay::open(&path, options(3)).unwrap());
    let mut readers = Vec::new();
    for device in 0..2 {
        let fast_reader = replay.clone();
        readers.push(std::thread::spawn(move || (fast_times(&fast_reader, device).len(), 0)));
        let slow_reader = replay.clone();
        readers.push(std::thread::spawn(move || {
            // The slow tier pauses now and then, as a sampler's slower
            // timer does; the others do not wait for it.
            let mut count = 0;
            while slow_reader.read_slow(device, usize::MAX).is_ok() {
                count += 1;
                if count % 100 == 0 {
                    std::thread::yield_now();
                }
            }
            (0, count)
        }));
    }
    let totals = within_bound(move || {
        readers
            .into_iter()
            .map(|reader| reader.join().unwrap())
            .fold((0, 0), |sum, one| (sum.0 + one.0, sum.1 + one.1))
    });
    assert_eq!(totals, (2 * STEPS as usize, 2 * STEPS as usize / 4));
    assert!(replay.peak_buffered_records() <= 12);
}

#[test]
fn a_bad_line_late_in_a_long_trace_stops_the_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = long_trace();
    let last = lines.len();
    lines[last - 2] = "{\"record\":\"fast\",".to_owned();
    let path = write(&dir, &lines);
    let error = StreamedReplay::open(&path, options(4)).unwrap_err();
    assert_eq!(error.line(), Some(last as u64 - 1), "{error}");
    assert!(error.to_string().contains("trace.ndjson line "), "{error}");
    let empty = dir.path().join("empty.ndjson");
    std::fs::write(&empty, "").unwrap();
    assert!(matches!(StreamedReplay::open(&empty, options(4)), Err(TraceError::Empty { .. })));
    let missing = StreamedReplay::open(Path::new("/nonexistent/t.ndjson"), options(4));
    assert!(matches!(missing, Err(TraceError::Open { .. })));
}

#[test]
fn a_trace_damaged_after_start_up_answers_errors_from_the_damaged_line_on() {
    let dir = tempfile::tempdir().unwrap();
    let lines = long_trace();
    let path = write(&dir, &lines);
    let replay = StreamedReplay::open(&path, options(2)).unwrap();
    // Damage a line near the end in place (same inode, same length), past
    // what the reading thread can have read ahead.
    let damaged = lines.len() - 10;
    let mut text = std::fs::read_to_string(&path).unwrap();
    let offset: usize = lines[..damaged].iter().map(|line| line.len() + 1).sum();
    let garbage = "x".repeat(lines[damaged].len());
    text.replace_range(offset..offset + garbage.len(), &garbage);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()))
        .unwrap();
    let replay = Arc::new(replay);
    let reader = replay.clone();
    let (read, failure, again) = within_bound(move || {
        let mut read = 0;
        let failure = loop {
            match reader.read_fast(0) {
                Ok(_) => read += 1,
                Err(error) => break error,
            }
        };
        (read, failure, reader.read_fast(0))
    });
    assert!(read > STEPS as usize - 10 && read < STEPS as usize, "{read} readings before it");
    let SourceError::Unavailable { reason } = &failure else { panic!("{failure:?}") };
    assert!(reason.contains(&format!("line {}", damaged + 1)), "{reason}");
    assert_eq!(again, Err(failure), "every later read says so too");
}

#[test]
fn the_documented_example_answers_as_the_whole_trace_replay_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = documented_example(&dir);
    let whole = Replay::open(&path, 4096).unwrap();
    let streamed = StreamedReplay::open(&path, options(1)).unwrap();
    assert_eq!(streamed.header(), whole.header());
    assert_eq!(streamed.devices(), whole.devices());
    assert!(streamed.has_probe_records());
    let request = probe_request();
    let devices = whole.devices().unwrap();
    for _ in 0..5 {
        for device in &devices {
            let index = device.index;
            assert_eq!(streamed.read_fast(index), whole.read_fast(index));
            assert_eq!(streamed.read_slow(index, 1), whole.read_slow(index, 1));
            assert_eq!(streamed.probe(device, &request), whole.probe(device, &request));
        }
    }
    let ended = streamed.probe(&devices[0], &request).unwrap_err();
    assert_eq!(ended.kind, ProbeFailureKind::TraceEnded);
}

#[test]
fn probe_outcomes_are_not_queued_when_the_probe_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = documented_example(&dir);
    let request = probe_request();
    let off =
        StreamedReplay::open(&path, ReplayOptions { answer_probes: false, ..options(8) }).unwrap();
    assert!(off.has_probe_records());
    // Fast and slow of two devices: no probe queue to fill.
    assert_eq!(off.lane_count(), 4);
    let device = off.devices().unwrap().remove(0);
    assert_eq!(off.probe(&device, &request).unwrap_err().kind, ProbeFailureKind::TraceEnded);
    let on = StreamedReplay::open(&path, options(8)).unwrap();
    assert_eq!(on.lane_count(), 6);
}

#[test]
fn oom_events_come_in_file_order_however_many_the_queue_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = vec![HEADER.to_owned()];
    for id in 0..50 {
        let device = id % 2;
        lines.push(fast(device, id.into()));
        lines.push(format!(
            r#"{{"record":"oom","device":{device},"event":{{"id":{id},"uuid":"GPU-{device}","index":{device},"reporter_pid":42,"hostname":"h","pid":4242,"at":"2026-01-01T00:00:01.000Z","received_at":"2026-01-01T00:00:02.000Z","requested_bytes":1,"device_free_bytes":1}}}}"#
        ));
    }
    let path = write(&dir, &lines);
    let replay = Arc::new(StreamedReplay::open(&path, options(2)).unwrap());
    let feed = replay.oom_feed().unwrap();
    let reader = replay.clone();
    let ids = within_bound(move || {
        let mut ids = Vec::new();
        loop {
            match feed.try_next() {
                NextOom::Event(device, event) => ids.push((device, event.id)),
                NextOom::NotYet => {
                    // Something reads the devices meanwhile, as the sampler
                    // does.
                    let _ = reader.read_fast(0);
                    let _ = reader.read_fast(1);
                    std::thread::yield_now();
                }
                NextOom::Ended => return ids,
            }
        }
    });
    let expected: Vec<(u32, u64)> = (0..50).map(|id| (id % 2, u64::from(id))).collect();
    assert_eq!(ids, expected);
    assert!(replay.peak_buffered_records() <= 10);
}

#[test]
fn devices_past_the_sampler_limit_are_read_past_not_queued() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, &long_trace());
    let replay = Arc::new(
        StreamedReplay::open(&path, ReplayOptions { max_devices: 1, ..options(4) }).unwrap(),
    );
    let reader = replay.clone();
    assert_eq!(within_bound(move || fast_times(&reader, 0)), expected_fast());
    // Device 0's slow lane, full; nothing of device 1.
    assert_eq!(replay.buffered_records(), 4);
    assert_eq!(replay.read_fast(1), Err(SourceError::UnknownDevice { index: 1 }));
    assert_eq!(replay.devices().unwrap().len(), 2, "the sampler is told of both and keeps one");
}

#[test]
fn a_lane_whose_records_stop_early_ends_without_waiting_for_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // Device 1 is lost after 10 steps: its lanes have no more records.
    let lines: Vec<String> = long_trace()
        .into_iter()
        .enumerate()
        .filter(|(at, line)| *at < 60 || !line.contains("\"device\":1,"))
        .map(|(_, line)| line)
        .collect();
    let path = write(&dir, &lines);
    // Device 1's records all fit in its queues, so reading them needs no
    // lane detached; its end must not need the rest of the file either.
    let replay = Arc::new(StreamedReplay::open(&path, options(64)).unwrap());
    let reader = replay.clone();
    let lost = within_bound(move || fast_times(&reader, 1));
    assert_eq!(lost, expected_fast()[..lost.len()].to_vec());
    assert!((20..30).contains(&lost.len()), "{}", lost.len());
    for tier in [Tier::Fast, Tier::Slow] {
        let lane = replay.lane(0, tier).unwrap();
        assert!(!replay.queues().detached(lane), "device 0's {tier} queue was not read past");
    }
}

#[test]
fn a_line_of_the_recorders_layout_names_its_lane_from_its_first_bytes() {
    assert_eq!(sniff(fast(3, 7).as_bytes()), Some(LaneKey::Tier(3, Tier::Fast)));
    assert_eq!(sniff(slow(12, 7).as_bytes()), Some(LaneKey::Tier(12, Tier::Slow)));
    let probe = r#"{"record":"probe","device":1,"failure":{"kind":"timeout","message":"x"}}"#;
    assert_eq!(sniff(probe.as_bytes()), Some(LaneKey::Probe(1)));
    // Not certain from the first bytes: parsed instead.
    let error = r#"{"record":"error","device":1,"tier":"fast","kind":"device_lost","message":"x"}"#;
    assert_eq!(sniff(error.as_bytes()), None);
    assert_eq!(sniff(br#"{"device":1,"record":"fast","at":1}"#), None);
    assert_eq!(sniff(br#"{"record":"fast","device":99999999999,"at":1}"#), None);
    assert_eq!(sniff(br#"{"record":"fast","device":1}"#), None);
}

#[test]
fn a_probe_gets_its_next_outcome_at_once_however_far_ahead_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    for (at, line) in long_trace().into_iter().enumerate() {
        lines.push(line);
        if at > 0 && at % 3000 == 0 {
            let seconds = at / 3000;
            lines.push(format!(
                r#"{{"record":"probe","device":0,"failure":{{"kind":"timeout","message":"{seconds}"}}}}"#
            ));
        }
    }
    let path = write(&dir, &lines);
    let replay = Arc::new(StreamedReplay::open(&path, options(2)).unwrap());
    let device = replay.devices().unwrap().remove(0);
    let prober = replay.clone();
    let messages = within_bound(move || {
        let request = probe_request();
        (0..6).map(|_| prober.probe(&device, &request).unwrap_err().message).collect::<Vec<_>>()
    });
    assert_eq!(messages[..5], ["1", "2", "3", "4", "5"]);
    assert!(messages[5].contains("no more probe records"), "{}", messages[5]);
    for index in 0..2 {
        for tier in [Tier::Fast, Tier::Slow] {
            let lane = replay.lane(index, tier).unwrap();
            assert!(!replay.queues().detached(lane), "device {index} {tier} was not read past");
        }
    }
}
