//! Who holds each device: the per-process series (driver usage, allocator
//! statistics and ratios, process identity, per-process utilization) and
//! the Kubernetes containers the kubelet allocated the device to.
//!
//! Reads only the live state a scrape copied into its `DeviceView`s;
//! depends on `analysis::accounting` for the ratios, nothing else above
//! `history`.

use crate::analysis::accounting;
use crate::model::ProcessInfo;

use super::DeviceView;
use super::text::{Family, FamilyWriter, Labels, SampleValue, family};

struct ProcessView<'a> {
    labels: Labels,
    process: &'a ProcessInfo,
}

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
    DRIVER_ALLOCATED,
    "vramd_process_driver_allocated_bytes",
    Gauge,
    "Driver trace: bytes the process holds through libcuda allocations traced since the trace began (cuMemAlloc*, cuMemCreate); for PyTorch without expandable_segments, its allocator's reserved bytes."
);
family!(
    DRIVER_LIVE,
    "vramd_process_driver_live_allocations",
    Gauge,
    "Driver trace: allocations the process holds (counted in vramd_process_driver_allocated_bytes)."
);
family!(
    DRIVER_ALLOCATIONS,
    "vramd_process_driver_allocations_total",
    Counter,
    "Driver trace: libcuda allocation calls of the process that succeeded."
);
family!(
    DRIVER_FREES,
    "vramd_process_driver_frees_total",
    Counter,
    "Driver trace: libcuda free and release calls of the process that succeeded."
);
family!(
    DRIVER_FAILURES,
    "vramd_process_driver_allocation_failures_total",
    Counter,
    "Driver trace: libcuda allocation calls of the process that failed, whatever the error."
);
family!(
    DRIVER_OOMS,
    "vramd_process_driver_out_of_memory_total",
    Counter,
    "Driver trace: libcuda allocation calls of the process that failed with CUDA_ERROR_OUT_OF_MEMORY."
);
family!(
    DRIVER_RETRIES,
    "vramd_process_driver_allocation_retries_total",
    Counter,
    "Driver trace: out-of-memory failures of the process followed shortly by a successful allocation at least as large (a caching allocator that flushed its cache and retried)."
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
    "A Kubernetes container the kubelet allocated this device to (pod-resources API; replica: the N of a time-sliced ID <id>::N or GKE <id>/vgpuN; claim, claim_namespace: the ResourceClaim of a DRA allocation); always 1."
);
family!(
    ALLOCATIONS,
    "vramd_device_allocations",
    Gauge,
    "Containers the kubelet lists as holding this device; 0: allocated to no pod. Absent while the kubelet is not asked or does not answer."
);

family!(
    ALLOCATABLE,
    "vramd_device_allocatable",
    Gauge,
    "1 when the kubelet lists this device as one it could allocate to a pod (pod-resources GetAllocatableResources), else 0; absent where the kubelet does not offer that call."
);
family!(
    ALLOCATION_STATE,
    "vramd_device_allocation_state",
    Gauge,
    "1 for the device's Kubernetes state, 0 for the others: allocated (a pod holds it), used_unallocated (processes use it while no pod was given it), idle (neither). Absent while the kubelet does not answer, and on a MIG-enabled GPU (its MIG devices carry it)."
);

/// The states of `vramd_device_allocation_state`, in exposition order.
const ALLOCATION_STATES: [&str; 3] = ["allocated", "used_unallocated", "idle"];

/// Every series of this file, allocations first.
pub(super) fn render(views: &[DeviceView<'_>], out: &mut Vec<u8>) {
    render_allocations(views, out);
    render_processes(views, out);
}

fn render_allocations(views: &[DeviceView<'_>], out: &mut Vec<u8>) {
    super::per_device(out, views, &ALLOCATIONS, |view| {
        view.live.slow.as_ref()?.allocations.as_ref().map(|list| list.len() as f64)
    });
    super::per_device(out, views, &ALLOCATABLE, |view| {
        let allocatable = view.live.slow.as_ref()?.details.kubelet_allocatable?;
        Some(f64::from(u8::from(allocatable)))
    });
    {
        let mut writer = FamilyWriter::new(out, &ALLOCATION_STATE);
        for view in views {
            let Some(state) = allocation_state(view) else { continue };
            for name in ALLOCATION_STATES {
                let labels = view.labels.clone().with("state", name);
                writer.int(labels.as_str(), u64::from(name == state));
            }
        }
    }
    let mut writer = FamilyWriter::new(out, &ALLOCATION_INFO);
    for view in views {
        let Some(slow) = view.live.slow.as_ref() else { continue };
        for allocation in slow.allocations.iter().flatten() {
            let mut labels = view
                .identity
                .clone_with_room(PROCESS_LABELS_ROOM)
                .with("pod", &allocation.pod)
                .with("namespace", &allocation.namespace)
                .with("container", &allocation.container);
            if let Some(replica) = &allocation.replica {
                labels.push("replica", replica);
            }
            if let Some(claim) = &allocation.claim {
                labels.push("claim", claim);
            }
            if let Some(claim_namespace) = &allocation.claim_namespace {
                labels.push("claim_namespace", claim_namespace);
            }
            writer.int(labels.as_str(), 1);
        }
    }
}

/// Which of [`ALLOCATION_STATES`] a device is in, from its latest slow
/// reading: `None` while the kubelet's allocations or the process list are
/// unknown, and on a MIG-enabled GPU, whose processes run on MIG devices
/// that carry their own allocations.
fn allocation_state(view: &DeviceView<'_>) -> Option<&'static str> {
    let slow = view.live.slow.as_ref()?;
    if view.info.mig.is_none() && slow.details.mig_enabled == Some(true) {
        return None;
    }
    let allocations = slow.allocations.as_ref()?;
    if !allocations.is_empty() {
        return Some(ALLOCATION_STATES[0]);
    }
    let processes = slow.processes.as_ref()?;
    Some(if processes.is_empty() { ALLOCATION_STATES[2] } else { ALLOCATION_STATES[1] })
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
                labels: process_labels(&view.identity, process),
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
    process_family(out, &processes, &DRIVER_ALLOCATED, |p| driver(p).map(|d| d.allocated_bytes));
    process_family(out, &processes, &DRIVER_LIVE, |p| driver(p).map(|d| d.live_allocations));
    process_family(out, &processes, &DRIVER_ALLOCATIONS, |p| driver(p).map(|d| d.allocations));
    process_family(out, &processes, &DRIVER_FREES, |p| driver(p).map(|d| d.frees));
    process_family(out, &processes, &DRIVER_FAILURES, |p| driver(p).map(|d| d.allocation_failures));
    process_family(out, &processes, &DRIVER_OOMS, |p| driver(p).map(|d| d.out_of_memory_failures));
    process_family(out, &processes, &DRIVER_RETRIES, |p| driver(p).map(|d| d.allocation_retries));
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

/// What the driver trace saw of the process, when it runs.
fn driver(process: &ProcessInfo) -> Option<&crate::model::DriverStats> {
    process.details.driver.as_deref()
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
