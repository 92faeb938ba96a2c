//! The real device source: NVML through `nvml-wrapper`.
//!
//! Owns: the process's single `Nvml` handle (initialised lazily and retried,
//! so the daemon starts and serves on a machine with no driver), the device
//! and MIG handles of the listed devices (looked up once, not per read), the
//! mapping of NVML answers onto readings, the Xid watcher thread, and
//! process identity from /proc. A value a device does not support is left
//! out and logged once; a lost GPU fails the read with `DeviceLost`.
//!
//! Depends on: `model`, `clock`, `source` (trait, procfs). Every method
//! blocks in the driver; the sampler calls them on its own threads with a
//! deadline.

mod absent;
mod activity;
mod config;
mod identities;
mod mig;
mod slow;
pub mod xid;

pub use config::NvmlConfig;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use parking_lot::{Mutex, RwLock};

use crate::clock::ScaledClock;
use crate::model::{DeviceInfo, FastReading, MemoryInfo, SlowReading};

use super::procfs::ProcReader;
use super::{DeviceSource, SourceError};

use absent::AbsentLog;
use identities::Identities;

/// What the NVML source reads and where from: the first four fields are
/// the `nvml.` keys of their names.
#[derive(Clone, Debug, PartialEq)]
pub struct NvmlSettings {
    pub library_path: Option<PathBuf>,
    pub pcie_throughput: bool,
    pub max_cmdline_bytes: usize,
    pub xid_events: bool,
    /// Root of the proc filesystem (`/proc`; benchmarks point elsewhere).
    pub proc_root: PathBuf,
}

