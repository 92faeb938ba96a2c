//! What the kubelet and the container runtime said, as vramd uses it: the
//! pure mapping from their answers to device allocations and to each
//! container's pod, and the join onto a slow reading.
//!
//! Owns: which resources count as GPUs, the replica of a shared ID (`::N`,
//! GKE's `/vgpuN`), matching a kubelet device ID to a vramd device (GPU
//! UUID, MIG UUID, `nvidiaN`, GKE's `nvidiaN/giM`),
//! and the container-ID → pod table. No I/O. Depends on `model` and
//! `proto` only.

use std::collections::HashMap;

use crate::model::{DeviceInfo, PodAllocation, SharedStr, SlowReading};

use super::proto;

/// The CRI labels the kubelet puts on every container it creates.
const LABEL_POD: &str = "io.kubernetes.pod.name";
const LABEL_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
const LABEL_CONTAINER: &str = "io.kubernetes.container.name";

/// Who a container belongs to, from its runtime labels. Shared strings:
/// every slow sample puts them on each of the container's processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub pod: SharedStr,
    pub namespace: SharedStr,
    pub pod_uid: Option<SharedStr>,
    pub container: SharedStr,
}

/// One device ID the kubelet handed to a container, with the ID as vramd
/// matches it (replica suffix stripped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAllocation {
    pub device_id: String,
    pub allocation: PodAllocation,
}

/// The latest answers, published whole for the source's joiner to join.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attribution {
    /// `None` until the kubelet answers, and again while it does not:
    /// allocations change, so an old list would mislabel devices.
    pub allocations: Option<Vec<DeviceAllocation>>,
    /// `None` until the runtime first answers. Kept through later failures:
    /// a container ID never changes owner, so an old entry stays true.
    pub containers: Option<HashMap<String, PodRef>>,
    /// The GPU device IDs (replica stripped) the kubelet could allocate;
    /// `None` until it answers that call, and for good when it does not
    /// offer it. Kept through failures: the set changes only when devices
    /// are plugged, unplugged or turn unhealthy.
    pub allocatable: Option<Vec<String>>,
}

impl Attribution {
    /// Labels the reading's processes with their pods (by container ID)
    /// and sets the device's allocations. A process whose container the
    /// runtime does not know keeps what its allocator report said.
    pub fn join(&self, info: &DeviceInfo, reading: &mut SlowReading) {
        if let Some(allocations) = &self.allocations {
            let mut mine: Vec<PodAllocation> = allocations
                .iter()
                .filter(|entry| device_matches(info, &entry.device_id))
                .map(|entry| entry.allocation.clone())
                .collect();
            // One series per allocation: a device listed twice for the same
            // container (by UUID and by name) is one allocation. The clones
            // are reference counts, not copies.
            mine.sort_by(|a, b| holder(a).cmp(&holder(b)));
            mine.dedup_by(|a, b| holder(a) == holder(b));
            reading.allocations = Some(mine);
        }
        if let Some(allocatable) = &self.allocatable {
            reading.details.kubelet_allocatable =
                Some(allocatable.iter().any(|id| device_matches(info, id)));
        }
        let (Some(containers), Some(processes)) = (&self.containers, reading.processes.as_mut())
        else {
            return;
        };
        for process in processes {
            let details = &mut process.details;
            let Some(owner) = details.container_id.as_deref().and_then(|id| containers.get(id))
            else {
                continue;
            };
            // Reference counts, not copies: the join runs on every slow
            // sample of every device.
            details.pod = Some(owner.pod.clone());
            details.namespace = Some(owner.namespace.clone());
            details.container = Some(owner.container.clone());
            if details.pod_uid.is_none() {
                details.pod_uid.clone_from(&owner.pod_uid);
            }
        }
    }
}

impl Attribution {
    /// The container IDs of the reading's processes that the runtime's
    /// latest answer does not list (all of them before its first answer).
    pub fn unplaced<'r>(&self, reading: &'r SlowReading) -> impl Iterator<Item = &'r str> {
        let processes = reading.processes.as_deref().unwrap_or_default();
        processes.iter().filter_map(|process| {
            let id = process.details.container_id.as_deref()?;
            let known = self.containers.as_ref().is_some_and(|table| table.contains_key(id));
            (!known).then_some(id)
        })
    }
}

