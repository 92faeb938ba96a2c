//! Hostile clients against the vramd binary on a simulated host, over
//! plain TCP: slow bodies and idle connections must not starve `/healthz`
//! and `/metrics`, the connection cap holds, a body cut short is a 400, and
//! running out of file descriptors is warned once and recovered from.
//!
//! Every wait is bounded; every daemon is killed at the end.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// Real processes and sockets: wall-clock waits are what this test measures.
#![allow(clippy::disallowed_types)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;

use support::{Deadline, Process, SERVE, WAIT, http, pause};

/// Whether `stream` is still waiting for an answer (nothing to read, not
/// closed).
fn still_waiting(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let peeked = stream.peek(&mut [0u8; 1]);
    stream.set_nonblocking(false).unwrap();
    matches!(peeked, Err(error) if error.kind() == std::io::ErrorKind::WouldBlock)
}

/// Opens a connection and sends `head` (and no more).
fn hold(addr: SocketAddr, head: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

#[test]
fn slow_and_idle_clients_do_not_starve_health_and_metrics() {
    let mut args = vec!["--simulate", "steady-inference"];
    args.extend(SERVE);
    let mut daemon = Process::spawn(
        &args,
        &[
            ("VRAMD_SERVER__MAX_CONCURRENT_REQUESTS", "2"),
            ("VRAMD_SERVER__MAX_CONNECTIONS", "8"),
            ("VRAMD_SERVER__RESERVED_CONNECTIONS", "0"),
            ("VRAMD_SERVER__HEADER_READ_TIMEOUT", "2s"),
            ("VRAMD_SERVER__REQUEST_TIMEOUT", "30s"),
        ],
    );
    let addr = daemon.listening();
    daemon.wait_ready(addr);

    // Two slow report bodies hold every API slot. On a loaded machine a
    // probe of the API can race a holder to a slot (the holder then gets
    // 503): holders that were answered or closed are replaced until both
    // hang and the API answers 503.
    let slow_post = "POST /api/v1/allocator-reports HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{";
    let mut slow: Vec<TcpStream> = Vec::new();
    let deadline = Deadline::after(WAIT);
    loop {
        slow.retain(still_waiting);
        while slow.len() < 2 {
            slow.push(hold(addr, slow_post));
        }
        pause();
        let answer = http::get(addr, "/api/v1/devices").map(|answer| answer.status);
        if answer == Ok(503) && slow.iter().all(still_waiting) {
            break;
        }
        assert!(!deadline.passed(), "the slow bodies never took the API slots: last {answer:?}");
    }
    // ...but health, readiness and metrics have slots of their own.
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(http::get(addr, path).unwrap().status, 200, "{path}");
    }
    drop(slow);

    // An idle connection, and one with half its headers, are closed after
    // server.header_read_timeout.
    for head in ["", "GET /metrics HTTP/1.1\r\nhost: x\r\n"] {
        let mut idle = hold(addr, head);
        idle.set_read_timeout(Some(WAIT)).unwrap();
        let mut buffer = [0u8; 64];
        let read = idle.read(&mut buffer);
        assert!(matches!(read, Ok(0)) || read.is_err(), "closed, not answered: {read:?}");
    }

    // The connection cap: 8 idle connections give way to a new one (the
    // idlest is closed)...
    let idle: Vec<TcpStream> = (0..8).map(|_| hold(addr, "")).collect();
    assert_eq!(http::get(addr, "/healthz").unwrap().status, 200, "the idlest gave way");
    drop(idle);
    // ...8 streams do not: with no reserved connections, a new one is
    // closed on accept, and logged.
    let streams: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut stream = hold(addr, "GET /api/v1/alerts/stream HTTP/1.1\r\nhost: x\r\n\r\n");
            stream.set_read_timeout(Some(WAIT)).unwrap();
            let mut head = [0u8; 12];
            stream.read_exact(&mut head).unwrap();
            assert_eq!(&head, b"HTTP/1.1 200", "a stream is open");
            stream
        })
        .collect();
    let mut extra = hold(addr, "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n");
    extra.set_read_timeout(Some(WAIT)).unwrap();
    let mut buffer = [0u8; 64];
    let read = extra.read(&mut buffer);
    let closed = matches!(read, Ok(0))
        || read.as_ref().is_err_and(|error| error.kind() == std::io::ErrorKind::ConnectionReset);
    assert!(closed, "closed at the cap, neither answered nor left waiting: {read:?}");
    drop(streams);
    // The log is written off the accept loop: wait for the line, bounded.
    let deadline = Deadline::after(WAIT);
    while !daemon.stderr().contains("connection cap reached") {
        assert!(!deadline.passed(), "the refusal at the cap was not logged");
        pause();
    }
}

