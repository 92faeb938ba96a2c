//! A MIG device's GPU-instance and compute-instance ids, which
//! `nvml-wrapper` 0.13 loads (`nvmlDeviceGetGpuInstanceId`,
//! `nvmlDeviceGetComputeInstanceId`) but wraps in no safe function.
//!
//! Owns: those two calls, through the symbols the caller's `Nvml` already
//! resolved, so no second copy of the library is opened and a driver
//! without them answers `FailedToLoadSymbol` instead of failing to load.
//! Must not depend on anything of vramd's; errors are `nvml-wrapper`'s.

use std::os::raw::c_uint;

use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_t};

type IdCall = unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;

/// The GPU instance a MIG device belongs to. A physical GPU's handle gets
/// `NotSupported` or `InvalidArg`, as the driver answers.
pub fn gpu_instance_id(device: &Device<'_>) -> Result<u32, NvmlError> {
    let lib = device.nvml().lib();
    read_id(device, lib.nvmlDeviceGetGpuInstanceId.as_ref())
}

/// The compute instance within its GPU instance of a MIG device.
pub fn compute_instance_id(device: &Device<'_>) -> Result<u32, NvmlError> {
    let lib = device.nvml().lib();
    read_id(device, lib.nvmlDeviceGetComputeInstanceId.as_ref())
}

fn read_id<E: std::fmt::Display>(
    device: &Device<'_>,
    symbol: Result<&IdCall, &E>,
) -> Result<u32, NvmlError> {
    let call = symbol.map_err(|error| NvmlError::FailedToLoadSymbol(error.to_string()))?;
    let mut id: c_uint = 0;
    // SAFETY: `call` was resolved from the library this `Device`'s `Nvml`
    // holds loaded and initialised for as long as `device` borrows it; the
    // handle came from that library; `id` is a valid, exclusive `c_uint`
    // for the call's single write, and NVML keeps no pointer after return.
    let code = unsafe { call(device.handle(), &mut id) };
    nvml_try(code)?;
    Ok(id)
}
