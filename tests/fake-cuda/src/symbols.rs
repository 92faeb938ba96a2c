//! The driver API functions this library exports, by name.

/// Every exported function.
pub const ALL: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid",
    "cuDeviceGetUuid_v2",
    "cuCtxCreate_v2",
    "cuCtxDestroy_v2",
    "cuCtxSynchronize",
    "cuCtxSetCurrent",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAllocPitch_v2",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemCreate",
    "cuMemRelease",
];

/// The functions a device's `hang` may name.
pub const HANGABLE: &[&str] = &["cuInit", "cuCtxCreate_v2", "cuMemAlloc_v2", "cuMemGetInfo_v2"];