impl Default for NvmlSettings {
    fn default() -> Self {
        Self {
            library_path: None,
            pcie_throughput: false,
            max_cmdline_bytes: 256,
            xid_events: true,
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// A device handle kept for the life of the process (see [`NvmlSource::handle`]).
type Handle = Arc<Device<'static>>;

pub struct NvmlSource {
    settings: NvmlSettings,
    nvml: Mutex<Option<&'static Nvml>>,
    /// One entry per index the last listing returned (so bounded by it):
    /// its handle, or `None` until the next read looks it up again (after
    /// the device answered lost or unknown, its old handle is not trusted).
    handles: RwLock<HashMap<u32, Option<Handle>>>,
    clock: ScaledClock,
    absent: AbsentLog,
    activity: activity::ProcessActivity,
    identities: Identities,
    xid: xid::XidBook,
    xid_stop: Arc<AtomicBool>,
    xid_started: AtomicBool,
    /// The MIG layout of each GPU at the last listing (one entry per GPU:
    /// its MIG UUIDs, `None` with MIG off), compared on every slow read to
    /// notice a reconfiguration.
    mig_layouts: Mutex<HashMap<u32, Option<Vec<String>>>>,
    /// Bumped when a GPU's MIG layout no longer matches the listing
    /// ([`DeviceSource::layout_generation`]).
    generation: AtomicU64,
}

impl NvmlSource {
    pub fn new(settings: NvmlSettings) -> Self {
        let proc_reader = ProcReader::new(settings.proc_root.clone(), settings.max_cmdline_bytes);
        let identities = Identities::new(proc_reader);
        Self {
            settings,
            nvml: Mutex::new(None),
            handles: RwLock::new(HashMap::new()),
            clock: ScaledClock::wall(),
            absent: AbsentLog::default(),
            activity: activity::ProcessActivity::default(),
            identities,
            xid: xid::XidBook::default(),
            xid_stop: Arc::new(AtomicBool::new(false)),
            xid_started: AtomicBool::new(false),
            mig_layouts: Mutex::default(),
            generation: AtomicU64::new(0),
        }
    }

    /// The shared handle, initialising NVML on first use. A failed init is
    /// retried on the next call (the sampler backs off between calls).
    ///
    /// A successful init is kept for the rest of the process and never shut
    /// down: device handles borrow it, and a `'static` borrow is what lets
    /// them be kept between reads without `unsafe`. The design wants one
    /// `Nvml` per process anyway, and skipping `nvmlShutdown` at exit also
    /// avoids `Nvml`'s drop panicking on a library without that symbol.
    fn handle(&self) -> Result<&'static Nvml, SourceError> {
        let mut slot = self.nvml.lock();
        if let Some(nvml) = *slot {
            return Ok(nvml);
        }
        let mut builder = Nvml::builder();
        if let Some(path) = &self.settings.library_path {
            builder.lib_path(path.as_os_str());
        }
        let nvml = builder.init().map_err(|error| {
            let library = self.settings.library_path.as_deref();
            let library = library.unwrap_or(Path::new("libnvidia-ml.so.1")).display();
            SourceError::Unavailable {
                reason: format!("NVML ({library}) could not be initialised: {error}"),
            }
        })?;
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        *slot = Some(nvml);
        Ok(nvml)
    }

    /// The handle of a listed device, looked up only when none is kept. An
    /// index the last listing did not return is looked up on every read and
    /// not kept, so the map never outgrows the listing.
    fn device(&self, index: u32) -> Result<Handle, SourceError> {
        if let Some(Some(device)) = self.handles.read().get(&index) {
            return Ok(device.clone());
        }
        let device = Arc::new(mig::device(self.handle()?, index)?);
        if let Some(slot) = self.handles.write().get_mut(&index) {
            *slot = Some(device.clone());
        }
        Ok(device)
    }

    /// After a read failed because the device is lost or unknown, its handle
    /// is looked up again next time (a reset GPU may come back under a new
    /// one).
    fn distrust(&self, index: u32, error: &SourceError) {
        if matches!(error, SourceError::DeviceLost { .. } | SourceError::UnknownDevice { .. })
            && let Some(slot) = self.handles.write().get_mut(&index)
        {
            *slot = None;
        }
    }

    fn read_fast_from(&self, index: u32) -> Result<FastReading, SourceError> {
        let device = self.device(index)?;
        // Only memory info v2 separates driver-reserved memory from used;
        // a driver without it leaves memory absent rather than wrong.
        let memory = match device.memory_info() {
            Err(error @ (NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound)) => {
                self.absent.note(index, "memory info v2", &error);
                None
            }
            other => Some(other.map_err(|error| driver_error(index, "memory_info_v2", error))?),
        };
        let utilization = self
            .absent
            .value(index, "utilization", device.utilization_rates())
            .map_err(|error| driver_error(index, "utilization_rates", error))?;
        Ok(FastReading {
            at: self.clock.now(),
            memory: memory.map(|memory| MemoryInfo {
                total_bytes: memory.total,
                reserved_bytes: Some(memory.reserved),
                used_bytes: memory.used,
                free_bytes: memory.free,
            }),
            gpu_utilization: utilization.as_ref().map(|rates| f64::from(rates.gpu) / 100.0),
            memory_bandwidth_utilization: utilization.map(|rates| f64::from(rates.memory) / 100.0),
        })
    }

    fn read_slow_from(&self, index: u32, max: usize) -> Result<SlowReading, SourceError> {
        let device = self.device(index)?;
        let mut processes = slow::processes(index, &device, &self.absent, &self.identities, max)
            .map_err(|error| driver_error(index, "running_processes_v3", error))?;
        if let Some((listed, _)) = processes.as_mut() {
            self.activity
                .annotate(index, &device, &self.absent, listed)
                .map_err(|error| driver_error(index, "process_utilization", error))?;
        }
        let pcie = self.settings.pcie_throughput;
        let mut reading = slow::reading(index, &device, &self.absent, pcie, processes, &self.clock)
            .map_err(|error| driver_error(index, "health", error))?;
        if let Some(counts) = self.xid.counts.lock().get(&index) {
            reading.details.xid_errors = counts.clone();
        }
        reading.details.last_xid_unix_ms = self.xid.last.lock().get(&index).copied();
        if mig::split(index).is_none() {
            let layout = match reading.details.mig_enabled {
                Some(true) => Some(mig::uuids(&device)),
                Some(false) => None,
                // MIG mode unreadable: nothing to compare.
                None => return Ok(reading),
            };
            self.notice_mig_change(index, layout);
        }
        Ok(reading)
    }

    /// Compares a GPU's MIG layout with the last listing's; a difference
    /// bumps the generation once (the layout is taken as the new reference,
    /// so the same change is not reported on every read) and the sampler
    /// lists the devices again.
    fn notice_mig_change(&self, index: u32, now: Option<Vec<String>>) {
        let mut known = self.mig_layouts.lock();
        let Some(then) = known.get_mut(&index) else { return };
        if *then == now {
            return;
        }
        *then = now;
        drop(known);
        tracing::warn!(gpu = index, "MIG layout changed; listing the devices again");
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

impl Drop for NvmlSource {
    fn drop(&mut self) {
        self.xid_stop.store(true, Ordering::Relaxed);
    }
}

fn driver_error(index: u32, call: &'static str, error: NvmlError) -> SourceError {
    match error {
        NvmlError::GpuLost => {
            SourceError::DeviceLost { index, reason: format!("{call}: GPU is lost") }
        }
        NvmlError::InvalidArg => SourceError::UnknownDevice { index },
        other => SourceError::Driver { index, call: call.into(), reason: other.to_string() },
    }
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
        let driver_version = nvml.sys_driver_version().ok();
        let mut devices = Vec::new();
        let mut handles = HashMap::new();
        let mut layouts = HashMap::new();
        for index in 0..count {
            let device = nvml
                .device_by_index(index)
                .map_err(|error| driver_error(index, "device_by_index", error))?;
            let info = DeviceInfo {
                index,
                uuid: device.uuid().map_err(|error| driver_error(index, "uuid", error))?,
                name: device.name().map_err(|error| driver_error(index, "name", error))?,
                pci_bus_id: device.pci_info().ok().map(|pci| pci.bus_id),
                driver_version: driver_version.clone(),
                mig: None,
            };
            let mig_enabled = device.mig_mode().is_ok_and(|mode| mode.current == 1);
            let migs = if mig_enabled { mig::list(&device, &info) } else { Vec::new() };
            // Taken the way the slow read takes it, so a slot that is listed
            // but cannot be described does not read as a change every time.
            let layout = mig_enabled.then(|| mig::uuids(&device));
            layouts.insert(index, layout);
            devices.push(info);
            handles.insert(index, Some(Arc::new(device)));
            // MIG handles are looked up on their first read, then kept.
            handles.extend(migs.iter().map(|mig| (mig.index, None)));
            devices.extend(migs);
        }
        self.identities.retain_devices(|index| handles.contains_key(&index));
        *self.handles.write() = handles;
        *self.mig_layouts.lock() = layouts;
        if self.settings.xid_events && !self.xid_started.swap(true, Ordering::AcqRel) {
            let (book, clock) = (self.xid.clone(), self.clock.clone());
            xid::spawn(nvml, count, book, clock, self.xid_stop.clone());
        }
        Ok(devices)
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        self.read_fast_from(index).inspect_err(|error| self.distrust(index, error))
    }

    fn read_slow(&self, index: u32, max_processes: usize) -> Result<SlowReading, SourceError> {
        self.read_slow_from(index, max_processes).inspect_err(|error| self.distrust(index, error))
    }

    fn layout_generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mig_layout_change_bumps_the_generation_once() {
        let source = NvmlSource::new(NvmlSettings::default());
        let layout = |uuids: &[&str]| Some(uuids.iter().map(|u| (*u).to_owned()).collect());
        source.mig_layouts.lock().extend([(0, None), (1, layout(&["MIG-a"]))]);
        source.notice_mig_change(1, layout(&["MIG-a"]));
        source.notice_mig_change(7, layout(&["MIG-x"]));
        assert_eq!(source.layout_generation(), 0, "unchanged or never listed: nothing");
        source.notice_mig_change(1, layout(&["MIG-b", "MIG-c"]));
        source.notice_mig_change(1, layout(&["MIG-b", "MIG-c"]));
        assert_eq!(source.layout_generation(), 1, "one change, counted once");
        source.notice_mig_change(0, layout(&[]));
        assert_eq!(source.layout_generation(), 2, "MIG turned on");
    }
}
