//! End-to-end tests: run the real `vramd` binary, on ephemeral loopback
//! ports, and check what an operator would see: the exposition (checked by
//! `promtool`), the REST API over a real socket, signals, exit statuses and
//! log lines, configuration errors, and record/replay of traces.
//!
//! Needs `promtool` on PATH; `scripts/test.sh` installs it. Every wait is
//! bounded and every daemon is killed when its test ends, pass or fail.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use support::{Deadline, Output, Process, SERVE, WAIT, get, pause, run, start_ready};

/// The daemon promises to exit within 2 s of SIGTERM/SIGINT
/// (server.shutdown_timeout 1.5 s); allow a little slack.
const STOP_WAIT: Duration = Duration::from_secs(3);

fn args<'a>(flags: &[&'a str]) -> Vec<&'a str> {
    flags.iter().copied().chain(SERVE).collect()
}

fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "expected exit status {code}, got {}; stderr:\n{}",
        output.status,
        output.stderr
    );
}

/// The log line that reports the shutdown, with the signal named.
fn assert_logged_shutdown(output: &Output, signal: &str) {
    let logged = output
        .stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .any(|line| line["message"] == "shutting down" && line["signal"] == signal);
    assert!(logged, "no `shutting down` log line with signal {signal}; stderr:\n{}", output.stderr);
}

/// Config and input errors are reported before the daemon binds a port.
fn assert_never_listened(output: &Output) {
    assert!(!output.stderr.contains("listening"), "it bound a port first:\n{}", output.stderr);
}

/// Runs `promtool check metrics < file`; a missing promtool is a failure
/// with instructions, never a silent skip.
fn promtool_check(exposition: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics.txt");
    std::fs::write(&path, exposition).unwrap();
    let output = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&path).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(output) => output,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
            "promtool is not installed; run scripts/test.sh, which installs it \
             (Debian package `prometheus`)"
        ),
        Err(error) => panic!("cannot run promtool: {error}"),
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool rejected the exposition ({}):\n{said}",
        output.status
    );
    assert!(said.trim().is_empty(), "promtool found lint problems:\n{said}\nin:\n{exposition}");
}

fn device_uuids(addr: std::net::SocketAddr) -> Vec<String> {
    let response = get(addr, "/api/v1/devices");
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()["devices"]
        .as_array()
        .unwrap_or_else(|| panic!("no devices array: {}", response.text()))
        .iter()
        .map(|device| device["uuid"].as_str().unwrap().to_owned())
        .collect()
}

/// The JSON error shape: the given status, a JSON content type, a stable
/// `code` and a non-empty human `message`.
fn assert_json_error(addr: std::net::SocketAddr, path: &str, status: u16, code: &str) {
    let response = get(addr, path);
    assert_eq!(response.status, status, "GET {path}: {}", response.text());
    assert!(
        response.header("content-type").is_some_and(|value| value.starts_with("application/json")),
        "GET {path}: content type {:?}",
        response.header("content-type")
    );
    let body = response.json();
    assert_eq!(body["code"], code, "GET {path}: {body}");
    assert!(body["message"].as_str().is_some_and(|message| !message.is_empty()), "{body}");
}

#[test]
fn simulated_daemon_serves_metrics_that_promtool_accepts_and_stops_on_sigterm() {
    let (daemon, addr) = start_ready(&args(&[
        "--simulate",
        "multi-tenant",
        "--gpus",
        "2",
        "--seed",
        "7",
        "--speed",
        "20",
    ]));

    let response = get(addr, "/metrics");
    assert_eq!(response.status, 200, "{}", response.text());
    let content_type = response.header("content-type").unwrap_or_default();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "content type {content_type:?}");
    let text = response.text();
    for needle in [
        "vramd_memory_used_bytes{gpu=\"0\"",
        "vramd_process_memory_used_bytes",
        "vramd_allocator_reserved_bytes",
        "\nvramd_nvml_up 1\n",
        "vramd_build_info",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from /metrics:\n{text}");
    }
    promtool_check(&text);

    daemon.signal("TERM");
    let output = daemon.finish(STOP_WAIT);
    assert_exit(&output, 0);
    assert_logged_shutdown(&output, "SIGTERM");
}

#[test]
fn sigint_stops_the_daemon_cleanly() {
    let (daemon, _addr) = start_ready(&args(&["--simulate", "idle", "--speed", "20"]));
    daemon.signal("INT");
    let output = daemon.finish(STOP_WAIT);
    assert_exit(&output, 0);
    assert_logged_shutdown(&output, "SIGINT");
}

