//! The slow tier of the NVML source: processes and device health.

use std::collections::BTreeMap;
use std::sync::Arc;

use nvml_wrapper::Device;
use nvml_wrapper::enum_wrappers::device::{
    Clock, ComputeMode as NvmlComputeMode, EccCounter, MemoryError, PcieUtilCounter,
    PerformanceState, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;

use super::absent::AbsentLog;
use super::identities::Identities;
use crate::clock::ScaledClock;
use crate::model::{
    Bar1Memory, ComputeMode, EccCounters, ProcessDetails, ProcessInfo, ProcessKind, ProcessRole,
    RemappedRows, RetiredPages, SlowDetails, SlowReading, keep_first_by,
};
use crate::source::cuda::role as probe_role;
use crate::source::procfs::ProcessIdentity;

// NVML field ids for row remapping (nvml.h: NVML_FI_DEV_REMAPPED_COR, _UNC,
// _PENDING, _FAILURE); nvml-wrapper has no safe call for
// nvmlDeviceGetRemappedRows, field values give the same numbers.
// `examples/nvml-floor.rs` makes the same call: keep the two in step.
const REMAPPED_ROW_FIELDS: [FieldId; 4] = [FieldId(142), FieldId(143), FieldId(144), FieldId(145)];

/// Lists the processes on a device: compute, graphics and MPS clients,
/// merged by PID, the `max` first in the process cap's order kept with
/// their identity from /proc, and how many were left out. `None` when no
/// list could be read at all.
pub(super) fn processes(
    index: u32,
    device: &Device<'_>,
    absent: &AbsentLog,
    identities: &Identities,
    max: usize,
) -> Result<Option<(Vec<ProcessInfo>, usize)>, NvmlError> {
    let lists = [
        (
            ProcessKind::Compute,
            absent.value(index, "compute processes", device.running_compute_processes())?,
        ),
        (
            ProcessKind::Graphics,
            absent.value(index, "graphics processes", device.running_graphics_processes())?,
        ),
        (
            ProcessKind::Mps,
            absent.value(index, "MPS processes", device.mps_running_compute_processes())?,
        ),
    ];
    if lists.iter().all(|(_, list)| list.is_none()) {
        return Ok(None);
    }
    let listed = lists.into_iter().flat_map(|(kind, list)| {
        list.into_iter().flatten().map(move |process| {
            let used_bytes = match process.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            };
            Listed { pid: process.pid, kind, used_bytes }
        })
    });
    Ok(Some(keep_and_identify(index, merge(listed), identities, max)))
}

/// One process as the driver's lists give it: what merging and the cap
/// look at, 24 bytes, so that a device listing hundreds of processes is
/// sorted and cut before any `ProcessInfo` (hundreds of bytes) is built.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Listed {
    pid: u32,
    kind: ProcessKind,
    used_bytes: Option<u64>,
}

impl Listed {
    /// [`ProcessInfo::cap_order`] on the listing alone.
    fn cap_order(a: &Listed, b: &Listed) -> std::cmp::Ordering {
        ProcessInfo::cap_order_of((a.used_bytes, a.pid), (b.used_bytes, b.pid))
    }

    fn process(self) -> ProcessInfo {
        ProcessInfo {
            pid: self.pid,
            name: None,
            used_bytes: self.used_bytes,
            allocator: None,
            details: ProcessDetails { kind: Some(self.kind), ..ProcessDetails::default() },
        }
    }
}

/// One entry per PID, in PID order: the largest usage any list gave it,
/// and the kinds of work it was listed for.
fn merge(listed: impl Iterator<Item = Listed>) -> Vec<Listed> {
    let mut processes: Vec<Listed> = listed.collect();
    // Stable: a PID's entries keep the lists' order (compute first), which
    // `merge_kind` reads.
    processes.sort_by_key(|process| process.pid);
    processes.dedup_by(|later, kept| {
        if later.pid != kept.pid {
            return false;
        }
        kept.used_bytes = kept.used_bytes.max(later.used_bytes);
        kept.kind = merge_kind(kept.kind, later.kind);
        true
    });
    processes
}

