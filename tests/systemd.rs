//! The daemon under a `Type=notify` systemd unit, end to end: the
//! notification socket is one of the test's own (systemd's protocol: one
//! datagram per message, `KEY=value` lines), so no systemd is needed.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_types)]

mod support;

use std::time::Duration;

use support::systemd::{NotifySocket, count};
use support::{Process, SERVE, WAIT};

#[test]
fn systemd_hears_ready_then_watchdog_pings_then_stopping() {
    let mut socket = NotifySocket::new();
    let mut args = SERVE.to_vec();
    args.extend(["--simulate", "idle"]);
    // A 400 ms watchdog: pinged every 200 ms while sampling keeps up.
    let env = [("NOTIFY_SOCKET", socket.path()), ("WATCHDOG_USEC", "400000")];
    let mut daemon = Process::spawn(&args, &env);
    let addr = daemon.listening();
    assert!(
        socket.wait_for(WAIT, |seen| count(seen, "READY=1") == 1),
        "no READY=1 within {WAIT:?}: {:?}\n{}",
        socket.received,
        daemon.stderr()
    );
    // READY comes when /readyz would say ready, not before.
    let before_ready: Vec<&String> =
        socket.received.iter().take_while(|m| !m.lines().any(|l| l == "READY=1")).collect();
    assert!(
        before_ready.iter().all(|m| !m.contains("WATCHDOG=1")),
        "the watchdog was fed before the daemon was ready: {:?}",
        socket.received
    );
    assert_eq!(support::get(addr, "/readyz").status, 200);
    assert!(socket.received.iter().any(|m| m.contains("STATUS=sampling")), "{:?}", socket.received);
    assert!(
        socket.wait_for(WAIT, |seen| count(seen, "WATCHDOG=1") >= 4),
        "the watchdog is not fed: {:?}",
        socket.received
    );
    assert_eq!(socket.count("READY=1"), 1, "READY=1 is said once");
    daemon.signal("TERM");
    assert!(
        socket.wait_for(WAIT, |seen| count(seen, "STOPPING=1") == 1),
        "no STOPPING=1 after SIGTERM: {:?}",
        socket.received
    );
    let output = daemon.finish(WAIT);
    assert!(output.status.success(), "{}", output.stderr);
}

#[test]
fn an_unusable_notify_socket_never_stops_the_daemon() {
    let mut args = SERVE.to_vec();
    args.extend(["--simulate", "idle"]);
    let env = [("NOTIFY_SOCKET", "/nonexistent/vramd-notify"), ("WATCHDOG_USEC", "200000")];
    let mut daemon = Process::spawn(&args, &env);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(support::get(addr, "/readyz").status, 200);
    let warned = daemon
        .log()
        .iter()
        .filter(|line| {
            line["message"].as_str().is_some_and(|m| m.starts_with("cannot notify systemd"))
        })
        .count();
    assert_eq!(warned, 1, "logged once, not once per message:\n{}", daemon.stderr());
}

#[test]
fn a_reload_is_bracketed_by_reloading_and_ready_with_its_outcome_in_the_status() {
    let mut socket = NotifySocket::new();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("vramd.toml");
    std::fs::write(&config, "[alerts.memory_high]\nthreshold = 0.9\nclear = 0.8\n").unwrap();
    let mut args: Vec<String> = SERVE.iter().map(|arg| (*arg).to_owned()).collect();
    args.extend(["--simulate", "idle", "--config"].map(String::from));
    args.push(config.to_string_lossy().into_owned());
    let mut daemon = Process::spawn(&args, &[("NOTIFY_SOCKET", socket.path())]);
    daemon.listening();
    assert!(socket.wait_for(WAIT, |seen| count(seen, "READY=1") == 1), "{:?}", socket.received);

    std::fs::write(&config, "[alerts.memory_high]\nthreshold = 0.95\nclear = 0.8\n").unwrap();
    daemon.signal("HUP");
    assert!(
        socket.wait_for(WAIT, |seen| count(seen, "READY=1") == 2),
        "no READY=1 after the reload: {:?}\n{}",
        socket.received,
        daemon.stderr()
    );
    let reload: Vec<&String> =
        socket.received.iter().skip_while(|m| !m.contains("RELOADING=1")).collect();
    assert!(
        reload.len() >= 2,
        "RELOADING=1 comes before the second READY=1: {:?}",
        socket.received
    );
    assert!(reload[0].lines().any(|line| line.starts_with("MONOTONIC_USEC=")), "{}", reload[0]);
    let done = reload.iter().find(|m| m.lines().any(|l| l == "READY=1")).unwrap();
    assert!(done.contains("STATUS=sampling; configuration reloaded"), "{done}");

    // A refused reload also ends ready (the running configuration stays),
    // and says why in the unit's status.
    std::fs::write(&config, "[alerts.memory_high]\nthreshold = 0.5\nclear = 0.9\n").unwrap();
    daemon.signal("HUP");
    assert!(
        socket.wait_for(WAIT, |seen| count(seen, "READY=1") == 3),
        "no READY=1 after the refused reload: {:?}",
        socket.received
    );
    let refused = socket.received.iter().rev().find(|m| m.lines().any(|l| l == "READY=1")).unwrap();
    assert!(
        refused.contains("STATUS=sampling; reload refused, running configuration kept: "),
        "{refused}"
    );
    assert!(refused.contains("memory_high"), "the refusal names the key: {refused}");
    assert_eq!(socket.count("RELOADING=1"), 2);
    daemon.signal("TERM");
    assert!(daemon.finish(WAIT).status.success());
}