#[test]
fn rest_api_answers_over_a_real_socket() {
    let (daemon, addr) =
        start_ready(&args(&["--simulate", "multi-tenant", "--gpus", "2", "--speed", "20"]));

    let health = get(addr, "/healthz");
    assert_eq!(health.status, 200, "{}", health.text());

    let uuids = device_uuids(addr);
    assert_eq!(uuids.len(), 2, "{uuids:?}");

    // Processes come from the slow tier, which may trail readiness a little.
    let deadline = Deadline::after(WAIT);
    let detail = loop {
        let response = get(addr, "/api/v1/devices/0");
        assert_eq!(response.status, 200, "{}", response.text());
        let detail = response.json();
        if detail["processes"].as_array().is_some_and(|processes| !processes.is_empty()) {
            break detail;
        }
        assert!(!deadline.passed(), "device 0 listed no processes within {WAIT:?}: {detail}");
        pause();
    };
    assert_eq!(detail["index"], 0, "{detail}");
    assert_eq!(detail["uuid"], uuids[0].as_str(), "{detail}");
    assert!(detail["processes"][0]["pid"].is_u64(), "{detail}");

    for (index, uuid) in uuids.iter().enumerate() {
        assert!(uuid.starts_with("GPU-"), "{uuid}");
        let response = get(addr, &format!("/api/v1/devices/{uuid}"));
        assert_eq!(response.status, 200, "{uuid}: {}", response.text());
        let by_uuid = response.json();
        assert_eq!(by_uuid["uuid"], uuid.as_str(), "{by_uuid}");
        assert_eq!(by_uuid["index"], index, "{by_uuid}");
    }

    assert_json_error(addr, "/api/v1/devices/7", 404, "unknown_device");
    assert_json_error(
        addr,
        "/api/v1/devices/GPU-00000000-0000-0000-0000-000000000000",
        404,
        "unknown_device",
    );

    let response = get(addr, "/api/v1/devices/0/history?window=1m&step=1s");
    assert_eq!(response.status, 200, "{}", response.text());
    let history = response.json();
    assert_eq!(history["gpu"], 0, "{history}");
    assert_eq!(history["window_seconds"], 60.0, "{history}");
    assert_eq!(history["step_seconds"], 1.0, "{history}");
    let buckets = history["buckets"].as_array().unwrap_or_else(|| panic!("{history}"));
    assert!(!buckets.is_empty(), "no history buckets: {history}");
    for bucket in buckets {
        assert!(bucket["start"].is_string(), "{bucket}");
        assert!(bucket["samples"].as_u64().is_some_and(|samples| samples > 0), "{bucket}");
        assert!(bucket["used_bytes"]["last"].is_u64(), "{bucket}");
    }

    assert_json_error(addr, "/api/v1/devices/0/history?window=soon&step=1s", 400, "bad_window");
    assert_json_error(addr, "/api/v1/nothing-here", 404, "not_found");
    drop(daemon);
}

#[test]
fn no_driver_still_serves() {
    // No --simulate, and NVML pointed at a library that does not exist, so
    // the no-driver path runs whether or not this host has a driver.
    let missing = "/nonexistent/libnvidia-ml.so.1";
    let mut daemon = Process::spawn(&SERVE, &[("VRAMD_NVML__LIBRARY_PATH", missing)]);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    let metrics = get(addr, "/metrics").text();
    assert!(metrics.contains("\nvramd_nvml_up 0\n"), "/metrics:\n{metrics}");
    let devices = get(addr, "/api/v1/devices");
    assert_eq!(devices.status, 200, "{}", devices.text());
    assert_eq!(devices.json(), serde_json::json!({ "devices": [] }));

    // Let discovery retry (backoff from 1 s: attempts at about 0, 1 and 3 s),
    // then the failure must still have been logged only once.
    let unavailable = |text: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix("vramd_source_errors_total{kind=\"unavailable\"} "))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0)
    };
    let deadline = Deadline::after(WAIT);
    while unavailable(&get(addr, "/metrics").text()) < 3 {
        assert!(!deadline.passed(), "discovery did not retry twice within {WAIT:?}");
        pause();
    }
    let warnings: Vec<Value> = daemon
        .log()
        .into_iter()
        .filter(|line| line["level"] == "WARN" || line["level"] == "ERROR")
        .collect();
    assert_eq!(warnings.len(), 1, "the missing driver must be logged once: {warnings:#?}");
    assert!(warnings[0].to_string().contains("NVML"), "{}", warnings[0]);
    assert_eq!(get(addr, "/readyz").status, 200);
    drop(daemon);
}

