//! Shared fixture: each test runs its driver calls in a child process (this
//! test binary, filtered to that one test) whose environment points a fresh
//! copy of the fake library at the test's own scenario and call log. The
//! library's state is process-global and its scenario comes from the
//! environment, so this keeps tests parallel without ever changing the
//! environment of the multi-threaded test process. See README.md.
//!
//! ```ignore
//! #[test]
//! fn my_test() {
//!     let log = in_child("my_test", json!({ "devices": [{}] }), |driver| {
//!         driver.init().unwrap(); // runs in the child
//!     });
//!     assert_eq!(log, ["cuInit ok"]); // runs in the parent
//! }
//! ```

#![allow(dead_code)]
// Test helpers: a failure here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use cuda_driver::Driver;
use cuda_fake::harness;
use serde_json::Value;
use tempfile::TempDir;

/// Set in the child to the name of the test it runs.
const CHILD_ENV: &str = "FAKE_CUDA_TEST_CHILD";
/// The library copy the child loads.
const LIBRARY_ENV: &str = "FAKE_CUDA_TEST_LIBRARY";
/// A file the child creates once its body has returned, so a misspelt test
/// name (a child that ran no test and exited 0) cannot pass.
const DONE_ENV: &str = "FAKE_CUDA_TEST_DONE";

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;

pub struct Fixture {
    pub dir: TempDir,
    pub lib: PathBuf,
    pub scenario: PathBuf,
    pub log: PathBuf,
    done: PathBuf,
}

impl Fixture {
    /// A temporary directory with a copy of the library and `scenario`.
    pub fn new(scenario: Value) -> Self {
        let built = harness::build_fake_library().expect("build fake-cuda");
        let dir = tempfile::tempdir().expect("tempdir");
        let lib = harness::install_as_libcuda(dir.path(), &built);
        let scenario = harness::write_scenario(dir.path(), &scenario);
        let log = dir.path().join("calls.log");
        let done = dir.path().join("child-done");
        Self { dir, lib, scenario, log, done }
    }

    /// This test binary, filtered to `test`, with the fake's environment.
    pub fn command(&self, test: &str) -> Command {
        let mut command = Command::new(std::env::current_exe().expect("current exe"));
        command
            .args([test, "--exact", "--test-threads=1", "--nocapture"])
            .env(CHILD_ENV, test)
            .env(LIBRARY_ENV, &self.lib)
            .env(DONE_ENV, &self.done)
            .env(harness::SCENARIO_ENV, &self.scenario)
            .env(harness::LOG_ENV, &self.log);
        command
    }

    /// Runs `test` in a child; asserts it passed; returns its call log.
    pub fn run(&self, test: &str) -> Vec<String> {
        let output = self.command(test).output().expect("spawn the child");
        assert!(
            output.status.success(),
            "child {test} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        assert!(self.done.exists(), "the child ran no test named {test:?}");
        harness::read_log(&self.log)
    }

    /// Starts `test` in a child that is expected to hang in `call`; waits
    /// until the log says it did, checks it is still running, kills it.
    pub fn expect_hang(&self, test: &str, call: &str) {
        let mut child: Child = self.command(test).spawn().expect("spawn the child");
        let hang_line = format!("{call} hang");
        let mut waited = Duration::ZERO;
        while !harness::read_log(&self.log).contains(&hang_line) {
            assert!(child.try_wait().unwrap().is_none(), "the child exited instead of hanging");
            assert!(waited < Duration::from_secs(30), "the child never reached {call}");
            std::thread::sleep(Duration::from_millis(20));
            waited += Duration::from_millis(20);
        }
        std::thread::sleep(Duration::from_millis(200));
        let still_running = child.try_wait().unwrap().is_none();
        child.kill().expect("kill the child");
        child.wait().expect("reap the child");
        assert!(still_running, "{call} returned");
    }
}

/// In the child running `test`: loads the library, runs `body`, marks the
/// test done and exits the process (so the parent's half of the test does
/// not run here). Anywhere else: does nothing.
pub fn child_part(test: &str, body: impl FnOnce(&Driver)) {
    if std::env::var_os(CHILD_ENV).is_none_or(|name| name != test) {
        return;
    }
    let lib = std::env::var_os(LIBRARY_ENV).expect(LIBRARY_ENV);
    {
        let driver = Driver::load(&lib).expect("load the fake library");
        body(&driver);
    }
    std::fs::write(std::env::var_os(DONE_ENV).expect(DONE_ENV), "").expect("mark done");
    std::process::exit(0);
}

/// Runs `body` against a fresh fake driver with `scenario`, in a child
/// process; in the parent, returns the child's call log.
pub fn in_child(test: &str, scenario: Value, body: impl FnOnce(&Driver)) -> Vec<String> {
    child_part(test, body);
    Fixture::new(scenario).run(test)
}

/// One device with the given fields (others default).
pub fn one_device(fields: Value) -> Value {
    serde_json::json!({ "devices": [fields] })
}
