//! Device identity and the fast-tier readings: index, UUID, name, PCI info,
//! memory (v1 and v2), utilization, BAR1 and PCIe throughput.
//!
//! Safety contract of every function here (as in `nvml.h`): pointer
//! arguments are null or valid for the access the NVML documentation
//! describes (a `length`-byte buffer for strings, one struct otherwise).

#![allow(non_snake_case, non_upper_case_globals, clippy::missing_safety_doc)]

use std::os::raw::{c_char, c_uint};

use nvml_wrapper_sys::bindings::*;

use crate::codes::*;
use crate::ffi_util::{write, write_str};
use crate::scenario::{self, MemorySpec};
use crate::state::{Call, Subject, device_call};

/// `NVML_STRUCT_VERSION(Memory, 2)`: the version `nvmlMemory_v2_t` callers set.
pub const MEMORY_V2_VERSION: c_uint = (size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetIndex", Subject::Handle(device), |call| {
        call.physical()?;
        let value = c_uint::try_from(call.target.gpu()).map_err(|_| UNKNOWN)?;
        // SAFETY: `index` is null or valid for a write (contract).
        unsafe { write(index, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetUUID", Subject::Handle(device), |call| {
        let value = match call.mig() {
            Some(mig) => mig.uuid.clone(),
            None => call.device().uuid(call.target.gpu()),
        };
        // SAFETY: `uuid` is null or valid for `length` bytes (contract).
        unsafe { write_str(uuid, length, &value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetName", Subject::Handle(device), |call| {
        let parent = &call.device().name;
        let value = match call.mig() {
            Some(mig) => mig.name.clone().unwrap_or_else(|| {
                format!("{parent} MIG {}", mig.profile.as_deref().unwrap_or("instance"))
            }),
            None => parent.clone(),
        };
        // SAFETY: `name` is null or valid for `length` bytes (contract).
        unsafe { write_str(name, length, &value) }
    })
}

/// Copies `text` into a fixed C char array, NUL-terminated and truncated.
fn fill_chars<const N: usize>(out: &mut [c_char; N], text: &str) {
    for (slot, byte) in out.iter_mut().zip(text.bytes().take(N - 1)) {
        *slot = byte as c_char;
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPciInfo_v3", Subject::Handle(device), |call| {
        let spec = call.physical()?;
        let bus_id = spec.pci_bus_id(call.target.gpu());
        let (domain, bus, dev) = scenario::parse_bus_id(&bus_id).ok_or(UNKNOWN)?;
        let mut info = nvmlPciInfo_t {
            busIdLegacy: [0; 16],
            domain,
            bus,
            device: dev,
            pciDeviceId: spec.pci_device_id,
            pciSubSystemId: spec.pci_subsystem_id,
            busId: [0; 32],
        };
        fill_chars(&mut info.busIdLegacy, &format!("{domain:04X}:{bus:02X}:{dev:02X}.0"));
        fill_chars(&mut info.busId, &format!("{domain:08X}:{bus:02X}:{dev:02X}.0"));
        // SAFETY: `pci` is null or valid for a write (contract).
        unsafe { write(pci, info) }
    })
}

/// The memory spec of the addressed GPU or MIG device.
fn memory_spec(call: &Call) -> Result<&MemorySpec, nvmlReturn_t> {
    match call.mig() {
        Some(mig) => mig.memory.as_ref(),
        None => call.device().memory.as_ref(),
    }
    .ok_or(NOT_SUPPORTED)
}

/// `(total, reserved, used, free)` at this call, per the scenario.
pub fn memory_now(call: &Call, spec: &MemorySpec) -> (u64, u64, u64, u64) {
    let room = spec.total_bytes - spec.reserved_bytes;
    let used = if spec.used_bytes_per_call.is_empty() {
        let grown =
            spec.used_bytes as f64 + spec.growth_bytes_per_second * call.elapsed().as_secs_f64();
        grown.clamp(0.0, room as f64) as u64
    } else {
        let last = spec.used_bytes_per_call.len() - 1;
        let index = usize::try_from(call.sequence).unwrap_or(usize::MAX).min(last);
        spec.used_bytes_per_call[index]
    }
    .min(room);
    (spec.total_bytes, spec.reserved_bytes, used, room - used)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMemoryInfo", Subject::Handle(device), |call| {
        let (total, reserved, used, free) = memory_now(call, memory_spec(call)?);
        // v1 reports driver-reserved memory as used.
        let info = nvmlMemory_t { total, free, used: used + reserved };
        // SAFETY: `memory` is null or valid for a write (contract).
        unsafe { write(memory, info) }
    })
}

#[cfg(not(feature = "legacy-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMemoryInfo_v2", Subject::Handle(device), |call| {
        if memory.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null and valid for reads of the struct (contract).
        let version = unsafe { std::ptr::addr_of!((*memory).version).read_unaligned() };
        if version != MEMORY_V2_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let (total, reserved, used, free) = memory_now(call, memory_spec(call)?);
        let info = nvmlMemory_v2_t { version, total, reserved, free, used };
        // SAFETY: non-null and valid for a write (contract).
        unsafe { write(memory, info) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetUtilizationRates", Subject::Handle(device), |call| {
        let spec = call.physical()?.utilization.ok_or(NOT_SUPPORTED)?;
        let value = nvmlUtilization_t { gpu: spec.gpu, memory: spec.memory };
        // SAFETY: `utilization` is null or valid for a write (contract).
        unsafe { write(utilization, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetBAR1MemoryInfo(
    device: nvmlDevice_t,
    bar1: *mut nvmlBAR1Memory_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetBAR1MemoryInfo", Subject::Handle(device), |call| {
        let spec = call.physical()?.bar1.ok_or(NOT_SUPPORTED)?;
        let used = spec.used_bytes.min(spec.total_bytes);
        let value = nvmlBAR1Memory_t {
            bar1Total: spec.total_bytes,
            bar1Free: spec.total_bytes - used,
            bar1Used: used,
        };
        // SAFETY: `bar1` is null or valid for a write (contract).
        unsafe { write(bar1, value) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: nvmlPcieUtilCounter_t,
    value: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPcieThroughput", Subject::Handle(device), |call| {
        let spec = call.physical()?.pcie_throughput.ok_or(NOT_SUPPORTED)?;
        let kbps = match counter {
            nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_TX_BYTES => spec.tx_kbps,
            nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_RX_BYTES => spec.rx_kbps,
            _ => return Err(INVALID_ARGUMENT),
        };
        // SAFETY: `value` is null or valid for a write (contract).
        unsafe { write(value, kbps) }
    })
}
