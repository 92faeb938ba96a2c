//! What a device is and what its two sampling tiers read: device facts
//! (MIG placement included), memory info, fast and slow readings and the
//! slow tier's health details, each checked when read from input (parts
//! against the total, ratios 0..1, percentages 0..100).
//!
//! Depends only on `model`'s own time and process types.

use serde::{Deserialize, Serialize};
use strum::IntoStaticStr;

use super::{ProcessInfo, SharedStr, Timestamp};

/// Static facts about one monitored device.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Index as the driver enumerates it (`nvidia-smi -i`).
    pub index: u32,
    pub uuid: String,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    pub pci_bus_id: Option<String>,
    pub driver_version: Option<String>,
    /// Set when this is a MIG device: its parent GPU and profile.
    pub mig: Option<MigInfo>,
}

impl DeviceInfo {
    /// The `gpu` label and REST `gpu` field: the physical GPU's index, so a
    /// MIG device sorts under its parent (its own identity is the UUID).
    pub fn gpu_index(&self) -> u32 {
        self.mig.as_ref().map_or(self.index, |mig| mig.parent_index)
    }
}

/// Where a MIG device sits.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MigInfo {
    pub parent_index: u32,
    pub parent_uuid: String,
    /// Position among the parent's MIG devices.
    pub slot: u32,
    /// GPU-instance profile, e.g. `3g.40gb`, when the name carries it.
    pub profile: Option<String>,
    /// The GPU instance this MIG device belongs to (`nvidia-smi`'s GI ID);
    /// absent when the driver cannot say.
    pub gpu_instance_id: Option<u32>,
    /// The compute instance within that GPU instance (CI ID).
    pub compute_instance_id: Option<u32>,
}

/// Device memory as NVML's memory info v2 reports it:
/// `total = reserved + used + free`, with `reserved` the driver's own share.
///
/// Read from input (a trace), no part may exceed the total: a reading that
/// says otherwise is refused rather than exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "UncheckedMemoryInfo")]
pub struct MemoryInfo {
    pub total_bytes: u64,
    /// Driver-reserved memory; absent where only memory info v1 is available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
    pub used_bytes: u64,
    pub free_bytes: u64,
}

/// [`MemoryInfo`] as written, before its parts are checked against its total.
#[derive(Deserialize)]
struct UncheckedMemoryInfo {
    total_bytes: u64,
    #[serde(default)]
    reserved_bytes: Option<u64>,
    used_bytes: u64,
    free_bytes: u64,
}

impl TryFrom<UncheckedMemoryInfo> for MemoryInfo {
    type Error = String;

    fn try_from(raw: UncheckedMemoryInfo) -> Result<Self, String> {
        let UncheckedMemoryInfo { total_bytes, reserved_bytes, used_bytes, free_bytes } = raw;
        let parts = [
            ("used_bytes", Some(used_bytes)),
            ("free_bytes", Some(free_bytes)),
            ("reserved_bytes", reserved_bytes),
        ];
        for (field, value) in parts {
            if let Some(value) = value
                && value > total_bytes
            {
                return Err(format!(
                    "memory.{field} ({value}) exceeds memory.total_bytes ({total_bytes})"
                ));
            }
        }
        Ok(MemoryInfo { total_bytes, reserved_bytes, used_bytes, free_bytes })
    }
}

/// An optional utilization fraction read from input: refused outside 0..=1
/// (NVML reports utilization in percent, so anything else is corrupt).
fn ratio<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    within(deserializer, 0.0, 1.0, "a utilization ratio")
}

/// What the fast tier reads: cheap calls, sampled several times a second.
// Unknown fields refused: a trace's misspelt field must not vanish
// (`source::trace` reads a recorded line straight into this type).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FastReading {
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryInfo>,
    /// Fraction of time a kernel was running, 0.0–1.0.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ratio")]
    pub gpu_utilization: Option<f64>,
    /// Fraction of time device memory was being read or written, 0.0–1.0.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ratio")]
    pub memory_bandwidth_utilization: Option<f64>,
}

/// What the slow tier reads: calls that are expensive or take driver locks.
// Unknown fields refused, as for `FastReading`.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowReading {
    pub at: Timestamp,
    /// Processes holding memory on the device; `None` when the list could
    /// not be read (an empty list means "read, and nobody is there").
    pub processes: Option<Vec<ProcessInfo>>,
    pub temperature_celsius: Option<f64>,
    pub power_usage_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    /// Everything else the slow tier reads (clocks, ECC, modes, …).
    #[serde(default, skip_serializing_if = "SlowDetails::is_empty")]
    pub details: SlowDetails,
    /// The Kubernetes containers the kubelet allocated this device to;
    /// `None` when the kubelet was not asked or did not answer (an empty
    /// list: it answered, and no pod holds the device).
    pub allocations: Option<Vec<PodAllocation>>,
    /// Processes the source listed but left out of `processes` under the
    /// per-device cap (`sampler.max_processes_per_device`): the source cuts
    /// before reading each process's identity and joining its reports, so
    /// the cap saves that work, and a trace records what was cut.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub processes_left_out: usize,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