/// Who holds an allocation, the order and identity of a device's list.
fn holder(a: &PodAllocation) -> (&SharedStr, &SharedStr, &SharedStr, &Option<SharedStr>) {
    (&a.namespace, &a.pod, &a.container, &a.replica)
}

/// Whether a kubelet resource name is a GPU vramd can match: whole GPUs
/// (`nvidia.com/gpu`, and `nvidia.com/gpu.shared` as time-slicing renames
/// it) and MIG devices (`nvidia.com/mig-<profile>`).
pub fn is_gpu_resource(name: &str) -> bool {
    name.strip_prefix("nvidia.com/")
        .is_some_and(|rest| rest == "gpu" || rest.starts_with("gpu.") || rest.starts_with("mig-"))
}

/// A device ID without its time-slicing / sharing replica, and the
/// replica: the NVIDIA device plugin's (and EKS's) suffix `GPU-abc::3` →
/// (`GPU-abc`, `Some("3")`), and GKE's last segment `nvidia6/vgpu0` →
/// (`nvidia6`, `Some("0")`), also after a MIG partition (`nvidia0/gi2/vgpu1`).
pub fn split_replica(id: &str) -> (&str, Option<&str>) {
    if let Some((base, replica)) = id.rsplit_once("::")
        && !base.is_empty()
        && !replica.is_empty()
    {
        return (base, Some(replica));
    }
    if let Some((base, last)) = id.rsplit_once('/')
        && let Some(replica) = last.strip_prefix("vgpu")
        && !base.is_empty()
        && number(replica).is_some()
    {
        return (base, Some(replica));
    }
    (id, None)
}

/// Whether a kubelet device ID (replica stripped) names this device: its
/// UUID (GPU or MIG, case as NVML writes it); `nvidia<index>` for a whole
/// GPU, as device plugins that list by index (GKE's among them) name it;
/// or GKE's `nvidia<index>/gi<M>` for the MIG device of GPU instance M on
/// that GPU.
pub fn device_matches(info: &DeviceInfo, device_id: &str) -> bool {
    if device_id.eq_ignore_ascii_case(&info.uuid) {
        return true;
    }
    let Some(rest) = device_id.strip_prefix("nvidia") else { return false };
    match (rest.split_once("/gi"), &info.mig) {
        (None, None) => number(rest) == Some(info.index),
        (Some((gpu, instance)), Some(mig)) => {
            number(gpu) == Some(mig.parent_index)
                && number(instance).is_some_and(|id| mig.gpu_instance_id == Some(id))
        }
        _ => false,
    }
}

/// A plain decimal number (no sign, no spaces).
fn number(text: &str) -> Option<u32> {
    text.bytes().all(|b| b.is_ascii_digit()).then(|| text.parse().ok()).flatten()
}

/// The DRA driver whose devices are NVIDIA GPUs (NVIDIA's DRA driver).
pub const DRA_GPU_DRIVER: &str = "gpu.nvidia.com";

/// The device ID vramd matches for a device NVIDIA's DRA driver names:
/// `gpu-N` is whole GPU N (`nvidiaN`), a GPU or MIG UUID is itself. Its
/// MIG devices are named by profile and memory placement
/// (`gpu-0-mig-1g10gb-…`), which a reading does not carry: `None`.
pub fn dra_device_id(device_name: &str) -> Option<String> {
    if let Some(index) = device_name.strip_prefix("gpu-").and_then(number) {
        return Some(format!("nvidia{index}"));
    }
    // NVML writes UUIDs with an uppercase prefix; the driver's own names
    // are lowercase (`gpu-0-mig-…`).
    let uuid = ["GPU-", "MIG-"].iter().find_map(|prefix| device_name.strip_prefix(prefix));
    uuid.is_some_and(|rest| {
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
    })
    .then(|| device_name.to_owned())
}