/// Keeps the `max` first processes in the cap's order (`keep_first_by`, as
/// `keep_by_cap_order` keeps whole processes: a list within the cap keeps
/// its PID order) and reads /proc for those alone: a process the cap
/// leaves out costs its listing, nothing more. Returns the kept processes
/// and how many were left out.
fn keep_and_identify(
    index: u32,
    mut processes: Vec<Listed>,
    identities: &Identities,
    max: usize,
) -> (Vec<ProcessInfo>, usize) {
    let listed: Vec<u32> = match processes.len() > max {
        true => processes.iter().map(|process| process.pid).collect(),
        false => Vec::new(),
    };
    let left_out = keep_first_by(&mut processes, max, Listed::cap_order);
    let kept: Vec<u32> = processes.iter().map(|process| process.pid).collect();
    // Every listed PID as a left-out one: the kept ones are taken first.
    let identities = identities.of_capped(index, &kept, &listed);
    let mut processes: Vec<ProcessInfo> = processes.into_iter().map(Listed::process).collect();
    identify(&mut processes, &identities, std::process::id());
    (processes, left_out)
}

/// Puts each identity on its process (the first `identities.len()` ones).
/// The identity's strings are shared, not copied: a process listed sample
/// after sample costs reference counts here, never an allocation.
fn identify(processes: &mut [ProcessInfo], identities: &[Arc<ProcessIdentity>], own_pid: u32) {
    for (process, identity) in processes.iter_mut().zip(identities) {
        process.name.clone_from(&identity.comm);
        process.details.cmdline.clone_from(&identity.cmdline);
        if probe_role::is_probe(identity, own_pid) {
            // vramd's own probe runs in vramd's container: attributing it
            // would charge a pod (and its leak check) for vramd's work.
            process.details.role = Some(ProcessRole::Probe);
        } else {
            process.details.container_id.clone_from(&identity.container_id);
            process.details.pod_uid.clone_from(&identity.pod_uid);
        }
        process.details.namespace_pid = identity.namespace_pid;
    }
}

/// The kind of a PID listed as `known` and again as `seen`.
fn merge_kind(known: ProcessKind, seen: ProcessKind) -> ProcessKind {
    match (known, seen) {
        (ProcessKind::Compute, ProcessKind::Graphics)
        | (ProcessKind::Graphics, ProcessKind::Compute) => ProcessKind::ComputeAndGraphics,
        (known, _) => known,
    }
}

