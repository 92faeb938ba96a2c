//! Plain data that flows from the device sources through the sampler into
//! history and out to the HTTP surfaces.
//!
//! Owns: timestamps, device facts, the readings of the two sampling tiers,
//! the catalogue of simulated scenarios and the built-in rules' table.
//! Depends on nothing else in the crate. An absent value is `None`, never `0`.

mod error_kind;
mod oom;
mod probe;
mod rules;
mod scenario;

pub use error_kind::ErrorKind;
pub use oom::{OomCause, OomEvent};
pub use probe::{
    HeadroomSearch, HeadroomStop, ProbeFailure, ProbeFailureKind, ProbeReading, ProbeSkipReason,
};
pub use rules::{Direction, RuleId, RuleSettings, RuleSpec, RuleUnit, Severity};
pub use scenario::{ScenarioKind, UnknownScenario};

use std::time::Duration;

use serde::{Deserialize, Serialize};
use strum::{Display, IntoStaticStr};

/// A point in time, as milliseconds since the Unix epoch.
///
/// Every reading carries one of these, stamped by its source; later stages
/// compute only from these, never from the wall clock, so simulation at any
/// speed and replay of recorded traces behave exactly like live sampling.
///
/// Input (traces, reports) can only produce times in
/// [`Timestamp::EARLIEST`]`..=`[`Timestamp::LATEST`]: deserialising refuses
/// anything else, so no later stage ever formats or iterates over an
/// absurd time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

/// Why a time from input was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "timestamp {millis} ms since the Unix epoch is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59.999Z"
)]
pub struct TimestampOutOfRange {
    pub millis: i128,
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let millis = i64::deserialize(deserializer)?;
        Timestamp::checked(millis).map_err(serde::de::Error::custom)
    }
}

impl Timestamp {
    /// The Unix epoch: nothing vramd reads comes from before it.
    pub const EARLIEST: Timestamp = Timestamp(0);
    /// 9999-12-31T23:59:59.999Z, the last instant RFC 3339 can write.
    pub const LATEST: Timestamp = Timestamp(253_402_300_799_999);

    /// A time from input, refused outside `EARLIEST..=LATEST`.
    pub fn checked(millis: i64) -> Result<Self, TimestampOutOfRange> {
        if (Self::EARLIEST.0..=Self::LATEST.0).contains(&millis) {
            Ok(Self(millis))
        } else {
            Err(TimestampOutOfRange { millis: i128::from(millis) })
        }
    }

    pub const fn from_unix_millis(millis: i64) -> Self {
        Self(millis)
    }

    pub const fn unix_millis(self) -> i64 {
        self.0
    }

    pub fn unix_seconds_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    pub fn saturating_add(self, duration: Duration) -> Self {
        Self(self.0.saturating_add(duration_millis(duration)))
    }

    pub fn saturating_sub(self, duration: Duration) -> Self {
        Self(self.0.saturating_sub(duration_millis(duration)))
    }

    /// Time elapsed since `earlier`, or `None` when `earlier` is later.
    pub fn duration_since(self, earlier: Timestamp) -> Option<Duration> {
        let delta = self.0.checked_sub(earlier.0)?;
        u64::try_from(delta).ok().map(Duration::from_millis)
    }

    /// Reads RFC 3339 text (`2026-01-01T00:00:00.250Z`; offsets and a
    /// missing fraction accepted) to millisecond precision.
    pub fn parse_rfc3339(text: &str) -> Result<Timestamp, String> {
        let time = humantime::parse_rfc3339_weak(text).map_err(|error| error.to_string())?;
        let since_epoch =
            time.duration_since(std::time::UNIX_EPOCH).map_err(|error| error.to_string())?;
        let millis = i64::try_from(since_epoch.as_millis()).map_err(|_| {
            TimestampOutOfRange {
                millis: i128::try_from(since_epoch.as_millis()).unwrap_or(i128::MAX),
            }
            .to_string()
        })?;
        Timestamp::checked(millis).map_err(|error| error.to_string())
    }

    /// RFC 3339 text with millisecond precision, e.g. `2026-01-01T00:00:00.250Z`.
    /// Total: a time outside what RFC 3339 can write (only reachable by
    /// arithmetic, never from input) is written `@<millis>ms` instead of
    /// panicking in the formatter, which accepts only years 1970 to 9999.
    pub fn to_rfc3339(self) -> String {
        if Timestamp::checked(self.0).is_err() {
            return format!("@{}ms", self.0);
        }
        let since_epoch = Duration::from_millis(self.0.unsigned_abs());
        match std::time::UNIX_EPOCH.checked_add(since_epoch) {
            Some(time) => humantime::format_rfc3339_millis(time).to_string(),
            None => format!("@{}ms", self.0),
        }
    }
}

