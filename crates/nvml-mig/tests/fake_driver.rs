//! The two calls against the fake `libnvidia-ml.so` (tests/fake-nvml),
//! through the real `nvml-wrapper` loading it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use nvidia_ml_fake::harness;
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;
use serde_json::json;

#[test]
fn mig_devices_answer_their_instance_ids_and_whole_gpus_do_not() {
    let built = harness::build_fake_library(false).unwrap_or_else(|error| panic!("{error}"));
    let dir = tempfile::tempdir().unwrap();
    let lib = harness::install_as_libnvidia(dir.path(), &built);
    let scenario = harness::write_scenario(
        dir.path(),
        &json!({ "devices": [ { "mig": { "enabled": true, "max_devices": 7, "devices": [
            { "uuid": "MIG-aaaa", "gpu_instance_id": 3, "compute_instance_id": 1 },
            { "uuid": "MIG-bbbb", "gpu_instance_id": 5, "compute_instance_id": 0 },
        ] } } ] }),
    );
    harness::set_scenario_path(&lib, &scenario).unwrap();
    let nvml = Nvml::builder().lib_path(lib.as_os_str()).init().unwrap();
    let gpu = nvml.device_by_index(0).unwrap();
    let first = gpu.mig_device_by_index(0).unwrap();
    let second = gpu.mig_device_by_index(1).unwrap();
    assert_eq!(nvml_mig::gpu_instance_id(&first).unwrap(), 3);
    assert_eq!(nvml_mig::compute_instance_id(&first).unwrap(), 1);
    assert_eq!(nvml_mig::gpu_instance_id(&second).unwrap(), 5);
    assert_eq!(nvml_mig::compute_instance_id(&second).unwrap(), 0);
    assert!(matches!(nvml_mig::gpu_instance_id(&gpu), Err(NvmlError::NotSupported)));
    assert!(matches!(nvml_mig::compute_instance_id(&gpu), Err(NvmlError::NotSupported)));
}

#[test]
fn a_failing_driver_answer_is_an_error_not_a_made_up_id() {
    let built = harness::build_fake_library(false).unwrap_or_else(|error| panic!("{error}"));
    let dir = tempfile::tempdir().unwrap();
    let lib = harness::install_as_libnvidia(dir.path(), &built);
    let scenario = harness::write_scenario(
        dir.path(),
        &json!({ "devices": [ {
            "mig": { "enabled": true, "max_devices": 7, "devices": [
                { "uuid": "MIG-aaaa", "gpu_instance_id": 1, "compute_instance_id": 0 },
            ] },
            "faults": { "fail": { "nvmlDeviceGetGpuInstanceId": "NVML_ERROR_NO_PERMISSION" } },
        } ] }),
    );
    harness::set_scenario_path(&lib, &scenario).unwrap();
    let nvml = Nvml::builder().lib_path(lib.as_os_str()).init().unwrap();
    let mig = nvml.device_by_index(0).unwrap().mig_device_by_index(0).unwrap();
    assert!(matches!(nvml_mig::gpu_instance_id(&mig), Err(NvmlError::NoPermission)));
}
