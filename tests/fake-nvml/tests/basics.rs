//! Init, identity, memory and the slow-tier readings, through nvml-wrapper.

mod common;

use std::thread::sleep;
use std::time::Duration;

use common::{Fixture, GIB, one_device};
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, RetirementCause};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::nvmlDevice_t;
use serde_json::json;

#[test]
fn init_reports_devices_identity_and_versions() {
    let scenario = json!({
        "driver_version": "575.51.03",
        "devices": [
            { "uuid": "GPU-aaaa", "name": "NVIDIA H200", "pci_bus_id": "00000000:1A:00.0" },
            {}
        ]
    });
    let fixture = Fixture::new(scenario);
    let nvml = fixture.init();
    assert_eq!(nvml.sys_driver_version().unwrap(), "575.51.03");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 12080);
    assert_eq!(nvml.device_count().unwrap(), 2);

    let first = nvml.device_by_index(0).unwrap();
    assert_eq!(first.uuid().unwrap(), "GPU-aaaa");
    assert_eq!(first.name().unwrap(), "NVIDIA H200");
    assert_eq!(first.index().unwrap(), 0);
    let pci = first.pci_info().unwrap();
    assert_eq!(pci.bus_id, "00000000:1A:00.0");
    assert_eq!((pci.domain, pci.bus, pci.device), (0, 0x1A, 0));

    let second = nvml.device_by_index(1).unwrap();
    assert_eq!(second.uuid().unwrap(), "GPU-00000000-0000-0000-0000-000000000001");
    assert_eq!(second.pci_info().unwrap().bus_id, "00000000:18:00.0");
    assert_eq!(nvml.device_by_uuid("GPU-aaaa").unwrap().index().unwrap(), 0);
    assert_eq!(nvml.device_by_pci_bus_id("00000000:18:00.0").unwrap().index().unwrap(), 1);

    assert!(matches!(nvml.device_by_index(2), Err(NvmlError::InvalidArg)));
    assert!(matches!(nvml.device_by_uuid("GPU-nope"), Err(NvmlError::NotFound)));
}

#[test]
fn memory_v2_reports_reserved_separately_and_v1_counts_it_as_used() {
    let fixture = Fixture::new(one_device(json!({})));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    let memory = device.memory_info().unwrap();
    assert_eq!(memory.total, 80 * GIB);
    assert_eq!(memory.reserved, GIB);
    assert_eq!(memory.used, 10 * GIB);
    assert_eq!(memory.free, 69 * GIB);

    let v1 = nvml.lib().nvmlDeviceGetMemoryInfo.as_ref().unwrap();
    // SAFETY: a handle from nvml-wrapper and a local out-struct.
    let (code, raw) = unsafe {
        let mut raw = std::mem::zeroed();
        (v1(device.handle(), &mut raw), raw)
    };
    assert_eq!(code, 0);
    assert_eq!((raw.total, raw.used, raw.free), (80 * GIB, 11 * GIB, 69 * GIB));
}

#[test]
fn memory_v2_rejects_a_wrong_struct_version() {
    let fixture = Fixture::new(one_device(json!({})));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    let v2 = nvml.lib().nvmlDeviceGetMemoryInfo_v2.as_ref().unwrap();
    // SAFETY: a handle from nvml-wrapper and a local out-struct.
    let code = unsafe {
        let mut raw: nvml_wrapper_sys::bindings::nvmlMemory_v2_t = std::mem::zeroed();
        raw.version = 1;
        v2(device.handle(), &mut raw)
    };
    assert_eq!(
        code,
        nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    );
}

