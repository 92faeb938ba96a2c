//! MIG: distinct device handles mapping to (parent, MIG index).

mod common;

use common::{Fixture, GIB, one_device};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use serde_json::json;

fn mig_scenario(enabled: bool) -> serde_json::Value {
    one_device(json!({
        "mig": {
            "enabled": enabled,
            "max_devices": 7,
            "devices": [
                { "uuid": "MIG-aaaa", "gpu_instance_id": 1, "profile": "3g.40gb",
                  "memory": { "total_bytes": 40 * GIB, "used_bytes": GIB },
                  "processes": { "compute": [{ "pid": 11, "used_bytes": GIB }] } },
                { "uuid": "MIG-bbbb", "gpu_instance_id": 2, "compute_instance_id": 0,
                  "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb" }
            ]
        }
    }))
}

#[test]
fn mig_devices_have_their_own_handles_and_readings() {
    let fixture = Fixture::new(mig_scenario(true));
    let nvml = fixture.init();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu.mig_mode().unwrap().current, 1);
    assert_eq!(gpu.mig_device_count().unwrap(), 7);
    assert!(!gpu.mig_is_mig_device_handle().unwrap());

    let mig = gpu.mig_device_by_index(0).unwrap();
    // SAFETY: comparing opaque handles only.
    assert_ne!(unsafe { mig.handle() }, unsafe { gpu.handle() });
    assert!(mig.mig_is_mig_device_handle().unwrap());
    assert_eq!(mig.uuid().unwrap(), "MIG-aaaa");
    assert_eq!(mig.name().unwrap(), "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
    assert_eq!(mig.memory_info().unwrap().total, 40 * GIB);
    let processes = mig.running_compute_processes().unwrap();
    assert_eq!(processes[0].gpu_instance_id, Some(1));
    assert_eq!(processes[0].used_gpu_memory, UsedGpuMemory::Used(GIB));
    assert_eq!(mig.mig_parent_device().unwrap().uuid().unwrap(), gpu.uuid().unwrap());
    assert!(matches!(mig.utilization_rates(), Err(NvmlError::NotSupported)));

    let gi = nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref().unwrap();
    let mut id = 0;
    // SAFETY: a handle from nvml-wrapper and a local out-value.
    assert_eq!(unsafe { gi(gpu.mig_device_by_index(1).unwrap().handle(), &mut id) }, 0);
    assert_eq!(id, 2);

    assert!(matches!(gpu.mig_device_by_index(2), Err(NvmlError::NotFound)));
    assert!(matches!(gpu.mig_device_by_index(7), Err(NvmlError::InvalidArg)));
    assert_eq!(nvml.device_by_uuid("MIG-bbbb").unwrap().uuid().unwrap(), "MIG-bbbb");
}

#[test]
fn mig_disabled_has_no_mig_devices() {
    let fixture = Fixture::new(mig_scenario(false));
    let nvml = fixture.init();
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu.mig_mode().unwrap().current, 0);
    assert!(matches!(gpu.mig_device_by_index(0), Err(NvmlError::NotFound)));
}
