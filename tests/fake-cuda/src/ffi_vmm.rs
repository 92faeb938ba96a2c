//! The allocation calls beyond `cuMemAlloc_v2` that the driver trace
//! probes: pitched (`cuMemAllocPitch_v2`: rows padded to 512 bytes),
//! stream-ordered (`cuMemAllocAsync`, `cuMemFreeAsync`) and
//! virtual-memory physical allocations (`cuMemCreate`, `cuMemRelease`).
//! They draw on the same free memory and fail the same ways
//! (`alloc_error`, `max_alloc_bytes`, free memory) as `cuMemAlloc_v2`.
//!
//! Simplifications: a stream-ordered call completes at once (the stream is
//! ignored); a physical allocation belongs to no context, so destroying
//! contexts never releases it.
//!
//! Safety contract of every function here (as in `cuda.h`): pointer
//! arguments are null or valid for the access the driver API documents.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::c_void;
use std::os::raw::{c_int, c_ulonglong};

use crate::codes::*;
use crate::ffi_context::CUdeviceptr;
use crate::ffi_util::{entry, write};
use crate::state;

/// `CUstream`: opaque, never dereferenced here.
pub type CUstream = *mut c_void;
/// `CUmemGenericAllocationHandle`.
pub type CUmemGenericAllocationHandle = c_ulonglong;

/// `CUmemLocation` (`cuda.h`).
#[repr(C)]
pub struct CUmemLocation {
    pub location_type: c_int,
    /// The device ordinal, for a device location.
    pub id: c_int,
}

/// `CUmemAllocationProp` (`cuda.h`); only `location.id` is read.
#[repr(C)]
pub struct CUmemAllocationProp {
    pub allocation_type: c_int,
    pub requested_handle_types: c_int,
    pub location: CUmemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: [u8; 8],
}

/// Allocates at once in the current context (the stream is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(
    pointer: *mut CUdeviceptr,
    bytes: usize,
    _stream: CUstream,
) -> CUresult {
    entry("cuMemAllocAsync", || {
        if pointer.is_null() {
            return Err(INVALID_VALUE);
        }
        let bytes = u64::try_from(bytes).map_err(|_| OUT_OF_MEMORY)?;
        let address = state::with(|loaded| loaded.allocate(bytes))?;
        let address = CUdeviceptr::try_from(address).map_err(|_| OUT_OF_MEMORY)?;
        // SAFETY: `pointer` is non-null and valid for a write (contract).
        unsafe { write(pointer, address) }
    })
}

/// Rows of `width` bytes padded to the 512-byte alignment (the pitch),
/// `height` of them, in the current context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    pointer: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    _element_bytes: std::os::raw::c_uint,
) -> CUresult {
    entry("cuMemAllocPitch_v2", || {
        if pointer.is_null() || pitch.is_null() {
            return Err(INVALID_VALUE);
        }
        let padded = width.checked_next_multiple_of(512).ok_or(OUT_OF_MEMORY)?;
        let bytes = padded.checked_mul(height).ok_or(OUT_OF_MEMORY)?;
        let bytes = u64::try_from(bytes).map_err(|_| OUT_OF_MEMORY)?;
        let address = state::with(|loaded| loaded.allocate(bytes))?;
        let address = CUdeviceptr::try_from(address).map_err(|_| OUT_OF_MEMORY)?;
        // SAFETY: both are non-null and valid for a write (contract).
        unsafe {
            write(pitch, padded)?;
            write(pointer, address)
        }
    })
}

/// Frees at once; INVALID_VALUE for a pointer not handed out.
#[unsafe(no_mangle)]
#[allow(clippy::useless_conversion, reason = "CUdeviceptr is 32 bits on 32-bit targets")]
pub extern "C" fn cuMemFreeAsync(pointer: CUdeviceptr, _stream: CUstream) -> CUresult {
    entry("cuMemFreeAsync", || state::with(|loaded| loaded.free(u64::from(pointer))))
}

/// A physical allocation on the device `prop.location.id` names.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    bytes: usize,
    prop: *const CUmemAllocationProp,
    _flags: c_ulonglong,
) -> CUresult {
    entry("cuMemCreate", || {
        if handle.is_null() || prop.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: `prop` is non-null and valid for a read (contract).
        let ordinal = unsafe { (*prop).location.id };
        let bytes = u64::try_from(bytes).map_err(|_| OUT_OF_MEMORY)?;
        let created = state::with(|loaded| loaded.create_physical(ordinal, bytes))?;
        // SAFETY: `handle` is non-null and valid for a write (contract).
        unsafe { write(handle, created) }
    })
}

/// Releases a physical allocation; INVALID_VALUE for an unknown handle.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    entry("cuMemRelease", || state::with(|loaded| loaded.free(handle)))
}