/// Serde forms of a [`Timestamp`] as RFC 3339 text, for JSON documents
/// people read (`#[serde(with = "crate::model::rfc3339")]`, or
/// `rfc3339::option` for an `Option<Timestamp>`).
pub mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Timestamp;

    pub fn serialize<S: Serializer>(at: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&at.to_rfc3339())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse_rfc3339(&text).map_err(serde::de::Error::custom)
    }

    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        use super::super::Timestamp;

        pub fn serialize<S: Serializer>(
            at: &Option<Timestamp>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match at {
                Some(at) => super::serialize(at, serializer),
                None => serializer.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<Timestamp>, D::Error> {
            Option::<String>::deserialize(deserializer)?
                .map(|text| Timestamp::parse_rfc3339(&text).map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}

fn duration_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

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

/// What `--record` does when its file already exists (`source.record_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum RecordMode {
    /// Keep it: renamed to `<file>.1` (earlier ones shift up, at most
    /// `source.record_keep` kept), so a restart never loses the last run.
    #[default]
    Rotate,
    /// Refuse to start, naming the file.
    Refuse,
    /// Truncate it (the behaviour before 0.2; only on request).
    Overwrite,
}

impl RecordMode {
    pub const ALL: [RecordMode; 3] =
        [RecordMode::Rotate, RecordMode::Refuse, RecordMode::Overwrite];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.as_str() == name)
    }
}

/// The two sampling tiers: fast (memory, utilization) and slow (processes
/// and everything else).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(IntoStaticStr, Display)]
#[strum(serialize_all = "lowercase")]
pub enum Tier {
    Fast,
    Slow,
}

impl Tier {
    pub const ALL: [Tier; 2] = [Tier::Fast, Tier::Slow];

    pub fn as_str(self) -> &'static str {
        self.into()
    }
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
        let parts = [
            ("used_bytes", Some(raw.used_bytes)),
            ("free_bytes", Some(raw.free_bytes)),
            ("reserved_bytes", raw.reserved_bytes),
        ];
        for (field, value) in parts {
            if let Some(value) = value
                && value > raw.total_bytes
            {
                return Err(format!(
                    "memory.{field} ({value}) exceeds memory.total_bytes ({})",
                    raw.total_bytes
                ));
            }
        }
        Ok(MemoryInfo {
            total_bytes: raw.total_bytes,
            reserved_bytes: raw.reserved_bytes,
            used_bytes: raw.used_bytes,
            free_bytes: raw.free_bytes,
        })
    }
}

/// Serde for an optional fraction read from input: refused outside 0..=1
/// (NVML reports utilization in percent, so anything else is corrupt).
pub mod ratio {
    use serde::{Deserialize, Deserializer};

    pub fn option<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
        let value = Option::<f64>::deserialize(deserializer)?;
        match value {
            Some(fraction) if !(0.0..=1.0).contains(&fraction) => Err(serde::de::Error::custom(
                format!("a utilization ratio must be within 0..1, got {fraction}"),
            )),
            _ => Ok(value),
        }
    }
}

/// What the fast tier reads: cheap calls, sampled several times a second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FastReading {
    pub at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryInfo>,
    /// Fraction of time a kernel was running, 0.0–1.0.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ratio::option")]
    pub gpu_utilization: Option<f64>,
    /// Fraction of time device memory was being read or written, 0.0–1.0.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ratio::option")]
    pub memory_bandwidth_utilization: Option<f64>,
}

/// What the slow tier reads: calls that are expensive or take driver locks.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
}

/// One container the kubelet's pod-resources API lists as holding a device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PodAllocation {
    pub pod: String,
    pub namespace: String,
    pub container: String,
    /// The extended resource, e.g. `nvidia.com/gpu` or `nvidia.com/mig-1g.10gb`.
    pub resource: String,
    /// The `N` of a time-sliced or shared device ID `<id>::N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
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
}

impl SlowDetails {
    pub fn is_empty(&self) -> bool {
        *self == SlowDetails::default()
    }
}

/// An optional percentage read from input: refused above 100.
fn percent<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    match Option::<u32>::deserialize(deserializer)? {
        Some(value) if value > 100 => Err(serde::de::Error::custom(format!(
            "a utilization percentage must be within 0..100, got {value}"
        ))),
        other => Ok(other),
    }
}

