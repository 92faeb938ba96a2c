//! The real NVML code path (`nvml-wrapper` → `libnvidia-ml.so.1`) of the
//! built daemon, against the fake driver library built from
//! `tests/fake-nvml`, driven by scenario files.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_types)]

mod support;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nvidia_ml_fake::harness;
use serde_json::{Value, json};
use tempfile::TempDir;

use support::{Process, SERVE, eventually, get, sample};

const GIB: u64 = 1 << 30;

/// A temporary directory holding a copy of the fake library and a scenario.
struct FakeDriver {
    dir: TempDir,
    library: PathBuf,
    scenario: PathBuf,
}

impl FakeDriver {
    fn new(scenario: &Value, legacy: bool) -> Self {
        let built = harness::build_fake_library(legacy).unwrap_or_else(|error| panic!("{error}"));
        let dir = TempDir::new().unwrap();
        let library = harness::install_as_libnvidia(dir.path(), &built);
        let scenario = harness::write_scenario(dir.path(), scenario);
        Self { dir, library, scenario }
    }

    /// Starts the daemon on this driver and waits until it is ready.
    fn start(&self, extra_env: &[(&str, &str)]) -> (Process, SocketAddr) {
        let (mut daemon, addr) = self.start_listening(extra_env);
        daemon.wait_ready(addr);
        (daemon, addr)
    }