/// A body cut short of its `Content-Length` (the client closed its side)
/// is a malformed request, 400; a truthful body over the limit stays 413.
#[test]
fn a_body_shorter_than_its_content_length_gets_400_not_413() {
    let mut args = vec!["--simulate", "steady-inference"];
    args.extend(SERVE);
    let mut daemon = Process::spawn(&args, &[]);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    let status = |length: usize, body: &str| {
        let mut stream = hold(
            addr,
            &format!(
                "POST /api/v1/allocator-reports HTTP/1.1\r\nhost: x\r\n\
                 content-type: application/json\r\ncontent-length: {length}\r\n\r\n{body}"
            ),
        );
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer.split(' ').nth(1).and_then(|code| code.parse::<u16>().ok())
    };
    assert_eq!(status(100, "{\"version\":1"), Some(400), "{}", daemon.stderr());
    assert_eq!(status(2 << 20, "{"), Some(413), "announced over server.max_request_body");
}

/// Out of file descriptors, every accept fails, ten times a second while
/// it lasts: the daemon warns once, keeps serving what it holds, and says
/// once that it accepts again when descriptors come back.
#[test]
fn running_out_of_file_descriptors_is_warned_once_and_recovers() {
    let mut command = Command::new("prlimit");
    command
        .args(["--nofile=48:48", support::BIN, "--simulate", "steady-inference", "--gpus", "1"])
        .args(SERVE);
    // The server's debug lines count each failed retry after the warning.
    let mut daemon =
        Process::spawn_command(&mut command, &[("VRAMD_LOG__LEVEL", "info,vramd::server=debug")]);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    // More connections than descriptors: the daemon takes what it can,
    // the rest wait in the backlog and each accept of them fails.
    let held: Vec<TcpStream> = (0..80).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let deadline = Deadline::after(WAIT);
    while !daemon.stderr().contains("accepting a connection failed") {
        assert!(!deadline.passed(), "no accept failure with 80 connections and 48 descriptors");
        pause();
    }
    // What is under test is a second of failures (ten attempts, one every
    // 100 ms), counted after the warning and reported at recovery.
    let retried = |log: &[serde_json::Value]| {
        log.iter().filter(|line| line["message"] == "accepting a connection failed again").count()
    };
    let deadline = Deadline::after(WAIT);
    while retried(&daemon.log()) < 10 {
        assert!(!deadline.passed(), "fewer than 10 failed retries within {WAIT:?}");
        pause();
    }
    drop(held);
    // A descriptor freed for a moment (the readiness probe's connection
    // closing late on a loaded host, or the backlog refilling what the
    // closed connections freed) may split the failures into several runs,
    // each closed by its own recovery line; together they count the second
    // of failures. Recovery is announced at most once per 10 s, so a later
    // run's line waits for an accept after that: one request per poll.
    let recovered = |log: &[serde_json::Value]| {
        log.iter()
            .filter(|line| line["message"] == "accepting connections again")
            .filter_map(|line| line["unlogged_failures"].as_u64())
            .collect::<Vec<u64>>()
    };
    let deadline = Deadline::after(WAIT * 2);
    while recovered(&daemon.log()).iter().sum::<u64>() < 3 {
        assert!(!deadline.passed(), "no recovery once the connections closed");
        let _ = http::get(addr, "/healthz");
        pause();
    }
    let answer = http::get(addr, "/healthz").unwrap();
    assert_eq!(answer.status, 200);
    let log = daemon.log();
    let warnings = log
        .iter()
        .filter(|line| line["message"] == "accepting a connection failed; retrying every 100 ms");
    assert_eq!(warnings.count(), 1, "{}", daemon.stderr());
    let recoveries = recovered(&log);
    assert!(!recoveries.is_empty(), "{}", daemon.stderr());
    assert!(recoveries.iter().sum::<u64>() >= 3, "{}", daemon.stderr());
}