#[test]
fn used_memory_grows_with_time_since_init_and_is_clamped() {
    let memory = |used: u64, growth: f64| json!({ "total_bytes": 10 * GIB, "used_bytes": used, "growth_bytes_per_second": growth });
    let gib = GIB as f64;
    let fixture = Fixture::new(json!({ "devices": [
        { "memory": memory(GIB, 4.0 * gib) },
        { "memory": memory(9 * GIB, 1000.0 * gib) },
        { "memory": memory(GIB, -1000.0 * gib) }
    ] }));
    let nvml = fixture.init();
    let growing = nvml.device_by_index(0).unwrap();
    let first = growing.memory_info().unwrap().used;
    assert!(first >= GIB, "first {first}");
    sleep(Duration::from_millis(250));
    let second = growing.memory_info().unwrap();
    // At 4 GiB/s, 250 ms add at least 1 GiB (less a byte of rounding).
    assert!(second.used >= first + GIB - 1, "{} vs {first}", second.used);
    assert_eq!(second.used + second.free, 10 * GIB);
    let full = nvml.device_by_index(1).unwrap().memory_info().unwrap();
    assert_eq!((full.used, full.free), (10 * GIB, 0));
    let empty = nvml.device_by_index(2).unwrap().memory_info().unwrap();
    assert_eq!((empty.used, empty.free), (0, 10 * GIB));
}

#[test]
fn used_memory_per_call_values_repeat_the_last() {
    let memory = json!({ "total_bytes": 100, "used_bytes_per_call": [10, 20, 30] });
    let fixture = Fixture::new(one_device(json!({ "memory": memory })));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    let used: Vec<u64> = (0..5).map(|_| device.memory_info().unwrap().used).collect();
    assert_eq!(used, [10, 20, 30, 30, 30]);
}

#[test]
fn slow_tier_readings_come_from_the_scenario() {
    let extra = json!({
        "temperature_c": 61, "power_usage_mw": 312_000, "power_limit_mw": 700_000,
        "clocks": { "graphics_mhz": 1980, "sm_mhz": 1980, "memory_mhz": 2619 },
        "throttle_reasons": 4,
        "ecc": { "enabled": true, "volatile_corrected": 3, "aggregate_uncorrected": 1 },
        "retired_pages": { "double_bit": [{ "address": 4096, "timestamp": 7 }], "pending": true },
        "remapped_rows": { "correctable": 2, "uncorrectable": 1, "pending": true },
        "persistence_mode": true, "compute_mode": "exclusive_process",
        "bar1": { "total_bytes": 256 * GIB, "used_bytes": GIB },
        "pcie_throughput": { "tx_kbps": 1000, "rx_kbps": 2000 }
    });
    let fixture = Fixture::new(one_device(extra));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    let utilization = device.utilization_rates().unwrap();
    assert_eq!((utilization.gpu, utilization.memory), (35, 20));
    assert_eq!(device.temperature(TemperatureSensor::Gpu).unwrap(), 61);
    assert_eq!(device.power_usage().unwrap(), 312_000);
    assert_eq!(device.enforced_power_limit().unwrap(), 700_000);
    assert_eq!(device.clock_info(Clock::SM).unwrap(), 1980);
    assert!(matches!(device.clock_info(Clock::Video), Err(NvmlError::NotSupported)));
    assert_eq!(device.current_throttle_reasons().unwrap().bits(), 4);
    assert!(device.is_ecc_enabled().unwrap().currently_enabled);
    let corrected = device.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile);
    assert_eq!(corrected.unwrap(), 3);
    let uncorrected = device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate);
    assert_eq!(uncorrected.unwrap(), 1);
    let pages = device.retired_pages(RetirementCause::DoubleBitEccError).unwrap();
    assert_eq!((pages.len(), pages[0].address, pages[0].timestamp), (1, 4096, 7));
    assert!(device.retired_pages(RetirementCause::MultipleSingleBitEccErrors).unwrap().is_empty());
    assert!(device.are_pages_pending_retired().unwrap());
    assert!(device.is_in_persistent_mode().unwrap());
    let mode = device.compute_mode().unwrap();
    assert_eq!(mode, nvml_wrapper::enum_wrappers::device::ComputeMode::ExclusiveProcess);
    let bar1 = device.bar1_memory_info().unwrap();
    assert_eq!((bar1.total, bar1.used, bar1.free), (256 * GIB, GIB, 255 * GIB));
    assert_eq!(device.pcie_throughput(PcieUtilCounter::Receive).unwrap(), 2000);

    let remapped = nvml.lib().nvmlDeviceGetRemappedRows.as_ref().unwrap();
    let mut rows = [0u32; 4];
    // SAFETY: a handle from nvml-wrapper and four local out-values.
    let code = unsafe {
        let handle: nvmlDevice_t = device.handle();
        let [a, b, c, d] = &mut rows;
        remapped(handle, a, b, c, d)
    };
    assert_eq!((code, rows), (0, [2, 1, 1, 0]));
}

