//! Slow-tier readings: temperature, power, clocks, throttle reasons, ECC,
//! retired pages, remapped rows, persistence and compute mode.
//!
//! Safety contract of every function here (as in `nvml.h`): pointer
//! arguments are null or valid for the access the NVML documentation
//! describes; list buffers hold `*count` items.

#![allow(non_snake_case, non_upper_case_globals, clippy::missing_safety_doc)]

use std::os::raw::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::ffi_util::{non_null, two_call, write, write_slice};
use crate::scenario::{ComputeMode, RetiredPage};
use crate::state::{Call, Subject, device_call};

fn enable_state(on: bool) -> nvmlEnableState_t {
    if on {
        nvmlEnableState_enum_NVML_FEATURE_ENABLED
    } else {
        nvmlEnableState_enum_NVML_FEATURE_DISABLED
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor: nvmlTemperatureSensors_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTemperature", Subject::Handle(device), |call| {
        if sensor != nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return Err(INVALID_ARGUMENT);
        }
        let value = call.physical()?.temperature_c.ok_or(NOT_SUPPORTED)?;
        // SAFETY: `temp` is null or valid for a write (contract).
        unsafe { write(temp, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    power: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPowerUsage", Subject::Handle(device), |call| {
        let value = call.physical()?.power_usage_mw.ok_or(NOT_SUPPORTED)?;
        // SAFETY: `power` is null or valid for a write (contract).
        unsafe { write(power, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetEnforcedPowerLimit", Subject::Handle(device), |call| {
        let value = call.physical()?.power_limit_mw.ok_or(NOT_SUPPORTED)?;
        // SAFETY: `limit` is null or valid for a write (contract).
        unsafe { write(limit, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    kind: nvmlClockType_t,
    clock: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetClockInfo", Subject::Handle(device), |call| {
        let clocks = call.physical()?.clocks;
        let value = match kind {
            nvmlClockType_enum_NVML_CLOCK_GRAPHICS => clocks.graphics_mhz,
            nvmlClockType_enum_NVML_CLOCK_SM => clocks.sm_mhz,
            nvmlClockType_enum_NVML_CLOCK_MEM => clocks.memory_mhz,
            nvmlClockType_enum_NVML_CLOCK_VIDEO => clocks.video_mhz,
            _ => return Err(INVALID_ARGUMENT),
        };
        // SAFETY: `clock` is null or valid for a write (contract).
        unsafe { write(clock, value.ok_or(NOT_SUPPORTED)?) }
    })
}

/// # Safety
/// `out` must be null or valid for a write.
unsafe fn throttle(
    name: &'static str,
    device: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call(name, Subject::Handle(device), |call| {
        let value = call.physical()?.throttle_reasons.ok_or(NOT_SUPPORTED)?;
        // SAFETY: `out` is null or valid for a write (this function's contract).
        unsafe { write(out, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    // SAFETY: forwarded contract.
    unsafe { throttle("nvmlDeviceGetCurrentClocksThrottleReasons", device, reasons) }
}

#[cfg(not(feature = "legacy-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    // SAFETY: forwarded contract.
    unsafe { throttle("nvmlDeviceGetCurrentClocksEventReasons", device, reasons) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut nvmlEnableState_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetEccMode", Subject::Handle(device), |call| {
        let ecc = call.physical()?.ecc.ok_or(NOT_SUPPORTED)?;
        non_null(&[current.cast_const(), pending.cast_const()])?;
        // SAFETY: both non-null and valid for a write (contract).
        unsafe {
            write(current, enable_state(ecc.enabled))?;
            write(pending, enable_state(ecc.pending.unwrap_or(ecc.enabled)))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    counter_type: nvmlEccCounterType_t,
    count: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTotalEccErrors", Subject::Handle(device), |call| {
        let ecc = call.physical()?.ecc.ok_or(NOT_SUPPORTED)?;
        if !ecc.enabled {
            return Err(NOT_SUPPORTED);
        }
        let corrected = nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED;
        let uncorrected = nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED;
        let volatile = nvmlEccCounterType_enum_NVML_VOLATILE_ECC;
        let aggregate = nvmlEccCounterType_enum_NVML_AGGREGATE_ECC;
        let value = match (error_type, counter_type) {
            (e, c) if e == corrected && c == volatile => ecc.volatile_corrected,
            (e, c) if e == uncorrected && c == volatile => ecc.volatile_uncorrected,
            (e, c) if e == corrected && c == aggregate => ecc.aggregate_corrected,
            (e, c) if e == uncorrected && c == aggregate => ecc.aggregate_uncorrected,
            _ => return Err(INVALID_ARGUMENT),
        };
        // SAFETY: `count` is null or valid for a write (contract).
        unsafe { write(count, value) }
    })
}

fn retired(call: &Call, cause: nvmlPageRetirementCause_t) -> Result<&[RetiredPage], nvmlReturn_t> {
    let spec = call.physical()?.retired_pages.as_ref().ok_or(NOT_SUPPORTED)?;
    match cause {
        nvmlPageRetirementCause_enum_NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS => {
            Ok(&spec.multiple_single_bit)
        }
        nvmlPageRetirementCause_enum_NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR => {
            Ok(&spec.double_bit)
        }
        _ => Err(INVALID_ARGUMENT),
    }
}

/// Both retired-page getters: the count-then-fill protocol over one list.
///
/// # Safety
/// `count` null or valid; `addresses` (and `timestamps`, when non-null)
/// valid for `*count` items.
unsafe fn retired_pages(
    name: &'static str,
    device: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: Option<*mut c_ulonglong>,
) -> nvmlReturn_t {
    device_call(name, Subject::Handle(device), |call| {
        let pages = retired(call, cause)?;
        let fill = || {
            non_null(&[addresses.cast_const()])?;
            let list: Vec<u64> = pages.iter().map(|p| p.address).collect();
            // SAFETY: non-null and holds `*count >= list.len()` items (contract).
            unsafe { write_slice(addresses, &list) };
            if let Some(timestamps) = timestamps {
                non_null(&[timestamps.cast_const()])?;
                let list: Vec<u64> = pages.iter().map(|p| p.timestamp).collect();
                // SAFETY: as for `addresses`.
                unsafe { write_slice(timestamps, &list) };
            }
            Ok(())
        };
        // SAFETY: `count` is null or valid (contract); `fill` only runs when
        // the capacity suffices.
        unsafe { two_call(count, pages.len(), fill) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages(
    device: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
) -> nvmlReturn_t {
    let name = "nvmlDeviceGetRetiredPages";
    // SAFETY: forwarded contract.
    unsafe { retired_pages(name, device, cause, count, addresses, None) }
}

#[cfg(not(feature = "legacy-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPages_v2(
    device: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> nvmlReturn_t {
    let name = "nvmlDeviceGetRetiredPages_v2";
    // SAFETY: forwarded contract.
    unsafe { retired_pages(name, device, cause, count, addresses, Some(timestamps)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    device: nvmlDevice_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetRetiredPagesPendingStatus", Subject::Handle(device), |call| {
        let spec = call.physical()?.retired_pages.as_ref().ok_or(NOT_SUPPORTED)?;
        // SAFETY: `pending` is null or valid for a write (contract).
        unsafe { write(pending, enable_state(spec.pending)) }
    })
}

#[cfg(not(feature = "legacy-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: nvmlDevice_t,
    correctable: *mut c_uint,
    uncorrectable: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetRemappedRows", Subject::Handle(device), |call| {
        let rows = call.physical()?.remapped_rows.ok_or(NOT_SUPPORTED)?;
        let outs = [correctable, uncorrectable, pending, failure];
        non_null(&outs.map(<*mut c_uint>::cast_const))?;
        // SAFETY: all four non-null and valid for a write (contract).
        unsafe {
            write(correctable, rows.correctable)?;
            write(uncorrectable, rows.uncorrectable)?;
            write(pending, c_uint::from(rows.pending))?;
            write(failure, c_uint::from(rows.failure))
        }
    })
}

/// Field values: only the row-remapping fields (142–145), which vramd reads
/// this way; every other field answers NOT_SUPPORTED in its own slot.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    values_count: std::os::raw::c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetFieldValues", Subject::Handle(device), |call| {
        let count = usize::try_from(values_count).map_err(|_| INVALID_ARGUMENT)?;
        if count == 0 {
            return Ok(());
        }
        non_null(&[values.cast_const()])?;
        let rows = call.physical()?.remapped_rows;
        for slot in 0..count {
            // SAFETY: the caller passes `values_count` valid, writable
            // elements at `values` (the NVML contract), checked non-null.
            let value = unsafe { &mut *values.add(slot) };
            let answer = match (value.fieldId, rows) {
                (142, Some(rows)) => Some(c_ulonglong::from(rows.correctable)),
                (143, Some(rows)) => Some(c_ulonglong::from(rows.uncorrectable)),
                (144, Some(rows)) => Some(c_ulonglong::from(rows.pending)),
                (145, Some(rows)) => Some(c_ulonglong::from(rows.failure)),
                _ => None,
            };
            match answer {
                Some(number) => {
                    value.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
                    value.value = nvmlValue_t { ullVal: number };
                    value.nvmlReturn = SUCCESS;
                }
                None => value.nvmlReturn = NOT_SUPPORTED,
            }
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    device: nvmlDevice_t,
    mode: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPersistenceMode", Subject::Handle(device), |call| {
        let on = call.physical()?.persistence_mode.ok_or(NOT_SUPPORTED)?;
        // SAFETY: `mode` is null or valid for a write (contract).
        unsafe { write(mode, enable_state(on)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(
    device: nvmlDevice_t,
    mode: *mut nvmlComputeMode_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetComputeMode", Subject::Handle(device), |call| {
        let value = match call.physical()?.compute_mode.ok_or(NOT_SUPPORTED)? {
            ComputeMode::Default => nvmlComputeMode_enum_NVML_COMPUTEMODE_DEFAULT,
            ComputeMode::ExclusiveThread => nvmlComputeMode_enum_NVML_COMPUTEMODE_EXCLUSIVE_THREAD,
            ComputeMode::Prohibited => nvmlComputeMode_enum_NVML_COMPUTEMODE_PROHIBITED,
            ComputeMode::ExclusiveProcess => {
                nvmlComputeMode_enum_NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
            }
        };
        // SAFETY: `mode` is null or valid for a write (contract).
        unsafe { write(mode, value) }
    })
}
