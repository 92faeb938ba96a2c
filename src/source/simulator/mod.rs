//! Simulated devices playing scripted, deterministic scenarios.
//!
//! Owns: the [`Simulator`] device source, its spec and errors, and (in the
//! submodules) the device models, the noise, and every scenario's dynamics.
//! Depends on: `model`, `clock` and `source` only; never on history,
//! analysis, alerts or HTTP.
//!
//! A reading is a pure function of `(spec, device index, scenario time)`,
//! where scenario time is `at − origin` (times before the origin read as the
//! origin). Noise is a hash of `(seed, stream, device, slot, time step)`, so
//! the same question always gets the same answer, in any call order. Memory
//! noise changes once per second and is shared by both tiers, so the fast
//! tier's `used` always covers the slow tier's processes at the same instant.
//! Utilization noise changes every 250 ms, temperature and power every 5 s.
//!
//! Every reading satisfies, at every instant: `total = reserved + used +
//! free` exactly; `Σ process used ≤ used ≤ total`; per PyTorch process
//! `allocated ≤ reserved ≤ process used`, `active ≤ reserved`,
//! `inactive_split ≤ reserved − allocated`; `alloc_retries` and `ooms` never
//! decrease for a PID. `used` is the processes plus 2–6 MiB unattributed.
//!
//! # Devices
//!
//! A host is homogeneous. `steady-inference` runs on NVIDIA H200 (143771 MiB,
//! 575 MiB driver reserved, 700 W), `multi-tenant` on NVIDIA A100-SXM4-40GB
//! (40960 MiB, 336 MiB reserved, 400 W), every other scenario on NVIDIA H100
//! 80GB HBM3 (81559 MiB, 543 MiB reserved, 700 W). UUIDs derive from seed and
//! index, PCI bus ids follow the model's 8-GPU baseboard, the driver is
//! 570.124.06. "Capacity" below is `total − driver reserved`.
//!
//! # Scenarios (times since the origin; constants in [`timeline`])
//!
//! - **steady-inference**: every GPU runs one PyTorch inference server
//!   (`python3`: reserved 58 % of capacity, allocated 55 % ± 0.4 %); odd GPUs
//!   also a flat 3 GiB `tritonserver`. Device memory is flat within a few
//!   MiB, utilization ≈ 0.55. Nothing trends, nothing is under pressure.
//! - **training-fragmentation**: GPU 0 runs `pt_main_thread` in 20-minute
//!   cycles; other GPUs run steady training ranks (reserved 70 %, allocated
//!   62 % ± 2 %). In each cycle on GPU 0:
//!   - 0:00–12:00: allocated flat at 64 % ± 0.5 % of capacity; reserved
//!     steps up every 30 s from 70 % of capacity to a ceiling leaving
//!     ≈ 0.8 % of total free (≈ 1.8 GiB/min on H100); 85 % of the cache is
//!     `inactive_split`. Free drops below 5 % of total at ≈ 10 min.
//!   - 12:00–20:00: reserved hovers at the ceiling (≤ 256 MiB dips);
//!     `alloc_retries` grows by 0–3 per second, faster as the window goes
//!     on (hundreds per cycle); utilization drops to ≈ 0.78.
//!   - 20:00: an OOM (`ooms` 0 → 1); the job's handler calls
//!     `empty_cache()` and the same process starts the next cycle from 70 %.
//!     Repeats: OOMs at 20:00, 40:00, 60:00, …; retries keep accumulating.
//! - **leak**: GPU 0's `python3` holds allocated 6 GiB (+1.5 GiB cache)
//!   until 2:00, then allocated and reserved grow linearly at 40 MiB/s until
//!   free memory is down to ≈ 256 MiB (≈ 32 min on H100), where they
//!   saturate. No retries or OOMs. Other GPUs: steady inference.
//! - **oom-spike**: every GPU runs a steady training rank. On GPU 0 at 10:00
//!   reserved jumps so that driver reserved + used = 98 % of total, for 4 s;
//!   at 10:02 `alloc_retries` and `ooms` go 0 → 1; from 10:04 everything is
//!   exactly as before. Flat before and after.
//! - **multi-tenant**: each GPU has 3–6 processes (count fixed per seed and
//!   GPU): slot 0 `python3` (PyTorch, allocated 5 GiB), then cycling
//!   `tritonserver` 3 GiB (opaque), `pt_main_thread` (PyTorch, 3.5/5 GiB),
//!   `python3` (PyTorch, 2/2.5 GiB), `ffmpeg` 420 MiB (opaque),
//!   `tritonserver` 1.5 GiB (opaque). On GPU 0 slot 0 grows at 5 MiB/s
//!   from 1:00 until 512 MiB would be left free (not before ≈ 60 min).
//! - **device-lost**: steady inference (as `steady-inference`, on H100); at
//!   5:00 the last GPU (index `gpus − 1`) is lost: both tiers return
//!   [`SourceError::DeviceLost`] for it from then on. `devices()` still lists
//!   it. Other GPUs are unaffected.
//! - **idle**: no processes, 2–6 MiB used, utilization exactly 0.

