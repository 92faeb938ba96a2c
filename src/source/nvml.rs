//! The real device source: NVML through `nvml-wrapper`.
//!
//! Owns: the process's single `Nvml` handle (loaded lazily, so the daemon
//! starts and serves on a machine with no driver and retries later) and the
//! mapping of NVML answers onto readings. This is the first cut: memory
//! (info v2), utilization, compute processes, temperature and power. The
//! full slow tier, Xid events, MIG and the fake-library tests are the NVML
//! issue's work.
//!
//! Depends on: `model`, `clock`, `source` (trait). Every method blocks in
//! the driver; the sampler calls them on `spawn_blocking` with a deadline.

use std::sync::Arc;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use parking_lot::Mutex;

use crate::clock::ScaledClock;
use crate::model::{DeviceInfo, FastReading, MemoryInfo, ProcessInfo, SlowReading};

use super::{DeviceSource, SourceError};

pub struct NvmlSource {
    nvml: Mutex<Option<Arc<Nvml>>>,
    clock: ScaledClock,
}

impl Default for NvmlSource {
    fn default() -> Self {
        Self::new()
    }
}

impl NvmlSource {
    pub fn new() -> Self {
        Self { nvml: Mutex::new(None), clock: ScaledClock::wall() }
    }

    /// The shared handle, initialising NVML on first use. A failed init is
    /// retried on the next call (the sampler backs off between calls).
    fn handle(&self) -> Result<Arc<Nvml>, SourceError> {
        let mut slot = self.nvml.lock();
        if let Some(nvml) = slot.as_ref() {
            return Ok(nvml.clone());
        }
        let nvml = Nvml::init().map(Arc::new).map_err(|error| SourceError::Unavailable {
            reason: format!("NVML (libnvidia-ml.so.1) could not be initialised: {error}"),
        })?;
        *slot = Some(nvml.clone());
        Ok(nvml)
    }
}

fn driver_error(index: u32, call: &'static str, error: NvmlError) -> SourceError {
    match error {
        NvmlError::GpuLost => {
            SourceError::DeviceLost { index, reason: format!("{call}: GPU is lost") }
        }
        NvmlError::InvalidArg => SourceError::UnknownDevice { index },
        other => SourceError::Driver { index, call, reason: other.to_string() },
    }
}

/// A value the device may not support: absent rather than an error.
fn optional<T>(result: Result<T, NvmlError>) -> Result<Option<T>, NvmlError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(NvmlError::NotSupported | NvmlError::FunctionNotFound | NvmlError::NoPermission) => {
            Ok(None)
        }
        Err(NvmlError::FailedToLoadSymbol(_)) => Ok(None),
        Err(other) => Err(other),
    }
}

/// The short process name, when this process may read it.
fn process_name(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let name = text.trim_end();
    (!name.is_empty()).then(|| name.to_owned())
}

impl DeviceSource for NvmlSource {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        let nvml = self.handle()?;
        let count = nvml.device_count().map_err(|error| SourceError::Unavailable {
            reason: format!("nvmlDeviceGetCount failed: {error}"),
        })?;
        let driver_version = optional(nvml.sys_driver_version()).ok().flatten();
        (0..count)
            .map(|index| {
                let device = nvml
                    .device_by_index(index)
                    .map_err(|e| driver_error(index, "device_by_index", e))?;
                Ok(DeviceInfo {
                    index,
                    uuid: device.uuid().map_err(|e| driver_error(index, "uuid", e))?,
                    name: device.name().map_err(|e| driver_error(index, "name", e))?,
                    pci_bus_id: optional(device.pci_info()).ok().flatten().map(|pci| pci.bus_id),
                    driver_version: driver_version.clone(),
                })
            })
            .collect()
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        let nvml = self.handle()?;
        let device =
            nvml.device_by_index(index).map_err(|e| driver_error(index, "device_by_index", e))?;
        let memory = device.memory_info().map_err(|e| driver_error(index, "memory_info_v2", e))?;
        let utilization = optional(device.utilization_rates())
            .map_err(|e| driver_error(index, "utilization_rates", e))?;
        Ok(FastReading {
            at: self.clock.now(),
            memory: Some(MemoryInfo {
                total_bytes: memory.total,
                reserved_bytes: Some(memory.reserved),
                used_bytes: memory.used,
                free_bytes: memory.free,
            }),
            gpu_utilization: utilization.as_ref().map(|u| f64::from(u.gpu) / 100.0),
            memory_bandwidth_utilization: utilization.map(|u| f64::from(u.memory) / 100.0),
        })
    }

    fn read_slow(&self, index: u32) -> Result<SlowReading, SourceError> {
        let nvml = self.handle()?;
        let device =
            nvml.device_by_index(index).map_err(|e| driver_error(index, "device_by_index", e))?;
        let processes = optional(device.running_compute_processes())
            .map_err(|e| driver_error(index, "running_compute_processes_v3", e))?
            .map(|list| {
                list.into_iter()
                    .map(|process| ProcessInfo {
                        pid: process.pid,
                        name: process_name(process.pid),
                        used_bytes: match process.used_gpu_memory {
                            UsedGpuMemory::Used(bytes) => Some(bytes),
                            UsedGpuMemory::Unavailable => None,
                        },
                        allocator: None,
                    })
                    .collect()
            });
        let temperature = optional(device.temperature(TemperatureSensor::Gpu))
            .map_err(|e| driver_error(index, "temperature", e))?;
        let power =
            optional(device.power_usage()).map_err(|e| driver_error(index, "power_usage", e))?;
        let limit = optional(device.enforced_power_limit())
            .map_err(|e| driver_error(index, "enforced_power_limit", e))?;
        Ok(SlowReading {
            at: self.clock.now(),
            processes,
            temperature_celsius: temperature.map(f64::from),
            power_usage_watts: power.map(|milliwatts| f64::from(milliwatts) / 1000.0),
            power_limit_watts: limit.map(|milliwatts| f64::from(milliwatts) / 1000.0),
        })
    }
}