/// The GPU allocations in a pod-resources answer (device-plugin devices,
/// then DRA claims), at most `max` of them, and how many were left out
/// beyond that.
pub fn allocations(
    response: proto::ListPodResourcesResponse,
    max: usize,
) -> (Vec<DeviceAllocation>, usize) {
    let mut kept = Vec::new();
    let mut dropped = 0;
    let mut keep = |entry: DeviceAllocation| {
        if kept.len() < max {
            kept.push(entry);
        } else {
            dropped += 1;
        }
    };
    for pod in response.pod_resources {
        for container in pod.containers {
            let holder = |resource: &str| PodAllocation {
                pod: pod.name.as_str().into(),
                namespace: pod.namespace.as_str().into(),
                container: container.name.as_str().into(),
                resource: resource.into(),
                replica: None,
                claim: None,
                claim_namespace: None,
            };
            for devices in &container.devices {
                if !is_gpu_resource(&devices.resource_name) {
                    continue;
                }
                for id in &devices.device_ids {
                    let (base, replica) = split_replica(id);
                    let allocation = PodAllocation {
                        replica: replica.map(SharedStr::from),
                        ..holder(&devices.resource_name)
                    };
                    keep(DeviceAllocation { device_id: base.to_owned(), allocation });
                }
            }
            for claim in &container.dynamic_resources {
                for device in &claim.claim_resources {
                    let Some(device_id) = (device.driver_name == DRA_GPU_DRIVER)
                        .then(|| dra_device_id(&device.device_name))
                        .flatten()
                    else {
                        continue;
                    };
                    let allocation = PodAllocation {
                        claim: Some(claim.claim_name.as_str().into()),
                        claim_namespace: Some(claim.claim_namespace.as_str().into()),
                        ..holder(&device.driver_name)
                    };
                    keep(DeviceAllocation { device_id, allocation });
                }
            }
        }
    }
    (kept, dropped)
}

/// The GPU device IDs in an allocatable-resources answer, replica
/// stripped and each once (a time-sliced GPU is listed once per replica),
/// at most `max`, and how many were left out beyond that.
pub fn allocatable_devices(
    response: proto::AllocatableResourcesResponse,
    max: usize,
) -> (Vec<String>, usize) {
    let mut ids: Vec<String> = response
        .devices
        .iter()
        .filter(|devices| is_gpu_resource(&devices.resource_name))
        .flat_map(|devices| devices.device_ids.iter().map(|id| split_replica(id).0.to_owned()))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let dropped = ids.len().saturating_sub(max);
    ids.truncate(max);
    (ids, dropped)
}

/// The Kubernetes containers in a runtime answer by (lowercase) container
/// ID, at most `max`, and how many were left out beyond that. Containers
/// without the kubelet's pod labels (not started by Kubernetes) are skipped.
pub fn containers(
    response: proto::ListContainersResponse,
    max: usize,
) -> (HashMap<String, PodRef>, usize) {
    let mut table = HashMap::new();
    let mut dropped = 0;
    for mut container in response.containers {
        let (Some(pod), Some(namespace)) =
            (container.labels.remove(LABEL_POD), container.labels.remove(LABEL_NAMESPACE))
        else {
            continue;
        };
        if table.len() >= max {
            dropped += 1;
            continue;
        }
        let name = container
            .labels
            .remove(LABEL_CONTAINER)
            .or_else(|| container.metadata.map(|metadata| metadata.name))
            .unwrap_or_default();
        let owner = PodRef {
            pod: pod.into(),
            namespace: namespace.into(),
            pod_uid: container
                .labels
                .remove(LABEL_POD_UID)
                .filter(|uid| !uid.is_empty())
                .map(SharedStr::from),
            container: name.into(),
        };
        table.insert(container.id.to_ascii_lowercase(), owner);
    }
    (table, dropped)
}

/// Puts back the `previous` answer's entry for every container whose owner
/// did not change, so that the strings the processes carry stay the same
/// allocations from one refresh to the next (and the new copies are freed
/// at once) instead of one set per refresh for as long as readings keep it.
pub fn share_unchanged(
    table: &mut HashMap<String, PodRef>,
    previous: Option<&HashMap<String, PodRef>>,
) {
    let Some(previous) = previous else { return };
    for (id, owner) in table.iter_mut() {
        if let Some(known) = previous.get(id).filter(|known| *known == owner) {
            owner.clone_from(known);
        }
    }
}
