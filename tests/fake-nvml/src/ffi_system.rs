//! Library lifetime and system-wide queries: init/shutdown, error strings,
//! versions, device count and device handles by index, UUID or PCI bus id.
//!
//! Safety contract of every function here (as in `nvml.h`): pointer
//! arguments are null or valid for the access the NVML documentation
//! describes; string arguments are null or NUL-terminated.

#![allow(non_snake_case, non_upper_case_globals, clippy::missing_safety_doc)]

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

use crate::codes::*;
use crate::ffi_util::{boundary, write, write_str};
use crate::scenario;
use crate::state::{self, Subject, Target, device_call, system_call};

static REPORTED: AtomicBool = AtomicBool::new(false);

fn init() -> Result<(), nvmlReturn_t> {
    if state::retain() {
        return Ok(());
    }
    let scenario = scenario::load_configured().map_err(|reason| {
        if !REPORTED.swap(true, Ordering::Relaxed) {
            eprintln!("fake-nvml: nvmlInit fails: {reason}");
        }
        UNKNOWN
    })?;
    if scenario.init.sleep_ms > 0 {
        std::thread::sleep(Duration::from_millis(scenario.init.sleep_ms));
    }
    if let Some(code) = scenario.init.fail {
        return Err(code.0);
    }
    state::install(scenario);
    Ok(())
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    boundary(init)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    boundary(init)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    boundary(|| match state::release() {
        SUCCESS => Ok(()),
        code => Err(code),
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    catch_unwind(|| crate::codes::message(result)).unwrap_or(c"Unknown Error").as_ptr()
}

/// Not NVML: sets the scenario path for this loaded copy of the library
/// (precedence over `FAKE_NVML_SCENARIO`; null clears it). Lets tests in one
/// process give each copy of the library its own scenario.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fake_nvml_set_scenario_path(path: *const c_char) -> nvmlReturn_t {
    boundary(|| {
        if path.is_null() {
            scenario::set_path_override(None);
            return Ok(());
        }
        // SAFETY: non-null and NUL-terminated per this function's contract.
        let text = unsafe { CStr::from_ptr(path) }.to_str().map_err(|_| INVALID_ARGUMENT)?;
        scenario::set_path_override(Some(PathBuf::from(text)));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    system_call("nvmlSystemGetDriverVersion", |scenario| {
        // SAFETY: `version` is null or valid for `length` bytes (contract).
        unsafe { write_str(version, length, &scenario.driver_version) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    system_call("nvmlSystemGetNVMLVersion", |scenario| {
        // SAFETY: `version` is null or valid for `length` bytes (contract).
        unsafe { write_str(version, length, &scenario.nvml_version) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> nvmlReturn_t {
    system_call("nvmlSystemGetCudaDriverVersion", |scenario| {
        // SAFETY: `version` is null or valid for a write (contract).
        unsafe { write(version, scenario.cuda_driver_version) }
    })
}

#[cfg(not(feature = "legacy-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> nvmlReturn_t {
    system_call("nvmlSystemGetCudaDriverVersion_v2", |scenario| {
        // SAFETY: `version` is null or valid for a write (contract).
        unsafe { write(version, scenario.cuda_driver_version) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    system_call("nvmlDeviceGetCount_v2", |scenario| {
        let devices = c_uint::try_from(scenario.devices.len()).map_err(|_| UNKNOWN)?;
        // SAFETY: `count` is null or valid for a write (contract).
        unsafe { write(count, devices) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetHandleByIndex_v2", Subject::Index(index), |call| {
        // SAFETY: `device` is null or valid for a write (contract).
        unsafe { write(device, call.target.handle()) }
    })
}

/// Finds a device by a string key, then runs the call on it as usual
/// (so faults and GPU-lost counting apply).
///
/// # Safety
/// `key` must be null or NUL-terminated.
unsafe fn by_key(
    name: &'static str,
    key: *const c_char,
    device: *mut nvmlDevice_t,
    matches: impl Fn(&scenario::Scenario, usize, &str) -> bool,
) -> nvmlReturn_t {
    let lookup = || {
        if key.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null and NUL-terminated per the contract.
        let key = unsafe { CStr::from_ptr(key) }.to_str().map_err(|_| INVALID_ARGUMENT)?;
        let guard = state::lock();
        let loaded = guard.as_ref().ok_or(UNINITIALIZED)?;
        let scenario = &loaded.scenario;
        if let Some(gpu) = (0..scenario.devices.len()).find(|i| matches(scenario, *i, key)) {
            return Ok(Target::Gpu(gpu));
        }
        for (gpu, spec) in scenario.devices.iter().enumerate() {
            let migs = spec.mig.iter().filter(|m| m.enabled).flat_map(|m| m.current().iter());
            if let Some(mig) = migs.into_iter().position(|m| m.uuid == key) {
                return Ok(Target::Mig(gpu, mig));
            }
        }
        Err(NOT_FOUND)
    };
    match catch_unwind(AssertUnwindSafe(lookup)) {
        Ok(Ok(target)) => device_call(name, Subject::Target(target), |call| {
            // SAFETY: `device` is null or valid for a write (contract).
            unsafe { write(device, call.target.handle()) }
        }),
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    let name = "nvmlDeviceGetHandleByUUID";
    // SAFETY: `uuid` is null or NUL-terminated (contract).
    unsafe { by_key(name, uuid, device, |s, i, key| s.devices[i].uuid(i) == key) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    let name = "nvmlDeviceGetHandleByPciBusId_v2";
    let same = |s: &scenario::Scenario, i: usize, key: &str| {
        scenario::parse_bus_id(&s.devices[i].pci_bus_id(i)) == scenario::parse_bus_id(key)
    };
    // SAFETY: `bus_id` is null or NUL-terminated (contract).
    unsafe { by_key(name, bus_id, device, same) }
}
