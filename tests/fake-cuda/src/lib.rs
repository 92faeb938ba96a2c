//! A fake `libcuda.so` for tests: build this crate as a `cdylib`, install it
//! as `libcuda.so.1`, describe the GPUs in a JSON scenario
//! (`FAKE_CUDA_SCENARIO`), and vramd's real CUDA probe path (the
//! `cuda-driver` crate) runs against it with no GPU or driver present.
//! Optionally every call is logged (`FAKE_CUDA_LOG`), so tests can check
//! that the probe released each allocation and its context. See README.md.
//!
//! As an `rlib`, the crate offers [`harness`]: build the library once per
//! test process, install it under the driver's file name, write scenarios.
//!
//! Every exported function takes its C arguments as `cuda.h` documents them
//! and runs its body through [`ffi_util::entry`] (or `boundary`), which
//! turns panics into `CUDA_ERROR_UNKNOWN`. State is process-global (one
//! mutex), as in the real driver.

pub mod codes;
pub mod ffi_context;
pub mod ffi_current;
pub mod ffi_device;
pub mod ffi_util;
pub mod ffi_vmm;
pub mod harness;
pub mod program;
pub mod scenario;
pub mod state;
pub mod symbols;
