//! Initialisation and the calls that need no context: `cuInit`, driver
//! version, error names, device count, handles, names and UUIDs.
//!
//! Safety contract of every function here (as in `cuda.h`): pointer
//! arguments are null or valid for the access the driver API documents.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_uint};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::codes::{self, *};
use crate::ffi_util::{boundary, entry, hang, write};
use crate::scenario::Scenario;
use crate::state;

/// `CUdevice`: the ordinal.
pub type CUdevice = c_int;

/// `CUuuid`: `struct { char bytes[16]; }`.
#[repr(C)]
pub struct CUuuid {
    pub bytes: [c_char; 16],
}

/// The scenario error is printed to stderr once per process, not per call.
static REPORTED: AtomicBool = AtomicBool::new(false);

fn init(flags: c_uint) -> Result<(), CUresult> {
    if flags != 0 {
        return Err(INVALID_VALUE);
    }
    if state::initialised() {
        return Ok(());
    }
    let scenario = Scenario::load_configured().map_err(|reason| {
        if !REPORTED.swap(true, Ordering::Relaxed) {
            eprintln!("fake-cuda: cuInit fails: {reason}");
        }
        NOT_INITIALIZED
    })?;
    if scenario.hangs_in("cuInit") {
        hang("cuInit");
    }
    if let Some(code) = scenario.init_error {
        return Err(code);
    }
    if scenario.devices.is_empty() {
        // What the real driver's cuInit says on a machine without a GPU.
        return Err(NO_DEVICE);
    }
    state::install(scenario);
    Ok(())
}

#[unsafe(no_mangle)]
pub extern "C" fn cuInit(flags: c_uint) -> CUresult {
    entry("cuInit", || init(flags))
}

/// Works before `cuInit`, as the real driver's does: the version then comes
/// from the scenario file, read for this call only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    entry("cuDriverGetVersion", || {
        if version.is_null() {
            return Err(INVALID_VALUE);
        }
        let known = state::with(|loaded| Ok(loaded.scenario.driver_version));
        let value = match known {
            Ok(value) => value,
            Err(_) => Scenario::load_configured().map_err(|_| NOT_INITIALIZED)?.driver_version,
        };
        // SAFETY: `version` is non-null and valid for a write (contract).
        unsafe { write(version, value) }
    })
}

/// A pure lookup: works before `cuInit` and is not logged. Unknown codes
/// get INVALID_VALUE and a null name, as from the real driver.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, name: *mut *const c_char) -> CUresult {
    boundary(|| {
        let found = codes::name(error);
        // SAFETY: `name` is null or valid for a write (contract).
        unsafe { write(name, found.map_or(std::ptr::null(), CStr::as_ptr)) }?;
        found.map(|_| ()).ok_or(INVALID_VALUE)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    entry("cuDeviceGetCount", || {
        let devices = state::with(|loaded| Ok(loaded.scenario.devices.len()))?;
        let devices = c_int::try_from(devices).map_err(|_| UNKNOWN)?;
        // SAFETY: `count` is null or valid for a write (contract).
        unsafe { write(count, devices) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    entry("cuDeviceGet", || {
        state::with(|loaded| loaded.device(ordinal).map(|_| ()))?;
        // SAFETY: `device` is null or valid for a write (contract).
        unsafe { write(device, ordinal) }
    })
}

/// Copies the name and a NUL into the caller's `length` bytes, cutting the
/// name short when it does not fit (as the real driver does).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(
    name: *mut c_char,
    length: c_int,
    device: CUdevice,
) -> CUresult {
    entry("cuDeviceGetName", || {
        let text = state::with(|loaded| Ok(loaded.device(device)?.1.name.clone()))?;
        let room = usize::try_from(length).ok().and_then(|n| n.checked_sub(1));
        let Some(room) = room.filter(|_| !name.is_null()) else { return Err(INVALID_VALUE) };
        let bytes = &text.as_bytes()[..text.len().min(room)];
        // SAFETY: `name` is non-null and valid for `length` bytes (contract),
        // and `bytes.len() + 1 <= length`; a fresh String cannot overlap it.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), bytes.len());
            name.add(bytes.len()).write(0);
        }
        Ok(())
    })
}

/// Both UUID getters.
///
/// # Safety
/// `out` must be null or valid for a write of a `CUuuid`.
unsafe fn uuid(name: &'static str, out: *mut CUuuid, device: CUdevice) -> CUresult {
    entry(name, || {
        let bytes = state::with(|loaded| Ok(loaded.device(device)?.1.uuid))?;
        let uuid = CUuuid { bytes: bytes.map(|byte| c_char::from_ne_bytes([byte])) };
        // SAFETY: `out` is null or valid for a write of a CUuuid (contract).
        unsafe { write(out, uuid) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(out: *mut CUuuid, device: CUdevice) -> CUresult {
    // SAFETY: the caller's contract is this function's.
    unsafe { uuid("cuDeviceGetUuid", out, device) }
}

/// The same bytes as `cuDeviceGetUuid` (the two differ only for MIG devices,
/// which the fake does not model as separate CUDA devices).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(out: *mut CUuuid, device: CUdevice) -> CUresult {
    // SAFETY: the caller's contract is this function's.
    unsafe { uuid("cuDeviceGetUuid_v2", out, device) }
}
