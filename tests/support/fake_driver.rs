//! The fake NVML driver for tests of the real NVML path: a temporary copy
//! of the library built from `tests/fake-nvml` with a scenario file, the
//! daemon started on it, and the scenario's device template.

// Test code: a panic here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use nvidia_ml_fake::harness;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::support::{Process, SERVE, get, sample};

pub const GIB: u64 = 1 << 30;

/// A temporary directory holding a copy of the fake library and a scenario.
pub struct FakeDriver {
    dir: TempDir,
    library: PathBuf,
    scenario: PathBuf,
}

impl FakeDriver {
    pub fn new(scenario: &Value, legacy: bool) -> Self {
        let built = harness::build_fake_library(legacy).unwrap_or_else(|error| panic!("{error}"));
        let dir = TempDir::new().unwrap();
        let library = harness::install_as_libnvidia(dir.path(), &built);
        let scenario = harness::write_scenario(dir.path(), scenario);
        Self { dir, library, scenario }
    }

    /// Starts the daemon on this driver and waits until it is ready.
    pub fn start(&self, extra_env: &[(&str, &str)]) -> (Process, SocketAddr) {
        let (mut daemon, addr) = self.start_listening(extra_env);
        daemon.wait_ready(addr);
        (daemon, addr)
    }

    /// Starts the daemon on this driver and waits until it listens (a
    /// driver that hangs from the start never lets it become ready).
    pub fn start_listening(&self, extra_env: &[(&str, &str)]) -> (Process, SocketAddr) {
        let library = self.library.to_str().unwrap().to_owned();
        let scenario = self.scenario.to_str().unwrap().to_owned();
        let mut env = vec![
            ("VRAMD_NVML__LIBRARY_PATH", library.as_str()),
            (harness::SCENARIO_ENV, scenario.as_str()),
            ("VRAMD_SAMPLER__FAST_INTERVAL", "100ms"),
            ("VRAMD_SAMPLER__SLOW_INTERVAL", "200ms"),
        ];
        env.extend_from_slice(extra_env);
        let mut daemon = Process::spawn(&SERVE, &env);
        let addr = daemon.listening();
        let _ = &self.dir;
        (daemon, addr)
    }
}

pub fn device(uuid: &str, used: u64, extra: Value) -> Value {
    let mut device = json!({
        "uuid": uuid,
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:17:00.0",
        "memory": { "total_bytes": 80 * GIB, "reserved_bytes": GIB / 2, "used_bytes": used },
        "utilization": { "gpu": 87, "memory": 41 },
        "temperature_c": 64,
        "power_usage_mw": 412_000,
        "power_limit_mw": 700_000,
        "clocks": { "graphics_mhz": 1980, "sm_mhz": 1980, "memory_mhz": 2619, "video_mhz": 1755 },
        "throttle_reasons": 4,
        "persistence_mode": true,
        "compute_mode": "default",
        "bar1": { "total_bytes": 128 * GIB, "used_bytes": 8 << 20 },
        "processes": { "compute": [], "graphics": [], "mps": [] },
    });
    if let (Some(target), Some(extra)) = (device.as_object_mut(), extra.as_object()) {
        for (key, value) in extra {
            target.insert(key.clone(), value.clone());
        }
    }
    device
}

pub fn up(addr: SocketAddr, gpu: u32, uuid: &str) -> Option<f64> {
    sample(
        &get(addr, "/metrics").text(),
        &format!("vramd_device_up{{gpu=\"{gpu}\",uuid=\"{uuid}\"}}"),
    )
}

pub fn promtool_accepts(metrics: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is needed: run scripts/test.sh, which installs it");
    child.stdin.take().unwrap().write_all(metrics.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success() && report.trim().is_empty(), "promtool:\n{report}");
}

pub const GPU0: &str = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20";
pub const GPU1: &str = "GPU-1b2c3d4e-1111-4d7b-9a1e-3b5c7d9e1f21";