/// An optional performance state read from input: refused above P15.
fn pstate<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u8>, D::Error> {
    match Option::<u8>::deserialize(deserializer)? {
        Some(value) if value > 15 => Err(serde::de::Error::custom(format!(
            "a performance state must be within 0..15, got {value}"
        ))),
        other => Ok(other),
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
#[derive(IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

impl ComputeMode {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One process holding memory on one device.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Host PID, as the driver reports it.
    pub pid: u32,
    /// Short process name (`comm`), when known.
    pub name: Option<String>,
    /// Device memory the driver attributes to the process; absent when the
    /// driver cannot say (e.g. without privileges, or under MIG).
    pub used_bytes: Option<u64>,
    /// PyTorch caching-allocator statistics, for processes that report them.
    pub allocator: Option<AllocatorStats>,
    /// Who the process is: kind of GPU work, command line, container.
    #[serde(default, skip_serializing_if = "ProcessDetails::is_empty")]
    pub details: ProcessDetails,
}

impl ProcessInfo {
    /// The order the per-device process cap keeps processes in: most memory
    /// first, unknown usage last, then by PID. The NVML source reads /proc
    /// only for the processes this order keeps.
    pub fn cap_order(a: &ProcessInfo, b: &ProcessInfo) -> std::cmp::Ordering {
        b.used_bytes.cmp(&a.used_bytes).then(a.pid.cmp(&b.pid))
    }
}

/// Identity of a process beyond its PID and name; each field absent when
/// unknown (the process exited, no permission, not in a container).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessDetails {
    pub kind: Option<ProcessKind>,
    /// Command line, truncated to `nvml.max_cmdline_bytes`.
    pub cmdline: Option<String>,
    pub container_id: Option<String>,
    /// Kubernetes pod UID, from the process's cgroup.
    pub pod_uid: Option<String>,
    /// The PID inside the process's own PID namespace (`NSpid`).
    pub namespace_pid: Option<u32>,
    /// SM (compute) utilization of this process over the latest slow-tier
    /// period, 0–100 (NVML process utilization). 0 when the driver had
    /// samples of other processes but none of this one; absent when the
    /// driver has no per-process utilization.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "percent")]
    pub sm_utilization_percent: Option<u32>,
    /// Memory-bandwidth utilization of this process, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "percent")]
    pub memory_utilization_percent: Option<u32>,
    /// What vramd knows the process to be beyond a workload: `probe` for
    /// vramd's own CUDA probe child (never attributed to a pod, never
    /// assessed for leaks).
    pub role: Option<ProcessRole>,
    /// Kubernetes pod name: from the container runtime (CRI) by container
    /// ID, else from the process's allocator report.
    pub pod: Option<String>,
    /// Kubernetes namespace of [`Self::pod`].
    pub namespace: Option<String>,
    /// Container name within [`Self::pod`].
    pub container: Option<String>,
    /// Summary of the process's last allocator snapshot, when it reports one.
    pub snapshot: Option<SnapshotSummary>,
    /// The allocator's own ceiling, when it preallocated a pool (JAX's
    /// `bytes_limit`): the part of the pool not in use is free to that
    /// process, so a full-looking GPU is not pressure by itself.
    pub pool_limit_bytes: Option<u64>,
}

/// What a workload's `torch.cuda.memory_snapshot()` says about one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotSummary {
    #[schema(maximum = 9007199254740992_u64)]
    pub segments: u64,
    #[schema(maximum = 9007199254740992_u64)]
    pub total_bytes: u64,
    #[schema(maximum = 9007199254740992_u64)]
    pub allocated_bytes: u64,
    #[schema(maximum = 9007199254740992_u64)]
    pub largest_free_block_bytes: u64,
}

impl ProcessDetails {
    pub fn is_empty(&self) -> bool {
        *self == ProcessDetails::default()
    }

    /// vramd's own probe child: not a workload.
    pub fn is_probe(&self) -> bool {
        self.role == Some(ProcessRole::Probe)
    }
}

/// A process vramd recognises as its own rather than a workload's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ProcessRole {
    /// The CUDA probe child (`vramd-probe`), alive for about a second.
    Probe,
}

impl ProcessRole {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// How a process uses the GPU, as NVML lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ProcessKind {
    Compute,
    Graphics,
    /// Listed both as a compute and as a graphics process.
    ComputeAndGraphics,
    /// A client of the Multi-Process Service.
    Mps,
}

