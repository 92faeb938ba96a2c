//! Event sets: supported types, registration, and Xid events from the
//! scenario's `xid_events`, each delivered once per set when it is due.
//!
//! Safety contract (as in `nvml.h`): pointer arguments are null or valid for
//! a write of their type.

#![allow(non_snake_case, non_upper_case_globals, clippy::missing_safety_doc)]

use std::os::raw::{c_uint, c_ulonglong};
use std::time::{Duration, Instant};

use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::ffi_util::{non_null, write};
use crate::state::{self, Subject, Target, device_call, set_handle, set_id, system_call};

const XID: u64 = nvmlEventTypeXidCriticalError as u64;
const ALL: u64 = nvmlEventTypeAll as u64;
/// Longest single sleep inside a wait, so a freed set or shutdown is noticed.
const POLL: Duration = Duration::from_millis(50);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    types: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetSupportedEventTypes", Subject::Handle(device), |call| {
        let mask = call.physical()?.supported_event_types.unwrap_or(ALL);
        // SAFETY: `types` is null or valid for a write (contract).
        unsafe { write(types, mask) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    system_call("nvmlEventSetCreate", |_| {
        non_null(&[set.cast_const()])?;
        let id = state::lock().as_mut().ok_or(UNINITIALIZED)?.new_event_set();
        // SAFETY: non-null and valid for a write (contract).
        unsafe { write(set, set_handle(id)) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceRegisterEvents", Subject::Handle(device), |call| {
        let supported = call.physical()?.supported_event_types.unwrap_or(ALL);
        if types & !supported != 0 {
            return Err(NOT_SUPPORTED);
        }
        let id = set_id(set).ok_or(INVALID_ARGUMENT)?;
        let mut guard = state::lock();
        let loaded = guard.as_mut().ok_or(UNINITIALIZED)?;
        let entry = loaded.event_sets.get_mut(&id).ok_or(INVALID_ARGUMENT)?;
        *entry.registered.entry(call.target.gpu()).or_insert(0) |= types;
        Ok(())
    })
}

/// The next undelivered Xid event of this set: delivered (and returned) if
/// due, otherwise how long until it is.
fn next_event(id: usize) -> Result<Result<nvmlEventData_t, Option<Duration>>, nvmlReturn_t> {
    let mut guard = state::lock();
    let loaded = guard.as_mut().ok_or(UNINITIALIZED)?;
    let scenario = loaded.scenario.clone();
    let elapsed = loaded.started.elapsed();
    let set = loaded.event_sets.get_mut(&id).ok_or(INVALID_ARGUMENT)?;
    let mut best: Option<(u64, usize, usize)> = None;
    for (&gpu, &mask) in &set.registered {
        if mask & XID == 0 {
            continue;
        }
        for (index, event) in scenario.devices[gpu].xid_events.iter().enumerate() {
            let key = (event.after_ms, gpu, index);
            if !set.delivered.contains(&(gpu, index)) && best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
    }
    let Some((after_ms, gpu, index)) = best else { return Ok(Err(None)) };
    let due = Duration::from_millis(after_ms);
    if due > elapsed {
        return Ok(Err(Some(due - elapsed)));
    }
    set.delivered.insert((gpu, index));
    let event = scenario.devices[gpu].xid_events[index];
    Ok(Ok(nvmlEventData_t {
        device: Target::Gpu(gpu).handle(),
        eventType: XID,
        eventData: event.xid,
        gpuInstanceId: event.gpu_instance_id.unwrap_or(u32::MAX),
        computeInstanceId: event.compute_instance_id.unwrap_or(u32::MAX),
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeout_ms: c_uint,
) -> nvmlReturn_t {
    system_call("nvmlEventSetWait_v2", |_| {
        non_null(&[data.cast_const()])?;
        let id = set_id(set).ok_or(INVALID_ARGUMENT)?;
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
        loop {
            let wait = match next_event(id)? {
                // SAFETY: non-null and valid for a write (contract).
                Ok(event) => return unsafe { write(data, event) },
                Err(wait) => wait,
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(TIMEOUT);
            }
            std::thread::sleep(remaining.min(wait.unwrap_or(POLL)).min(POLL));
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    system_call("nvmlEventSetFree", |_| {
        let id = set_id(set).ok_or(INVALID_ARGUMENT)?;
        let mut guard = state::lock();
        let loaded = guard.as_mut().ok_or(UNINITIALIZED)?;
        loaded.event_sets.remove(&id).map(|_| ()).ok_or(INVALID_ARGUMENT)
    })
}
