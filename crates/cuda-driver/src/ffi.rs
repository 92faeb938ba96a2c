//! The C side: the `cuda.h` types and function signatures this crate calls,
//! and resolving them by name from the loaded library into an [`Api`].
//!
//! The signatures are those of the driver API's versioned entry points
//! (`cuCtxCreate_v2`, `cuMemAlloc_v2`, …), which the driver has exported
//! unchanged since CUDA 3.2; `cuDeviceGetUuid_v2` (CUDA 11.4) is optional.

use std::os::raw::{c_char, c_int, c_uint};

use libloading::Library;

use crate::error::LoadError;

/// `CUresult`: 0 is `CUDA_SUCCESS`.
pub type CUresult = c_int;
/// `CUdevice`: a device ordinal.
pub type CUdevice = c_int;
/// `CUcontext`: an opaque `struct CUctx_st *`, never dereferenced here.
pub type CUcontext = *mut std::ffi::c_void;
/// `CUdeviceptr`: `unsigned long long` on LP64 platforms, else `unsigned int`.
#[cfg(target_pointer_width = "64")]
pub type CUdeviceptr = std::os::raw::c_ulonglong;
#[cfg(not(target_pointer_width = "64"))]
pub type CUdeviceptr = c_uint;

pub const CUDA_SUCCESS: CUresult = 0;

/// `CUuuid`: `struct { char bytes[16]; }`.
#[repr(C)]
pub struct CUuuid {
    pub bytes: [c_char; 16],
}

type CuInit = unsafe extern "C" fn(flags: c_uint) -> CUresult;
type CuDriverGetVersion = unsafe extern "C" fn(version: *mut c_int) -> CUresult;
type CuDeviceGetCount = unsafe extern "C" fn(count: *mut c_int) -> CUresult;
type CuDeviceGet = unsafe extern "C" fn(device: *mut CUdevice, ordinal: c_int) -> CUresult;
type CuDeviceGetName =
    unsafe extern "C" fn(name: *mut c_char, length: c_int, device: CUdevice) -> CUresult;
/// `cuDeviceGetUuid` and `cuDeviceGetUuid_v2` share this signature.
type CuDeviceGetUuid = unsafe extern "C" fn(uuid: *mut CUuuid, device: CUdevice) -> CUresult;
type CuCtxCreate =
    unsafe extern "C" fn(context: *mut CUcontext, flags: c_uint, device: CUdevice) -> CUresult;
type CuCtxDestroy = unsafe extern "C" fn(context: CUcontext) -> CUresult;
type CuCtxSynchronize = unsafe extern "C" fn() -> CUresult;
type CuMemGetInfo = unsafe extern "C" fn(free: *mut usize, total: *mut usize) -> CUresult;
type CuMemAlloc = unsafe extern "C" fn(pointer: *mut CUdeviceptr, bytes: usize) -> CUresult;
type CuMemFree = unsafe extern "C" fn(pointer: CUdeviceptr) -> CUresult;
type CuGetErrorName = unsafe extern "C" fn(code: CUresult, name: *mut *const c_char) -> CUresult;

/// Every driver function this crate calls, resolved. The pointers are valid
/// only while the [`Library`] they came from stays loaded, which
/// [`crate::Driver`] guarantees by owning both.
pub struct Api {
    pub init: CuInit,
    pub driver_get_version: CuDriverGetVersion,
    pub device_get_count: CuDeviceGetCount,
    pub device_get: CuDeviceGet,
    pub device_get_name: CuDeviceGetName,
    /// `cuDeviceGetUuid_v2` when the library has it, else `cuDeviceGetUuid`.
    pub device_get_uuid: CuDeviceGetUuid,
    /// The name of the function in `device_get_uuid` (for errors).
    pub device_get_uuid_name: &'static str,
    pub ctx_create: CuCtxCreate,
    pub ctx_destroy: CuCtxDestroy,
    pub ctx_synchronize: CuCtxSynchronize,
    pub mem_get_info: CuMemGetInfo,
    pub mem_alloc: CuMemAlloc,
    pub mem_free: CuMemFree,
    pub get_error_name: CuGetErrorName,
}

impl Api {
    /// Resolves every symbol from `library` (`name` is for error messages).
    pub fn resolve(library: &Library, name: &str) -> Result<Api, LoadError> {
        let missing = |symbol| LoadError::Symbol { library: name.to_owned(), symbol };
        macro_rules! require {
            ($symbol:literal) => {
                find(library, $symbol).ok_or_else(|| missing($symbol))?
            };
        }
        // First, so that a library that is not a CUDA driver at all is
        // reported by the most basic symbol.
        let init = require!("cuInit");
        let uuid = find(library, "cuDeviceGetUuid_v2")
            .map(|f| (f, "cuDeviceGetUuid_v2"))
            .or_else(|| find(library, "cuDeviceGetUuid").map(|f| (f, "cuDeviceGetUuid")))
            .ok_or_else(|| missing("cuDeviceGetUuid"))?;
        Ok(Api {
            init,
            driver_get_version: require!("cuDriverGetVersion"),
            device_get_count: require!("cuDeviceGetCount"),
            device_get: require!("cuDeviceGet"),
            device_get_name: require!("cuDeviceGetName"),
            device_get_uuid: uuid.0,
            device_get_uuid_name: uuid.1,
            ctx_create: require!("cuCtxCreate_v2"),
            ctx_destroy: require!("cuCtxDestroy_v2"),
            ctx_synchronize: require!("cuCtxSynchronize"),
            mem_get_info: require!("cuMemGetInfo_v2"),
            mem_alloc: require!("cuMemAlloc_v2"),
            mem_free: require!("cuMemFree_v2"),
            get_error_name: require!("cuGetErrorName"),
        })
    }
}

/// Looks `symbol` up as a function pointer of type `F`; `None` when absent
/// (libloading reports a null address as an error too).
fn find<F: Copy>(library: &Library, symbol: &str) -> Option<F> {
    // SAFETY: `F` is, at every call site, the signature `cuda.h` declares for
    // `symbol`; a library exporting the driver API's names with other
    // signatures is not a CUDA driver, and no binding by name can detect
    // that. The copied pointer outlives the `Symbol` guard but not the
    // library: `Api` lives only inside `Driver`, next to its `Library`.
    unsafe { library.get::<F>(symbol.as_bytes()) }.ok().map(|found| *found)
}
