//! The current context: `cuCtxSetCurrent`, `cuCtxPushCurrent_v2`,
//! `cuCtxPopCurrent_v2`, `cuCtxGetCurrent`, and the primary contexts
//! (`cuDevicePrimaryCtxRetain`, `cuDevicePrimaryCtxRelease_v2`), so a
//! program can allocate on two devices the way the CUDA runtime does.
//!
//! Safety contract of every function here (as in `cuda.h`): pointer
//! arguments are null or valid for the access the driver API documents.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use crate::codes::*;
use crate::ffi_context::CUcontext;
use crate::ffi_device::CUdevice;
use crate::ffi_util::{entry, write};
use crate::state;

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(context: CUcontext) -> CUresult {
    entry("cuCtxSetCurrent", || state::with(|loaded| loaded.set_current(context.addr())))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent_v2(context: CUcontext) -> CUresult {
    entry("cuCtxPushCurrent_v2", || state::with(|loaded| loaded.push_current(context.addr())))
}

/// Pops the current context; writes it to `context` when that is not null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(context: *mut CUcontext) -> CUresult {
    entry("cuCtxPopCurrent_v2", || {
        let popped = state::with(|loaded| loaded.pop_current())?;
        if context.is_null() {
            return Ok(());
        }
        // SAFETY: `context` is non-null and valid for a write (contract).
        unsafe { write(context, std::ptr::without_provenance_mut(popped)) }
    })
}

/// The device's primary context (created at the first retain), not made
/// current: the caller sets it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(
    context: *mut CUcontext,
    device: CUdevice,
) -> CUresult {
    entry("cuDevicePrimaryCtxRetain", || {
        if context.is_null() {
            return Err(INVALID_VALUE);
        }
        let id = state::with(|loaded| {
            let (index, _) = loaded.device(device)?;
            loaded.retain_primary(index)
        })?;
        // SAFETY: `context` is non-null and valid for a write (contract).
        unsafe { write(context, state::context_handle(id)) }
    })
}

/// Accepted; the primary context lives until the process ends.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> CUresult {
    entry("cuDevicePrimaryCtxRelease_v2", || {
        state::with(|loaded| loaded.device(device).map(|_| ()))
    })
}
