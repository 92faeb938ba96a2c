//! The JSON shapes of the REST API. Field names carry their units; absent
//! values are left out, never written as 0.

use serde::Serialize;

use crate::analysis::accounting::{self, DeviceBreakdown, ProcessBreakdown};
use crate::analysis::summary::DeviceAnalysis;
use crate::history::{LiveState, ProbeAttempt, ProbeState, ReadFailure};
use crate::model::{
    AllocatorStats, DeviceInfo, MemoryInfo, MigInfo, PodAllocation, ProbeFailureKind, ProbeReading,
    ProbeSkipReason, ProcessDetails, ProcessInfo, SharedStr, SlowDetails, Timestamp,
};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeviceList {
    pub devices: Vec<DeviceSummary>,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeviceSummary {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: Option<String>,
    pub driver_version: Option<String>,
    /// For a MIG device: its parent GPU, slot and profile.
    pub mig: Option<MigInfo>,
    /// The device answered its latest memory read.
    pub up: bool,
    /// Time of the newest reading (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none", with = "crate::model::rfc3339::option")]
    #[schema(value_type = Option<String>)]
    pub at: Option<Timestamp>,
    pub memory: Option<MemoryDto>,
    pub gpu_utilization_ratio: Option<f64>,
    pub memory_bandwidth_utilization_ratio: Option<f64>,
    pub process_count: Option<usize>,
    /// Failures of the latest reads, by tier.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<FailureDto>,
    /// The CUDA driver probe; absent when the device is not probed
    /// (probe.enabled off, or a replayed trace).
    pub probe: Option<ProbeDto>,
}

/// What the CUDA driver probe says about a device.
#[serde_with::skip_serializing_none]
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProbeDto {
    /// The latest successful probe; kept after later failures (its `at`
    /// says how old it is).
    pub latest: Option<ProbeReading>,
    /// NVML free minus CUDA free at that probe; may be negative.
    pub free_difference_bytes: Option<i64>,
    /// How the latest turn ended: succeeded, failed (kind, message) or
    /// skipped (reason).
    pub last_attempt: Option<ProbeAttemptDto>,
    /// Probes started (succeeded or failed).
    pub runs: u64,
    /// Failures since the last success.
    pub consecutive_failures: u32,
    /// Failures by kind, every kind listed.
    pub failures: std::collections::BTreeMap<&'static str, u64>,
    /// Skipped turns by reason, every reason listed.
    pub skipped: std::collections::BTreeMap<&'static str, u64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProbeAttemptDto {
    /// When (RFC 3339, source time).
    #[serde(with = "crate::model::rfc3339")]
    #[schema(value_type = String)]
    pub at: Timestamp,
    #[serde(flatten)]
    pub attempt: ProbeAttempt,
}

pub fn probe(state: &ProbeState) -> Option<ProbeDto> {
    if !state.scheduled {
        return None;
    }
    Some(ProbeDto {
        free_difference_bytes: state.latest.as_ref().and_then(ProbeReading::free_difference_bytes),
        latest: state.latest.clone(),
        last_attempt: state
            .last_attempt
            .clone()
            .map(|(at, attempt)| ProbeAttemptDto { at, attempt }),
        runs: state.runs,
        consecutive_failures: state.consecutive_failures,
        failures: ProbeFailureKind::ALL
            .iter()
            .map(|kind| (kind.as_str(), state.failures_of(*kind)))
            .collect(),
        skipped: ProbeSkipReason::ALL
            .iter()
            .map(|reason| (reason.as_str(), state.skipped_for(*reason)))
            .collect(),
    })
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MemoryDto {
    pub total_bytes: u64,
    pub reserved_bytes: Option<u64>,
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// Largest `used_bytes` within `metrics.peak_window`.
    pub used_peak_bytes: Option<u64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FailureDto {
    pub tier: &'static str,
    pub kind: &'static str,
    pub message: String,
    pub consecutive: u32,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeviceDetail {
    #[serde(flatten)]
    pub summary: DeviceSummary,
    pub temperature_celsius: Option<f64>,
    pub power_usage_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    /// Clocks, throttling, ECC, retired pages, remapped rows, modes, Xid
    /// errors: whatever the device reports; absent parts are left out.
    pub health: Option<SlowDetails>,
    /// Where the memory went (DESIGN.md's accounting model).
    pub accounting: Option<DeviceBreakdown>,
    /// Absent when the process list could not be read.
    pub processes: Option<Vec<ProcessDto>>,
    /// Processes left out by `sampler.max_processes_per_device`.
    pub processes_dropped: usize,
    /// The Kubernetes containers the kubelet allocated this device to
    /// (`kubernetes.enabled`); absent while the kubelet is not asked or does
    /// not answer, empty when no pod holds the device.
    pub allocations: Option<Vec<PodAllocation>>,
    pub history: HistoryCounts,
    /// The latest analysis: growth, time to exhaustion, pressure, leaks.
    pub analysis: Option<DeviceAnalysis>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HistoryCounts {
    pub fast_samples: usize,
    pub slow_samples: usize,
}

#[serde_with::skip_serializing_none]
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProcessDto {
    pub pid: u32,
    #[schema(value_type = Option<String>)]
    pub name: Option<SharedStr>,
    pub used_bytes: Option<u64>,
    pub allocator: Option<AllocatorStats>,
    pub breakdown: Option<ProcessBreakdown>,
    /// Kind of GPU work, command line, container ID, pod UID, namespace
    /// PID, and the Kubernetes pod, namespace and container names.
    #[serde(flatten)]
    pub details: ProcessDetails,
}

fn failures(live: &LiveState) -> Vec<FailureDto> {
    let entry = |tier: &'static str, failure: &ReadFailure| FailureDto {
        tier,
        kind: failure.kind.as_str(),
        message: failure.message.clone(),
        consecutive: failure.consecutive,
    };
    let fast = live.fast_failure.as_ref().map(|failure| entry("fast", failure));
    let slow = live.slow_failure.as_ref().map(|failure| entry("slow", failure));
    fast.into_iter().chain(slow).collect()
}

pub fn summary(info: &DeviceInfo, live: &LiveState, probe_state: &ProbeState) -> DeviceSummary {
    let fast = live.fast.as_ref();
    DeviceSummary {
        index: info.index,
        uuid: info.uuid.clone(),
        name: info.name.clone(),
        pci_bus_id: info.pci_bus_id.clone(),
        driver_version: info.driver_version.clone(),
        mig: info.mig.clone(),
        up: live.is_up(),
        at: live.newest_at(),
        memory: fast.and_then(|reading| reading.memory).map(|memory: MemoryInfo| MemoryDto {
            total_bytes: memory.total_bytes,
            reserved_bytes: memory.reserved_bytes,
            used_bytes: memory.used_bytes,
            free_bytes: memory.free_bytes,
            used_peak_bytes: live.peak_used_bytes,
        }),
        gpu_utilization_ratio: fast.and_then(|reading| reading.gpu_utilization),
        memory_bandwidth_utilization_ratio: fast
            .and_then(|reading| reading.memory_bandwidth_utilization),
        process_count: live
            .slow
            .as_ref()
            .and_then(|slow| slow.processes.as_ref())
            .map(|list| list.len() + live.processes_dropped),
        failures: failures(live),
        probe: probe(probe_state),
    }
}

pub fn detail(
    info: &DeviceInfo,
    live: &LiveState,
    probe_state: &ProbeState,
    history: HistoryCounts,
    analysis: Option<DeviceAnalysis>,
) -> DeviceDetail {
    let slow = live.slow.as_deref();
    let processes = slow.and_then(|slow| slow.processes.as_deref());
    let accounting = live.fast.as_ref().and_then(|fast| fast.memory).map(|memory| {
        accounting::device_breakdown(&memory, processes, live.processes_dropped == 0)
    });
    DeviceDetail {
        summary: summary(info, live, probe_state),
        temperature_celsius: slow.and_then(|slow| slow.temperature_celsius),
        power_usage_watts: slow.and_then(|slow| slow.power_usage_watts),
        power_limit_watts: slow.and_then(|slow| slow.power_limit_watts),
        health: slow.map(|slow| slow.details.clone()).filter(|details| !details.is_empty()),
        accounting,
        processes: processes.map(|list| list.iter().map(process).collect()),
        processes_dropped: live.processes_dropped,
        allocations: slow.and_then(|slow| slow.allocations.clone()),
        history,
        analysis,
    }
}

fn process(process: &ProcessInfo) -> ProcessDto {
    ProcessDto {
        pid: process.pid,
        name: process.name.clone(),
        used_bytes: process.used_bytes,
        allocator: process.allocator,
        breakdown: accounting::process_breakdown(process),
        details: process.details.clone(),
    }
}
