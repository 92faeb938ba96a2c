//! Process lists: NVML's count-then-fill protocol with 0, 1 and 70 entries.

mod common;

use std::thread::sleep;
use std::time::Duration;

use common::{Fixture, GIB, one_device};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper_sys::bindings::*;
use serde_json::{Value, json};

fn with_compute(list: Value) -> Fixture {
    Fixture::new(one_device(json!({ "processes": { "compute": list } })))
}

#[test]
fn no_processes_is_an_empty_list() {
    let fixture = with_compute(json!([]));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    assert!(device.running_compute_processes().unwrap().is_empty());
    assert_eq!(device.running_compute_processes_count().unwrap(), 0);
}

#[test]
fn one_process_with_memory_and_one_unavailable() {
    let list = json!([
        { "pid": 4242, "used_bytes": 3 * GIB },
        { "pid": 7, "used_bytes": "unavailable" }
    ]);
    let fixture = with_compute(list);
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    let processes = device.running_compute_processes().unwrap();
    assert_eq!(processes.len(), 2);
    assert_eq!(processes[0].pid, 4242);
    assert_eq!(processes[0].used_gpu_memory, UsedGpuMemory::Used(3 * GIB));
    assert_eq!(processes[0].gpu_instance_id, None);
    assert_eq!(processes[1].used_gpu_memory, UsedGpuMemory::Unavailable);
}

#[test]
fn seventy_processes_round_trip_and_the_protocol_is_honoured() {
    let list: Vec<Value> = (0..70).map(|i| json!({ "pid": 1000 + i, "used_bytes": i })).collect();
    let fixture = with_compute(Value::Array(list));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    let processes = device.running_compute_processes().unwrap();
    assert_eq!(processes.len(), 70);
    assert_eq!(processes[69].pid, 1069);
    assert_eq!(processes[69].used_gpu_memory, UsedGpuMemory::Used(69));

    // The raw protocol: too small a buffer reports the needed count.
    let get = nvml.lib().nvmlDeviceGetComputeRunningProcesses_v3.as_ref().unwrap();
    // SAFETY: a handle from nvml-wrapper and local buffers of the sizes passed.
    unsafe {
        let handle = device.handle();
        let mut count = 0;
        assert_eq!(get(handle, &mut count, std::ptr::null_mut()), 7);
        assert_eq!(count, 70);
        let mut buffer = vec![std::mem::zeroed::<nvmlProcessInfo_t>(); 10];
        let mut count = 10;
        assert_eq!(get(handle, &mut count, buffer.as_mut_ptr()), 7);
        assert_eq!(count, 70);
        let mut count = 70;
        assert_eq!(get(handle, &mut count, std::ptr::null_mut()), 2, "null buffer");
        assert_eq!(get(handle, std::ptr::null_mut(), buffer.as_mut_ptr()), 2, "null count");
    }
}

#[test]
fn graphics_and_mps_lists_are_separate() {
    let processes = json!({
        "compute": [{ "pid": 1, "used_bytes": 1 }],
        "graphics": [{ "pid": 2, "used_bytes": 2 }, { "pid": 3, "used_bytes": 3 }],
        "mps": [{ "pid": 4, "used_bytes": 4, "gpu_instance_id": 1, "compute_instance_id": 0 }]
    });
    let fixture = Fixture::new(one_device(json!({ "processes": processes })));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    assert_eq!(device.running_graphics_processes().unwrap().len(), 2);
    let mps = device.mps_running_compute_processes().unwrap();
    assert_eq!(
        (mps[0].pid, mps[0].gpu_instance_id, mps[0].compute_instance_id),
        (4, Some(1), Some(0))
    );
}

#[test]
fn processes_appear_and_leave_on_their_time_windows() {
    let list = json!([
        { "pid": 1, "used_bytes": 1, "until_ms": 500 },
        { "pid": 2, "used_bytes": 2, "after_ms": 500 }
    ]);
    let fixture = with_compute(list);
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    let pids = || -> Vec<u32> {
        device.running_compute_processes().unwrap().iter().map(|p| p.pid).collect()
    };
    assert_eq!(pids(), [1]);
    sleep(Duration::from_millis(600));
    assert_eq!(pids(), [2]);
}
