//! The real NVML code path (`nvml-wrapper` → `libnvidia-ml.so.1`) of the
//! built daemon, against the fake driver library built from
//! `tests/fake-nvml`, driven by scenario files: what the driver says, lost
//! and hung devices, older drivers, reports joined to NVML processes.
//! MIG layouts are in `tests/nvml_mig.rs`, the daemon's own upkeep on this
//! path in `tests/nvml_daemon.rs`.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_types)]

#[path = "support/fake_driver.rs"]
mod fake_driver;
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use fake_driver::{FakeDriver, GIB, GPU0, GPU1, device, promtool_accepts, up};
use support::{eventually, get, sample};

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