impl ProcessKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The subset of `torch.cuda.memory_stats()` the accounting model uses.
///
/// Invariant kept by every source: `allocated <= reserved`,
/// `active <= reserved`, `inactive_split <= reserved - allocated`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AllocatorStats {
    /// `allocated_bytes.all.current`: live tensors.
    pub allocated_bytes: u64,
    /// `reserved_bytes.all.current`: segments the allocator holds from CUDA.
    pub reserved_bytes: u64,
    /// `active_bytes.all.current`: blocks in use, including not yet freed
    /// blocks awaiting stream synchronisation.
    pub active_bytes: u64,
    /// `inactive_split_bytes.all.current`: free pieces of split segments,
    /// which `empty_cache()` cannot return.
    pub inactive_split_bytes: u64,
    /// `num_alloc_retries`: times the allocator flushed its cache to satisfy
    /// an allocation. Monotonic for the life of the process.
    pub alloc_retries: u64,
    /// `num_ooms`: out-of-memory errors raised. Monotonic.
    pub ooms: u64,
}

impl AllocatorStats {
    /// Whether the invariants documented on the type hold.
    pub fn is_consistent(&self) -> bool {
        self.allocated_bytes <= self.reserved_bytes
            && self.active_bytes <= self.reserved_bytes
            && self.inactive_split_bytes <= self.reserved_bytes - self.allocated_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_arithmetic_saturates_and_orders() {
        let start = Timestamp::from_unix_millis(1_000);
        let later = start.saturating_add(Duration::from_millis(250));
        assert_eq!(later.unix_millis(), 1_250);
        assert_eq!(later.duration_since(start), Some(Duration::from_millis(250)));
        assert_eq!(start.duration_since(later), None);
        assert_eq!(
            Timestamp::from_unix_millis(i64::MAX).saturating_add(Duration::from_secs(1)),
            Timestamp::from_unix_millis(i64::MAX)
        );
    }

    #[test]
    fn timestamp_formats_as_rfc3339_with_millis() {
        let at = Timestamp::from_unix_millis(1_767_225_600_250);
        assert_eq!(at.to_rfc3339(), "2026-01-01T00:00:00.250Z");
    }

    #[test]
    fn times_outside_1970_to_9999_are_refused_from_input_and_never_panic_when_written() {
        for bad in ["-5", "253402300800000", "9223372036854775807", "-9223372036854775808"] {
            let error = serde_json::from_str::<Timestamp>(bad).unwrap_err().to_string();
            assert!(
                error.contains("outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59.999Z"),
                "{bad}: {error}"
            );
        }
        assert_eq!(serde_json::from_str::<Timestamp>("0").unwrap(), Timestamp::EARLIEST);
        assert_eq!(
            serde_json::from_str::<Timestamp>("253402300799999").unwrap(),
            Timestamp::LATEST
        );
        assert_eq!(Timestamp::LATEST.to_rfc3339(), "9999-12-31T23:59:59.999Z");
        // Reachable only by arithmetic, and still total.
        assert_eq!(Timestamp::from_unix_millis(-5).to_rfc3339(), "@-5ms");
        assert_eq!(Timestamp::from_unix_millis(i64::MAX).to_rfc3339(), format!("@{}ms", i64::MAX));
        assert!(Timestamp::parse_rfc3339("+10000-01-01T00:00:00Z").is_err());
        assert!(Timestamp::parse_rfc3339("1969-12-31T23:59:59Z").is_err());
    }

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
    }

    #[test]
    fn label_names_are_the_serde_names() {
        fn same<T: Serialize>(all: &[T], name: impl Fn(&T) -> &'static str) {
            for value in all {
                assert_eq!(serde_json::to_value(value).unwrap(), name(value));
            }
        }
        same(&ErrorKind::ALL, |kind| kind.as_str());
        same(&RecordMode::ALL, |mode| mode.as_str());
        same(&Tier::ALL, |tier| tier.as_str());
        same(&[ComputeMode::ExclusiveThread, ComputeMode::ExclusiveProcess], |mode| mode.as_str());
        same(&[ProcessKind::ComputeAndGraphics, ProcessKind::Mps], |kind| kind.as_str());
        same(&[ProcessRole::Probe], |role| role.as_str());
        same(&[Severity::Info, Severity::Warning, Severity::Critical], |severity| {
            severity.as_str()
        });
        assert_eq!(Tier::Slow.to_string(), "slow");
    }

    #[test]
    fn allocator_consistency_rejects_allocated_above_reserved() {
        let mut stats = AllocatorStats {
            allocated_bytes: 10,
            reserved_bytes: 20,
            active_bytes: 12,
            inactive_split_bytes: 5,
            alloc_retries: 0,
            ooms: 0,
        };
        assert!(stats.is_consistent());
        stats.allocated_bytes = 30;
        assert!(!stats.is_consistent());
    }
}