#[test]
fn unknown_config_key_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vramd.toml");
    std::fs::write(&path, "[sampler]\nfast_intervall = \"1s\"\n").unwrap();
    let output = run(
        &[Path::new("--config"), path.as_path(), Path::new("--listen"), Path::new("127.0.0.1:0")],
        &[],
    );
    assert_exit(&output, 2);
    assert!(output.stderr.contains("sampler.fast_intervall"), "{}", output.stderr);
    assert_never_listened(&output);
}

#[test]
fn invalid_listen_address_exits_2() {
    let output = run(&["--listen", "nonsense"], &[]);
    assert_exit(&output, 2);
    assert!(output.stderr.contains("server.listen"), "{}", output.stderr);
    assert!(output.stderr.contains("nonsense"), "{}", output.stderr);
    assert_never_listened(&output);
}

#[test]
fn invalid_environment_value_exits_2_naming_the_key() {
    let output = run(&SERVE, &[("VRAMD_SAMPLER__FAST_INTERVAL", "fast")]);
    assert_exit(&output, 2);
    assert!(output.stderr.contains("sampler.fast_interval"), "{}", output.stderr);
    assert_never_listened(&output);
}

#[test]
fn occupied_port_exits_1_naming_the_address() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = run(&["--simulate", "idle", "--listen", &addr, "--log-format", "json"], &[]);
    assert_exit(&output, 1);
    assert!(output.stderr.contains(&addr), "{addr} not named in:\n{}", output.stderr);
    drop(taken);
}

#[test]
fn require_gpu_without_a_driver_exits_1_naming_the_library() {
    let missing = "/nonexistent/libnvidia-ml.so.1";
    let output = run(
        &["--require-gpu", "--listen", "127.0.0.1:0", "--log-format", "json"],
        &[("VRAMD_NVML__LIBRARY_PATH", missing)],
    );
    assert_exit(&output, 1);
    assert!(output.stderr.contains(missing), "library not named in:\n{}", output.stderr);
    assert!(!output.stderr.contains("\"listening\""), "must fail before binding");
}

#[test]
fn check_config_prints_the_effective_configuration() {
    let output = run(&["check-config"], &[]);
    assert_exit(&output, 0);
    assert!(output.stdout.contains("fast_interval"), "{}", output.stdout);
}

#[test]
fn scenarios_lists_seven_scenarios() {
    let output = run(&["scenarios"], &[]);
    assert_exit(&output, 0);
    assert_eq!(output.stdout.lines().count(), 7, "{}", output.stdout);
    assert!(
        output.stdout.lines().any(|line| line.starts_with("multi-tenant ")),
        "{}",
        output.stdout
    );
}

/// An option the subcommand would ignore is refused with status 2, naming
/// it, instead of silently doing nothing (issue 35, operators).
#[test]
fn subcommands_refuse_options_they_would_ignore() {
    let output = run(&["scenarios", "--web.config.file", "/nonexistent"], &[]);
    assert_exit(&output, 2);
    assert!(output.stderr.contains("--web.config.file"), "{}", output.stderr);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("x.ndjson");
    let output = run(&["analyze", "--simulate", "idle", "--record", trace.to_str().unwrap()], &[]);
    assert_exit(&output, 2);
    assert!(output.stderr.contains("`vramd analyze` does not use --record"), "{}", output.stderr);
    assert!(!trace.exists(), "nothing was recorded");
}

/// Whether the trace at `path` holds a fast and a slow reading of each of
/// its first `devices` devices (a line still being written is skipped).
fn records_every_tier(path: &Path, devices: usize) -> bool {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let records: Vec<Value> =
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    (0..devices).all(|device| {
        ["fast", "slow"].iter().all(|tier| {
            records.iter().any(|record| record["record"] == *tier && record["device"] == device)
        })
    })
}

