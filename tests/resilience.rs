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

use support::{BIN, Deadline, SERVE, WAIT, get, pause, start_ready};

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
    let mut child = Guard(
        Command::new(BIN)
            .args(daemon_args(&listen.to_string()))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
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
    let mut child = Guard(
        Command::new(BIN)
            .args(daemon_args(&listen.to_string()))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(writer)
            .spawn()
            .unwrap(),
    );
    assert_still_sampling(&mut child.0, listen);
}

#[test]
fn a_full_log_device_does_not_stop_sampling() {
    let Ok(full) = File::options().write(true).open("/dev/full") else {
        eprintln!("skipped: no /dev/full on this host");
        return;
    };
    let listen = free_port();
    let mut child = Guard(
        Command::new(BIN)
            .args(daemon_args(&listen.to_string()))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(full)
            .spawn()
            .unwrap(),
    );
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
