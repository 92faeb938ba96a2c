//! A fake `libnvidia-ml.so` for tests: build this crate as a `cdylib`, put it
//! where `nvml-wrapper` looks for `libnvidia-ml.so.1`, describe the GPUs in a
//! JSON scenario (`FAKE_NVML_SCENARIO`), and the real `nvml-wrapper` code path
//! runs against it with no GPU or driver present. See README.md.
//!
//! As an `rlib`, the crate offers [`harness`]: build the library once per test
//! process, install it under the driver's file name, write scenarios.
//!
//! Every exported function takes its C arguments as `nvml.h` documents them,
//! so they are `unsafe extern "C"` (the caller promises valid pointers), and
//! runs its body through [`ffi_util::boundary`], which turns panics into
//! NVML_ERROR_UNKNOWN.

pub mod codes;
pub mod ffi_activity;
pub mod ffi_device;
pub mod ffi_events;
pub mod ffi_health;
pub mod ffi_mig;
pub mod ffi_process;
pub mod ffi_system;
pub mod ffi_util;
pub mod harness;
pub mod scenario;
pub mod state;
pub mod symbols;
