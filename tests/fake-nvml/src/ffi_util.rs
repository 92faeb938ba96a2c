//! The FFI boundary: panic containment and writing into caller memory.
//!
//! Every exported function runs its body through [`boundary`], so a panic
//! (a bug, or the injected `panic_in` fault) becomes NVML_ERROR_UNKNOWN and
//! never unwinds into C (which would abort the host process).

use std::os::raw::{c_char, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use crate::codes::*;

/// Runs `body`, mapping `Ok` to NVML_SUCCESS, `Err(code)` to `code` and a
/// panic to NVML_ERROR_UNKNOWN.
pub fn boundary(body: impl FnOnce() -> Result<(), nvmlReturn_t>) -> nvmlReturn_t {
    // AssertUnwindSafe: after a panic the only shared state touched is the
    // global state mutex, whose poisoning `state::lock` ignores on purpose;
    // every mutation under it is a single assignment or counter update.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

/// Fails with INVALID_ARGUMENT if any pointer is null.
pub fn non_null<T>(pointers: &[*const T]) -> Result<(), nvmlReturn_t> {
    if pointers.iter().any(|p| p.is_null()) { Err(INVALID_ARGUMENT) } else { Ok(()) }
}

/// Writes `value` through `out`; INVALID_ARGUMENT when `out` is null.
///
/// # Safety
/// `out` must be null or valid for a write of one `T` (the NVML C contract).
pub unsafe fn write<T>(out: *mut T, value: T) -> Result<(), nvmlReturn_t> {
    if out.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and the caller guarantees it is valid for a write of `T`.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// Copies `text` and a NUL into the caller's `length`-byte buffer;
/// INSUFFICIENT_SIZE when it does not fit, INVALID_ARGUMENT when null.
///
/// # Safety
/// `buffer` must be null or valid for writes of `length` bytes.
pub unsafe fn write_str(
    buffer: *mut c_char,
    length: c_uint,
    text: &str,
) -> Result<(), nvmlReturn_t> {
    if buffer.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > length as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `buffer` is non-null and valid for `length` bytes (caller), and
    // `bytes.len() + 1 <= length`; a fresh `&str` cannot overlap C memory.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.cast::<u8>(), bytes.len());
        buffer.add(bytes.len()).write(0);
    }
    Ok(())
}

/// Copies `items` into the caller's array of `capacity` items.
///
/// # Safety
/// `out` must be valid for writes of `items.len()` values of `T`.
pub unsafe fn write_slice<T: Copy>(out: *mut T, items: &[T]) {
    // SAFETY: the caller guarantees room for `items.len()` values; a Rust
    // slice cannot overlap memory the C caller handed us for output.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), out, items.len()) };
}

/// The count-then-fill protocol of NVML list getters: `*count` in is the
/// caller's capacity; out is the number of items. A capacity too small sets
/// the needed count and returns INSUFFICIENT_SIZE; an empty list returns
/// SUCCESS with count 0 (buffers may then be null).
///
/// # Safety
/// `count` must be null or valid for reads and writes; `fill` is only called
/// when the caller's capacity holds `len` items.
pub unsafe fn two_call(
    count: *mut c_uint,
    len: usize,
    fill: impl FnOnce() -> Result<(), nvmlReturn_t>,
) -> Result<(), nvmlReturn_t> {
    if count.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let len = c_uint::try_from(len).map_err(|_| UNKNOWN)?;
    // SAFETY: non-null, and valid for reads per the caller's contract.
    let capacity = unsafe { count.read_unaligned() };
    // SAFETY: as above, valid for writes.
    unsafe { count.write_unaligned(len) };
    if len == 0 {
        return Ok(());
    }
    if capacity < len {
        return Err(INSUFFICIENT_SIZE);
    }
    fill()
}
