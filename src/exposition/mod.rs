//! `/metrics`: the Prometheus exposition of every device's live state and
//! of vramd's own health.
//!
//! Owns: metric names, help texts and labels (DESIGN.md's naming contract).
//! A scrape only reads the live state the sampler left in history; it never
//! calls a device source. Absent values are left out, never written as 0.
//! Depends on: `history`, `analysis` (accounting, the published
//! snapshot), `alerts::board`, `telemetry`, `model`.

mod alerts;
mod health;
mod probe;
mod text;

use std::sync::Arc;

use crate::alerts::board::AlertBoard;
use crate::analysis::accounting;
use crate::analysis::snapshot::AnalysisSnapshot;
use crate::history::{DeviceHistory, HistoryStore, LiveState, ProbeState};
use crate::model::{DeviceInfo, ProcessInfo};
use crate::telemetry::{Telemetry, TelemetryError};

use text::{Family, FamilyWriter, Labels, SampleValue, family};

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders the full exposition: device series, the latest analysis and
/// alerts, then self metrics.
pub fn render(
    store: &HistoryStore,
    telemetry: &Telemetry,
    analyses: &AnalysisSnapshot,
    board: &AlertBoard,
) -> Result<Vec<u8>, TelemetryError> {
    let devices = store.devices();
    let views = collect(&devices);
    let mut out = Vec::with_capacity(estimate_size(&views));
    render_devices_into(&views, &mut out);
    alerts::render(&views, analyses, board, &mut out);
    telemetry.encode_into(&mut out)?;
    Ok(out)
}

/// Renders only the device and process series (deterministic for a given
/// state; what the golden test pins down).
pub fn render_devices(store: &HistoryStore) -> Vec<u8> {
    let devices = store.devices();
    let views = collect(&devices);
    let mut out = Vec::with_capacity(estimate_size(&views));
    render_devices_into(&views, &mut out);
    out
}

/// One device as a scrape sees it: its static facts borrowed from history,
/// copies of its live and probe state (taken once, so the locks are held
/// only for the copy), and its `gpu`/`uuid` labels.
struct DeviceView<'a> {
    info: &'a DeviceInfo,
    labels: Labels,
    live: LiveState,
    probe: ProbeState,
    fast_len: usize,
    slow_len: usize,
    /// OOM events ever received for the device.
    oom_events: u64,
    /// Wall time of each tier's last stored reading, fast then slow.
    last_success: [Option<crate::model::Timestamp>; 2],
}

struct ProcessView<'a> {
    labels: Labels,
    process: &'a ProcessInfo,
}

fn collect(devices: &[Arc<DeviceHistory>]) -> Vec<DeviceView<'_>> {
    devices
        .iter()
        .map(|device| {
            let info = device.info();
            let mut labels = Labels::default()
                .with_uint("gpu", u64::from(info.gpu_index()))
                .with("uuid", &info.uuid);
            // dcgm-exporter's GPU_I_ID/GPU_I_PROFILE users filter MIG
            // series by instance; constant for a MIG device's UUID, so
            // they add no series.
            if let Some(mig) = &info.mig {
                if let Some(id) = mig.gpu_instance_id {
                    labels = labels.with_uint("gpu_instance_id", u64::from(id));
                }
                if let Some(id) = mig.compute_instance_id {
                    labels = labels.with_uint("compute_instance_id", u64::from(id));
                }
            }
            DeviceView {
                info,
                labels,
                live: device.live(),
                probe: device.probe(),
                fast_len: device.fast_len(),
                slow_len: device.slow_len(),
                oom_events: device.oom_total(),
                last_success: crate::model::Tier::ALL
                    .map(|tier| device.progress().last_success(tier)),
            }
        })
        .collect()
}