#[test]
fn recorded_trace_replays_the_same_devices_and_a_corrupt_trace_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.ndjson");
    let trace_arg = trace.to_str().unwrap();

    let (recorder, addr) =
        start_ready(&args(&["--simulate", "leak", "--speed", "50", "--record", trace_arg]));
    let recorded = device_uuids(addr);
    assert!(!recorded.is_empty());
    // The replay is ready once it has played a cycle: a fast and a slow
    // reading of every device.
    let deadline = Deadline::after(WAIT);
    while !records_every_tier(&trace, recorded.len()) {
        assert!(!deadline.passed(), "the trace lacks a reading of some device within {WAIT:?}");
        pause();
    }
    recorder.signal("TERM");
    assert_exit(&recorder.finish(STOP_WAIT), 0);

    let (replayer, addr) = start_ready(&args(&["--replay", trace_arg, "--speed", "50"]));
    assert_eq!(device_uuids(addr), recorded);
    replayer.signal("TERM");
    assert_exit(&replayer.finish(STOP_WAIT), 0);

    let corrupt = dir.path().join("corrupt.ndjson");
    std::fs::copy(&trace, &corrupt).unwrap();
    let mut file = std::fs::OpenOptions::new().append(true).open(&corrupt).unwrap();
    file.write_all(b"this is not a trace record\n").unwrap();
    drop(file);
    let lines = std::fs::read_to_string(&corrupt).unwrap().lines().count();
    let output = run(&args(&["--replay", corrupt.to_str().unwrap(), "--speed", "50"]), &[]);
    assert_exit(&output, 2);
    assert!(
        output.stderr.contains(&format!("line {lines}")),
        "line {lines} not named in:\n{}",
        output.stderr
    );
    assert_never_listened(&output);
}

