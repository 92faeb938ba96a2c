//! Configuration reload on the real binary: SIGHUP with a changed file
//! applies the alert rules without resetting history or alert states; an
//! invalid file is refused whole with its reason logged; a key that needs a
//! restart is named and keeps its running value.

// A test crate: a panic here is a failed test, not a failed daemon; and
// these tests measure real processes in real time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_types)]

mod support;

use std::net::SocketAddr;
use std::path::Path;

use serde_json::Value;
use support::{Deadline, Process, SERVE, WAIT, get, pause};

/// memory_high that the steady-inference scenario (a flat working set well
/// above 5% of each GPU) never reaches, and one that it is past at once.
const QUIET: &str = "[alerts.memory_high]\nthreshold = 0.99\nclear = 0.98\nfor = \"0s\"\n";
const LOW: &str = "[alerts.memory_high]\nthreshold = 0.05\nclear = 0.04\nfor = \"0s\"\n";

/// Replaces the file in one step, so the daemon never reads half of it.
fn write_config(dir: &Path, text: &str) {
    let staged = dir.join("vramd.toml.new");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(staged, dir.join("vramd.toml")).unwrap();
}

/// A simulated steady host reading `dir/vramd.toml`, listening on loopback.
fn start(dir: &Path) -> (Process, SocketAddr) {
    let config = dir.join("vramd.toml");
    let mut args: Vec<String> = SERVE.iter().map(|arg| (*arg).to_owned()).collect();
    args.extend(["--simulate", "steady-inference", "--speed", "20", "--config"].map(String::from));
    args.push(config.to_string_lossy().into_owned());
    support::start_ready(&args)
}

/// The memory_high alert of GPU 0, if any.
fn memory_high(addr: SocketAddr) -> Option<Value> {
    let alerts = get(addr, "/api/v1/alerts?rule=memory_high&gpu=0").json();
    alerts["alerts"].as_array().and_then(|alerts| alerts.first().cloned())
}

fn history_len(addr: SocketAddr) -> usize {
    let history = get(addr, "/api/v1/devices/0/history?window=1h").json();
    history["points"].as_array().map_or(0, Vec::len)
}

/// Waits (bounded) for the log line whose `message` is `message` and
/// returns it; fails with the log if none comes.
fn wait_for_log(daemon: &mut Process, message: &str, after: usize) -> Value {
    let deadline = Deadline::after(WAIT);
    loop {
        let found = daemon.log().into_iter().skip(after).find(|line| line["message"] == message);
        if let Some(line) = found {
            return line;
        }
        assert!(daemon.exited().is_none(), "vramd exited:\n{}", daemon.stderr());
        assert!(!deadline.passed(), "no `{message}` logged:\n{}", daemon.stderr());
        pause();
    }
}

/// Waits (bounded) until `check` holds for GPU 0's memory_high alert.
fn wait_for_alert(addr: SocketAddr, what: &str, check: impl Fn(Option<&Value>) -> bool) -> Value {
    let deadline = Deadline::after(WAIT);
    loop {
        let alert = memory_high(addr);
        if check(alert.as_ref()) {
            return alert.unwrap_or(Value::Null);
        }
        assert!(!deadline.passed(), "memory_high never {what}: {alert:?}");
        pause();
    }
}

fn metric(addr: SocketAddr, series: &str) -> Option<f64> {
    get(addr, "/metrics")
        .text()
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse::<f64>().ok())
}

#[test]
fn sighup_applies_new_thresholds_and_keeps_history_and_alert_states() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), QUIET);
    let (mut daemon, addr) = start(dir.path());
    assert!(memory_high(addr).is_none(), "nothing fires with the quiet threshold");
    let before = history_len(addr);

    write_config(dir.path(), LOW);
    let mark = daemon.log().len();
    daemon.signal("HUP");
    let reloaded = wait_for_log(&mut daemon, "configuration reloaded", mark);
    assert_eq!(reloaded["applied"], "alerts", "{reloaded}");
    let fired = wait_for_alert(addr, "fired", |alert| {
        alert.is_some_and(|alert| alert["state"] == "firing")
    });
    assert_eq!(fired["threshold"], 0.05, "the new threshold is the one judged: {fired}");
    let after = history_len(addr);
    assert!(after > before, "history goes on growing across the reload: {before} then {after}");

    // A change to another rule leaves this firing alert alone.
    write_config(dir.path(), &format!("{LOW}[alerts.xid_error]\nthreshold = 3\nclear = 2\n"));
    let mark = daemon.log().len();
    daemon.signal("HUP");
    wait_for_log(&mut daemon, "configuration reloaded", mark);
    let kept = memory_high(addr).unwrap();
    assert_eq!(kept["state"], "firing");
    assert_eq!(kept["firing_since"], fired["firing_since"], "not reset by the reload");
    assert!(history_len(addr) >= after, "history is never reset");

    // The rule disabled: its alert resolves.
    write_config(dir.path(), &format!("{LOW}enabled = false\n"));
    daemon.signal("HUP");
    wait_for_alert(addr, "resolved", |alert| {
        alert.is_none_or(|alert| alert["state"] == "resolved")
    });
    assert_eq!(metric(addr, "vramd_config_reload_total{result=\"success\"}"), Some(3.0));
    assert!(
        metric(addr, "vramd_config_last_reload_success_timestamp_seconds")
            .is_some_and(|at| at > 1.7e9)
    );
}

