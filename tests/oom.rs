//! The OOM flight recorder end to end, on the real binary: an OOM event
//! posted to a running daemon raises `allocator_oom` at once (the event
//! triggers its own evaluation) with the event's evidence, is counted in `/metrics`, is written into the
//! recording, and fires again when `vramd analyze` replays that recording.
//! With `ingest.snapshot_dir` set, the snapshots uploaded to events are kept
//! within their budget, oldest evicted first, and served back.
//!
//! Every wait is bounded and every daemon is killed when its test ends.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};

use support::{Deadline, Process, SERVE, WAIT, get, pause, run};

/// An OOM of `pid` on `uuid`: 1 GiB asked with 100 MiB free on the device
/// and 2 GiB cached in pieces of at most 256 MiB, so fragmentation.
fn event(uuid: &str, pid: u64) -> String {
    json!({
        "version": 1,
        "reporter": {"pid": pid, "hostname": "e2e"},
        "at": "2026-01-01T00:00:00.000Z",
        "uuid": uuid,
        "index": 0,
        "requested_bytes": 1_u64 << 30,
        "device_free_bytes": 100_u64 << 20,
        "memory_stats": {
            "allocated_bytes.all.current": 6_u64 << 30,
            "reserved_bytes.all.current": 8_u64 << 30,
            "active_bytes.all.current": 6_u64 << 30,
            "inactive_split_bytes.all.current": 1_u64 << 30,
            "num_alloc_retries": 2,
            "num_ooms": 1
        },
        "snapshot": {"segments": 40, "total_bytes": 8_u64 << 30, "allocated_bytes": 6_u64 << 30,
            "largest_free_block_bytes": 256_u64 << 20},
        "snapshot_path": "/tmp/vramd-snapshots/oom-e2e.pickle"
    })
    .to_string()
}

fn oom_alert(addr: std::net::SocketAddr) -> Option<Value> {
    let alerts = get(addr, "/api/v1/alerts?rule=allocator_oom").json();
    alerts["alerts"].as_array()?.iter().find(|alert| alert["state"] == "firing").cloned()
}

/// A ready daemon simulating one GPU of steady inference (nothing alerts),
/// with its address, the device's UUID and the simulated process's PID.
fn simulated_inference(env: &[(&str, &str)]) -> (Process, std::net::SocketAddr, String, u64) {
    let args: Vec<&str> =
        ["--simulate", "steady-inference", "--gpus", "1"].into_iter().chain(SERVE).collect();
    let mut daemon = Process::spawn(&args, env);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    let device = get(addr, "/api/v1/devices/0").json();
    let uuid = device["uuid"].as_str().unwrap().to_owned();
    let pid = device["processes"][0]["pid"].as_u64().expect("a simulated process");
    (daemon, addr, uuid, pid)
}

#[test]
fn an_oom_event_alerts_at_the_next_evaluation_and_replays_from_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.ndjson");
    let trace_arg = trace.to_str().unwrap();
    // steady-inference: nothing alerts, so the OOM alert is the event's.
    let env = [("VRAMD_ANALYSIS__EVALUATION_INTERVAL", "1s")];
    let flags = ["--simulate", "steady-inference", "--gpus", "1", "--record", trace_arg];
    let args: Vec<&str> = flags.iter().copied().chain(SERVE).collect();
    let mut daemon = Process::spawn(&args, &env);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    let device = get(addr, "/api/v1/devices/0").json();
    let uuid = device["uuid"].as_str().unwrap().to_owned();
    let pid = device["processes"][0]["pid"].as_u64().expect("a simulated process");
    assert!(oom_alert(addr).is_none(), "no OOM before the event");

    // One evaluation is 1 s; allow one more for the poll and a busy machine.
    let one_evaluation = Deadline::after(Duration::from_secs(3));
    let accepted = support::http::post(addr, "/api/v1/oom-events", &event(&uuid, pid)).unwrap();
    assert_eq!(accepted.status, 202, "{}", accepted.text());
    assert_eq!(accepted.json()["pid"], pid, "joined to the simulated process");
    let deadline = Deadline::after(WAIT);
    let alert = loop {
        if let Some(alert) = oom_alert(addr) {
            break alert;
        }
        assert!(!deadline.passed(), "allocator_oom did not fire within {WAIT:?}");
        pause();
    };
    assert!(!one_evaluation.passed(), "fired more than 3 s after the event");
    let description = alert["description"].as_str().unwrap();
    for evidence in [
        "OOM event 1",
        "fragmentation",
        "256 MiB",
        "/tmp/vramd-snapshots/oom-e2e.pickle",
        "GET /api/v1/oom-events/1/snapshot",
    ] {
        assert!(description.contains(evidence), "{evidence} not in {description}");
    }
    assert!(alert["remediation"].as_str().unwrap().contains("expandable_segments:True"));
    let metrics = get(addr, "/metrics").text();
    let line = format!("vramd_allocator_oom_events_total{{gpu=\"0\",uuid=\"{uuid}\"}} 1");
    assert!(metrics.contains(&line), "{line} not in /metrics");
    let listed = get(addr, &format!("/api/v1/oom-events?pid={pid}")).json();
    assert_eq!(listed["events"][0]["cause"], "fragmentation", "{listed}");

    // Give the recording a few more evaluation intervals past the event.
    let until = Deadline::after(Duration::from_secs(3));
    while !until.passed() {
        pause();
    }
    daemon.signal("TERM");
    let stopped = daemon.finish(WAIT);
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
    let recorded = std::fs::read_to_string(&trace).unwrap();
    assert_eq!(
        recorded.lines().filter(|line| line.contains("\"record\":\"oom\"")).count(),
        1,
        "one OOM record in the trace"
    );

    let replayed = run(&["analyze", "--replay", trace_arg], &env);
    assert_eq!(replayed.status.code(), Some(0), "{}", replayed.stderr);
    assert!(
        replayed
            .stdout
            .lines()
            .any(|line| line.contains("firing") && line.contains("allocator_oom")),
        "the replay did not fire allocator_oom:\n{}",
        replayed.stdout
    );
}

