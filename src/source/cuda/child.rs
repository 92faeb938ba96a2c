//! `vramd probe`: the CUDA driver probe itself, run in a short-lived child
//! process so the daemon never holds a CUDA context.
//!
//! Loads the driver library at run time (a missing library or symbol is a
//! failure of its own kind, never a panic), finds the device by UUID,
//! creates a context, reads `cuMemGetInfo` and NVML's free memory one right
//! after the other, times allocations, optionally searches for the largest
//! allocatable block, and releases everything. NVML is read best-effort
//! (for the comparison and the context's cost); without it those values
//! are absent.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cuda_driver::{Context, CudaError, DEFAULT_LIBRARY, Driver, LoadError};
use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::struct_wrappers::device::MemoryInfo;

use crate::clock::{Stopwatch, wall_now};
use crate::model::{ProbeFailure, ProbeFailureKind, ProbeReading};

use super::search::{MAX_ATTEMPTS, SearchLimits, TrialAllocator, median, search_headroom};

/// What `vramd probe` was asked to measure.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeArgs {
    pub device_uuid: String,
    pub block_bytes: u64,
    pub samples: u32,
    pub margin_bytes: u64,
    /// Search for the largest block, stopping after this.
    pub headroom_time_budget: Option<Duration>,
    pub cuda_library: Option<PathBuf>,
    pub nvml_library: Option<PathBuf>,
    /// Longest wait for `nvmlInit` (it can take seconds with persistence
    /// mode off, or hang); beyond it the probe goes on without NVML's
    /// comparison values.
    pub nvml_timeout: Duration,
}

/// A driver call's error as a probe failure of `kind`.
trait OrFail<T> {
    fn or_fail(self, kind: ProbeFailureKind) -> Result<T, ProbeFailure>;
}

impl<T, E: std::fmt::Display> OrFail<T> for Result<T, E> {
    fn or_fail(self, kind: ProbeFailureKind) -> Result<T, ProbeFailure> {
        self.map_err(|error| ProbeFailure::new(kind, error.to_string()))
    }
}

/// Runs the probe once. Blocking; meant for the `vramd probe` process.
pub fn run(args: &ProbeArgs) -> Result<ProbeReading, ProbeFailure> {
    let stopwatch = Stopwatch::start();
    let library = args.cuda_library.as_deref().map_or(OsStr::new(DEFAULT_LIBRARY), Path::as_os_str);
    let driver = Driver::load(library).map_err(|error| {
        let kind = match error {
            LoadError::Library { .. } => ProbeFailureKind::LibraryMissing,
            LoadError::Symbol { .. } => ProbeFailureKind::SymbolMissing,
        };
        ProbeFailure::new(kind, error.to_string())
    })?;
    driver.init().or_fail(ProbeFailureKind::InitFailed)?;
    let device = find_device(&driver, &args.device_uuid)?;
    // NVML only once the driver is known to be usable: a host without
    // CUDA never pays for initialising it.
    let nvml = NvmlView::open(args);
    let used_before = nvml.as_ref().and_then(|view| view.memory()).map(|memory| memory.used);

    let creating = Stopwatch::start();
    let context = driver.create_context(device).or_fail(ProbeFailureKind::ContextFailed)?;
    let context_create_seconds = creating.elapsed().as_secs_f64();

    let memory = context.memory_info().or_fail(ProbeFailureKind::ContextFailed)?;
    let at = wall_now();
    // One NVML read for both the comparison and the context's cost.
    let during = nvml.as_ref().and_then(|view| view.memory());
    let nvml_free_bytes = during.as_ref().map(|memory| memory.free);
    let context_bytes = nvml.as_ref().and_then(|view| {
        view.own_process_bytes().or_else(|| {
            let during = during.as_ref()?.used;
            during.checked_sub(used_before?).filter(|bytes| *bytes > 0)
        })
    });

    let (alloc_latency, free_latency, alloc_samples) =
        time_pairs(&context, memory.free_bytes, args).or_fail(ProbeFailureKind::AllocFailed)?;
    let headroom = args
        .headroom_time_budget
        .map(|time_budget| {
            let limits = SearchLimits {
                margin_bytes: args.margin_bytes,
                time_budget,
                max_attempts: MAX_ATTEMPTS,
            };
            let searching = Stopwatch::start();
            search_headroom(&mut Trials(&context), &limits, &|| searching.elapsed())
        })
        .transpose()
        .or_fail(ProbeFailureKind::AllocFailed)?;
    if let Err(error) = context.destroy() {
        // Exiting releases the context anyway; the measurements stand.
        eprintln!("vramd probe: {error}");
    }
    Ok(ProbeReading {
        at,
        cuda_free_bytes: memory.free_bytes,
        cuda_total_bytes: memory.total_bytes,
        nvml_free_bytes,
        context_create_seconds,
        context_bytes,
        alloc_block_bytes: args.block_bytes,
        alloc_latency_seconds: alloc_latency,
        free_latency_seconds: free_latency,
        alloc_samples,
        headroom,
        duration_seconds: stopwatch.elapsed().as_secs_f64(),
    })
}