#[test]
fn absent_values_are_not_supported_rather_than_zero() {
    let fixture = Fixture::new(json!({ "devices": [{}] }));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    assert!(matches!(device.memory_info(), Err(NvmlError::NotSupported)));
    assert!(matches!(device.temperature(TemperatureSensor::Gpu), Err(NvmlError::NotSupported)));
    assert!(matches!(device.power_usage(), Err(NvmlError::NotSupported)));
    assert!(matches!(device.is_ecc_enabled(), Err(NvmlError::NotSupported)));
    assert!(device.running_compute_processes().unwrap().is_empty());
}

#[test]
fn uninitialised_calls_fail_and_init_is_reference_counted() {
    let fixture = Fixture::new(one_device(json!({})));
    let count = {
        let nvml = fixture.init();
        let second = fixture.init();
        drop(second);
        // Still initialised: one reference left.
        nvml.device_count()
    };
    assert_eq!(count.unwrap(), 1);
    // Both `Nvml`s are gone, so the library is shut down; call it directly.
    // SAFETY: loading the fake library runs no initialisers.
    let lib = unsafe { libloading::Library::new(&fixture.lib) }.unwrap();
    // SAFETY: the symbol has the NVML signature.
    let code = unsafe {
        let get_count =
            lib.get::<unsafe extern "C" fn(*mut u32) -> u32>(b"nvmlDeviceGetCount_v2\0").unwrap();
        let mut n = 0;
        get_count(&mut n)
    };
    assert_eq!(code, nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED);
}

#[test]
fn raw_calls_validate_pointers_handles_and_buffer_sizes() {
    use nvml_wrapper_sys::bindings::*;
    let fixture = Fixture::new(one_device(json!({})));
    let nvml = fixture.init();
    let device = nvml.device_by_index(0).unwrap();
    let lib = nvml.lib();
    let get_uuid = lib.nvmlDeviceGetUUID.as_ref().unwrap();
    let get_count = lib.nvmlDeviceGetCount_v2.as_ref().unwrap();
    let get_power = lib.nvmlDeviceGetPowerUsage.as_ref().unwrap();
    let mut buffer = [0 as std::os::raw::c_char; 96];
    let bogus = 0x1234 as nvmlDevice_t;
    // SAFETY: handles from nvml-wrapper or bogus ones the fake must reject;
    // buffers are local and at least as long as the lengths passed.
    unsafe {
        let handle = device.handle();
        assert_eq!(get_uuid(handle, buffer.as_mut_ptr(), 96), nvmlReturn_enum_NVML_SUCCESS);
        assert_eq!(
            get_uuid(handle, buffer.as_mut_ptr(), 10),
            nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert_eq!(
            get_uuid(handle, std::ptr::null_mut(), 96),
            nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            get_uuid(bogus, buffer.as_mut_ptr(), 96),
            nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(get_count(std::ptr::null_mut()), nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        let mut power = 0;
        assert_eq!(get_power(handle, &mut power), nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
        let text = lib.nvmlErrorString.as_ref().unwrap()(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST);
        assert_eq!(std::ffi::CStr::from_ptr(text).to_str().unwrap(), "GPU is lost");
    }
}

#[test]
fn system_faults_apply_to_calls_without_a_device() {
    let faults = json!({
        "sleep_ms": { "nvmlDeviceGetCount_v2": 200 },
        "fail": { "nvmlSystemGetNVMLVersion": "NVML_ERROR_UNKNOWN" }
    });
    let mut scenario = one_device(json!({}));
    scenario["system_faults"] = faults;
    let fixture = Fixture::new(scenario);
    let nvml = fixture.init();
    let start = std::time::Instant::now();
    assert_eq!(nvml.device_count().unwrap(), 1);
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert!(matches!(nvml.sys_nvml_version(), Err(NvmlError::Unknown)));
}
