//! The scenario file: what the fake driver reports and which faults it injects.
//!
//! Read once per `nvmlInit` (the first one; later ones only count references)
//! from the path in `FAKE_NVML_SCENARIO`, or from the path set through
//! `fake_nvml_set_scenario_path`. Unknown keys are errors, so a typo in a test
//! scenario fails loudly instead of silently reporting a default. The format
//! is documented, with a full example, in this crate's README.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::codes::ErrorCode;

mod load;
mod validate;

pub use load::{load, load_configured, set_path_override};
pub use validate::parse_bus_id;

/// The environment variable that names the scenario file.
pub const SCENARIO_ENV: &str = "FAKE_NVML_SCENARIO";

/// Most devices one scenario may describe (handles encode the index in 8 bits).
pub const MAX_DEVICES: usize = 64;
/// Most MIG devices per GPU.
pub const MAX_MIG_DEVICES: usize = 64;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    #[serde(default = "default_nvml_version")]
    pub nvml_version: String,
    #[serde(default = "default_cuda_driver_version")]
    pub cuda_driver_version: i32,
    #[serde(default)]
    pub init: InitSpec,
    /// Faults for calls that take no device (driver version, device count, …).
    /// `gpu_lost_after_calls`/`recover_after_calls` are not allowed here.
    #[serde(default)]
    pub system_faults: Faults,
    #[serde(default)]
    pub devices: Vec<DeviceSpec>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitSpec {
    /// `nvmlInit*` returns this error (after sleeping, when `sleep_ms` is set).
    pub fail: Option<ErrorCode>,
    /// `nvmlInit*` sleeps this long first (a slow or hanging driver).
    #[serde(default)]
    pub sleep_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Defaults to `GPU-00000000-0000-0000-0000-0000000000NN` (NN = index).
    pub uuid: Option<String>,
    #[serde(default = "default_name")]
    pub name: String,
    /// `DDDDDDDD:BB:DD.F`, hex. Defaults to `00000000:NN:00.0` (NN = 0x17 + index).
    pub pci_bus_id: Option<String>,
    #[serde(default = "default_pci_device_id")]
    pub pci_device_id: u32,
    #[serde(default = "default_pci_subsystem_id")]
    pub pci_subsystem_id: u32,
    /// Absent: the memory queries return NOT_SUPPORTED.
    pub memory: Option<MemorySpec>,
    pub utilization: Option<UtilizationSpec>,
    #[serde(default)]
    pub processes: ProcessesSpec,
    pub temperature_c: Option<u32>,
    pub power_usage_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
    #[serde(default)]
    pub clocks: ClocksSpec,
    /// `nvmlClocksThrottleReason*` / `nvmlClocksEventReason*` bitmask.
    pub throttle_reasons: Option<u64>,
    pub ecc: Option<EccSpec>,
    pub retired_pages: Option<RetiredPagesSpec>,
    pub remapped_rows: Option<RemappedRowsSpec>,
    pub persistence_mode: Option<bool>,
    pub compute_mode: Option<ComputeMode>,
    pub bar1: Option<Bar1Spec>,
    pub pcie_throughput: Option<PcieSpec>,
    /// Energy counter at `nvmlInit`, in mJ; it then grows by
    /// `power_usage_mw` (or 0) per second, as a real counter would.
    pub energy_mj: Option<u64>,
    /// 0..=15 for P0..P15, 32 for NVML_PSTATE_UNKNOWN.
    pub performance_state: Option<u32>,
    /// Percent, 0..=100.
    pub encoder_utilization: Option<u32>,
    pub decoder_utilization: Option<u32>,
    pub mig: Option<MigSpec>,
    /// Bitmask of `nvmlEventType*`; defaults to every type the bindings know.
    pub supported_event_types: Option<u64>,
    #[serde(default)]
    pub xid_events: Vec<XidEvent>,
    #[serde(default)]
    pub faults: Faults,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    pub total_bytes: u64,
    /// Driver-reserved memory (v2 only; v1 counts it as used).
    #[serde(default)]
    pub reserved_bytes: u64,
    /// Used memory at `nvmlInit`.
    #[serde(default)]
    pub used_bytes: u64,
    /// Change of `used` per second since `nvmlInit` (may be negative).
    #[serde(default)]
    pub growth_bytes_per_second: f64,
    /// When not empty, the `n`th call to a memory query on this device (v1
    /// and v2 counted separately) reports `used_bytes_per_call[n]`; the last
    /// value repeats. Overrides `used_bytes`/`growth_bytes_per_second`.
    #[serde(default)]
    pub used_bytes_per_call: Vec<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilizationSpec {
    pub gpu: u32,
    pub memory: u32,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessesSpec {
    #[serde(default)]
    pub compute: Vec<ProcessSpec>,
    #[serde(default)]
    pub graphics: Vec<ProcessSpec>,
    #[serde(default)]
    pub mps: Vec<ProcessSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub pid: u32,
    pub used_bytes: UsedBytes,
    /// Defaults to "not available" (0xFFFFFFFF); a MIG device's own lists
    /// default to that MIG device's ids.
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
    /// Per-process utilization samples (`nvmlDeviceGetProcessUtilization`)
    /// while the process is listed; absent: the process has no sample.
    pub utilization: Option<ProcessUtilizationSpec>,
    /// Listed only from this many ms after `nvmlInit` …
    #[serde(default)]
    pub after_ms: u64,
    /// … and only until this many ms after it.
    pub until_ms: Option<u64>,
    /// When set, the usage moves from call to call, as an allocator's
    /// does: `used_bytes` plus a pseudo-random 0..32 steps of this many
    /// bytes, drawn from the process and the millisecond of the call.
    pub moving_step_bytes: Option<u64>,
}

/// Percentages of one process's utilization samples.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessUtilizationSpec {
    pub sm: u32,
    pub memory: u32,
    #[serde(default)]
    pub encoder: u32,
    #[serde(default)]
    pub decoder: u32,
}

/// A process's memory: bytes, or `"unavailable"` (NVML_VALUE_NOT_AVAILABLE).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub enum UsedBytes {
    Bytes(u64),
    Unavailable(Unavailable),
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub enum Unavailable {
    #[serde(rename = "unavailable")]
    Unavailable,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClocksSpec {
    pub graphics_mhz: Option<u32>,
    pub sm_mhz: Option<u32>,
    pub memory_mhz: Option<u32>,
    pub video_mhz: Option<u32>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EccSpec {
    pub enabled: bool,
    /// Mode after the next reboot; defaults to `enabled`.
    pub pending: Option<bool>,
    #[serde(default)]
    pub volatile_corrected: u64,
    #[serde(default)]
    pub volatile_uncorrected: u64,
    #[serde(default)]
    pub aggregate_corrected: u64,
    #[serde(default)]
    pub aggregate_uncorrected: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredPagesSpec {
    #[serde(default)]
    pub multiple_single_bit: Vec<RetiredPage>,
    #[serde(default)]
    pub double_bit: Vec<RetiredPage>,
    #[serde(default)]
    pub pending: bool,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredPage {
    pub address: u64,
    #[serde(default)]
    pub timestamp: u64,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemappedRowsSpec {
    #[serde(default)]
    pub correctable: u32,
    #[serde(default)]
    pub uncorrectable: u32,
    #[serde(default)]
    pub pending: bool,
    #[serde(default)]
    pub failure: bool,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bar1Spec {
    pub total_bytes: u64,
    #[serde(default)]
    pub used_bytes: u64,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieSpec {
    pub tx_kbps: u32,
    pub rx_kbps: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    pub enabled: bool,
    /// Mode after the next reset; defaults to `enabled`.
    pub pending: Option<bool>,
    #[serde(default = "default_max_mig")]
    pub max_devices: u32,
    #[serde(default)]
    pub devices: Vec<MigDeviceSpec>,
    /// A second layout that replaces `devices` while a trigger file exists,
    /// so a test can reconfigure MIG under a running daemon.
    pub reconfigured: Option<MigReconfigSpec>,
}

/// The layout a MIG GPU switches to while `when_file_exists` exists.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigReconfigSpec {
    pub when_file_exists: std::path::PathBuf,
    #[serde(default)]
    pub devices: Vec<MigDeviceSpec>,
}

impl MigSpec {
    /// The MIG devices as laid out now: the reconfigured layout while its
    /// trigger file exists (checked on every call, so a test flips it by
    /// creating the file), otherwise `devices`.
    pub fn current(&self) -> &[MigDeviceSpec] {
        match &self.reconfigured {
            Some(next) if next.when_file_exists.exists() => &next.devices,
            _ => &self.devices,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigDeviceSpec {
    /// `MIG-…`.
    pub uuid: String,
    /// Defaults to `<parent name> MIG <profile>`.
    pub name: Option<String>,
    pub gpu_instance_id: u32,
    #[serde(default)]
    pub compute_instance_id: u32,
    /// Documentation only, e.g. `1g.10gb`.
    pub profile: Option<String>,
    pub memory: Option<MemorySpec>,
    #[serde(default)]
    pub processes: ProcessesSpec,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidEvent {
    /// Due this many ms after `nvmlInit`.
    pub after_ms: u64,
    pub xid: u64,
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}

/// Injected faults, keyed by exported function name (e.g. `nvmlDeviceGetPowerUsage`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    #[serde(default)]
    pub not_supported: Vec<String>,
    /// Calls number N+1, N+2, … on this device (and its MIG devices) return GPU_IS_LOST.
    pub gpu_lost_after_calls: Option<u64>,
    /// … until this many calls later; then the device answers again.
    pub recover_after_calls: Option<u64>,
    #[serde(default)]
    pub sleep_ms: BTreeMap<String, u64>,
    #[serde(default)]
    pub fail: BTreeMap<String, ErrorCode>,
    /// Test-only: the function panics (the boundary must turn it into UNKNOWN).
    #[serde(default)]
    pub panic_in: Vec<String>,
}

impl DeviceSpec {
    pub fn uuid(&self, index: usize) -> String {
        self.uuid.clone().unwrap_or_else(|| format!("GPU-00000000-0000-0000-0000-{index:012}"))
    }

    pub fn pci_bus_id(&self, index: usize) -> String {
        self.pci_bus_id.clone().unwrap_or_else(|| format!("00000000:{:02X}:00.0", 0x17 + index))
    }
}

fn default_driver_version() -> String {
    "570.133.20".into()
}
fn default_nvml_version() -> String {
    "12.570.133.20".into()
}
fn default_cuda_driver_version() -> i32 {
    12080
}
fn default_name() -> String {
    "NVIDIA H100 80GB HBM3".into()
}
fn default_pci_device_id() -> u32 {
    0x2330_10DE
}
fn default_pci_subsystem_id() -> u32 {
    0x16C1_10DE
}
fn default_max_mig() -> u32 {
    7
}

#[cfg(test)]
mod tests;