fn estimate_size(views: &[DeviceView<'_>]) -> usize {
    let processes: usize = views
        .iter()
        .filter_map(|view| view.live.slow.as_ref()?.processes.as_ref().map(Vec::len))
        .sum();
    8_192 + views.len() * 4_096 + processes * 1_600
}

family!(DEVICE_INFO, "vramd_device_info", Gauge, "Static facts about a monitored GPU; always 1.");
family!(
    SAMPLER_LAST_SUCCESS,
    "vramd_sampler_last_success_timestamp_seconds",
    Gauge,
    "Wall-clock time the sampler last stored a reading of this device and tier; with time(), how long a GPU has gone unseen (VramdSamplerStalled)."
);
family!(
    DEVICE_UP,
    "vramd_device_up",
    Gauge,
    "1 when the GPU answered its latest memory read, else 0."
);
family!(
    MEMORY_TOTAL,
    "vramd_memory_total_bytes",
    Gauge,
    "Total device memory (NVML memory info v2)."
);
family!(
    MEMORY_USED,
    "vramd_memory_used_bytes",
    Gauge,
    "Device memory in use by processes and contexts, excluding driver-reserved memory."
);
family!(MEMORY_FREE, "vramd_memory_free_bytes", Gauge, "Device memory free for allocation.");
family!(
    MEMORY_RESERVED,
    "vramd_memory_reserved_bytes",
    Gauge,
    "Device memory reserved by the driver (total = reserved + used + free)."
);
family!(
    MEMORY_PEAK,
    "vramd_memory_used_peak_bytes",
    Gauge,
    "Largest used memory over the configured peak window (metrics.peak_window), so spikes between scrapes show."
);
family!(
    GPU_UTIL,
    "vramd_gpu_utilization_ratio",
    Gauge,
    "Fraction of the last sample period during which a kernel ran."
);
family!(
    BANDWIDTH_UTIL,
    "vramd_memory_bandwidth_utilization_ratio",
    Gauge,
    "Fraction of the last sample period during which device memory was read or written."
);
family!(TEMPERATURE, "vramd_temperature_celsius", Gauge, "GPU core temperature.");
family!(POWER_USAGE, "vramd_power_usage_watts", Gauge, "Power drawn by the GPU.");
family!(POWER_LIMIT, "vramd_power_limit_watts", Gauge, "Power management limit of the GPU.");
family!(
    PROCESSES,
    "vramd_processes",
    Gauge,
    "Processes holding memory on the GPU, including any left out by the per-device cap."
);
family!(
    PROCESSES_DROPPED,
    "vramd_processes_dropped",
    Gauge,
    "Processes left out of per-process series by sampler.max_processes_per_device (smallest users first)."
);
family!(
    UNATTRIBUTED,
    "vramd_memory_unattributed_bytes",
    Gauge,
    "Used memory not attributed to any listed process (used minus the sum of per-process usage)."
);
family!(
    PROCESS_USED,
    "vramd_process_memory_used_bytes",
    Gauge,
    "Device memory the driver attributes to a process."
);
family!(
    ALLOC_ALLOCATED,
    "vramd_allocator_allocated_bytes",
    Gauge,
    "PyTorch caching allocator: memory in live tensors (allocated_bytes.all.current)."
);
family!(
    ALLOC_RESERVED,
    "vramd_allocator_reserved_bytes",
    Gauge,
    "PyTorch caching allocator: memory held from CUDA (reserved_bytes.all.current)."
);
family!(
    ALLOC_ACTIVE,
    "vramd_allocator_active_bytes",
    Gauge,
    "PyTorch caching allocator: memory in active blocks (active_bytes.all.current)."
);
family!(
    ALLOC_INACTIVE_SPLIT,
    "vramd_allocator_inactive_split_bytes",
    Gauge,
    "PyTorch caching allocator: free pieces of split segments that empty_cache() cannot return."
);
family!(
    ALLOC_RETRIES,
    "vramd_allocator_alloc_retries_total",
    Counter,
    "PyTorch caching allocator: allocations that had to flush the cache and retry."
);
family!(
    ALLOC_OOMS,
    "vramd_allocator_ooms_total",
    Counter,
    "PyTorch caching allocator: out-of-memory errors raised."
);
family!(
    ALLOC_CACHE_RATIO,
    "vramd_allocator_cache_ratio",
    Gauge,
    "PyTorch caching allocator: (reserved - allocated) / reserved; absent when nothing is reserved."
);
family!(
    ALLOC_FRAGMENTATION,
    "vramd_allocator_fragmentation_ratio",
    Gauge,
    "PyTorch caching allocator: inactive_split / reserved; absent when nothing is reserved."
);
family!(
    PROCESS_INFO,
    "vramd_process_info",
    Gauge,
    "Identity of a process on a GPU (kind of work, container, pod, PID in its namespace); always 1. Join on pid."
);
family!(
    PROCESS_SM_UTIL,
    "vramd_process_sm_utilization_ratio",
    Gauge,
    "Fraction of the latest slow-tier period during which the process ran on the SMs (NVML process utilization; 0 when idle)."
);
family!(
    PROCESS_BANDWIDTH_UTIL,
    "vramd_process_memory_bandwidth_utilization_ratio",
    Gauge,
    "Fraction of the latest slow-tier period during which the process read or wrote device memory; with the SM ratio, tells working from only holding memory."
);
family!(
    ALLOCATION_INFO,
    "vramd_device_allocation_info",
    Gauge,
    "A Kubernetes container the kubelet allocated this device to (pod-resources API; replica: the N of a time-sliced ID <id>::N); always 1."
);
family!(
    ALLOCATIONS,
    "vramd_device_allocations",
    Gauge,
    "Containers the kubelet lists as holding this device; 0: allocated to no pod. Absent while the kubelet is not asked or does not answer."
);
family!(
    HISTORY_SAMPLES,
    "vramd_history_samples",
    Gauge,
    "Samples held in the device's history ring, by tier."
);

family!(
    ALLOC_OOM_EVENTS,
    "vramd_allocator_oom_events_total",
    Counter,
    "Allocator out-of-memory events received from workloads (POST /api/v1/oom-events)."
);

fn render_devices_into(views: &[DeviceView<'_>], out: &mut Vec<u8>) {
    {
        let mut writer = FamilyWriter::new(out, &DEVICE_INFO);
        for view in views {
            let mut labels = view.labels.clone().with("name", &view.info.name);
            if let Some(bus) = &view.info.pci_bus_id {
                labels.push("pci_bus_id", bus);
            }
            if let Some(driver) = &view.info.driver_version {
                labels.push("driver_version", driver);
            }
            if let Some(mig) = &view.info.mig {
                labels.push("parent_uuid", &mig.parent_uuid);
                if let Some(profile) = &mig.profile {
                    labels.push("mig_profile", profile);
                }
            }
            writer.int(labels.as_str(), 1);
        }
    }
    device_family(out, views, &DEVICE_UP, |live| Some(u64::from(live.is_up()) as f64));
    {
        let mut writer = FamilyWriter::new(out, &SAMPLER_LAST_SUCCESS);
        for view in views {
            for (tier, at) in crate::model::Tier::ALL.into_iter().zip(view.last_success) {
                if let Some(at) = at {
                    let labels = view.labels.clone().with("tier", tier.as_str());
                    writer.float(labels.as_str(), at.unix_seconds_f64());
                }
            }
        }
    }
    let memory = |live: &LiveState| live.fast.as_ref().and_then(|fast| fast.memory);
    device_family(out, views, &MEMORY_TOTAL, |live| memory(live).map(|m| m.total_bytes as f64));
    device_family(out, views, &MEMORY_USED, |live| memory(live).map(|m| m.used_bytes as f64));
    device_family(out, views, &MEMORY_FREE, |live| memory(live).map(|m| m.free_bytes as f64));
    device_family(out, views, &MEMORY_RESERVED, |live| {
        memory(live).and_then(|m| m.reserved_bytes).map(|b| b as f64)
    });
    device_family(out, views, &MEMORY_PEAK, |live| live.peak_used_bytes.map(|b| b as f64));
    device_family(out, views, &GPU_UTIL, |live| live.fast.as_ref()?.gpu_utilization);
    device_family(out, views, &BANDWIDTH_UTIL, |live| {
        live.fast.as_ref()?.memory_bandwidth_utilization
    });
    device_family(out, views, &TEMPERATURE, |live| live.slow.as_ref()?.temperature_celsius);
    device_family(out, views, &POWER_USAGE, |live| live.slow.as_ref()?.power_usage_watts);
    device_family(out, views, &POWER_LIMIT, |live| live.slow.as_ref()?.power_limit_watts);
    device_family(out, views, &PROCESSES, |live| {
        let listed = live.slow.as_ref()?.processes.as_ref()?.len();
        Some((listed + live.processes_dropped) as f64)
    });
    device_family(out, views, &PROCESSES_DROPPED, |live| {
        live.slow.as_ref()?.processes.as_ref()?;
        Some(live.processes_dropped as f64)
    });
    device_family(out, views, &UNATTRIBUTED, |live| {
        // The accounting model's definition: absent unless every process is
        // listed with its usage.
        let processes = live.slow.as_ref()?.processes.as_deref()?;
        let breakdown = accounting::device_breakdown(
            &memory(live)?,
            Some(processes),
            live.processes_dropped == 0,
        );
        breakdown.unattributed_bytes.map(|bytes| bytes as f64)
    });
    {
        let mut writer = FamilyWriter::new(out, &HISTORY_SAMPLES);
        for view in views {
            writer.int(view.labels.clone().with("tier", "fast").as_str(), view.fast_len as u64);
            writer.int(view.labels.clone().with("tier", "slow").as_str(), view.slow_len as u64);
        }
    }
    {
        let mut writer = FamilyWriter::new(out, &ALLOC_OOM_EVENTS);
        for view in views {
            writer.int(view.labels.as_str(), view.oom_events);
        }
    }
    health::render(views, out);
    probe::render(views, out);
    render_allocations(views, out);
    render_processes(views, out);
}

fn render_allocations(views: &[DeviceView<'_>], out: &mut Vec<u8>) {
    per_device(out, views, &ALLOCATIONS, |view| {
        view.live.slow.as_ref()?.allocations.as_ref().map(|list| list.len() as f64)
    });
    let mut writer = FamilyWriter::new(out, &ALLOCATION_INFO);
    for view in views {
        let Some(slow) = view.live.slow.as_ref() else { continue };
        for allocation in slow.allocations.iter().flatten() {
            let mut labels = view
                .labels
                .clone_with_room(PROCESS_LABELS_ROOM)
                .with("pod", &allocation.pod)
                .with("namespace", &allocation.namespace)
                .with("container", &allocation.container);
            if let Some(replica) = &allocation.replica {
                labels.push("replica", replica);
            }
            writer.int(labels.as_str(), 1);
        }
    }
}

/// A family with at most one sample per device, which `value` picks from
/// the device's view (`None`: no sample).
fn per_device<'v, 'a: 'v>(
    out: &mut Vec<u8>,
    views: impl IntoIterator<Item = &'v DeviceView<'a>>,
    family: &Family,
    value: impl Fn(&DeviceView<'a>) -> Option<f64>,
) {
    let mut writer = FamilyWriter::new(out, family);
    for view in views {
        if let Some(value) = value(view) {
            writer.float(view.labels.as_str(), value);
        }
    }
}

/// [`per_device`] with a value from the device's live state.
fn device_family(
    out: &mut Vec<u8>,
    views: &[DeviceView<'_>],
    family: &Family,
    value: impl Fn(&LiveState) -> Option<f64>,
) {
    per_device(out, views, family, |view| value(&view.live));
}

/// Bytes reserved beyond the device labels for a process's `pid`,
/// `process` and pod labels.
const PROCESS_LABELS_ROOM: usize = 192;

fn render_processes(views: &[DeviceView<'_>], out: &mut Vec<u8>) {
    let processes: Vec<ProcessView<'_>> = views
        .iter()
        .flat_map(|view| {
            let listed = view.live.slow.as_ref().and_then(|slow| slow.processes.as_ref());
            listed.into_iter().flatten().map(move |process| ProcessView {
                labels: process_labels(&view.labels, process),
                process,
            })
        })
        .collect();
    {
        let mut writer = FamilyWriter::new(out, &PROCESS_INFO);
        // The identity labels of one process at a time, in one reused
        // buffer, written after the process's own labels.
        let mut identity = Labels::default();
        for view in &processes {
            let details = &view.process.details;
            identity.clear();
            if let Some(kind) = details.kind {
                identity.push("kind", kind.as_str());
            }
            if let Some(role) = details.role {
                identity.push("role", role.as_str());
            }
            if let Some(container) = &details.container_id {
                identity.push("container_id", container);
            }
            if let Some(pod) = &details.pod_uid {
                identity.push("pod_uid", pod);
            }
            if let Some(namespace_pid) = details.namespace_pid {
                identity = identity.with_uint("namespace_pid", u64::from(namespace_pid));
            }
            writer.int_joined(view.labels.as_str(), identity.as_str(), 1);
        }
    }
    // Byte counts and counters as integers: no detour through f64.
    process_family(out, &processes, &PROCESS_USED, |p| p.used_bytes);
    process_family(out, &processes, &ALLOC_ALLOCATED, |p| p.allocator.map(|a| a.allocated_bytes));
    process_family(out, &processes, &ALLOC_RESERVED, |p| p.allocator.map(|a| a.reserved_bytes));
    process_family(out, &processes, &ALLOC_ACTIVE, |p| p.allocator.map(|a| a.active_bytes));
    process_family(out, &processes, &ALLOC_INACTIVE_SPLIT, |p| {
        p.allocator.map(|a| a.inactive_split_bytes)
    });
    process_family(out, &processes, &ALLOC_RETRIES, |p| p.allocator.map(|a| a.alloc_retries));
    process_family(out, &processes, &ALLOC_OOMS, |p| p.allocator.map(|a| a.ooms));
    process_family(out, &processes, &PROCESS_SM_UTIL, |p| {
        p.details.sm_utilization_percent.map(|percent| f64::from(percent) / 100.0)
    });
    process_family(out, &processes, &PROCESS_BANDWIDTH_UTIL, |p| {
        p.details.memory_utilization_percent.map(|percent| f64::from(percent) / 100.0)
    });
    // Ratios as the accounting model defines them (one definition for the
    // metrics, the REST document and the alert rules).
    process_family(out, &processes, &ALLOC_CACHE_RATIO, |p| {
        accounting::process_breakdown(p)?.cache_ratio
    });
    process_family(out, &processes, &ALLOC_FRAGMENTATION, |p| {
        accounting::process_breakdown(p)?.fragmentation_ratio
    });
}

/// A process's series labels: its device's, `pid`, `process`, and the
/// Kubernetes `pod`, `namespace` and `container` (dcgm-exporter's names)
/// when known. These add no series: a process has one pod.
fn process_labels(device: &Labels, process: &ProcessInfo) -> Labels {
    let details = &process.details;
    let mut labels = device
        .clone_with_room(PROCESS_LABELS_ROOM)
        .with_uint("pid", u64::from(process.pid))
        .with("process", process.name.as_deref().unwrap_or(""));
    for (name, value) in [
        ("pod", &details.pod),
        ("namespace", &details.namespace),
        ("container", &details.container),
    ] {
        if let Some(value) = value {
            labels.push(name, value);
        }
    }
    labels
}

fn process_family<V: SampleValue>(
    out: &mut Vec<u8>,
    processes: &[ProcessView<'_>],
    family: &Family,
    value: impl Fn(&ProcessInfo) -> Option<V>,
) {
    let mut writer = FamilyWriter::new(out, family);
    for view in processes {
        if let Some(value) = value(view.process) {
            value.write(&mut writer, view.labels.as_str());
        }
    }
}
