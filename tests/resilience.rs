//! A side path must never blind the monitor: the real binary with its log
//! pipe closed under it, closed before it starts, or on a full device keeps
//! sampling (history advances, a lost GPU still raises its alert); and no
//! catchable signal other than a shutdown one kills it.

// A test crate: a panic here is a failed test, not a failed daemon; and
// these tests measure real processes in real time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_types)]

mod support;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};

use support::{BIN, Deadline, Process, SERVE, WAIT, get, pause, start_ready};

/// Simulated seconds per real second: the device-lost scenario loses its
/// second GPU within a few real seconds.
const SPEED: &str = "60";

fn daemon_args(listen: &str) -> Vec<String> {
    ["--simulate", "device-lost", "--speed", SPEED, "--listen", listen, "--log-level", "debug"]
        .map(String::from)
        .to_vec()
}

/// A loopback port that was free a moment ago (for daemons whose stderr
/// cannot tell us the port they bound).
fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// Kills the child on drop, whatever the test's outcome.
struct Guard(Child);

/// Starts the device-lost scenario on `listen` with `stderr` as its log.
fn spawn_logging_to(listen: SocketAddr, stderr: impl Into<Stdio>) -> Guard {
    Guard(
        Command::new(BIN)
            .args(daemon_args(&listen.to_string()))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap(),
    )
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn newest_sample_at(addr: SocketAddr) -> Option<String> {
    let devices = support::http::get(addr, "/api/v1/devices").ok()?.json();
    devices["devices"][0]["at"].as_str().map(str::to_owned)
}

/// Waits until the daemon serves, then asserts that sampling goes on: the
/// newest sample moves forward, the lost GPU raises `device_lost`, and the
/// dropped log lines are counted.
fn assert_still_sampling(child: &mut Child, addr: SocketAddr) {
    let deadline = Deadline::after(WAIT);
    let first = loop {
        if let Some(at) = newest_sample_at(addr) {
            break at;
        }
        assert!(child.try_wait().unwrap().is_none(), "vramd exited with its log broken");
        assert!(!deadline.passed(), "vramd never served a device with its log broken");
        pause();
    };
    let deadline = Deadline::after(WAIT * 2);
    loop {
        let advanced = newest_sample_at(addr).is_some_and(|at| at > first);
        let metrics = get(addr, "/metrics").text();
        let dropped = metrics
            .lines()
            .find_map(|line| {
                line.strip_prefix("vramd_log_lines_dropped_total ")?.parse::<f64>().ok()
            })
            .unwrap_or(0.0);
        let alerts = get(addr, "/api/v1/alerts").text();
        let lost_alert = alerts.contains("\"rule\":\"device_lost\"");
        if advanced && dropped > 0.0 && lost_alert {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "vramd exited with its log broken");
        assert!(
            !deadline.passed(),
            "with its log broken vramd must keep sampling: advanced={advanced} dropped={dropped} device_lost={lost_alert}"
        );
        pause();
    }
}

#[test]
fn a_log_pipe_closed_while_running_does_not_stop_sampling() {
    let listen = free_port();
    let mut child = spawn_logging_to(listen, Stdio::piped());
    // Read the first lines, as `| head -3` would, then close the pipe.
    let stderr = child.0.stderr.take().unwrap();
    let mut reader = BufReader::new(stderr);
    let mut line = String::new();
    for _ in 0..3 {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    drop(reader);
    assert_still_sampling(&mut child.0, listen);
}

#[test]
fn a_log_pipe_closed_before_start_does_not_stop_sampling() {
    let listen = free_port();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = spawn_logging_to(listen, writer);
    assert_still_sampling(&mut child.0, listen);
}

#[test]
fn a_full_log_device_does_not_stop_sampling() {
    let Ok(full) = File::options().write(true).open("/dev/full") else {
        eprintln!("skipped: no /dev/full on this host");
        return;
    };
    let listen = free_port();
    let mut child = spawn_logging_to(listen, full);
    assert_still_sampling(&mut child.0, listen);
}

#[test]
fn stray_signals_are_logged_and_ignored_and_sighup_says_what_it_did() {
    let mut args = SERVE.to_vec();
    args.extend(["--simulate", "idle"]);
    let (mut daemon, addr) = start_ready(&args);
    for signal in [
        "USR1", "USR2", "ALRM", "HUP", "VTALRM", "PROF", "IO", "PWR", "XCPU", "TRAP", "RTMIN",
        "RTMAX",
    ] {
        daemon.signal(signal);
    }
    // Each one is logged; none stops the daemon.
    let deadline = Deadline::after(WAIT);
    loop {
        let log = daemon.log();
        let ignored = log
            .iter()
            .filter(|line| line["message"] == "signal ignored: it does not stop vramd")
            .count();
        let hangup = log.iter().any(|line| line["signal"] == "SIGHUP");
        if ignored >= 11 && hangup {
            break;
        }
        assert!(daemon.exited().is_none(), "a stray signal killed vramd:\n{}", daemon.stderr());
        assert!(
            !deadline.passed(),
            "signals not logged ({ignored} of 11, SIGHUP {hangup}):\n{}",
            daemon.stderr()
        );
        pause();
    }
    assert_eq!(get(addr, "/healthz").status, 200);
    assert!(daemon.exited().is_none());
    // And a shutdown signal still shuts down cleanly, saying which.
    daemon.signal("QUIT");
    let output = daemon.finish(WAIT);
    assert!(output.status.success(), "SIGQUIT is a clean shutdown: {}", output.status);
    assert!(output.stderr.contains("\"signal\":\"SIGQUIT\""), "{}", output.stderr);
}

#[test]
fn a_daemon_whose_log_is_fine_drops_nothing() {
    let mut args = SERVE.to_vec();
    args.extend(["--simulate", "idle"]);
    let (daemon, addr) = start_ready(&args);
    let metrics = get(addr, "/metrics").text();
    assert!(metrics.contains("vramd_log_lines_dropped_total 0"), "{metrics}");
    drop(daemon);
}

const HEADER: &str = r#"{"format":"vramd-trace","version":1,"source":"simulator","devices":[{"index":0,"uuid":"GPU-972aef12-9421-4446-c663-d8e89bade7ec","name":"NVIDIA H100 80GB HBM3","pci_bus_id":"00000000:18:00.0","driver_version":"570.124.06"}]}"#;

/// A one-device trace of three fast readings, the second one `bad`.
fn trace_with(bad: &str) -> tempfile::NamedTempFile {
    let good = |at: u64| {
        format!(
            r#"{{"record":"fast","device":0,"at":{at},"memory":{{"total_bytes":85520809984,"reserved_bytes":569376768,"used_bytes":5177601,"free_bytes":84946255615}},"gpu_utilization":0.5}}"#
        )
    };
    let text =
        format!("{HEADER}\n{}\n{bad}\n{}\n", good(1_767_225_600_000), good(1_767_225_602_000));
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
    file
}

#[test]
fn traces_with_impossible_times_or_values_are_refused_at_start_naming_the_field() {
    let fast = |at: &str, memory: &str, utilization: &str| {
        format!(
            r#"{{"record":"fast","device":0,"at":{at},"memory":{memory},"gpu_utilization":{utilization}}}"#
        )
    };
    let memory = r#"{"total_bytes":85520809984,"used_bytes":5177601,"free_bytes":84946255615}"#;
    let cases = [
        (fast("-5", memory, "0.5"), "outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59.999Z"),
        (fast("253402300800000", memory, "0.5"), "outside 1970"),
        (fast("9223372036854775807", memory, "0.5"), "outside 1970"),
        (
            fast("1767225601000", r#"{"total_bytes":100,"used_bytes":160,"free_bytes":0}"#, "0.5"),
            "memory.used_bytes (160) exceeds memory.total_bytes (100)",
        ),
        (fast("1767225601000", memory, "-1"), "utilization ratio must be within 0..1"),
    ];
    for (line, reason) in cases {
        let trace = trace_with(&line);
        let path = trace.path().to_str().unwrap();
        // Offline analysis refuses it with status 2 ...
        let output = support::run(&["analyze", "--replay", path], &[]);
        assert_eq!(output.status.code(), Some(2), "analyze of {line}: {}", output.stderr);
        assert!(
            output.stderr.contains(reason) && output.stderr.contains("line 3"),
            "{}",
            output.stderr
        );
        // ... and so does the daemon, before it binds.
        let mut args = SERVE.to_vec();
        args.extend(["--replay", path]);
        let output = support::run(&args, &[]);
        assert_eq!(output.status.code(), Some(2), "daemon on {line}: {}", output.stderr);
        assert!(
            !output.stderr.contains("\"listening\""),
            "refused before binding: {}",
            output.stderr
        );
    }
}

#[test]
fn device_indices_are_parsed_strictly_and_implausible_reports_are_refused() {
    let mut args = SERVE.to_vec();
    args.extend(["--simulate", "idle"]);
    let (_daemon, addr) = start_ready(&args);
    assert_eq!(get(addr, "/api/v1/devices/0").status, 200);
    for alias in ["00", "+0", "0x0", " 0"] {
        let path = format!("/api/v1/devices/{}", alias.replace(' ', "%20"));
        assert_eq!(get(addr, &path).status, 404, "{path} must not resolve to device 0");
    }
    let uuid = get(addr, "/api/v1/devices/0").json()["uuid"].as_str().unwrap().to_owned();
    let report = |stat: &str, value: &str| {
        format!(
            r#"{{"version":1,"reporter":{{"pid":4242,"hostname":"node"}},"at":"2026-01-01T00:00:00Z","devices":[{{"uuid":"{uuid}","index":0,"memory_stats":{{"allocated_bytes.all.current":1024,"reserved_bytes.all.current":2048,"active_bytes.all.current":1024,"inactive_split_bytes.all.current":0,"num_alloc_retries":0,"num_ooms":0,"{stat}":{value}}}}}]}}"#
        )
    };
    let cases = [
        (
            report("reserved_bytes.all.current", "18446744073709551615"),
            "reserved_bytes.all.current",
        ),
        (report("num_ooms", "1e300"), "memory_stats[num_ooms]"),
        (report("max_split_size", "-2"), "max_split_size"),
        // 1 PiB reserved on an 80 GB device.
        (
            report("reserved_bytes.all.current", "1125899906842624"),
            "more than the device's total memory",
        ),
    ];
    for (body, field) in cases {
        let response = support::http::post(addr, "/api/v1/allocator-reports", &body).unwrap();
        assert_eq!(response.status, 400, "{body}: {}", response.text());
        let answer = response.json();
        assert_eq!(answer["code"], "bad_report");
        assert!(answer["message"].as_str().unwrap().contains(field), "{answer}");
    }
    // Nothing of them was kept.
    let reports = get(addr, "/api/v1/allocator-reports").json();
    assert_eq!(reports["reports"].as_array().map(Vec::len), Some(0), "{reports}");
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Recording is a side path: with its writes failing, the devices are
/// still served with their memory series, and the failure is counted.
fn assert_recording_fails_without_blinding(daemon: &mut Process, addr: SocketAddr) {
    let deadline = Deadline::after(WAIT * 2);
    loop {
        let metrics = get(addr, "/metrics").text();
        let errors = metric(&metrics, "vramd_record_errors_total").unwrap_or(0.0);
        let failing = metric(&metrics, "vramd_record_failing");
        let served = metrics.contains("vramd_memory_used_bytes{")
            && metric(&metrics, "vramd_nvml_up") == Some(1.0)
            && !metrics
                .lines()
                .any(|line| line.starts_with("vramd_device_up{") && line.ends_with(" 0"));
        if errors > 0.0 && failing == Some(1.0) && served {
            break;
        }
        assert!(daemon.exited().is_none(), "vramd exited:\n{}", daemon.stderr());
        assert!(
            !deadline.passed(),
            "recording failure must be counted and blind nothing: errors={errors} failing={failing:?} served={served}"
        );
        pause();
    }
    let first = newest_sample_at(addr);
    let deadline = Deadline::after(WAIT);
    while newest_sample_at(addr) == first {
        assert!(!deadline.passed(), "history froze while recording failed");
        pause();
    }
    let devices = get(addr, "/api/v1/devices").json();
    assert!(devices["devices"].as_array().is_some_and(|list| !list.is_empty()));
    assert!(
        devices["devices"].as_array().unwrap().iter().all(|device| device["up"] == true),
        "{devices}"
    );
    let warnings = daemon
        .log()
        .iter()
        .filter(|line| {
            line["message"]
                == "recording failed; live monitoring is unaffected, the trace has a gap"
        })
        .count();
    assert!((1..=3).contains(&warnings), "logged at a bounded rate, got {warnings} lines");
}

#[test]
fn recording_to_a_full_device_blinds_nothing() {
    let mut args = SERVE.to_vec();
    args.extend(["--simulate", "steady-inference", "--speed", "20", "--record", "/dev/full"]);
    let mut daemon = Process::spawn(&args, &[]);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    assert_recording_fails_without_blinding(&mut daemon, addr);
}

#[test]
fn a_recording_disk_filling_mid_run_blinds_nothing() {
    // A size-capped file (RLIMIT_FSIZE, 64 KiB): writes past it fail with
    // EFBIG exactly as on a full disk, with no privileges needed to mount.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.ndjson");
    let command = format!(
        "ulimit -f 64 && exec \"$0\" --listen 127.0.0.1:0 --log-format json --simulate steady-inference --speed 20 --record {}",
        trace.display()
    );
    let mut daemon =
        Process::spawn_command(std::process::Command::new("bash").args(["-c", &command, BIN]), &[]);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    assert_recording_fails_without_blinding(&mut daemon, addr);
    // What was written before the cap stays a valid trace up to its last
    // whole line. The daemon still runs and tries every new line: each try
    // writes part of it up to the cap and cuts it back at once, so a read
    // may land inside one such try; it must find whole lines between them.
    let deadline = Deadline::after(WAIT);
    loop {
        let text = std::fs::read_to_string(&trace).unwrap();
        if text.len() <= 64 * 1024 && text.ends_with('\n') {
            break;
        }
        assert!(!deadline.passed(), "{} bytes, not ending with a whole line", text.len());
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
}

#[test]
fn an_existing_recording_is_kept_not_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.ndjson");
    std::fs::write(&trace, "the previous run's trace\n").unwrap();
    let mut args = SERVE.to_vec();
    let path = trace.to_str().unwrap();
    args.extend(["--simulate", "idle", "--record", path]);
    let (daemon, _addr) = start_ready(&args);
    drop(daemon);
    let kept = dir.path().join("trace.ndjson.1");
    assert_eq!(std::fs::read_to_string(kept).unwrap(), "the previous run's trace\n");
    assert!(std::fs::read_to_string(&trace).unwrap().starts_with("{\"format\":\"vramd-trace\""));
}

#[test]
fn recording_through_a_link_to_the_replayed_trace_is_refused() {
    let replayed = trace_with(
        r#"{"record":"fast","device":0,"at":1767225601000,"memory":{"total_bytes":100,"used_bytes":10,"free_bytes":90}}"#,
    );
    let before = std::fs::read(replayed.path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("link.ndjson");
    std::os::unix::fs::symlink(replayed.path(), &link).unwrap();
    let mut args = SERVE.to_vec();
    args.extend([
        "--replay",
        replayed.path().to_str().unwrap(),
        "--record",
        link.to_str().unwrap(),
    ]);
    let output = support::run(&args, &[]);
    assert_eq!(output.status.code(), Some(2), "{}", output.stderr);
    assert!(output.stderr.contains("it is the trace being replayed"), "{}", output.stderr);
    assert_eq!(std::fs::read(replayed.path()).unwrap(), before, "the replay's source is intact");
}

#[test]
fn a_config_file_without_end_is_refused_not_read_forever() {
    let output = support::run(&["check-config", "--config", "/dev/zero"], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", output.stderr);
    assert!(output.stderr.contains("at most 1 MiB"), "{}", output.stderr);
}

#[test]
fn a_token_file_that_cannot_be_used_is_refused_before_binding_and_by_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty-token");
    std::fs::write(&empty, "  \n").unwrap();
    let missing = dir.path().join("missing-token");
    for (path, reason) in [(&empty, "the token file is empty"), (&missing, "No such file")] {
        let variable = [("VRAMD_INGEST__TOKEN_FILE", path.to_str().unwrap())];
        let checked = support::run(&["check-config"], &variable);
        assert_eq!(checked.status.code(), Some(2), "check-config: {}", checked.stderr);
        assert!(checked.stderr.contains(reason), "{}", checked.stderr);
        let mut args = SERVE.to_vec();
        args.extend(["--simulate", "idle"]);
        let output = support::run(&args, &variable);
        assert_eq!(output.status.code(), Some(2), "daemon: {}", output.stderr);
        assert!(output.stderr.contains(reason), "{}", output.stderr);
        assert!(
            !output.stderr.contains("\"listening\""),
            "refused before binding: {}",
            output.stderr
        );
    }
}

#[test]
fn devices_beyond_the_cap_are_left_out_and_logged() {
    let mut args = SERVE.to_vec();
    args.extend(["--simulate", "idle", "--gpus", "4"]);
    let mut daemon = Process::spawn(&args, &[("VRAMD_SAMPLER__MAX_DEVICES", "2")]);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    let devices = get(addr, "/api/v1/devices").json();
    assert_eq!(devices["devices"].as_array().map(Vec::len), Some(2), "{devices}");
    assert!(daemon.stderr().contains("more devices than sampler.max_devices"));
}

#[test]
fn record_mode_refuse_names_the_existing_file_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.ndjson");
    std::fs::write(&trace, "precious\n").unwrap();
    let mut args = SERVE.to_vec();
    args.extend(["--simulate", "idle", "--record", trace.to_str().unwrap()]);
    let output = support::run(&args, &[("VRAMD_SOURCE__RECORD_MODE", "refuse")]);
    assert_eq!(output.status.code(), Some(2), "{}", output.stderr);
    assert!(output.stderr.contains("already exists") && output.stderr.contains("trace.ndjson"));
    assert_eq!(std::fs::read_to_string(&trace).unwrap(), "precious\n");
}

#[test]
fn a_very_fast_replay_speed_keeps_threads_bounded() {
    let mut args = SERVE.to_vec();
    args.extend(["--simulate", "multi-tenant", "--gpus", "8", "--speed", "10000"]);
    let mut daemon = Process::spawn(&args, &[("VRAMD_SAMPLER__MAX_BLOCKING_THREADS", "16")]);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    let threads = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
        status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap()
    };
    // Two seconds of 10,000x sampling: 16 blocking threads, the runtime's
    // workers (one per core), one sampling thread per device and tier (fixed
    // by the device count, not the speed) and a few of vramd's own (log,
    // Xid-less here).
    let deadline = Deadline::after(std::time::Duration::from_secs(2));
    let mut most = 0;
    while !deadline.passed() {
        most = most.max(threads());
        pause();
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let tier_threads = 2 * 8;
    assert!(
        most <= 16 + cores + tier_threads + 8,
        "{most} threads with 16 blocking threads and {tier_threads} tier threads allowed"
    );
}