/// The CUDA device whose UUID is `uuid` (`GPU-…` or `MIG-…`).
fn find_device(driver: &Driver, uuid: &str) -> Result<cuda_driver::Device, ProbeFailure> {
    let count = driver.device_count().or_fail(ProbeFailureKind::InitFailed)?;
    let Some(wanted) = cuda_driver::parse_uuid(uuid) else {
        // Drivers before R470 name MIG devices `MIG-GPU-<uuid>/<gi>/<ci>`,
        // which carry no 16-byte UUID. The daemon starts the probe with
        // CUDA_VISIBLE_DEVICES set to exactly that name, so the one device
        // CUDA then shows is the one meant.
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
        if count == 1 && visible == uuid {
            return driver.device(0).or_fail(ProbeFailureKind::InitFailed);
        }
        return Err(ProbeFailure::new(
            ProbeFailureKind::DeviceNotFound,
            format!(
                "{uuid:?} is not a GPU-… or MIG-… UUID, and CUDA_VISIBLE_DEVICES does not select it alone"
            ),
        ));
    };
    let mut seen = Vec::new();
    for ordinal in 0..count {
        let device = driver.device(ordinal).or_fail(ProbeFailureKind::InitFailed)?;
        let bytes = driver.device_uuid(device).or_fail(ProbeFailureKind::InitFailed)?;
        if bytes == wanted {
            return Ok(device);
        }
        if seen.len() < 8 {
            seen.push(cuda_driver::format_uuid("GPU", &bytes));
        }
    }
    Err(ProbeFailure::new(
        ProbeFailureKind::DeviceNotFound,
        format!("no CUDA device has UUID {uuid}; CUDA sees {count}: {}", seen.join(", ")),
    ))
}

/// Times `args.samples` allocations and releases of the block, when it
/// fits above the margin: (median alloc, median free, pairs timed).
fn time_pairs(
    context: &Context<'_>,
    free: u64,
    args: &ProbeArgs,
) -> Result<(Option<f64>, Option<f64>, u32), CudaError> {
    if free.saturating_sub(args.margin_bytes) < args.block_bytes {
        return Ok((None, None, 0));
    }
    let mut allocs = Vec::with_capacity(args.samples as usize);
    let mut frees = Vec::with_capacity(args.samples as usize);
    for _ in 0..args.samples {
        let timing = Stopwatch::start();
        let block = context.allocate(args.block_bytes)?;
        allocs.push(timing.elapsed().as_secs_f64());
        let timing = Stopwatch::start();
        block.free()?;
        frees.push(timing.elapsed().as_secs_f64());
    }
    Ok((median(&mut allocs), median(&mut frees), args.samples))
}

/// The headroom search's view of a context.
struct Trials<'a, 'd>(&'a Context<'d>);

impl TrialAllocator for Trials<'_, '_> {
    type Error = CudaError;

    fn free_bytes(&mut self) -> Result<u64, CudaError> {
        Ok(self.0.memory_info()?.free_bytes)
    }

    fn try_block(&mut self, bytes: u64) -> Result<bool, CudaError> {
        match self.0.allocate(bytes) {
            Ok(block) => block.free().map(|()| true),
            Err(error) if error.is_out_of_memory() => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// NVML, opened by the probe for its own comparison readings.
struct NvmlView {
    nvml: Nvml,
    uuid: String,
}

impl NvmlView {
    /// Initialises NVML on a thread of its own, waiting at most
    /// `args.nvml_timeout`: a hung `nvmlInit` (seen on some drivers)
    /// costs the comparison values, never the CUDA measurements. A thread
    /// left behind ends with the process.
    fn open(args: &ProbeArgs) -> Option<Self> {
        let library = args.nvml_library.clone();
        let (sender, receiver) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("probe-nvml-init".into()).spawn(move || {
            let mut builder = Nvml::builder();
            if let Some(path) = &library {
                builder.lib_path(path.as_os_str());
            }
            let _ = sender.send(builder.init());
        });
        let outcome = match spawned {
            Ok(_) => match receiver.recv_timeout(args.nvml_timeout) {
                Ok(init) => init.map_err(|error| error.to_string()),
                Err(_) => Err(format!("nvmlInit did not return within {:?}", args.nvml_timeout)),
            },
            Err(error) => Err(format!("cannot start a thread for nvmlInit: {error}")),
        };
        outcome
            .map(|nvml| Self { nvml, uuid: args.device_uuid.clone() })
            .inspect_err(|reason| {
                eprintln!("vramd probe: NVML unavailable, comparison values left out: {reason}");
            })
            .ok()
    }

    fn memory(&self) -> Option<MemoryInfo> {
        self.nvml.device_by_uuid(self.uuid.as_str()).ok()?.memory_info().ok()
    }

    /// What NVML attributes to this process: exactly the context's cost,
    /// when the probe can see its own PID (not in a container without
    /// the host's PID namespace).
    fn own_process_bytes(&self) -> Option<u64> {
        let pid = std::process::id();
        let device = self.nvml.device_by_uuid(self.uuid.as_str()).ok()?;
        let processes = device.running_compute_processes().ok()?;
        match processes.into_iter().find(|process| process.pid == pid)?.used_gpu_memory {
            UsedGpuMemory::Used(bytes) => Some(bytes),
            UsedGpuMemory::Unavailable => None,
        }
    }
}