/// One container the kubelet's pod-resources API lists as holding a device.
// Shared strings: every slow sample of the device carries the list, made
// once per kubelet answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PodAllocation {
    #[schema(value_type = String)]
    pub pod: SharedStr,
    #[schema(value_type = String)]
    pub namespace: SharedStr,
    #[schema(value_type = String)]
    pub container: SharedStr,
    /// The extended resource, e.g. `nvidia.com/gpu` or `nvidia.com/mig-1g.10gb`.
    #[schema(value_type = String)]
    pub resource: SharedStr,
    /// The `N` of a time-sliced or shared device ID `<id>::N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub replica: Option<SharedStr>,
    /// The `ResourceClaim` that holds the device, for a device allocated
    /// through Dynamic Resource Allocation (then `resource` is the DRA
    /// driver, e.g. `gpu.nvidia.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub claim: Option<SharedStr>,
    /// The claim's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub claim_namespace: Option<SharedStr>,
}

/// Device health and configuration read on the slow tier. Each field is
/// absent when the device or driver does not report it.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SlowDetails {
    pub bar1: Option<Bar1Memory>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    /// NVML clock throttle (event) reason bits currently active; see
    /// [`THROTTLE_REASONS`] for their names.
    pub throttle_reasons: Option<u64>,
    /// Present only while ECC is enabled on the device.
    pub ecc: Option<EccCounters>,
    pub retired_pages: Option<RetiredPages>,
    pub remapped_rows: Option<RemappedRows>,
    pub persistence_mode: Option<bool>,
    pub compute_mode: Option<ComputeMode>,
    /// Current MIG mode.
    pub mig_enabled: Option<bool>,
    /// PCIe throughput; read only when enabled in configuration.
    pub pcie_tx_bytes_per_second: Option<u64>,
    pub pcie_rx_bytes_per_second: Option<u64>,
    /// Energy used since the driver was last loaded, in millijoules
    /// (monotonic while the driver stays loaded).
    pub energy_millijoules: Option<u64>,
    /// Performance state, 0 (P0, most performance) to 15 (P15); absent
    /// when the driver reports it unknown.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "pstate")]
    pub performance_state: Option<u8>,
    /// Video encoder utilization over the driver's sampling period, 0–100.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "percent")]
    pub encoder_utilization_percent: Option<u32>,
    /// Video decoder utilization over the driver's sampling period, 0–100.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "percent")]
    pub decoder_utilization_percent: Option<u32>,
    /// When the latest Xid error of this device arrived (Unix milliseconds,
    /// vramd's clock); absent while none was seen since vramd started.
    #[schema(value_type = Option<i64>)]
    pub last_xid_unix_ms: Option<Timestamp>,
    /// Xid errors seen since vramd started, by code (`"79"`; `"other"` past
    /// the per-device bound). Empty when none were seen or Xid events are
    /// not watched.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub xid_errors: std::collections::BTreeMap<String, u64>,
    /// Whether the kubelet lists this device as one it could allocate to a
    /// pod (pod-resources `GetAllocatableResources`); absent off
    /// Kubernetes and where the kubelet does not offer that call.
    pub kubelet_allocatable: Option<bool>,
}

impl SlowReading {
    /// A reading of the process list alone, every health value absent: what
    /// the tests that follow processes build, in one place.
    #[cfg(test)]
    pub(crate) fn listing(at: Timestamp, processes: Option<Vec<ProcessInfo>>) -> Self {
        Self {
            at,
            processes,
            temperature_celsius: None,
            power_usage_watts: None,
            power_limit_watts: None,
            details: SlowDetails::default(),
            allocations: None,
            processes_left_out: 0,
        }
    }

    /// Keeps the `max` processes using the most memory (unknown usage last,
    /// [`ProcessInfo::cap_order`]), adds those left out to
    /// `processes_left_out` and returns how many this call left out: the
    /// one cap every source applies before its per-process work, and every
    /// replay again, so a replay keeps the processes the live daemon kept.
    pub fn cap_processes(&mut self, max: usize) -> usize {
        let dropped =
            self.processes.as_mut().map_or(0, |processes| keep_by_cap_order(processes, max));
        self.processes_left_out = self.processes_left_out.saturating_add(dropped);
        dropped
    }
}

