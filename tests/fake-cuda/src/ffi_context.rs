//! Contexts and memory: `cuCtxCreate_v2`, `cuCtxDestroy_v2`,
//! `cuCtxSynchronize`, `cuMemGetInfo_v2`, `cuMemAlloc_v2`, `cuMemFree_v2`.
//! The injected hang and allocation delay happen here, outside the state lock.
//!
//! Safety contract of every function here (as in `cuda.h`): pointer
//! arguments are null or valid for the access the driver API documents.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::c_void;
use std::os::raw::c_uint;

use crate::codes::*;
use crate::ffi_device::CUdevice;
use crate::ffi_util::{entry, hang, write};
use crate::state;

/// `CUcontext`: an opaque pointer (here a tagged id, never dereferenced).
pub type CUcontext = *mut c_void;
/// `CUdeviceptr`: `unsigned long long` on LP64 platforms, else `unsigned int`.
#[cfg(target_pointer_width = "64")]
pub type CUdeviceptr = std::os::raw::c_ulonglong;
#[cfg(not(target_pointer_width = "64"))]
pub type CUdeviceptr = c_uint;

/// Flags are accepted and ignored: the fake has no scheduling to configure.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v2(
    context: *mut CUcontext,
    _flags: c_uint,
    device: CUdevice,
) -> CUresult {
    const NAME: &str = "cuCtxCreate_v2";
    entry(NAME, || {
        let (index, hangs) = state::with(|loaded| {
            let (index, spec) = loaded.device(device)?;
            Ok((index, spec.hang == Some(NAME)))
        })?;
        if context.is_null() {
            return Err(INVALID_VALUE);
        }
        if hangs {
            hang(NAME);
        }
        let id = state::with(|loaded| loaded.create_context(index))?;
        // SAFETY: `context` is non-null and valid for a write (contract).
        unsafe { write(context, state::context_handle(id)) }
    })
}

/// Destroys the context and frees what was allocated in it.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDestroy_v2(context: CUcontext) -> CUresult {
    entry("cuCtxDestroy_v2", || state::with(|loaded| loaded.destroy_context(context.addr())))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    entry("cuCtxSynchronize", || state::with(|loaded| loaded.current_device().map(|_| ())))
}

/// Free and total bytes of the current context's device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    const NAME: &str = "cuMemGetInfo_v2";
    entry(NAME, || {
        let hangs = state::with(|loaded| Ok(loaded.current_device()?.1.hang == Some(NAME)))?;
        if free.is_null() || total.is_null() {
            return Err(INVALID_VALUE);
        }
        if hangs {
            hang(NAME);
        }
        let (free_bytes, total_bytes) = state::with(|loaded| loaded.memory_info())?;
        let size = |bytes: u64| usize::try_from(bytes).unwrap_or(usize::MAX);
        // SAFETY: both are non-null and valid for a write (contract).
        unsafe {
            write(free, size(free_bytes))?;
            write(total, size(total_bytes))
        }
    })
}

/// Sleeps `alloc_delay_us` (or hangs), then allocates in the current context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(pointer: *mut CUdeviceptr, bytes: usize) -> CUresult {
    const NAME: &str = "cuMemAlloc_v2";
    entry(NAME, || {
        let (hangs, delay) = state::with(|loaded| {
            let spec = loaded.current_device()?.1;
            Ok((spec.hang == Some(NAME), spec.alloc_delay))
        })?;
        if pointer.is_null() {
            return Err(INVALID_VALUE);
        }
        if hangs {
            hang(NAME);
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let bytes = u64::try_from(bytes).map_err(|_| OUT_OF_MEMORY)?;
        let address = state::with(|loaded| loaded.allocate(bytes))?;
        let address = CUdeviceptr::try_from(address).map_err(|_| OUT_OF_MEMORY)?;
        // SAFETY: `pointer` is non-null and valid for a write (contract).
        unsafe { write(pointer, address) }
    })
}

/// Frees an allocation; INVALID_VALUE for a pointer this library did not hand out.
#[unsafe(no_mangle)]
#[allow(clippy::useless_conversion, reason = "CUdeviceptr is 32 bits on 32-bit targets")]
pub extern "C" fn cuMemFree_v2(pointer: CUdeviceptr) -> CUresult {
    entry("cuMemFree_v2", || state::with(|loaded| loaded.free(u64::from(pointer))))
}
