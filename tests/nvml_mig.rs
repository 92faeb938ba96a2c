//! MIG on the real NVML code path, against the fake driver library: each
//! instance monitored as a device of its own, and a reconfiguration
//! followed without a restart.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_types)]

#[path = "support/fake_driver.rs"]
mod fake_driver;
mod support;

use std::time::Duration;

use serde_json::json;
use tempfile::TempDir;

use fake_driver::{FakeDriver, GIB, GPU0, device, promtool_accepts};
use support::{eventually, get, sample};

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
