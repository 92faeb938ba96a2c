//! NVML return codes: names for the scenario file and `nvmlErrorString` texts.

use std::ffi::CStr;

use nvml_wrapper_sys::bindings::*;
use serde::Deserialize;

pub const SUCCESS: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;
pub const UNINITIALIZED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub const INVALID_ARGUMENT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub const NOT_SUPPORTED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub const NOT_FOUND: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub const INSUFFICIENT_SIZE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub const TIMEOUT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_TIMEOUT;
pub const GPU_IS_LOST: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
pub const ARGUMENT_VERSION_MISMATCH: nvmlReturn_t =
    nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
pub const UNKNOWN: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// Every code, with its C name and the text `nvmlErrorString` returns.
const TABLE: &[(nvmlReturn_t, &str, &CStr)] = &[
    (SUCCESS, "NVML_SUCCESS", c"Success"),
    (UNINITIALIZED, "NVML_ERROR_UNINITIALIZED", c"Uninitialized"),
    (INVALID_ARGUMENT, "NVML_ERROR_INVALID_ARGUMENT", c"Invalid Argument"),
    (NOT_SUPPORTED, "NVML_ERROR_NOT_SUPPORTED", c"Not Supported"),
    (
        nvmlReturn_enum_NVML_ERROR_NO_PERMISSION,
        "NVML_ERROR_NO_PERMISSION",
        c"Insufficient Permissions",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_ALREADY_INITIALIZED,
        "NVML_ERROR_ALREADY_INITIALIZED",
        c"Already Initialized",
    ),
    (NOT_FOUND, "NVML_ERROR_NOT_FOUND", c"Not Found"),
    (INSUFFICIENT_SIZE, "NVML_ERROR_INSUFFICIENT_SIZE", c"Insufficient Size"),
    (
        nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_POWER,
        "NVML_ERROR_INSUFFICIENT_POWER",
        c"Insufficient External Power",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
        "NVML_ERROR_DRIVER_NOT_LOADED",
        c"Driver Not Loaded",
    ),
    (TIMEOUT, "NVML_ERROR_TIMEOUT", c"Timeout"),
    (nvmlReturn_enum_NVML_ERROR_IRQ_ISSUE, "NVML_ERROR_IRQ_ISSUE", c"Interrupt Request Issue"),
    (
        nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND,
        "NVML_ERROR_LIBRARY_NOT_FOUND",
        c"NVML Shared Library Not Found",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND,
        "NVML_ERROR_FUNCTION_NOT_FOUND",
        c"Function Not Found",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_CORRUPTED_INFOROM,
        "NVML_ERROR_CORRUPTED_INFOROM",
        c"Corrupted infoROM",
    ),
    (GPU_IS_LOST, "NVML_ERROR_GPU_IS_LOST", c"GPU is lost"),
    (
        nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED,
        "NVML_ERROR_RESET_REQUIRED",
        c"GPU requires restart",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_OPERATING_SYSTEM,
        "NVML_ERROR_OPERATING_SYSTEM",
        c"The operating system has blocked the request.",
    ),
    (
        nvmlReturn_enum_NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        c"RM has detected an NVML/RM version mismatch.",
    ),
    (nvmlReturn_enum_NVML_ERROR_IN_USE, "NVML_ERROR_IN_USE", c"In use by another client"),
    (nvmlReturn_enum_NVML_ERROR_MEMORY, "NVML_ERROR_MEMORY", c"Insufficient Memory"),
    (nvmlReturn_enum_NVML_ERROR_NO_DATA, "NVML_ERROR_NO_DATA", c"No data"),
    (
        ARGUMENT_VERSION_MISMATCH,
        "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        c"Argument version mismatch",
    ),
    (nvmlReturn_enum_NVML_ERROR_NOT_READY, "NVML_ERROR_NOT_READY", c"Not ready"),
    (UNKNOWN, "NVML_ERROR_UNKNOWN", c"Unknown Error"),
];

/// The `nvmlErrorString` text of a code (static, NUL-terminated).
pub fn message(code: nvmlReturn_t) -> &'static CStr {
    TABLE.iter().find(|(c, _, _)| *c == code).map_or(c"Unknown Error", |(_, _, text)| text)
}

/// A return code named in the scenario file, e.g. `"NVML_ERROR_GPU_IS_LOST"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct ErrorCode(pub nvmlReturn_t);

impl TryFrom<String> for ErrorCode {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        TABLE
            .iter()
            .find(|(_, n, _)| *n == name)
            .map(|(code, _, _)| ErrorCode(*code))
            .ok_or_else(|| format!("unknown NVML return code {name:?}"))
    }
}
