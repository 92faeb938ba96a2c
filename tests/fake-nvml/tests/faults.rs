//! Injected faults and init failures, as nvml-wrapper reports them.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Fixture, one_device};
use nvidia_ml_fake::harness;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::error::NvmlError;
use serde_json::json;

#[test]
fn not_supported_fault_maps_to_not_supported() {
    let faults = json!({ "not_supported": ["nvmlDeviceGetPowerUsage"] });
    let fixture = Fixture::new(one_device(json!({ "power_usage_mw": 1, "faults": faults })));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    assert!(matches!(device.power_usage(), Err(NvmlError::NotSupported)));
    assert!(device.memory_info().is_ok());
}

#[test]
fn fail_fault_returns_the_named_code() {
    let faults = json!({ "fail": { "nvmlDeviceGetTemperature": "NVML_ERROR_NO_PERMISSION" } });
    let fixture = Fixture::new(one_device(json!({ "temperature_c": 50, "faults": faults })));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    assert!(matches!(device.temperature(TemperatureSensor::Gpu), Err(NvmlError::NoPermission)));
}

#[test]
fn gpu_is_lost_after_n_calls_and_recovers_m_calls_later() {
    let faults = json!({ "gpu_lost_after_calls": 3, "recover_after_calls": 2 });
    let fixture = Fixture::new(one_device(json!({ "faults": faults })));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap(); // call 1
    assert!(device.memory_info().is_ok()); // 2
    assert!(device.utilization_rates().is_ok()); // 3
    assert!(matches!(device.memory_info(), Err(NvmlError::GpuLost))); // 4
    assert!(matches!(nvml.device_by_index(0), Err(NvmlError::GpuLost))); // 5
    assert!(device.memory_info().is_ok()); // 6: recovered
    assert_eq!(nvml.device_count().unwrap(), 1);
}

#[test]
fn gpu_lost_without_recovery_stays_lost() {
    let faults = json!({ "gpu_lost_after_calls": 1 });
    let fixture = Fixture::new(one_device(json!({ "faults": faults })));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    for _ in 0..5 {
        assert!(matches!(device.uuid(), Err(NvmlError::GpuLost)));
    }
}

#[test]
fn sleeping_call_takes_at_least_its_sleep() {
    let faults = json!({ "sleep_ms": { "nvmlDeviceGetMemoryInfo_v2": 300 } });
    let fixture = Fixture::new(one_device(json!({ "faults": faults })));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    let start = Instant::now();
    assert!(device.memory_info().is_ok());
    assert!(start.elapsed() >= Duration::from_millis(300));
    let start = Instant::now();
    assert!(device.utilization_rates().is_ok());
    assert!(start.elapsed() < Duration::from_millis(300));
}

#[test]
fn a_panic_inside_an_exported_function_returns_unknown() {
    let faults = json!({ "panic_in": ["nvmlDeviceGetName"] });
    let fixture = Fixture::new(one_device(json!({ "faults": faults })));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    assert!(matches!(device.name(), Err(NvmlError::Unknown)));
    // The library is still usable afterwards.
    assert!(device.uuid().is_ok());
    assert!(matches!(device.name(), Err(NvmlError::Unknown)));
}

#[test]
fn init_failure_and_init_sleep() {
    let fixture = Fixture::new(
        json!({ "init": { "fail": "NVML_ERROR_DRIVER_NOT_LOADED", "sleep_ms": 200 } }),
    );
    let start = Instant::now();
    assert!(matches!(fixture.try_init(), Err(NvmlError::DriverNotLoaded)));
    assert!(start.elapsed() >= Duration::from_millis(200));
}

#[test]
fn invalid_or_missing_scenario_fails_init_with_unknown() {
    let fixture = Fixture::new(json!({ "devices": [{ "no_such_key": 1 }] }));
    assert!(matches!(fixture.try_init(), Err(NvmlError::Unknown)));
    std::fs::write(&fixture.scenario, "{ not json").unwrap();
    assert!(matches!(fixture.try_init(), Err(NvmlError::Unknown)));
    std::fs::remove_file(&fixture.scenario).unwrap();
    assert!(matches!(fixture.try_init(), Err(NvmlError::Unknown)));
    let typo = json!({ "devices": [{ "faults": { "not_supported": ["nvmlDeviceGetPower"] } }] });
    harness::write_scenario(fixture.dir.path(), &typo);
    assert!(matches!(fixture.try_init(), Err(NvmlError::Unknown)));
}

/// Runs in a child process (see below) with `FAKE_NVML_SCENARIO` set.
#[test]
#[ignore = "run by scenario_path_comes_from_the_environment in a child process"]
fn env_child() {
    let lib = std::env::var_os("FAKE_NVML_TEST_LIB").expect("FAKE_NVML_TEST_LIB");
    let nvml = Nvml::builder().lib_path(&lib).init().expect("init from env scenario");
    assert_eq!(nvml.device_by_index(0).unwrap().uuid().unwrap(), "GPU-from-env");
}

#[test]
fn scenario_path_comes_from_the_environment() {
    let built = harness::build_fake_library(false).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lib = harness::install_as_libnvidia(dir.path(), &built);
    let scenario =
        harness::write_scenario(dir.path(), &json!({ "devices": [{ "uuid": "GPU-from-env" }] }));
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "env_child", "--ignored", "--quiet"])
        .env(harness::SCENARIO_ENV, &scenario)
        .env("FAKE_NVML_TEST_LIB", &lib)
        .status()
        .unwrap();
    assert!(status.success());
}
