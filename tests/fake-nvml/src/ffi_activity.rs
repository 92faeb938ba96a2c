//! Activity readings: the energy counter, performance state, encoder and
//! decoder utilization, and per-process utilization samples with NVML's
//! last-seen-timestamp protocol.
//!
//! Safety contract (as in `nvml.h`): pointer arguments are null or valid for
//! the access the NVML documentation describes; a sample buffer holds
//! `*count` items.

#![allow(non_snake_case, non_upper_case_globals, clippy::missing_safety_doc)]

use std::os::raw::{c_uint, c_ulonglong};
use std::time::Duration;

use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::ffi_process::{self, Kind};
use crate::ffi_util::{non_null, two_call, write, write_slice};
use crate::state::{Call, Subject, device_call};

/// The driver samples process utilization about this often; a sample's
/// timestamp is the start of the period it falls in.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(100);
/// CPU timestamp (µs) of the fake's `nvmlInit`, so timestamps look real.
const EPOCH_US: u64 = 1_767_225_600_000_000;
/// Encoder/decoder sampling period reported, in µs.
const CODEC_PERIOD_US: c_uint = 1_000_000;

/// The timestamp (µs) of the newest sample at this call.
pub fn newest_sample_us(call: &Call) -> u64 {
    let periods = call.elapsed().as_micros() / SAMPLE_PERIOD.as_micros();
    let offset = u64::try_from(periods).unwrap_or(u64::MAX / 2).saturating_mul(100_000);
    EPOCH_US.saturating_add(offset)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTotalEnergyConsumption", Subject::Handle(device), |call| {
        let spec = call.physical()?;
        let start = spec.energy_mj.ok_or(NOT_SUPPORTED)?;
        // mW × ms / 1000 = mJ.
        let elapsed_ms = u64::try_from(call.elapsed().as_millis()).unwrap_or(u64::MAX);
        let power = u64::from(spec.power_usage_mw.unwrap_or(0));
        let value = start.saturating_add(power.saturating_mul(elapsed_ms) / 1000);
        // SAFETY: `energy` is null or valid for a write (contract).
        unsafe { write(energy, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(
    device: nvmlDevice_t,
    state: *mut nvmlPstates_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPerformanceState", Subject::Handle(device), |call| {
        let value = call.physical()?.performance_state.ok_or(NOT_SUPPORTED)?;
        // SAFETY: `state` is null or valid for a write (contract).
        unsafe { write(state, value as nvmlPstates_t) }
    })
}

/// # Safety
/// See the module's contract.
unsafe fn codec(
    name: &'static str,
    device: nvmlDevice_t,
    encoder: bool,
    utilization: *mut c_uint,
    period: *mut c_uint,
) -> nvmlReturn_t {
    device_call(name, Subject::Handle(device), |call| {
        let spec = call.physical()?;
        let value = if encoder { spec.encoder_utilization } else { spec.decoder_utilization };
        let value = value.ok_or(NOT_SUPPORTED)?;
        non_null(&[utilization.cast_const(), period.cast_const()])?;
        // SAFETY: both non-null and valid for a write (contract).
        unsafe {
            write(utilization, value)?;
            write(period, CODEC_PERIOD_US)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    period: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: forwarded contract.
    unsafe { codec("nvmlDeviceGetEncoderUtilization", device, true, utilization, period) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    period: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: forwarded contract.
    unsafe { codec("nvmlDeviceGetDecoderUtilization", device, false, utilization, period) }
}

/// Samples newer than `last_seen` (µs): one per listed process with a
/// `utilization`, stamped with the newest sample period. None newer →
/// NOT_FOUND, as the driver answers.
fn samples(
    call: &Call,
    last_seen: u64,
) -> Result<Vec<nvmlProcessUtilizationSample_t>, nvmlReturn_t> {
    call.physical()?;
    let at = newest_sample_us(call);
    if at <= last_seen {
        return Err(NOT_FOUND);
    }
    let spec = &call.device().processes;
    let listed: Vec<u32> = [Kind::Compute, Kind::Graphics, Kind::Mps]
        .into_iter()
        .flat_map(|kind| ffi_process::listed(call, kind))
        .map(|process| process.pid)
        .collect();
    let mut samples: Vec<nvmlProcessUtilizationSample_t> = Vec::new();
    for process in spec.compute.iter().chain(&spec.graphics).chain(&spec.mps) {
        let Some(util) = process.utilization else { continue };
        if !listed.contains(&process.pid) || samples.iter().any(|s| s.pid == process.pid) {
            continue;
        }
        samples.push(nvmlProcessUtilizationSample_t {
            pid: process.pid,
            timeStamp: at,
            smUtil: util.sm,
            memUtil: util.memory,
            encUtil: util.encoder,
            decUtil: util.decoder,
        });
    }
    if samples.is_empty() {
        return Err(NOT_FOUND);
    }
    Ok(samples)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetProcessUtilization", Subject::Handle(device), |call| {
        let list = samples(call, last_seen)?;
        let fill = || {
            non_null(&[utilization.cast_const()])?;
            // SAFETY: non-null and holds `*count >= list.len()` items (contract).
            unsafe { write_slice(utilization, &list) };
            Ok(())
        };
        // SAFETY: `count` is null or valid for reads and writes (contract).
        unsafe { two_call(count, list.len(), fill) }
    })
}