// `devices` and `noise` are public for the detection corpus
// (`crates/corpus`, a dev-only crate), which plays the same device table and
// hash rather than copies; only the items it uses are `pub`.
pub mod devices;
mod leak;
mod names;
pub mod noise;
mod probe;
mod process;
mod spike;
mod tenants;
pub mod timeline;
mod training;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_scenarios;

pub use crate::model::{ScenarioKind, UnknownScenario};

use std::sync::Arc;

use crate::clock::ScaledClock;
use crate::model::{DeviceInfo, FastReading, MemoryInfo, SlowDetails, SlowReading, Timestamp};
use crate::source::{DeviceSource, SourceError};
use devices::GpuModel;
use noise::Stream;
use process::Gpu;

/// 2026-01-01T00:00:00Z: the origin tests and golden files use.
pub const GOLDEN_ORIGIN: Timestamp = Timestamp::from_unix_millis(1_767_225_600_000);

/// The most GPUs one simulated host has (an 8-GPU baseboard).
pub const MAX_GPUS: u32 = 8;

/// What to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimulatorSpec {
    pub scenario: ScenarioKind,
    /// Number of GPUs, 1–[`MAX_GPUS`].
    pub gpus: u32,
    /// Seeds every bit of noise and every identifier (UUIDs, PIDs).
    pub seed: u64,
}

/// Why a [`SimulatorSpec`] was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimulatorError {
    #[error("the simulator needs 1 to {MAX_GPUS} GPUs, got {gpus}")]
    InvalidGpuCount { gpus: u32 },
}

/// A [`DeviceSource`] whose devices play a [`ScenarioKind`].
#[derive(Clone, Debug)]
pub struct Simulator {
    spec: SimulatorSpec,
    model: &'static GpuModel,
    clock: ScaledClock,
    origin: Timestamp,
    /// When set, `read_slow` leaves allocator statistics out: the
    /// simulated workloads deliver them as allocator reports instead
    /// (`report_documents`), through the same path as real ones.
    reports_allocator: bool,
    /// When set, each process carries a container ID derived from its
    /// device and PID, as NVML's processes do from `/proc/PID/cgroup`.
    container_ids: bool,
    /// Shared by clones: the strings every slow sample repeats, made once.
    names: Arc<names::Names>,
}

const UTILIZATION_STEP_MS: u64 = 250;
const THERMAL_STEP_MS: u64 = 5_000;
const LOST_REASON: &str = "GPU has fallen off the bus (simulated Xid 79)";

impl Simulator {
    /// A simulator whose scenario starts at `origin`.
    pub fn with_origin(
        spec: SimulatorSpec,
        clock: ScaledClock,
        origin: Timestamp,
    ) -> Result<Self, SimulatorError> {
        if spec.gpus == 0 || spec.gpus > MAX_GPUS {
            return Err(SimulatorError::InvalidGpuCount { gpus: spec.gpus });
        }
        Ok(Self {
            spec,
            model: devices::model_for(spec.scenario),
            clock,
            origin,
            reports_allocator: false,
            container_ids: false,
            names: Arc::default(),
        })
    }