/// The device's health around the already read `processes`.
pub(super) fn reading(
    index: u32,
    device: &Device<'_>,
    absent: &AbsentLog,
    pcie_throughput: bool,
    processes: Option<(Vec<ProcessInfo>, usize)>,
    clock: &ScaledClock,
) -> Result<SlowReading, NvmlError> {
    let (processes, processes_left_out) = match processes {
        Some((kept, left_out)) => (Some(kept), left_out),
        None => (None, 0),
    };
    let watts = |milliwatts: u32| f64::from(milliwatts) / 1000.0;
    let temperature = device.temperature(TemperatureSensor::Gpu);
    let temperature_celsius = absent.value(index, "temperature", temperature)?.map(f64::from);
    let power_usage_watts = absent.value(index, "power usage", device.power_usage())?.map(watts);
    let power_limit = device.enforced_power_limit();
    let power_limit_watts = absent.value(index, "power limit", power_limit)?.map(watts);
    let ecc_enabled = absent
        .value(index, "ECC mode", device.is_ecc_enabled())?
        .is_some_and(|mode| mode.currently_enabled);
    let ecc = if ecc_enabled {
        absent.value(index, "ECC error counters", ecc_counters(device))?
    } else {
        None
    };
    let (pcie_tx, pcie_rx) = if pcie_throughput {
        // NVML reports KB/s over a 20 ms sample per direction.
        let kilobytes = |counter| device.pcie_throughput(counter).map(|kb| u64::from(kb) * 1024);
        (
            absent.value(index, "PCIe TX throughput", kilobytes(PcieUtilCounter::Send))?,
            absent.value(index, "PCIe RX throughput", kilobytes(PcieUtilCounter::Receive))?,
        )
    } else {
        (None, None)
    };
    let details = SlowDetails {
        bar1: absent.value(index, "BAR1 memory", device.bar1_memory_info())?.map(|bar1| {
            Bar1Memory { total_bytes: bar1.total, used_bytes: bar1.used, free_bytes: bar1.free }
        }),
        sm_clock_mhz: absent.value(index, "SM clock", device.clock_info(Clock::SM))?,
        memory_clock_mhz: absent.value(index, "memory clock", device.clock_info(Clock::Memory))?,
        throttle_reasons: absent
            .value(index, "throttle reasons", device.current_throttle_reasons())?
            .map(|reasons| reasons.bits()),
        ecc,
        retired_pages: absent.value(index, "retired pages", retired_pages(device))?,
        remapped_rows: absent.value(index, "remapped rows", remapped_rows(device))?,
        persistence_mode: absent.value(
            index,
            "persistence mode",
            device.is_in_persistent_mode(),
        )?,
        compute_mode: absent.value(index, "compute mode", device.compute_mode())?.map(|mode| {
            match mode {
                NvmlComputeMode::Default => ComputeMode::Default,
                NvmlComputeMode::ExclusiveThread => ComputeMode::ExclusiveThread,
                NvmlComputeMode::Prohibited => ComputeMode::Prohibited,
                NvmlComputeMode::ExclusiveProcess => ComputeMode::ExclusiveProcess,
            }
        }),
        mig_enabled: absent
            .value(index, "MIG mode", device.mig_mode())?
            .map(|mode| mode.current == 1),
        pcie_tx_bytes_per_second: pcie_tx,
        pcie_rx_bytes_per_second: pcie_rx,
        energy_millijoules: absent.value(
            index,
            "energy counter",
            device.total_energy_consumption(),
        )?,
        performance_state: absent
            .value(index, "performance state", device.performance_state())?
            .and_then(pstate_number),
        encoder_utilization_percent: absent
            .value(index, "encoder utilization", device.encoder_utilization())?
            .map(|info| info.utilization.min(100)),
        decoder_utilization_percent: absent
            .value(index, "decoder utilization", device.decoder_utilization())?
            .map(|info| info.utilization.min(100)),
        last_xid_unix_ms: None,
        xid_errors: BTreeMap::new(),
        // Joined from the kubelet's answer after the read.
        kubelet_allocatable: None,
    };
    Ok(SlowReading {
        allocations: None,
        at: clock.now(),
        processes,
        temperature_celsius,
        power_usage_watts,
        power_limit_watts,
        details,
        processes_left_out,
    })
}

/// P0 → 0 … P15 → 15, NVML's own numbers; an unknown state (32) is absent.
fn pstate_number(state: PerformanceState) -> Option<u8> {
    u8::try_from(state.as_c()).ok().filter(|&number| number <= 15)
}

fn ecc_counters(device: &Device<'_>) -> Result<EccCounters, NvmlError> {
    let count = |error, counter| device.total_ecc_errors(error, counter);
    Ok(EccCounters {
        volatile_corrected: count(MemoryError::Corrected, EccCounter::Volatile)?,
        volatile_uncorrected: count(MemoryError::Uncorrected, EccCounter::Volatile)?,
        aggregate_corrected: count(MemoryError::Corrected, EccCounter::Aggregate)?,
        aggregate_uncorrected: count(MemoryError::Uncorrected, EccCounter::Aggregate)?,
    })
}

fn retired_pages(device: &Device<'_>) -> Result<RetiredPages, NvmlError> {
    let single = device.retired_pages(RetirementCause::MultipleSingleBitEccErrors)?.len();
    let double = device.retired_pages(RetirementCause::DoubleBitEccError)?.len();
    Ok(RetiredPages {
        single_bit_ecc: single as u64,
        double_bit_ecc: double as u64,
        pending: device.are_pages_pending_retired().ok(),
    })
}