#[test]
fn simulated_workloads_report_their_allocator_through_the_report_path() {
    let (daemon, addr) =
        start_ready(&args(&["--simulate", "multi-tenant", "--gpus", "2", "--speed", "5"]));
    let reports = get(addr, "/api/v1/allocator-reports").json();
    let listed = reports["reports"].as_array().expect("a list");
    assert!(!listed.is_empty(), "{reports}");
    assert!(listed.iter().all(|r| r["reporter"]["hostname"] == "simulated"), "{reports}");
    let deadline = Deadline::after(WAIT);
    loop {
        let reports = get(addr, "/api/v1/allocator-reports").json();
        let all_matched =
            reports["reports"].as_array().is_some_and(|l| l.iter().all(|r| r["matched"] == true));
        if all_matched {
            break;
        }
        assert!(!deadline.passed(), "simulated reports never joined their processes: {reports}");
        pause();
    }
    let detail = get(addr, "/api/v1/devices/0").json();
    let with_stats = detail["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p.get("allocator").is_some())
        .count();
    assert!(with_stats >= 1, "{detail}");
    drop(daemon);
}

#[test]
fn alerts_beyond_max_alerts_are_counted_not_kept() {
    // oom-spike: at 10:05 two allocator alerts fire together on GPU 0; with
    // room for one alert the other is dropped, and /metrics says so.
    let env = [("VRAMD_ALERTS__MAX_ALERTS", "1"), ("VRAMD_ANALYSIS__EVALUATION_INTERVAL", "1s")];
    let mut daemon = support::Process::spawn(
        &args(&["--simulate", "oom-spike", "--gpus", "1", "--speed", "100"]),
        &env,
    );
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    let dropped = || {
        get(addr, "/metrics")
            .text()
            .lines()
            .find_map(|line| line.strip_prefix("vramd_alerts_dropped_total ")?.parse::<f64>().ok())
    };
    assert_eq!(dropped(), Some(0.0), "exported from the start");
    let deadline = Deadline::after(Duration::from_secs(30));
    while dropped() < Some(1.0) {
        assert!(!deadline.passed(), "no alert dropped within 30 s");
        pause();
    }
    let alerts = get(addr, "/api/v1/alerts").json();
    let active = alerts["alerts"].as_array().map_or(0, Vec::len);
    assert!(active <= 1, "{alerts}");
    daemon.signal("TERM");
    assert_exit(&daemon.finish(WAIT), 0);
}

#[test]
fn the_binary_accepts_the_environment_cargo_runs_it_with() {
    // `cargo run` and `cargo test` export the build script's variables;
    // none may look like a configuration key (VRAMD_*), or the README's
    // `cargo run -- --simulate …` would refuse to start.
    let output = Command::new(env!("CARGO_BIN_EXE_vramd"))
        .arg("check-config")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stray: Vec<String> =
        std::env::vars().map(|(key, _)| key).filter(|key| key.starts_with("VRAMD_")).collect();
    assert!(
        output.status.success(),
        "VRAMD_* variables in the test environment: {stray:?}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_replayed_recording_alerts_on_the_allocator_reports_the_live_daemon_joined() {
    // oom-spike: the allocator OOM and retry alerts come only from the
    // simulated workloads' allocator reports, which the sampler joins onto
    // processes after the source answered. The trace must keep them, so the
    // replay's timeline fires what the live daemon fired.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.ndjson");
    let trace_arg = trace.to_str().unwrap();
    let env = [("VRAMD_ANALYSIS__EVALUATION_INTERVAL", "1s")];
    let mut daemon = Process::spawn(
        &args(&["--simulate", "oom-spike", "--gpus", "1", "--speed", "100", "--record", trace_arg]),
        &env,
    );
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    let firing = || -> Vec<String> {
        let alerts = get(addr, "/api/v1/alerts").json();
        let mut rules: Vec<String> = alerts["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|alert| alert["state"] == "firing")
            .filter_map(|alert| alert["rule"].as_str().map(str::to_owned))
            .collect();
        rules.sort();
        rules.dedup();
        rules
    };
    let deadline = Deadline::after(Duration::from_secs(60));
    let live = loop {
        let rules = firing();
        if rules.iter().any(|rule| rule == "allocator_oom") {
            break rules;
        }
        assert!(!deadline.passed(), "no allocator_oom fired live within 60 s: {rules:?}");
        pause();
    };
    // Each state change is one log line, whether or not a notifier is set.
    let deadline = Deadline::after(WAIT);
    while !daemon.stderr().lines().any(|line| {
        line.contains("alert firing") && line.contains("allocator_oom") && line.contains("value")
    }) {
        assert!(!deadline.passed(), "no log line for the firing alert:\n{}", daemon.stderr());
        pause();
    }
    // Recording on for 30 s more of source time (30 evaluation intervals):
    // `vramd analyze` evaluates every `evaluation_interval` of the trace's
    // time, so a trace ending on the very sample that fired live would end
    // before its evaluation. What the trace held when the alert was seen
    // firing includes the samples it fired on.
    let fired_by = newest_reading_at(&trace).expect("a trace with readings");
    let deadline = Deadline::after(WAIT);
    while newest_reading_at(&trace).is_none_or(|at| at < fired_by + 30_000) {
        assert!(!deadline.passed(), "the trace did not grow 30 s past {fired_by} within {WAIT:?}");
        pause();
    }
    daemon.signal("TERM");
    assert_exit(&daemon.finish(STOP_WAIT), 0);

    let output = run(&["analyze", "--replay", trace_arg], &env);
    assert_exit(&output, 0);
    for rule in &live {
        assert!(
            output
                .stdout
                .lines()
                .any(|line| line.contains("firing") && line.contains(rule.as_str())),
            "{rule} fired live but not in the replay:\n{}",
            output.stdout
        );
    }
}

/// The newest reading's time (Unix milliseconds) in a trace, which may be
/// being written: a line not yet whole is left out.
fn newest_reading_at(trace: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(trace).ok()?;
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["record"] == "fast" || record["record"] == "slow")
        .filter_map(|record| record["at"].as_i64())
        .max()
}

#[test]
fn the_sampler_and_the_recorder_read_the_same_joined_slow_reading() {
    // Allocator reports are joined onto a slow reading once, by the
    // source's joiner, which the recorder wraps: the processes /api shows
    // live, allocator statistics (or none) and all, are one slow record of
    // the trace (the simulated source itself reads no allocator statistics).
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.ndjson");
    let trace_arg = trace.to_str().unwrap();
    let (daemon, addr) = start_ready(&args(&[
        "--simulate",
        "multi-tenant",
        "--gpus",
        "1",
        "--speed",
        "5",
        "--record",
        trace_arg,
    ]));
    let deadline = Deadline::after(WAIT);
    let live = loop {
        let device = get(addr, "/api/v1/devices/0").json();
        let processes = pids_and_allocators(&device);
        if processes.iter().any(|(_, allocator)| allocator.is_object()) {
            break processes;
        }
        assert!(!deadline.passed(), "no process with allocator statistics live: {device}");
        pause();
    };
    daemon.signal("TERM");
    assert_exit(&daemon.finish(STOP_WAIT), 0);

    let text = std::fs::read_to_string(&trace).unwrap();
    let recorded = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["record"] == "slow" && record["device"] == 0)
        .any(|record| pids_and_allocators(&record) == live);
    assert!(recorded, "no slow record holds the live processes {live:?}:\n{text}");
}

/// Each process of a device (REST) or slow record (trace): its PID and
/// allocator statistics (`null` when it has none), in their order.
fn pids_and_allocators(reading: &Value) -> Vec<(Value, Value)> {
    let processes = reading["processes"].as_array().into_iter().flatten();
    processes.map(|process| (process["pid"].clone(), process["allocator"].clone())).collect()
}