    /// The fast tier of device `index` at `at`. Pure and deterministic.
    pub fn fast_at(&self, index: u32, at: Timestamp) -> Result<FastReading, SourceError> {
        let gpu = self.live_gpu(index, at)?;
        let workload = timeline::workload(self.spec.scenario, &gpu);
        let processes_used =
            workload.processes.iter().fold(0u64, |sum, p| sum.saturating_add(p.used_bytes));
        let step = gpu.t_ms / UTILIZATION_STEP_MS;
        let utilization =
            noisy_ratio(workload.load, 0.08, gpu.noise(Stream::GpuUtilization, 0, step));
        let bandwidth = noisy_ratio(
            workload.load * 0.6,
            0.06,
            gpu.noise(Stream::BandwidthUtilization, 0, step),
        );
        Ok(FastReading {
            at,
            memory: Some(memory_info(&gpu, processes_used)),
            gpu_utilization: Some(utilization),
            memory_bandwidth_utilization: Some(bandwidth),
        })
    }

    /// The slow tier of device `index` at `at`. Pure and deterministic.
    pub fn slow_at(&self, index: u32, at: Timestamp) -> Result<SlowReading, SourceError> {
        let gpu = self.live_gpu(index, at)?;
        let workload = timeline::workload(self.spec.scenario, &gpu);
        let step = gpu.t_ms / THERMAL_STEP_MS;
        let limit = self.model.power_limit_watts;
        let idle = self.model.idle_power_watts;
        let power = idle
            + (limit * 0.88 - idle) * workload.load
            + 0.02 * limit * gpu.noise(Stream::Power, 0, step);
        let temperature =
            31.0 + 38.0 * workload.load + 1.5 * gpu.noise(Stream::Temperature, 0, step);
        // The work is shared evenly: nvitop-style per-process ratios that
        // add up to the device's load.
        let share = workload.load / workload.processes.len().max(1) as f64;
        let percent = |ratio: f64| (ratio * 100.0).round().clamp(0.0, 100.0) as u32;
        let processes = workload
            .processes
            .iter()
            .map(|p| {
                let mut info = p.to_info(self.names.name(p.name));
                info.details.sm_utilization_percent = Some(percent(share));
                info.details.memory_utilization_percent = Some(percent(share * 0.6));
                info
            })
            .collect();
        // A counter must never go back: integrate a constant mean draw from
        // an arbitrary earlier driver load (one kWh per GPU index + 1).
        let mean_watts = idle + (limit * 0.88 - idle) * 0.5;
        let energy =
            3_600_000_000 * (u64::from(index) + 1) + (mean_watts * gpu.t_ms as f64).round() as u64;
        Ok(SlowReading {
            allocations: None,
            processes_left_out: 0,
            at,
            processes: Some(processes),
            temperature_celsius: Some(temperature),
            power_usage_watts: Some(power.clamp(0.0, limit)),
            power_limit_watts: Some(limit),
            details: SlowDetails {
                energy_millijoules: Some(energy),
                // P0 while working, P8 (the usual idle state) otherwise.
                performance_state: Some(if workload.load > 0.0 { 0 } else { 8 }),
                // Training and inference use no video engines.
                encoder_utilization_percent: Some(0),
                decoder_utilization_percent: Some(0),
                ..SlowDetails::default()
            },
        })
    }

    /// The device at `index` and `at`, or why it cannot be read.
    fn live_gpu(&self, index: u32, at: Timestamp) -> Result<Gpu, SourceError> {
        if index >= self.spec.gpus {
            return Err(SourceError::UnknownDevice { index });
        }
        let t_ms = at
            .duration_since(self.origin)
            .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
        let gpu =
            Gpu { seed: self.spec.seed, index, gpus: self.spec.gpus, model: self.model, t_ms };
        if timeline::is_lost(self.spec.scenario, &gpu) {
            return Err(SourceError::DeviceLost { index, reason: LOST_REASON.to_owned() });
        }
        Ok(gpu)
    }

    /// Makes the simulated PyTorch processes report their allocator
    /// statistics as documents (see [`Simulator::report_documents`]) rather
    /// than through the device readings.
    pub fn reporting_allocator(mut self) -> Self {
        self.reports_allocator = true;
        self
    }