#[test]
fn sighup_refuses_an_invalid_file_whole_and_names_restart_only_keys() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), LOW);
    let (mut daemon, addr) = start(dir.path());
    let fired = wait_for_alert(addr, "fired", |alert| {
        alert.is_some_and(|alert| alert["state"] == "firing")
    });

    // A valid alerts part does not make an invalid file half-applied.
    write_config(dir.path(), &format!("{QUIET}[sampler]\nfast_interval = \"1ms\"\n"));
    let mark = daemon.log().len();
    daemon.signal("HUP");
    let refused = wait_for_log(
        &mut daemon,
        "invalid configuration: reload refused, the running configuration stays",
        mark,
    );
    let reason = refused["error"].as_str().unwrap_or_default();
    assert!(reason.contains("sampler.fast_interval"), "the reason names the key: {refused}");
    assert!(reason.contains("1ms"), "and the value: {refused}");
    let file = dir.path().join("vramd.toml").to_string_lossy().into_owned();
    let check = support::run(&["--config", file.as_str(), "check-config"], &[]);
    assert!(
        check.stderr.contains(reason),
        "the same text as check-config:\n{}\nvs {reason}",
        check.stderr
    );
    assert_eq!(metric(addr, "vramd_config_reload_total{result=\"failure\"}"), Some(1.0));
    let kept = memory_high(addr).unwrap();
    assert_eq!((&kept["state"], &kept["threshold"]), (&fired["state"], &fired["threshold"]));

    // Restart-only keys are named with both values and keep running ones;
    // the command line still wins over the file (--listen).
    write_config(
        dir.path(),
        &format!("{LOW}[sampler]\nfast_interval = \"500ms\"\n[server]\nlisten = \"127.0.0.1:1\"\n"),
    );
    let mark = daemon.log().len();
    daemon.signal("HUP");
    let named = wait_for_log(
        &mut daemon,
        "configuration reloaded, but these keys only change with a restart; they keep their running values",
        mark,
    );
    assert_eq!(named["level"], "WARN");
    assert_eq!(named["keys"], "sampler.fast_interval: 250ms -> 500ms", "{named}");
    assert_eq!(get(addr, "/healthz").status, 200, "still serving where it started");
    assert_eq!(metric(addr, "vramd_config_reload_total{result=\"success\"}"), Some(1.0));
}

fn threads(daemon: &Process) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap()
}

#[test]
fn sighups_while_the_file_is_a_pipe_nobody_writes_leave_no_thread_behind() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), QUIET);
    let (mut daemon, addr) = start(dir.path());
    let config = dir.path().join("vramd.toml");
    std::fs::remove_file(&config).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&config).status().unwrap().success());
    let before = threads(&daemon);
    for round in 0..5 {
        let seen = daemon.log().len();
        daemon.signal("HUP");
        // Each refused at once, saying why: before the fix each waited for
        // the reload deadline and left its thread blocked in the pipe.
        let refused = wait_for_log(
            &mut daemon,
            "invalid configuration: reload refused, the running configuration stays",
            seen,
        );
        let error = refused["error"].as_str().unwrap_or_default();
        assert!(error.contains("a named pipe, not a file"), "round {round}: {refused}");
    }
    let after = threads(&daemon);
    assert!(after <= before + 2, "threads grew from {before} to {after} over 5 SIGHUPs");
    assert_eq!(get(addr, "/readyz").status, 200, "sampling goes on");
}