/// Keeps the `max` first processes in [`ProcessInfo::cap_order`] (in that
/// order) and returns how many it left out. Selects before it sorts, so a
/// long list is not sorted whole to keep a few.
pub fn keep_by_cap_order(processes: &mut Vec<ProcessInfo>, max: usize) -> usize {
    keep_first_by(processes, max, ProcessInfo::cap_order)
}

/// Keeps the `max` first of `items` in `order` (in that order) and returns
/// how many it left out; a list within `max` keeps its own order. Selects
/// before it sorts, so a long list is not sorted whole to keep a few.
pub fn keep_first_by<T>(
    items: &mut Vec<T>,
    max: usize,
    mut order: impl FnMut(&T, &T) -> std::cmp::Ordering,
) -> usize {
    if items.len() <= max {
        return 0;
    }
    if max > 0 {
        items.select_nth_unstable_by(max - 1, &mut order);
    }
    let dropped = items.len() - max;
    items.truncate(max);
    items.sort_unstable_by(order);
    dropped
}

impl SlowDetails {
    pub fn is_empty(&self) -> bool {
        *self == SlowDetails::default()
    }
}

/// An optional percentage read from input: refused above 100.
pub(super) fn percent<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u32>, D::Error> {
    within(deserializer, 0, 100, "a utilization percentage")
}

/// An optional performance state read from input: refused above P15.
fn pstate<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u8>, D::Error> {
    within(deserializer, 0, 15, "a performance state")
}

/// An optional figure read from input, refused (NaN too) outside
/// `low..=high`, naming what it is.
fn within<'de, D, T>(deserializer: D, low: T, high: T, what: &str) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + PartialOrd + Copy + std::fmt::Display,
{
    let value = Option::<T>::deserialize(deserializer)?;
    match &value {
        Some(figure) if !(low..=high).contains(figure) => Err(serde::de::Error::custom(format!(
            "{what} must be within {low}..{high}, got {figure}"
        ))),
        _ => Ok(value),
    }
}

/// NVML clock throttle reason bits and their stable names.
pub const THROTTLE_REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Bar1Memory {
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
}

/// ECC error counts (all memory locations together).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EccCounters {
    /// Since the last driver reload.
    pub volatile_corrected: u64,
    pub volatile_uncorrected: u64,
    /// Over the life of the device.
    pub aggregate_corrected: u64,
    pub aggregate_uncorrected: u64,
}

/// Pages retired for ECC errors (pre-Ampere GPUs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetiredPages {
    pub single_bit_ecc: u64,
    pub double_bit_ecc: u64,
    /// A retirement waits for the next driver reload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<bool>,
}

/// Rows remapped for memory errors (Ampere and later).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RemappedRows {
    pub correctable: u64,
    pub uncorrectable: u64,
    /// A remapping waits for the next GPU reset.
    pub pending: bool,
    /// A remapping failed: the GPU needs service.
    pub failure: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_that_cannot_be_true_are_refused_naming_the_field() {
        let fast = |memory: &str, utilization: &str| {
            serde_json::from_str::<FastReading>(&format!(
                r#"{{"at":1000,"memory":{memory},"gpu_utilization":{utilization}}}"#
            ))
        };
        let good = r#"{"total_bytes":100,"reserved_bytes":5,"used_bytes":60,"free_bytes":35}"#;
        assert!(fast(good, "0.5").is_ok());
        let used_above_total = r#"{"total_bytes":100,"used_bytes":160,"free_bytes":0}"#;
        let error = fast(used_above_total, "0.5").unwrap_err().to_string();
        assert!(
            error.contains("memory.used_bytes (160) exceeds memory.total_bytes (100)"),
            "{error}"
        );
        for bad in ["-1", "1.5"] {
            let error = fast(good, bad).unwrap_err().to_string();
            assert!(error.contains("utilization ratio must be within 0..1"), "{bad}: {error}");
        }
        for (details, message) in [
            (r#"{"performance_state":16}"#, "a performance state must be within 0..15, got 16"),
            (
                r#"{"encoder_utilization_percent":101}"#,
                "a utilization percentage must be within 0..100, got 101",
            ),
        ] {
            let error = serde_json::from_str::<SlowDetails>(details).unwrap_err().to_string();
            assert!(error.contains(message), "{details}: {error}");
        }
        let ok = r#"{"performance_state":15,"decoder_utilization_percent":100}"#;
        assert!(serde_json::from_str::<SlowDetails>(ok).is_ok());
    }
}