fn remapped_rows(device: &Device<'_>) -> Result<RemappedRows, NvmlError> {
    let samples = device.field_values_for(&REMAPPED_ROW_FIELDS)?;
    if samples.len() != REMAPPED_ROW_FIELDS.len() {
        // A partial answer must not read as zeros.
        return Err(NvmlError::NotSupported);
    }
    let mut values = [0u64; 4];
    for (slot, sample) in values.iter_mut().zip(samples) {
        *slot = match sample?.value? {
            SampleValue::U32(value) => u64::from(value),
            SampleValue::U64(value) => value,
            SampleValue::I64(value) => u64::try_from(value).unwrap_or(0),
            SampleValue::F64(value) => value.max(0.0) as u64,
        };
    }
    let [correctable, uncorrectable, pending, failure] = values;
    Ok(RemappedRows { correctable, uncorrectable, pending: pending != 0, failure: failure != 0 })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use tempfile::TempDir;

    use super::*;
    use crate::model::SharedStr;
    use crate::source::procfs::ProcReader;

    fn listed(pid: u32, used_bytes: u64) -> Listed {
        Listed { pid, kind: ProcessKind::Compute, used_bytes: Some(used_bytes) }
    }

    /// One slow sample's process list, identified as `processes` does.
    fn sample(identities: &Identities, used_bytes: u64) -> Vec<ProcessInfo> {
        let mut processes = vec![listed(10, used_bytes).process()];
        identify(&mut processes, &identities.of(0, &[10]), 1);
        processes
    }

    /// A proc root where each of `pids` is a `worker` process.
    fn proc_root(pids: impl IntoIterator<Item = u32>) -> TempDir {
        let root = TempDir::new().unwrap();
        for pid in pids {
            let dir = root.path().join(pid.to_string());
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("comm"), "worker\n").unwrap();
            fs::write(dir.join("cmdline"), "worker\0").unwrap();
            let stat =
                format!("{pid} (worker) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 500 0");
            fs::write(dir.join("stat"), stat).unwrap();
        }
        root
    }

    fn pids(processes: &[ProcessInfo]) -> Vec<u32> {
        processes.iter().map(|process| process.pid).collect()
    }

    fn listed_pids(processes: &[Listed]) -> Vec<u32> {
        processes.iter().map(|process| process.pid).collect()
    }

    #[test]
    fn under_the_cap_only_the_kept_processes_are_read_from_proc() {
        let root = proc_root(1000..1256);
        let identities = Identities::new(ProcReader::new(root.path(), 64));
        // Sizes in no order, so the kept ones are not simply the first listed.
        let size = |pid: u32| u64::from(pid.wrapping_mul(2_654_435_761) % 4096) << 20;
        let listed: Vec<Listed> = (1000..1256).map(|pid| listed(pid, size(pid))).collect();
        let mut expected = listed.clone();
        expected.sort_by(Listed::cap_order);
        expected.truncate(64);

        let (kept, left_out) = keep_and_identify(0, listed, &identities, 64);
        assert_eq!(left_out, 192);
        assert_eq!(
            pids(&kept),
            listed_pids(&expected),
            "the 64 first in the cap's order, in that order"
        );
        assert!(kept.iter().all(|process| process.name.as_deref() == Some("worker")));
        let read: Vec<u32> =
            (1000..1256).filter(|&pid| identities.start_time_of(0, pid).is_some()).collect();
        let mut kept_pids = pids(&kept);
        kept_pids.sort_unstable();
        assert_eq!(read, kept_pids, "/proc was read for the kept processes alone");
    }

    #[test]
    fn a_process_back_above_the_cap_keeps_its_identity_without_a_new_read() {
        let root = proc_root([1, 2, 3]);
        let identities = Identities::new(ProcReader::new(root.path(), 64));
        let sample = |sizes: [u64; 3]| {
            let listed = (1..=3).zip(sizes).map(|(pid, size)| listed(pid, size)).collect();
            keep_and_identify(0, listed, &identities, 2)
        };
        assert_eq!(pids(&sample([30, 20, 10]).0), [1, 2]);
        assert_eq!(pids(&sample([30, 10, 20]).0), [1, 3], "2 is listed but left out");
        // Unreadable from now on: only what is kept can name it.
        fs::remove_dir_all(root.path().join("2")).unwrap();
        let (kept, left_out) = sample([30, 40, 20]);
        assert_eq!((pids(&kept), left_out), (vec![2, 1], 1));
        assert_eq!(kept[0].name.as_deref(), Some("worker"), "not read again");
    }

    #[test]
    fn a_pid_in_several_lists_is_one_process_with_its_largest_usage() {
        let merged = merge(
            [
                (7, ProcessKind::Compute, Some(10)),
                (3, ProcessKind::Compute, None),
                (7, ProcessKind::Graphics, Some(30)),
                (7, ProcessKind::Mps, None),
            ]
            .into_iter()
            .map(|(pid, kind, used_bytes)| Listed { pid, kind, used_bytes }),
        );
        assert_eq!(listed_pids(&merged), [3, 7]);
        assert_eq!(merged[1].used_bytes, Some(30));
        assert_eq!(merged[1].kind, ProcessKind::ComputeAndGraphics);
        assert_eq!(merged[0].used_bytes, None, "unknown usage stays unknown");
    }

    #[test]
    fn the_listing_is_cut_as_the_model_cuts_a_process_list() {
        // Ties in size, unknown sizes and lists within and over the cap:
        // the cut on 24-byte listings keeps what `keep_by_cap_order` keeps
        // from whole processes, in the same order.
        let root = proc_root([]);
        let identities = Identities::new(ProcReader::new(root.path(), 64));
        let mut rng = fastrand::Rng::with_seed(37);
        for round in 0..200 {
            let count = rng.usize(0..40);
            let listing: Vec<Listed> = (0..count)
                .map(|_| Listed {
                    pid: rng.u32(1..60),
                    kind: ProcessKind::Compute,
                    used_bytes: rng.bool().then(|| rng.u64(0..4) << 20),
                })
                .collect();
            let merged = merge(listing.into_iter());
            let max = rng.usize(0..30);
            let mut expected: Vec<ProcessInfo> = merged.iter().map(|l| l.process()).collect();
            let expected_left_out = crate::model::keep_by_cap_order(&mut expected, max);
            let (kept, left_out) = keep_and_identify(0, merged, &identities, max);
            assert_eq!(left_out, expected_left_out, "round {round}");
            assert_eq!(pids(&kept), pids(&expected), "round {round}, cap {max}");
            let sizes =
                |list: &[ProcessInfo]| list.iter().map(|p| p.used_bytes).collect::<Vec<_>>();
            assert_eq!(sizes(&kept), sizes(&expected), "round {round}");
        }
    }

    #[test]
    fn an_unchanged_process_shares_its_identity_strings_from_sample_to_sample() {
        let root = TempDir::new().unwrap();
        let dir = root.path().join("10");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("comm"), "python3\n").unwrap();
        fs::write(dir.join("cmdline"), "python3\0train.py\0").unwrap();
        let id = "ab".repeat(32);
        let cgroup = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-\
             pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-{id}.scope\n"
        );
        fs::write(dir.join("cgroup"), cgroup).unwrap();
        let stat = "10 (python3) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 500 0";
        fs::write(dir.join("stat"), stat).unwrap();
        let identities = Identities::new(ProcReader::new(root.path(), 64));

        let first = sample(&identities, 1 << 30);
        let second = sample(&identities, 2 << 30);
        let (a, b) = (&first[0], &second[0]);
        assert_eq!(b.name.as_deref(), Some("python3"));
        assert_eq!(b.details.cmdline.as_deref(), Some("python3 train.py"));
        assert_eq!(b.details.container_id.as_deref(), Some(id.as_str()));
        assert!(b.details.pod_uid.is_some());
        let shared = |x: &Option<SharedStr>, y: &Option<SharedStr>| match (x, y) {
            (Some(x), Some(y)) => SharedStr::ptr_eq(x, y),
            _ => false,
        };
        assert!(shared(&a.name, &b.name), "the name is one string, not a copy per sample");
        assert!(shared(&a.details.cmdline, &b.details.cmdline));
        assert!(shared(&a.details.container_id, &b.details.container_id));
        assert!(shared(&a.details.pod_uid, &b.details.pod_uid));
    }
}
