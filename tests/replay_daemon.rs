//! The daemon's streamed replay (`vramd --replay`) end to end, on the real
//! binary: a trace hundreds of times longer than its read-ahead queues,
//! replayed with a slow tier read four times less often than it was
//! recorded, still reaches every device's last reading and stores its OOM
//! events when the replay reaches them.
//!
//! Every wait is bounded and every daemon is killed when its test ends.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::fmt::Write as _;

use support::{Process, SERVE, WAIT, eventually, get, sample};

const START: i64 = 1_767_225_600_000;
const STEPS: i64 = 1200;
const TOTAL: u64 = 80 << 30;

fn used(device: u32, step: i64) -> u64 {
    (1 << 30) + (step as u64) * (1 << 20) + u64::from(device)
}

/// Two devices, a fast reading every 250 ms for 5 minutes and a slow one
/// every second, and an OOM event on each device half-way.
fn trace() -> String {
    let mut text = String::from(
        r#"{"format":"vramd-trace","version":1,"source":"simulator","devices":[{"index":0,"uuid":"GPU-0","name":"Fake"},{"index":1,"uuid":"GPU-1","name":"Fake"}]}"#,
    );
    text.push('\n');
    for step in 0..STEPS {
        let at = START + 250 * step;
        for device in 0..2 {
            let used = used(device, step);
            let free = TOTAL - used;
            writeln!(
                text,
                r#"{{"record":"fast","device":{device},"at":{at},"memory":{{"total_bytes":{TOTAL},"used_bytes":{used},"free_bytes":{free}}}}}"#
            )
            .unwrap();
            if step % 4 == 0 {
                writeln!(text, r#"{{"record":"slow","device":{device},"at":{at},"processes":[]}}"#)
                    .unwrap();
            }
            if step == STEPS / 2 {
                writeln!(
                    text,
                    r#"{{"record":"oom","device":{device},"event":{{"id":{device},"uuid":"GPU-{device}","index":{device},"reporter_pid":4242,"hostname":"h","pid":4242,"at":"2026-01-01T00:02:30.000Z","received_at":"2026-01-01T00:02:30.000Z","requested_bytes":1073741824,"device_free_bytes":104857600}}}}"#
                )
                .unwrap();
            }
        }
    }
    text
}

#[test]
fn a_trace_far_longer_than_the_queues_replays_to_its_end_with_its_oom_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.ndjson");
    std::fs::write(&path, trace()).unwrap();
    let args: Vec<&str> =
        ["--replay", path.to_str().unwrap(), "--speed", "100"].into_iter().chain(SERVE).collect();
    let env = [("VRAMD_SOURCE__REPLAY_QUEUE_RECORDS", "2"), ("VRAMD_SAMPLER__SLOW_INTERVAL", "4s")];
    let mut daemon = Process::spawn(&args, &env);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    eventually(WAIT, "every device's last fast reading replayed", || {
        let metrics = get(addr, "/metrics").text();
        (0..2).all(|device| {
            let series =
                format!("vramd_memory_used_bytes{{gpu=\"{device}\",uuid=\"GPU-{device}\"}}");
            sample(&metrics, &series) == Some(used(device, STEPS - 1) as f64)
        })
    });
    let events = get(addr, "/api/v1/oom-events?pid=4242").json();
    assert_eq!(events["events"].as_array().map(Vec::len), Some(2), "{events}");
    daemon.signal("TERM");
    let output = daemon.finish(WAIT);
    assert_eq!(output.status.code(), Some(0), "{}", output.stderr);
}