    /// Starts the daemon on this driver and waits until it listens (a
    /// driver that hangs from the start never lets it become ready).
    fn start_listening(&self, extra_env: &[(&str, &str)]) -> (Process, SocketAddr) {
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

fn device(uuid: &str, used: u64, extra: Value) -> Value {
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

fn up(addr: SocketAddr, gpu: u32, uuid: &str) -> Option<f64> {
    sample(
        &get(addr, "/metrics").text(),
        &format!("vramd_device_up{{gpu=\"{gpu}\",uuid=\"{uuid}\"}}"),
    )
}

fn promtool_accepts(metrics: &str) {
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

const GPU0: &str = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20";
const GPU1: &str = "GPU-1b2c3d4e-1111-4d7b-9a1e-3b5c7d9e1f21";

#[test]
fn the_real_nvml_path_reports_what_the_driver_says() {
    let me = std::process::id();
    let scenario = json!({
        "driver_version": "570.133.20",
        "devices": [
            device(GPU0, 10 * GIB, json!({
                "processes": {
                    "compute": [ { "pid": me, "used_bytes": 6 * GIB } ],
                    "graphics": [ { "pid": me, "used_bytes": 6 * GIB } ],
                    "mps": [],
                },
                "ecc": {
                    "enabled": true, "pending": true,
                    "volatile_corrected": 2, "volatile_uncorrected": 0,
                    "aggregate_corrected": 17, "aggregate_uncorrected": 0,
                },
                "supported_event_types": 65439,
                "xid_events": [ { "after_ms": 300, "xid": 79 } ],
                "remapped_rows": { "correctable": 3, "uncorrectable": 0, "pending": true, "failure": false },
            })),
            device(GPU1, 2 * GIB, json!({
                "faults": { "not_supported": ["nvmlDeviceGetPowerUsage"] },
            })),
        ],
    });
    let driver = FakeDriver::new(&scenario, false);
    let (daemon, addr) = driver.start(&[]);

    let metrics = get(addr, "/metrics").text();
    assert_eq!(sample(&metrics, "vramd_nvml_up"), Some(1.0));
    let labels0 = format!("{{gpu=\"0\",uuid=\"{GPU0}\"}}");
    let labels1 = format!("{{gpu=\"1\",uuid=\"{GPU1}\"}}");
    assert_eq!(
        sample(&metrics, &format!("vramd_memory_total_bytes{labels0}")),
        Some((80 * GIB) as f64)
    );
    assert_eq!(
        sample(&metrics, &format!("vramd_memory_reserved_bytes{labels0}")),
        Some((GIB / 2) as f64)
    );
    assert_eq!(
        sample(&metrics, &format!("vramd_memory_used_bytes{labels1}")),
        Some((2 * GIB) as f64)
    );
    assert_eq!(sample(&metrics, &format!("vramd_gpu_utilization_ratio{labels0}")), Some(0.87));
    assert_eq!(sample(&metrics, &format!("vramd_sm_clock_hertz{labels0}")), Some(1.98e9));
    assert_eq!(sample(&metrics, &format!("vramd_power_usage_watts{labels0}")), Some(412.0));
    assert_eq!(
        sample(&metrics, &format!("vramd_power_usage_watts{labels1}")),
        None,
        "a value the device does not support is absent, never 0"
    );
    assert!(metrics.contains(&format!(
        "vramd_clock_throttle_active{{gpu=\"0\",uuid=\"{GPU0}\",reason=\"sw_power_cap\"}} 1"
    )));
    assert!(metrics.contains(&format!(
        "vramd_ecc_errors_total{{gpu=\"0\",uuid=\"{GPU0}\",type=\"corrected\",scope=\"aggregate\"}} 17"
    )));
    assert!(!metrics.contains("vramd_ecc_errors_total{gpu=\"1\""), "ECC off: no counters");
    assert!(
        metrics.contains(&format!(
            "vramd_remapped_rows{{gpu=\"0\",uuid=\"{GPU0}\",type=\"correctable\"}} 3"
        )),
        "remapped rows come through NVML field values"
    );
    assert_eq!(sample(&metrics, &format!("vramd_remapped_rows_pending{labels0}")), Some(1.0));
    assert_eq!(
        sample(&metrics, &format!("vramd_remapped_rows_pending{labels1}")),
        None,
        "a device without row remapping leaves it out"
    );
    let process = format!("pid=\"{me}\"");
    let used = metrics
        .lines()
        .find(|line| line.starts_with("vramd_process_memory_used_bytes") && line.contains(&process))
        .unwrap_or_else(|| panic!("our process is not listed:\n{metrics}"));
    assert!(used.ends_with(&format!(" {}", 6 * GIB)), "{used}");
    assert!(
        metrics.lines().any(|line| line.starts_with("vramd_process_info")
            && line.contains(&process)
            && line.contains("kind=\"compute_and_graphics\"")),
        "compute and graphics entries of one PID merge"
    );

    eventually(Duration::from_secs(10), "the Xid event is counted", || {
        get(addr, "/metrics")
            .text()
            .contains(&format!("vramd_xid_errors_total{{gpu=\"0\",uuid=\"{GPU0}\",xid=\"79\"}} 1"))
    });
    promtool_accepts(&get(addr, "/metrics").text());

    let detail = get(addr, "/api/v1/devices/0").json();
    let ours = detail["processes"].as_array().unwrap().iter().find(|p| p["pid"] == me).unwrap();
    assert_eq!(ours["kind"], "compute_and_graphics");
    assert!(ours["name"].is_string(), "the name comes from /proc/<pid>/comm: {ours}");
    assert!(ours["cmdline"].is_string(), "{ours}");
    assert_eq!(detail["health"]["persistence_mode"], true);

    let log = daemon.stderr();
    let absent = log.matches("value left out of the metrics").count();
    assert!(absent >= 1, "unsupported values are logged:\n{log}");
    let power_notes = log.lines().filter(|line| line.contains("power usage")).count();
    assert_eq!(power_notes, 1, "logged once, not on every sample:\n{log}");
    drop(daemon);
}

#[test]
fn a_lost_gpu_goes_down_alone_and_comes_back() {
    let scenario = json!({
        "devices": [
            device(GPU0, 4 * GIB, json!({})),
            device(GPU1, 4 * GIB, json!({
                "faults": { "gpu_lost_after_calls": 40, "recover_after_calls": 6 },
            })),
        ],
    });
    let driver = FakeDriver::new(&scenario, false);
    let (daemon, addr) = driver.start(&[]);
    eventually(Duration::from_secs(15), "GPU 1 is reported down", || {
        up(addr, 1, GPU1) == Some(0.0)
    });
    // A lost GPU answers (GPU_IS_LOST): the sampler is sampling, and says
    // so; readiness is not GPU health.
    let ready = get(addr, "/readyz");
    assert_eq!(ready.status, 200, "{}", ready.text());
    let metrics = get(addr, "/metrics").text();
    assert_eq!(
        sample(&metrics, &format!("vramd_device_up{{gpu=\"0\",uuid=\"{GPU0}\"}}")),
        Some(1.0)
    );
    assert_eq!(
        sample(&metrics, &format!("vramd_memory_used_bytes{{gpu=\"1\",uuid=\"{GPU1}\"}}")),
        None,
        "a lost GPU's series stop; no stale values are served as current"
    );
    assert!(
        sample(&metrics, "vramd_source_errors_total{kind=\"device_lost\"}").unwrap_or(0.0) >= 1.0
    );
    eventually(Duration::from_secs(20), "GPU 1 comes back", || up(addr, 1, GPU1) == Some(1.0));
    drop(daemon);
}

#[test]
fn a_hung_driver_call_marks_the_device_down_and_never_slows_a_scrape() {
    let scenario = json!({
        "devices": [
            device(GPU0, 4 * GIB, json!({})),
            device(GPU1, 4 * GIB, json!({
                "faults": { "sleep_ms": { "nvmlDeviceGetMemoryInfo_v2": 60_000 } },
            })),
        ],
    });
    let driver = FakeDriver::new(&scenario, false);
    let (daemon, addr) = driver.start_listening(&[("VRAMD_SAMPLER__CALL_TIMEOUT", "300ms")]);
    eventually(Duration::from_secs(10), "GPU 1 is reported down", || {
        up(addr, 1, GPU1) == Some(0.0)
    });
    // A call stuck in the driver is a device the sampler cannot see: not
    // ready, naming it, with how late it is; the healthy GPU is not named.
    eventually(Duration::from_secs(10), "/readyz names GPU 1's fast tier as stale", || {
        let answer = get(addr, "/readyz");
        let body = answer.json();
        let stale = body["stale"].as_array().cloned().unwrap_or_default();
        answer.status == 503
            && body["code"] == "not_ready"
            && stale.iter().any(|tier| {
                tier["gpu"] == 1
                    && tier["tier"] == "fast"
                    && tier["overdue_seconds"].as_f64().is_some()
            })
            && stale.iter().all(|tier| tier["gpu"] == 1)
    });
    let metrics = get(addr, "/metrics").text();
    let last = sample(
        &metrics,
        &format!(
            "vramd_sampler_last_success_timestamp_seconds{{gpu=\"0\",uuid=\"{GPU0}\",tier=\"fast\"}}"
        ),
    );
    assert!(last.is_some_and(|seconds| seconds > 1.7e9), "GPU 0 is sampled: {last:?}");
    assert_eq!(
        sample(
            &metrics,
            &format!(
                "vramd_sampler_last_success_timestamp_seconds{{gpu=\"1\",uuid=\"{GPU1}\",tier=\"fast\"}}"
            ),
        ),
        None,
        "GPU 1's fast tier never stored a reading"
    );
    let threads = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
        status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap()
    };
    let before = threads();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    while started.elapsed() < Duration::from_secs(3) {
        let asked = Instant::now();
        let metrics = get(addr, "/metrics").text();
        slowest = slowest.max(asked.elapsed());
        assert_eq!(
            sample(&metrics, &format!("vramd_device_up{{gpu=\"0\",uuid=\"{GPU0}\"}}")),
            Some(1.0)
        );
        assert_eq!(
            sample(&metrics, "vramd_source_calls_stuck"),
            Some(1.0),
            "one stuck call, not one per tick"
        );
    }
    // Behaviour, not speed: a scrape that waited on the 60 s call would take 60 s.
    assert!(slowest < Duration::from_secs(5), "a scrape waited on the driver: {slowest:?}");
    let after = threads();
    assert!(after <= before + 2, "threads grew from {before} to {after}: calls are piling up");
    let metrics = get(addr, "/metrics").text();
    assert!(
        sample(&metrics, "vramd_source_errors_total{kind=\"still_running\"}").unwrap_or(0.0) >= 5.0
    );
    drop(daemon);
}

#[test]
fn an_older_driver_without_newer_symbols_leaves_those_values_absent() {
    let scenario = json!({ "devices": [ device(GPU0, 4 * GIB, json!({})) ] });
    let driver = FakeDriver::new(&scenario, true);
    let (mut daemon, addr) = driver.start(&[]);
    // Let a few slow-tier cycles run into the missing symbols.
    let slow_cycles = r#"vramd_sample_duration_seconds_count{tier="slow"}"#;
    eventually(Duration::from_secs(10), "three slow-tier cycles", || {
        sample(&get(addr, "/metrics").text(), slow_cycles).is_some_and(|cycles| cycles >= 3.0)
    });
    let metrics = get(addr, "/metrics").text();
    let labels = format!("{{gpu=\"0\",uuid=\"{GPU0}\"}}");
    assert_eq!(
        sample(&metrics, &format!("vramd_memory_used_bytes{labels}")),
        None,
        "no memory info v2"
    );
    assert_eq!(sample(&metrics, &format!("vramd_processes{labels}")), None, "no v3 process lists");
    assert_eq!(sample(&metrics, &format!("vramd_gpu_utilization_ratio{labels}")), Some(0.87));
    assert_eq!(sample(&metrics, &format!("vramd_temperature_celsius{labels}")), Some(64.0));
    assert!(daemon.exited().is_none(), "the daemon keeps running");
    assert!(!daemon.stderr().contains("panicked"), "{}", daemon.stderr());
    drop(daemon);
}

#[test]
fn mig_devices_are_monitored_as_devices_of_their_own() {
    const MIG: &str = "MIG-5c2a1d3e-0000-5f6a-8b9c-0d1e2f3a4b5c";
    let scenario = json!({
        "devices": [
            device(GPU0, 4 * GIB, json!({
                "mig": {
                    "enabled": true,
                    "pending": true,
                    "max_devices": 7,
                    "devices": [ {
                        "uuid": MIG,
                        "name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
                        "gpu_instance_id": 1,
                        "compute_instance_id": 0,
                        "profile": "3g.40gb",
                        "memory": { "total_bytes": 40 * GIB, "used_bytes": GIB },
                        "processes": { "compute": [ { "pid": 5151, "used_bytes": GIB } ] },
                    } ],
                },
            })),
        ],
    });
    let driver = FakeDriver::new(&scenario, false);
    let (daemon, addr) = driver.start(&[]);
    let devices = get(addr, "/api/v1/devices").json();
    let listed = devices["devices"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "the GPU and its MIG device: {devices}");
    let mig = listed.iter().find(|d| d["uuid"] == MIG).unwrap();
    assert_eq!(mig["mig"]["parent_uuid"], GPU0);
    assert_eq!(mig["mig"]["profile"], "3g.40gb");
    assert_eq!(mig["mig"]["gpu_instance_id"], 1, "{mig}");
    assert_eq!(mig["mig"]["compute_instance_id"], 0, "{mig}");
    let gpu = listed.iter().find(|d| d["uuid"] == GPU0).unwrap();
    assert!(gpu.get("mig").is_none(), "a whole GPU has no instance ids: {gpu}");

    eventually(Duration::from_secs(10), "the MIG device's processes are listed", || {
        let detail = get(addr, &format!("/api/v1/devices/{MIG}")).json();
        detail["processes"].as_array().is_some_and(|p| p.iter().any(|p| p["pid"] == 5151))
    });
    let metrics = get(addr, "/metrics").text();
    // dcgm-exporter users filter MIG series by instance: every series of
    // the MIG device carries its GPU-instance and compute-instance ids.
    let labels =
        format!("{{gpu=\"0\",uuid=\"{MIG}\",gpu_instance_id=\"1\",compute_instance_id=\"0\"}}");
    assert_eq!(
        sample(&metrics, &format!("vramd_memory_total_bytes{labels}")),
        Some((40 * GIB) as f64)
    );
    assert_eq!(sample(&metrics, &format!("vramd_memory_used_bytes{labels}")), Some(GIB as f64));
    assert!(
        metrics.lines().any(|line| line.starts_with("vramd_device_info")
            && line.contains(MIG)
            && line.contains("mig_profile=\"3g.40gb\"")
            && line.contains(&format!("parent_uuid=\"{GPU0}\""))),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, &format!("vramd_mig_mode{{gpu=\"0\",uuid=\"{GPU0}\"}}")),
        Some(1.0)
    );
    promtool_accepts(&metrics);
    drop(daemon);
}

#[test]
fn a_mig_reconfiguration_is_followed_without_a_restart() {
    const OLD: &str = "MIG-5c2a1d3e-0000-5f6a-8b9c-0d1e2f3a4b5c";
    const NEW_A: &str = "MIG-6d3b2e4f-1111-5f6a-8b9c-0d1e2f3a4b5c";
    const NEW_B: &str = "MIG-7e4c3f5a-2222-5f6a-8b9c-0d1e2f3a4b5c";
    let trigger_dir = TempDir::new().unwrap();
    let trigger = trigger_dir.path().join("reconfigure");
    let instance = |uuid: &str, gi: u32, profile: &str, used: u64| {
        json!({
            "uuid": uuid,
            "gpu_instance_id": gi,
            "profile": profile,
            "memory": { "total_bytes": 10 * GIB, "used_bytes": used },
        })
    };
    let scenario = json!({
        "devices": [
            device(GPU0, 4 * GIB, json!({
                "mig": {
                    "enabled": true,
                    "devices": [ instance(OLD, 1, "3g.40gb", GIB) ],
                    "reconfigured": {
                        "when_file_exists": trigger,
                        "devices": [
                            instance(NEW_A, 7, "1g.10gb", 2 * GIB),
                            instance(NEW_B, 8, "1g.10gb", 3 * GIB),
                        ],
                    },
                },
            })),
        ],
    });
    let driver = FakeDriver::new(&scenario, false);
    let (daemon, addr) = driver.start(&[]);
    let used = |metrics: &str, uuid: &str, gi: u32| {
        let labels = format!(
            "{{gpu=\"0\",uuid=\"{uuid}\",gpu_instance_id=\"{gi}\",compute_instance_id=\"0\"}}"
        );
        sample(metrics, &format!("vramd_memory_used_bytes{labels}"))
    };
    eventually(Duration::from_secs(10), "the first layout is sampled", || {
        used(&get(addr, "/metrics").text(), OLD, 1) == Some(GIB as f64)
    });

    std::fs::write(&trigger, b"").unwrap();
    eventually(Duration::from_secs(15), "the new MIG devices are sampled", || {
        let metrics = get(addr, "/metrics").text();
        used(&metrics, NEW_A, 7) == Some((2 * GIB) as f64)
            && used(&metrics, NEW_B, 8) == Some((3 * GIB) as f64)
    });
    let metrics = get(addr, "/metrics").text();
    assert!(!metrics.contains(OLD), "the removed MIG device's series are gone:\n{metrics}");
    assert_eq!(sample(&metrics, "vramd_mig_reconfigurations_total{gpu=\"0\"}"), Some(1.0));
    assert_eq!(
        sample(&metrics, &format!("vramd_device_up{{gpu=\"0\",uuid=\"{GPU0}\"}}")),
        Some(1.0),
        "the parent GPU kept sampling"
    );
    let devices = get(addr, "/api/v1/devices").json();
    let mut uuids: Vec<&str> =
        devices["devices"].as_array().unwrap().iter().filter_map(|d| d["uuid"].as_str()).collect();
    uuids.sort_unstable();
    assert_eq!(uuids, [GPU0, NEW_A, NEW_B], "{devices}");
    assert_eq!(get(addr, &format!("/api/v1/devices/{OLD}")).status, 404);
    promtool_accepts(&metrics);
    drop(daemon);
}

#[test]
fn an_allocator_report_joins_the_nvml_process_it_came_from() {
    let me = std::process::id();
    let scenario = json!({
        "devices": [ device(GPU0, 10 * GIB, json!({
            "processes": { "compute": [ { "pid": me, "used_bytes": 9 * GIB } ], "graphics": [], "mps": [] },
        })) ],
    });
    let driver = FakeDriver::new(&scenario, false);
    let (daemon, addr) = driver.start(&[]);
    let at = vramd::clock::wall_now().to_rfc3339();
    let report = json!({
        "version": 1,
        "reporter": { "pid": me, "hostname": "e2e" },
        "at": at,
        "devices": [ { "uuid": GPU0, "index": 0, "memory_stats": {
            "allocated_bytes.all.current": 6 * GIB, "reserved_bytes.all.current": 8 * GIB,
            "active_bytes.all.current": 6 * GIB, "inactive_split_bytes.all.current": GIB,
            "num_alloc_retries": 3, "num_ooms": 0 } } ],
    });
    let response =
        support::http::post(addr, "/api/v1/allocator-reports", &report.to_string()).unwrap();
    assert_eq!(response.status, 202, "{}", response.text());
    let series = format!("vramd_allocator_reserved_bytes{{gpu=\"0\",uuid=\"{GPU0}\",pid=\"{me}\"");
    eventually(Duration::from_secs(10), "the report joins our NVML process", || {
        get(addr, "/metrics").text().contains(&series)
    });
    let detail = get(addr, "/api/v1/devices/0").json();
    let ours = detail["processes"].as_array().unwrap().iter().find(|p| p["pid"] == me).unwrap();
    assert_eq!(ours["breakdown"]["outside_allocator_bytes"], GIB, "NVML 9 GiB - reserved 8 GiB");
    let reports = get(addr, "/api/v1/allocator-reports").json();
    assert_eq!(reports["reports"][0]["matched_pid"], me, "{reports}");
    drop(daemon);
}

#[test]
fn activity_values_come_through_and_unsupported_ones_stay_absent() {
    let me = std::process::id();
    // A process named like vramd's probe child, on the GPU like one.
    let dir = TempDir::new().unwrap();
    let probe_name = dir.path().join("vramd-probe");
    std::os::unix::fs::symlink("/bin/sleep", &probe_name).unwrap();
    let mut probe = Command::new(&probe_name).arg("60").spawn().unwrap();
    let probe_pid = probe.id();
    let scenario = json!({
        "devices": [
            device(GPU0, 10 * GIB, json!({
                "energy_mj": 5_000_000,
                "performance_state": 2,
                "encoder_utilization": 12,
                "decoder_utilization": 34,
                "supported_event_types": 65439,
                "xid_events": [ { "after_ms": 300, "xid": 13 } ],
                "processes": {
                    "compute": [
                        { "pid": me, "used_bytes": 6 * GIB,
                          "utilization": { "sm": 73, "memory": 21 } },
                        { "pid": probe_pid, "used_bytes": 500 << 20 },
                    ],
                    "graphics": [],
                    "mps": [],
                },
            })),
            device(GPU1, 2 * GIB, json!({
                "processes": { "compute": [ { "pid": me, "used_bytes": GIB } ] },
                "faults": { "not_supported": ["nvmlDeviceGetProcessUtilization"] },
            })),
        ],
    });
    let driver = FakeDriver::new(&scenario, false);
    let (daemon, addr) = driver.start(&[]);
    let labels0 = format!("gpu=\"0\",uuid=\"{GPU0}\"");
    let labels1 = format!("gpu=\"1\",uuid=\"{GPU1}\"");
    let xid = format!("vramd_device_last_xid_timestamp_seconds{{{labels0}}}");
    eventually(Duration::from_secs(10), "the Xid's time is exported", || {
        sample(&get(addr, "/metrics").text(), &xid).is_some()
    });
    let metrics = get(addr, "/metrics").text();
    let value = |series: String| sample(&metrics, &series);
    let wall =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let at = value(xid.clone()).unwrap();
    assert!((wall - 60.0..=wall + 1.0).contains(&at), "{at} vs now {wall}");
    assert_eq!(value(format!("vramd_device_last_xid_timestamp_seconds{{{labels1}}}")), None);
    let energy = value(format!("vramd_energy_consumption_joules_total{{{labels0}}}")).unwrap();
    assert!(energy >= 5_000.0, "mJ are exported as joules: {energy}");
    assert_eq!(value(format!("vramd_performance_state{{{labels0}}}")), Some(2.0));
    assert_eq!(value(format!("vramd_encoder_utilization_ratio{{{labels0}}}")), Some(0.12));
    assert_eq!(value(format!("vramd_decoder_utilization_ratio{{{labels0}}}")), Some(0.34));
    for family in [
        "vramd_energy_consumption_joules_total",
        "vramd_performance_state",
        "vramd_encoder_utilization_ratio",
        "vramd_decoder_utilization_ratio",
    ] {
        assert_eq!(
            value(format!("{family}{{{labels1}}}")),
            None,
            "{family}: unsupported is absent"
        );
    }
    let ours = format!("{labels0},pid=\"{me}\"");
    let sm = |metrics: &str| {
        metrics.lines().find_map(|line| {
            let rest = line.strip_prefix("vramd_process_sm_utilization_ratio{")?;
            rest.starts_with(&ours).then(|| line.rsplit(' ').next()?.parse::<f64>().ok())?
        })
    };
    eventually(Duration::from_secs(10), "per-process utilization", || {
        sm(&get(addr, "/metrics").text()) == Some(0.73)
    });
    let metrics = get(addr, "/metrics").text();
    assert!(
        metrics.lines().any(|line| line
            .starts_with(&format!("vramd_process_memory_bandwidth_utilization_ratio{{{ours}"))
            && line.ends_with(" 0.21")),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|line| line.starts_with("vramd_process_sm_utilization_ratio")
            && line.contains(&format!("pid=\"{probe_pid}\""))
            && line.ends_with(" 0")),
        "a listed process without a sample was idle, not unknown:\n{metrics}"
    );
    assert!(
        !metrics.lines().any(|line| line.starts_with("vramd_process_sm_utilization_ratio")
            && line.contains(&labels1)),
        "no per-process utilization where the driver has none"
    );
    assert!(
        metrics.lines().any(|line| line.starts_with("vramd_process_info")
            && line.contains(&format!("pid=\"{probe_pid}\""))
            && line.contains("role=\"probe\"")),
        "the probe child is marked:\n{metrics}"
    );
    promtool_accepts(&metrics);

    let detail = get(addr, "/api/v1/devices/0").json();
    assert_eq!(detail["health"]["performance_state"], 2, "{detail}");
    assert_eq!(detail["health"]["encoder_utilization_percent"], 12);
    assert!(detail["health"]["energy_millijoules"].as_u64().unwrap() >= 5_000_000);
    assert!(detail["health"]["last_xid_unix_ms"].is_i64());
    let processes = detail["processes"].as_array().unwrap();
    let mine = processes.iter().find(|p| p["pid"] == me).unwrap();
    assert_eq!(mine["sm_utilization_percent"], 73, "{mine}");
    assert_eq!(mine["memory_utilization_percent"], 21, "{mine}");
    assert!(mine.get("role").is_none());
    let child = processes.iter().find(|p| p["pid"] == probe_pid).unwrap();
    assert_eq!(child["role"], "probe", "{child}");
    assert_eq!(child["name"], "vramd-probe");
    let other = get(addr, "/api/v1/devices/1").json();
    let mine = other["processes"].as_array().unwrap().iter().find(|p| p["pid"] == me).unwrap();
    assert!(mine.get("sm_utilization_percent").is_none(), "{mine}");
    drop(daemon);
    let _ = probe.kill();
    let _ = probe.wait();
}

/// Issue 15: once start-up is over (10 s) the daemon hands back its freed
/// start-up heap and unmaps its start-up code; the code it still runs is
/// mapped again on use, so sampling, readiness and the API go on.
/// What a sample costs is readable in /metrics: the call's wall time and
/// the sampler thread's CPU time (one sample in 16), both in buckets from
/// 1 µs, since a fast sample on NVML costs a few microseconds.
#[test]
fn sample_timings_have_microsecond_buckets_and_a_cpu_clock_figure() {
    let scenario = json!({ "devices": [ device(GPU0, 4 * GIB, json!({})) ] });
    let driver = FakeDriver::new(&scenario, false);
    let (mut daemon, addr) = driver.start(&[]);
    let cpu_count = r#"vramd_sample_cpu_seconds_count{tier="fast"}"#;
    eventually(Duration::from_secs(30), "CPU times of fast samples", || {
        sample(&get(addr, "/metrics").text(), cpu_count).is_some_and(|count| count >= 3.0)
    });
    let text = get(addr, "/metrics").text();
    for family in ["vramd_sample_duration_seconds", "vramd_sample_cpu_seconds"] {
        for tier in ["fast", "slow"] {
            let lowest = format!("{family}_bucket{{tier=\"{tier}\",le=\"0.000001\"}}");
            assert!(sample(&text, &lowest).is_some(), "{lowest} in:\n{text}");
        }
    }
    let calls = sample(&text, r#"vramd_sample_duration_seconds_count{tier="fast"}"#).unwrap();
    let measured = sample(&text, cpu_count).unwrap();
    // Scraped a moment apart: a few samples may land between the two.
    assert!(measured <= (calls + 16.0) / 16.0 + 1.0, "{measured} of {calls}");
    let cpu = sample(&text, r#"vramd_sample_cpu_seconds_sum{tier="fast"}"#).unwrap();
    assert!(cpu > 0.0, "a sample costs some CPU: {cpu}");
    assert!(daemon.exited().is_none());
}

#[test]
fn sampling_and_serving_go_on_after_start_up_memory_is_released() {
    let scenario = json!({ "devices": [ device(GPU0, 4 * GIB, json!({})) ] });
    let driver = FakeDriver::new(&scenario, false);
    let (mut daemon, addr) = driver.start(&[("VRAMD_LOG__LEVEL", "info,vramd::app=debug")]);
    eventually(Duration::from_secs(30), "start-up memory released", || {
        daemon.log().iter().any(|line| line["message"] == "start-up code unmapped")
    });
    let released = daemon
        .log()
        .iter()
        .find(|line| line["message"] == "start-up code unmapped")
        .and_then(|line| line["bytes"].as_u64());
    assert!(released.is_some_and(|bytes| bytes > 0), "{}", daemon.stderr());
    let fast = r#"vramd_sample_duration_seconds_count{tier="fast"}"#;
    let before = sample(&get(addr, "/metrics").text(), fast).unwrap();
    eventually(Duration::from_secs(10), "fast samples after the release", || {
        sample(&get(addr, "/metrics").text(), fast).is_some_and(|count| count > before)
    });
    assert_eq!(get(addr, "/readyz").status, 200);
    assert_eq!(get(addr, "/api/v1/devices").status, 200);
    assert!(daemon.exited().is_none(), "the daemon keeps running");
    assert!(!daemon.stderr().contains("panicked"), "{}", daemon.stderr());
}

#[test]
fn a_driver_call_that_hangs_starves_systemds_watchdog() {
    let scenario = json!({
        "devices": [device(GPU0, 4 * GIB, json!({
            "faults": { "sleep_ms": { "nvmlDeviceGetMemoryInfo_v2": 60_000 } },
        }))],
    });
    let driver = FakeDriver::new(&scenario, false);
    let mut socket = support::systemd::NotifySocket::new();
    let env = [
        ("NOTIFY_SOCKET", socket.path()),
        ("WATCHDOG_USEC", "200000"),
        ("VRAMD_SAMPLER__CALL_TIMEOUT", "300ms"),
    ];
    let (daemon, addr) = driver.start_listening(&env);
    let behind = "STATUS=not ready: the sampler has fallen behind on 1 device tier";
    assert!(
        socket.wait_for(support::WAIT, |seen| support::systemd::count(seen, behind) > 0),
        "no STATUS line saying the sampler fell behind: {:?}",
        socket.received
    );
    // Ten watchdog periods: a daemon feeding it regardless would have sent
    // about twenty pings by now.
    socket.collect_for(Duration::from_secs(2));
    let since_behind: Vec<&String> =
        socket.received.iter().skip_while(|m| !m.lines().any(|l| l == behind)).collect();
    assert!(
        since_behind.iter().all(|m| !m.contains("WATCHDOG=1") && !m.contains("STATUS=sampling")),
        "the watchdog was fed while the sampler was stuck: {:?}",
        socket.received
    );
    assert_eq!(get(addr, "/readyz").status, 503, "the same truth as /readyz");
    drop(daemon);
}
