//! Init, versions, devices and their identity, and init failures: the fake
//! library driven through the real `cuda-driver` crate, one child process
//! per test (see common/mod.rs).

mod common;

use common::{Fixture, child_part, in_child, one_device};
use cuda_driver::{format_uuid, parse_uuid};
use cuda_fake::harness;
use serde_json::json;

#[test]
fn init_count_uuid_and_name_of_every_device() {
    let scenario = json!({
        "driver_version": 12080,
        "devices": [
            { "uuid": "GPU-01234567-89ab-cdef-0123-456789abcdef", "name": "NVIDIA H200" },
            {}
        ]
    });
    let log = in_child("init_count_uuid_and_name_of_every_device", scenario, |driver| {
        driver.init().unwrap();
        assert_eq!(driver.driver_version().unwrap(), 12080);
        assert_eq!(driver.device_count().unwrap(), 2);
        let first = driver.device(0).unwrap();
        let uuid = driver.device_uuid(first).unwrap();
        assert_eq!(format_uuid("GPU", &uuid), "GPU-01234567-89ab-cdef-0123-456789abcdef");
        assert_eq!(parse_uuid("GPU-01234567-89ab-cdef-0123-456789abcdef"), Some(uuid));
        assert_eq!(driver.device_name(first).unwrap(), "NVIDIA H200");
        let second = driver.device(1).unwrap();
        assert_ne!(first, second);
        let uuid = driver.device_uuid(second).unwrap();
        assert_eq!(format_uuid("GPU", &uuid), "GPU-00000000-0000-0000-0000-000000000001");
        assert_eq!(driver.device_name(second).unwrap(), "NVIDIA H100 80GB HBM3");
        let missing = driver.device(2).unwrap_err();
        assert_eq!((missing.call, missing.code), ("cuDeviceGet", 101));
        assert_eq!(missing.name, "CUDA_ERROR_INVALID_DEVICE");
        assert!(format!("{driver:?}").contains("cuDeviceGetUuid_v2"));
    });
    assert_eq!(
        log,
        [
            "cuInit ok",
            "cuDriverGetVersion ok",
            "cuDeviceGetCount ok",
            "cuDeviceGet ok",
            "cuDeviceGetUuid_v2 ok",
            "cuDeviceGetName ok",
            "cuDeviceGet ok",
            "cuDeviceGetUuid_v2 ok",
            "cuDeviceGetName ok",
            "cuDeviceGet 101",
        ]
    );
}

#[test]
fn calls_before_init_are_not_initialized_except_the_version() {
    let log = in_child(
        "calls_before_init_are_not_initialized_except_the_version",
        one_device(json!({})),
        |driver| {
            let error = driver.device_count().unwrap_err();
            assert!(error.is_not_initialized(), "{error}");
            assert_eq!(
                error.to_string(),
                "cuDeviceGetCount failed: CUDA_ERROR_NOT_INITIALIZED (3)"
            );
            assert!(driver.device(0).unwrap_err().is_not_initialized());
            // As the real driver's, cuDriverGetVersion needs no cuInit.
            assert_eq!(driver.driver_version().unwrap(), 12040);
            driver.init().unwrap();
            driver.init().unwrap();
            assert_eq!(driver.device_count().unwrap(), 1);
        },
    );
    assert_eq!(
        log,
        [
            "cuDeviceGetCount 3",
            "cuDeviceGet 3",
            "cuDriverGetVersion ok",
            "cuInit ok",
            "cuInit ok",
            "cuDeviceGetCount ok"
        ]
    );
}

#[test]
fn init_error_is_returned_and_the_driver_stays_uninitialised() {
    let scenario = json!({ "init_error": 100, "devices": [{}] });
    let log =
        in_child("init_error_is_returned_and_the_driver_stays_uninitialised", scenario, |driver| {
            let error = driver.init().unwrap_err();
            assert_eq!(error.to_string(), "cuInit failed: CUDA_ERROR_NO_DEVICE (100)");
            assert!(driver.device_count().unwrap_err().is_not_initialized());
        });
    assert_eq!(log, ["cuInit 100", "cuDeviceGetCount 3"]);
}

#[test]
fn no_devices_is_no_device() {
    let test = "no_devices_is_no_device";
    child_part(test, |driver| {
        let error = driver.init().unwrap_err();
        assert_eq!((error.code, error.name.as_str()), (100, "CUDA_ERROR_NO_DEVICE"));
    });
    assert_eq!(Fixture::new(json!({})).run(test), ["cuInit 100"]);
}

#[test]
fn unknown_codes_are_named_by_number() {
    let log =
        in_child("unknown_codes_are_named_by_number", json!({ "init_error": 12345 }), |driver| {
            let error = driver.init().unwrap_err();
            assert_eq!((error.code, error.name.as_str()), (12345, "CUDA_ERROR_12345"));
        });
    assert_eq!(log, ["cuInit 12345"]);
}

#[test]
fn a_missing_or_invalid_scenario_fails_init_until_it_is_fixed() {
    let log = in_child(
        "a_missing_or_invalid_scenario_fails_init_until_it_is_fixed",
        json!({}),
        |driver| {
            let path = std::env::var_os(harness::SCENARIO_ENV).unwrap();
            let dir = std::path::Path::new(&path).parent().unwrap();
            std::fs::remove_file(&path).unwrap();
            assert!(driver.init().unwrap_err().is_not_initialized());
            assert!(driver.driver_version().unwrap_err().is_not_initialized());
            harness::write_scenario(dir, &json!({ "devices": [{ "memory": 1 }] }));
            assert!(driver.init().unwrap_err().is_not_initialized());
            harness::write_scenario(dir, &json!({ "devices": [{ "hang": "cuDeviceGet" }] }));
            assert!(driver.init().unwrap_err().is_not_initialized());
            // A failed cuInit leaves nothing behind: the next one reads again.
            harness::write_scenario(dir, &json!({ "devices": [{}] }));
            driver.init().unwrap();
        },
    );
    assert_eq!(log, ["cuInit 3", "cuDriverGetVersion 3", "cuInit 3", "cuInit 3", "cuInit ok"]);
}

#[test]
fn hang_in_cu_init_never_returns() {
    let test = "hang_in_cu_init_never_returns";
    child_part(test, |driver| {
        let _ = driver.init();
    });
    let fixture = Fixture::new(json!({ "devices": [{}, { "hang": "cuInit" }] }));
    fixture.expect_hang(test, "cuInit");
    assert_eq!(harness::read_log(&fixture.log), ["cuInit hang"]);
}
