//! Helpers for tests that run the real `vramd` binary: start it, read its
//! JSON logs, talk HTTP to it, signal it, and always kill it at the end.
//!
//! Every wait is bounded; a [`Process`] that is dropped (test passed, failed
//! or panicked) is killed and reaped, so no daemon outlives its test.

// These tests drive real processes over real sockets, so real wall-clock
// time is what they must measure; the crate's injectable-time rule is about
// the daemon's own code.
#![allow(clippy::disallowed_types)]
// Shared by several test crates; each uses a different subset.
#![allow(dead_code)]

pub mod http;
pub mod systemd;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The binary under test, built by cargo for this integration test.
pub const BIN: &str = env!("CARGO_BIN_EXE_vramd");

/// Upper bound of every wait for the daemon (start, readiness, exit of a
/// command that should fail fast). Generous for a slow, busy 2-core machine.
pub const WAIT: Duration = Duration::from_secs(10);

/// How often bounded waits poll.
const POLL: Duration = Duration::from_millis(25);

/// Flags that make a daemon bind an ephemeral loopback port and log JSON,
/// so tests can read the bound address from its log.
pub const SERVE: [&str; 4] = ["--listen", "127.0.0.1:0", "--log-format", "json"];

/// A point in time a bounded wait gives up at.
#[derive(Clone, Copy, Debug)]
pub struct Deadline(Instant);

impl Deadline {
    pub fn after(limit: Duration) -> Self {
        Self(Instant::now() + limit)
    }

    pub fn passed(&self) -> bool {
        Instant::now() >= self.0
    }
}

/// Sleeps one polling interval.
pub fn pause() {
    std::thread::sleep(POLL);
}

/// What a finished process wrote and how it ended.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// A running `vramd`, with stdout and stderr collected in the background.
/// Killed and reaped on drop unless it has already exited.
pub struct Process {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Process {
    /// Starts `vramd args…` in the package root (so `./config/vramd.toml`,
    /// the shipped defaults, is the configuration file), with no stdin and
    /// no inherited `VRAMD_*` variables; `env` adds variables.
    pub fn spawn<A: AsRef<OsStr>>(args: &[A], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(BIN);
        command.args(args);
        Self::spawn_command(&mut command, env)
    }

    /// Starts `command` (which should end up running `vramd`, e.g. through
    /// a shell that sets a resource limit) like [`Process::spawn`].
    pub fn spawn_command(command: &mut Command, env: &[(&str, &str)]) -> Self {
        command
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("VRAMD_") {
                command.env_remove(key);
            }
        }
        command.envs(env.iter().copied());
        let mut child =
            command.spawn().unwrap_or_else(|error| panic!("cannot start {BIN}: {error}"));
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().expect("stdout is piped"), stdout.clone()),
            collect(child.stderr.take().expect("stderr is piped"), stderr.clone()),
        ];
        Self { child, stdout, stderr, readers, status: None }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything written to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The stderr lines that are JSON objects (the `--log-format json` log).
    pub fn log(&self) -> Vec<serde_json::Value> {
        self.stderr()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(serde_json::Value::is_object)
            .collect()
    }

    /// Whether the process has exited (and records how), without waiting.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status
    }

    /// Waits until the log says `listening` and returns the bound address.
    /// Fails the test if the process exits first or `WAIT` passes.
    pub fn listening(&mut self) -> SocketAddr {
        let deadline = Deadline::after(WAIT);
        loop {
            let found = self.log().into_iter().find_map(|line| {
                (line["message"] == "listening").then(|| line["addr"].as_str().map(str::to_owned))
            });
            if let Some(addr) = found {
                let addr =
                    addr.unwrap_or_else(|| panic!("`listening` without addr:\n{}", self.stderr()));
                return addr.parse().unwrap_or_else(|_| panic!("bad listen address {addr}"));
            }
            if let Some(status) = self.exited() {
                panic!("vramd exited ({status}) before listening; stderr:\n{}", self.stderr());
            }
            assert!(
                !deadline.passed(),
                "vramd did not log `listening` within {WAIT:?}; stderr:\n{}",
                self.stderr()
            );
            pause();
        }
    }

    /// Polls `GET /readyz` until it answers 200.
    pub fn wait_ready(&mut self, addr: SocketAddr) {
        let deadline = Deadline::after(WAIT);
        loop {
            let last = http::get(addr, "/readyz");
            if matches!(&last, Ok(response) if response.status == 200) {
                return;
            }
            if let Some(status) = self.exited() {
                panic!("vramd exited ({status}) before it was ready; stderr:\n{}", self.stderr());
            }
            assert!(
                !deadline.passed(),
                "/readyz not 200 within {WAIT:?} (last: {last:?}); stderr:\n{}",
                self.stderr()
            );
            pause();
        }
    }

    /// Sends a signal (`TERM`, `INT`) with the shell's `kill`; this crate
    /// forbids the `unsafe` a direct `libc::kill` would need.
    pub fn signal(&self, name: &str) {
        let status = Command::new("sh")
            .args(["-c", "kill -s \"$0\" \"$1\"", name, &self.pid().to_string()])
            .stdin(Stdio::null())
            .status()
            .unwrap_or_else(|error| panic!("cannot run kill: {error}"));
        assert!(status.success(), "kill -s {name} {} failed: {status}", self.pid());
    }

    /// Waits at most `limit` for the process to exit, then collects its
    /// output. Fails the test (and the drop kills it) if it is still running.
    pub fn finish(mut self, limit: Duration) -> Output {
        let deadline = Deadline::after(limit);
        let status = loop {
            if let Some(status) = self.exited() {
                break status;
            }
            assert!(
                !deadline.passed(),
                "vramd still running {limit:?} after being asked to stop; stderr:\n{}",
                self.stderr()
            );
            pause();
        };
        // The pipes close when the process exits; give the readers a bounded
        // moment to drain them.
        let deadline = Deadline::after(WAIT);
        while !self.readers.iter().all(JoinHandle::is_finished) && !deadline.passed() {
            pause();
        }
        let stdout = self.stdout.lock().unwrap().clone();
        Output { status, stdout, stderr: self.stderr() }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Copies a pipe into `sink` on a background thread until end of file.
fn collect(pipe: impl Read + Send + 'static, sink: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut line = Vec::new();
        while matches!(reader.read_until(b'\n', &mut line), Ok(read) if read > 0) {
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&line));
            line.clear();
        }
    })
}

/// Runs `vramd args…` to completion (at most `WAIT`).
pub fn run<A: AsRef<OsStr>>(args: &[A], env: &[(&str, &str)]) -> Output {
    Process::spawn(args, env).finish(WAIT)
}

/// Starts a daemon with `args` (which should include [`SERVE`]) and waits
/// until it is listening and ready.
pub fn start_ready<A: AsRef<OsStr>>(args: &[A]) -> (Process, SocketAddr) {
    let mut daemon = Process::spawn(args, &[]);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    (daemon, addr)
}

/// `GET path`, failing the test on a transport error.
pub fn get(addr: SocketAddr, path: &str) -> http::Response {
    http::get(addr, path).unwrap_or_else(|error| panic!("{error}"))
}

/// The value of the exposition line `series value` (the series with all
/// its labels), if there is one.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Polls `check` until it holds, failing the test after `limit`.
pub fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Deadline::after(limit);
    while !check() {
        assert!(!deadline.passed(), "{what}: not within {limit:?}");
        pause();
    }
}