#[test]
fn an_oom_event_alerts_without_waiting_for_the_evaluation_tick() {
    // A 30 s tick: only the event's own evaluation can fire within 5 s.
    let (daemon, addr, uuid, pid) =
        simulated_inference(&[("VRAMD_ANALYSIS__EVALUATION_INTERVAL", "30s")]);
    assert!(oom_alert(addr).is_none(), "no OOM before the event");

    let accepted = support::http::post(addr, "/api/v1/oom-events", &event(&uuid, pid)).unwrap();
    assert_eq!(accepted.status, 202, "{}", accepted.text());
    // Well under the tick; the 1 s target itself is measured, not asserted.
    let deadline = Deadline::after(Duration::from_secs(5));
    while oom_alert(addr).is_none() {
        assert!(!deadline.passed(), "allocator_oom waited for the 30 s evaluation tick");
        pause();
    }
    daemon.signal("TERM");
    let stopped = daemon.finish(WAIT);
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
}

#[test]
fn uploaded_snapshots_are_served_within_the_budget_oldest_evicted_first() {
    let dir = tempfile::tempdir().unwrap();
    let snapshots = dir.path().join("snapshots");
    std::fs::create_dir(&snapshots).unwrap();
    // Left by an earlier run: its ids would name this run's events.
    std::fs::write(snapshots.join("oom-1.snapshot"), b"stale").unwrap();
    let env = [
        ("VRAMD_INGEST__SNAPSHOT_DIR", snapshots.to_str().unwrap()),
        ("VRAMD_INGEST__MAX_SNAPSHOT_BYTES", "1MiB"),
        ("VRAMD_INGEST__MAX_SNAPSHOT_UPLOAD", "600KiB"),
    ];
    let (daemon, addr, uuid, pid) = simulated_inference(&env);
    assert_eq!(get(addr, "/api/v1/oom-events/1/snapshot").status, 404, "the stale file is gone");

    let mut ids = Vec::new();
    for _ in 0..3 {
        let accepted = support::http::post(addr, "/api/v1/oom-events", &event(&uuid, pid)).unwrap();
        assert_eq!(accepted.status, 202, "{}", accepted.text());
        ids.push(accepted.json()["id"].as_u64().unwrap());
    }
    let path = |id: u64| format!("/api/v1/oom-events/{id}/snapshot");
    let too_big = support::http::put(addr, &path(ids[0]), &vec![0; 700 << 10]).unwrap();
    assert_eq!(too_big.status, 413, "{}", too_big.text());
    assert_eq!(too_big.json()["code"], "snapshot_too_large");

    let mut evicted = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let body = vec![u8::try_from(n).unwrap(); 500 << 10];
        let stored = support::http::put(addr, &path(*id), &body).unwrap();
        assert_eq!(stored.status, 201, "{}", stored.text());
        evicted.extend(stored.json()["evicted"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(evicted, vec![json!(ids[0])], "1.5 MiB into 1 MiB: the first upload goes");
    assert_eq!(get(addr, &path(ids[0])).status, 404);
    let served = get(addr, &path(ids[2]));
    assert_eq!(served.status, 200);
    assert_eq!(served.header("content-type"), Some("application/octet-stream"));
    assert!(served.body == vec![2_u8; 500 << 10], "served bytes differ from the upload");
    let event = get(addr, &format!("/api/v1/oom-events/{}", ids[2])).json();
    assert_eq!(event["snapshot_url"], path(ids[2]), "{event}");
    let mut names: Vec<String> = std::fs::read_dir(&snapshots)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec![format!("oom-{}.snapshot", ids[1]), format!("oom-{}.snapshot", ids[2])]);
    daemon.signal("TERM");
    let stopped = daemon.finish(WAIT);
    assert_eq!(stopped.status.code(), Some(0), "{}", stopped.stderr);
}
