//! MIG: mode, MIG device handles (distinct from GPU handles, each mapping to
//! (parent, MIG index)), the parent of a MIG handle, GPU/compute instance ids.
//!
//! Safety contract (as in `nvml.h`): pointer arguments are null or valid for
//! a write of their type.

#![allow(non_snake_case, non_upper_case_globals, clippy::missing_safety_doc)]

use std::os::raw::c_uint;

use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::ffi_util::{non_null, write};
use crate::state::{Subject, Target, device_call};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMigMode", Subject::Handle(device), |call| {
        let mig = call.physical()?.mig.as_ref().ok_or(NOT_SUPPORTED)?;
        non_null(&[current.cast_const(), pending.cast_const()])?;
        // SAFETY: both non-null and valid for a write (contract).
        unsafe {
            write(current, c_uint::from(mig.enabled))?;
            write(pending, c_uint::from(mig.pending.unwrap_or(mig.enabled)))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMaxMigDeviceCount", Subject::Handle(device), |call| {
        let mig = call.physical()?.mig.as_ref().ok_or(NOT_SUPPORTED)?;
        // SAFETY: `count` is null or valid for a write (contract).
        unsafe { write(count, mig.max_devices) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig_device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMigDeviceHandleByIndex", Subject::Handle(device), |call| {
        let mig = call.physical()?.mig.as_ref().ok_or(NOT_SUPPORTED)?;
        if index >= mig.max_devices {
            return Err(INVALID_ARGUMENT);
        }
        let index = index as usize;
        if !mig.enabled || index >= mig.current().len() {
            return Err(NOT_FOUND);
        }
        let handle = Target::Mig(call.target.gpu(), index).handle();
        // SAFETY: `mig_device` is null or valid for a write (contract).
        unsafe { write(mig_device, handle) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    let name = "nvmlDeviceGetDeviceHandleFromMigDeviceHandle";
    device_call(name, Subject::Handle(mig_device), |call| {
        if call.mig().is_none() {
            return Err(INVALID_ARGUMENT);
        }
        let parent = Target::Gpu(call.target.gpu()).handle();
        // SAFETY: `device` is null or valid for a write (contract).
        unsafe { write(device, parent) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    is_mig: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceIsMigDeviceHandle", Subject::Handle(device), |call| {
        // SAFETY: `is_mig` is null or valid for a write (contract).
        unsafe { write(is_mig, c_uint::from(call.mig().is_some())) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstanceId", Subject::Handle(device), |call| {
        let mig = call.mig().ok_or(NOT_SUPPORTED)?;
        // SAFETY: `id` is null or valid for a write (contract).
        unsafe { write(id, mig.gpu_instance_id) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetComputeInstanceId", Subject::Handle(device), |call| {
        let mig = call.mig().ok_or(NOT_SUPPORTED)?;
        // SAFETY: `id` is null or valid for a write (contract).
        unsafe { write(id, mig.compute_instance_id) }
    })
}
