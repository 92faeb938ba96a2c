//! `CUresult` codes (values from `cuda.h`'s `cudaError_enum`) and the names
//! `cuGetErrorName` returns for them.

use std::ffi::CStr;
use std::os::raw::c_int;

/// `CUresult`.
pub type CUresult = c_int;

pub const SUCCESS: CUresult = 0;
pub const INVALID_VALUE: CUresult = 1;
pub const OUT_OF_MEMORY: CUresult = 2;
pub const NOT_INITIALIZED: CUresult = 3;
pub const NO_DEVICE: CUresult = 100;
pub const INVALID_DEVICE: CUresult = 101;
pub const INVALID_CONTEXT: CUresult = 201;
pub const UNKNOWN: CUresult = 999;

/// The codes `cuGetErrorName` knows: those above plus a few a scenario may
/// inject (`init_error`, `context_error`, `alloc_error`). Any other code
/// gets `CUDA_ERROR_INVALID_VALUE` and a null name, as from the real driver.
const NAMES: &[(CUresult, &CStr)] = &[
    (SUCCESS, c"CUDA_SUCCESS"),
    (INVALID_VALUE, c"CUDA_ERROR_INVALID_VALUE"),
    (OUT_OF_MEMORY, c"CUDA_ERROR_OUT_OF_MEMORY"),
    (NOT_INITIALIZED, c"CUDA_ERROR_NOT_INITIALIZED"),
    (4, c"CUDA_ERROR_DEINITIALIZED"),
    (34, c"CUDA_ERROR_STUB_LIBRARY"),
    (35, c"CUDA_ERROR_INSUFFICIENT_DRIVER"),
    (46, c"CUDA_ERROR_DEVICE_UNAVAILABLE"),
    (NO_DEVICE, c"CUDA_ERROR_NO_DEVICE"),
    (INVALID_DEVICE, c"CUDA_ERROR_INVALID_DEVICE"),
    (INVALID_CONTEXT, c"CUDA_ERROR_INVALID_CONTEXT"),
    (214, c"CUDA_ERROR_ECC_UNCORRECTABLE"),
    (216, c"CUDA_ERROR_CONTEXT_ALREADY_IN_USE"),
    (304, c"CUDA_ERROR_OPERATING_SYSTEM"),
    (700, c"CUDA_ERROR_ILLEGAL_ADDRESS"),
    (800, c"CUDA_ERROR_NOT_PERMITTED"),
    (801, c"CUDA_ERROR_NOT_SUPPORTED"),
    (803, c"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
    (UNKNOWN, c"CUDA_ERROR_UNKNOWN"),
];

/// `cuGetErrorName`'s static, NUL-terminated name for `code`, if it has one.
pub fn name(code: CUresult) -> Option<&'static CStr> {
    NAMES.iter().find(|(known, _)| *known == code).map(|(_, name)| *name)
}