    /// Gives every simulated process the container ID
    /// [`container_id`] derives, so Kubernetes attribution can be tested
    /// against a simulated host (`simulator.container_ids`).
    pub fn with_container_ids(mut self) -> Self {
        self.container_ids = true;
        self
    }

    /// The allocator report documents (version 1, as `vramd_reporter`
    /// sends them) of every simulated process with allocator statistics,
    /// at the clock's current time.
    pub fn report_documents(&self) -> Vec<serde_json::Value> {
        let at = self.clock.now();
        let mut documents = Vec::new();
        for index in 0..self.spec.gpus {
            let Ok(reading) = self.slow_at(index, at) else { continue };
            let uuid = devices::device_info(self.model, self.spec.seed, index).uuid;
            for process in reading.processes.iter().flatten() {
                let Some(stats) = process.allocator else { continue };
                documents.push(serde_json::json!({
                    "version": 1,
                    "reporter": { "pid": process.pid, "hostname": "simulated" },
                    "at": at.to_rfc3339(),
                    "devices": [ {
                        "uuid": uuid,
                        "index": index,
                        "memory_stats": {
                            "allocated_bytes.all.current": stats.allocated_bytes,
                            "reserved_bytes.all.current": stats.reserved_bytes,
                            "active_bytes.all.current": stats.active_bytes,
                            "inactive_split_bytes.all.current": stats.inactive_split_bytes,
                            "num_alloc_retries": stats.alloc_retries,
                            "num_ooms": stats.ooms,
                        },
                    } ],
                }));
            }
        }
        documents
    }
}

/// NVML v2 accounting: the driver's share, the processes plus a little
/// unattributed memory, and the rest free, summing exactly to total.
fn memory_info(gpu: &Gpu, processes_used: u64) -> MemoryInfo {
    let capacity = gpu.capacity();
    // Scenarios leave room for the largest unattributed share; trimming it
    // here keeps the sum exact even if one did not.
    let unattributed = gpu.unattributed().min(capacity.saturating_sub(processes_used));
    let used = processes_used.saturating_add(unattributed);
    MemoryInfo {
        total_bytes: gpu.model.total_bytes,
        reserved_bytes: Some(gpu.model.driver_reserved_bytes),
        used_bytes: used,
        free_bytes: capacity.saturating_sub(used),
    }
}

/// `mean` moved by `amplitude × s`, clamped to 0–1; an idle device (mean 0)
/// reads exactly 0 rather than noise around it.
fn noisy_ratio(mean: f64, amplitude: f64, s: f64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    (mean + amplitude * s).clamp(0.0, 1.0)
}

impl DeviceSource for Simulator {
    fn name(&self) -> &'static str {
        "simulator"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        Ok((0..self.spec.gpus)
            .map(|index| devices::device_info(self.model, self.spec.seed, index))
            .collect())
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        self.fast_at(index, self.clock.now())
    }

    fn read_slow(&self, index: u32, max_processes: usize) -> Result<SlowReading, SourceError> {
        let mut reading = self.slow_at(index, self.clock.now())?;
        // Before the container IDs: those are per-process work.
        reading.cap_processes(max_processes);
        let processes = reading.processes.as_deref_mut().unwrap_or_default();
        if self.reports_allocator {
            for process in processes.iter_mut() {
                process.allocator = None;
            }
        }
        if self.container_ids {
            let pids = processes.iter().map(|process| process.pid);
            let ids = self.names.container_ids(index, pids, |pid| container_id(index, pid));
            for (process, id) in processes.iter_mut().zip(ids) {
                process.details.container_id = Some(id);
            }
        }
        Ok(reading)
    }
}

/// The container ID a simulated process on device `index` carries with
/// [`Simulator::with_container_ids`]: 64 lowercase hex digits, as
/// `/proc/PID/cgroup` gives them, the same for the same device and PID.
pub fn container_id(index: u32, pid: u32) -> String {
    let word = (u64::from(index) << 32 | u64::from(pid)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!("{word:016x}").repeat(4)
}
