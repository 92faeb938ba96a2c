//! Running-process lists (compute, graphics, MPS; the v3 `nvmlProcessInfo_t`
//! layout) with NVML's count-then-fill protocol.
//!
//! Safety contract (as in `nvml.h`): `infoCount` is null or valid for reads
//! and writes; `infos` is null or holds `*infoCount` items.

#![allow(non_snake_case, non_upper_case_globals, clippy::missing_safety_doc)]
// The legacy build exports none of these lists.
#![cfg_attr(feature = "legacy-driver", allow(dead_code, unused_imports))]

use std::os::raw::c_uint;

use nvml_wrapper_sys::bindings::*;

use crate::ffi_util::{non_null, two_call, write_slice};
use crate::scenario::{ProcessSpec, ProcessesSpec, UsedBytes};
use crate::state::{Call, Subject, device_call};

/// "Not available" for ids and memory, as NVML reports it.
const NOT_AVAILABLE_U32: c_uint = 0xFFFF_FFFF;

#[derive(Clone, Copy)]
pub enum Kind {
    Compute,
    Graphics,
    Mps,
}

/// The processes listed at this call (those inside their time window).
pub fn listed(call: &Call, kind: Kind) -> Vec<nvmlProcessInfo_t> {
    let (lists, default_gi, default_ci): (&ProcessesSpec, c_uint, c_uint) = match call.mig() {
        Some(mig) => (&mig.processes, mig.gpu_instance_id, mig.compute_instance_id),
        None => (&call.device().processes, NOT_AVAILABLE_U32, NOT_AVAILABLE_U32),
    };
    let list: &[ProcessSpec] = match kind {
        Kind::Compute => &lists.compute,
        Kind::Graphics => &lists.graphics,
        Kind::Mps => &lists.mps,
    };
    let now_ms = u64::try_from(call.elapsed().as_millis()).unwrap_or(u64::MAX);
    list.iter()
        .filter(|p| p.after_ms <= now_ms && p.until_ms.is_none_or(|until| now_ms < until))
        .map(|p| nvmlProcessInfo_t {
            pid: p.pid,
            usedGpuMemory: match p.used_bytes {
                UsedBytes::Bytes(bytes) => match p.moving_step_bytes {
                    Some(step) => bytes.saturating_add(moving_steps(now_ms, p.pid) * step),
                    None => bytes,
                },
                UsedBytes::Unavailable(_) => NVML_VALUE_NOT_AVAILABLE as u64,
            },
            gpuInstanceId: p.gpu_instance_id.unwrap_or(default_gi),
            computeInstanceId: p.compute_instance_id.unwrap_or(default_ci),
        })
        .collect()
}

/// 0..32, well mixed from the call's millisecond and the process, so
/// every process moves on every sample and no two alike.
fn moving_steps(now_ms: u64, pid: u32) -> u64 {
    let mut x = now_ms.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(pid).rotate_left(32);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    (x ^ (x >> 31)) % 32
}

/// # Safety
/// See the module's contract.
unsafe fn processes(
    name: &'static str,
    kind: Kind,
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    device_call(name, Subject::Handle(device), |call| {
        let list = listed(call, kind);
        let fill = || {
            non_null(&[infos.cast_const()])?;
            // SAFETY: non-null and holds `*count >= list.len()` items (contract).
            unsafe { write_slice(infos, &list) };
            Ok(())
        };
        // SAFETY: `count` is null or valid for reads and writes (contract).
        unsafe { two_call(count, list.len(), fill) }
    })
}

#[cfg(not(feature = "legacy-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    let name = "nvmlDeviceGetComputeRunningProcesses_v3";
    // SAFETY: forwarded contract.
    unsafe { processes(name, Kind::Compute, device, count, infos) }
}

#[cfg(not(feature = "legacy-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    let name = "nvmlDeviceGetGraphicsRunningProcesses_v3";
    // SAFETY: forwarded contract.
    unsafe { processes(name, Kind::Graphics, device, count, infos) }
}

#[cfg(not(feature = "legacy-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    let name = "nvmlDeviceGetMPSComputeRunningProcesses_v3";
    // SAFETY: forwarded contract.
    unsafe { processes(name, Kind::Mps, device, count, infos) }
}
