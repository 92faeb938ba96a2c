use std::collections::HashMap;

use super::proto::{
    ClaimResource, Container, ContainerDevices, ContainerResources, DynamicResource,
    ListContainersResponse, ListPodResourcesResponse, PodResources,
};
use super::*;
use crate::model::{
    DeviceInfo, MigInfo, PodAllocation, ProcessDetails, ProcessInfo, SlowReading, Timestamp,
};

const GPU0: &str = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20";
const MIG: &str = "MIG-2f0b7f3c-1111-5a1e-8c2d-4e6f8a0b2c4d";

fn gpu(index: u32, uuid: &str) -> DeviceInfo {
    DeviceInfo {
        index,
        uuid: uuid.to_owned(),
        name: "NVIDIA H100 80GB HBM3".to_owned(),
        pci_bus_id: None,
        driver_version: None,
        mig: None,
    }
}

fn mig(index: u32, uuid: &str) -> DeviceInfo {
    DeviceInfo {
        mig: Some(MigInfo {
            parent_index: 0,
            parent_uuid: GPU0.to_owned(),
            slot: 0,
            profile: Some("1g.10gb".to_owned()),
            gpu_instance_id: None,
            compute_instance_id: None,
        }),
        ..gpu(index, uuid)
    }
}

fn pod(name: &str, resource: &str, ids: &[&str]) -> PodResources {
    PodResources {
        name: name.to_owned(),
        namespace: "ml".to_owned(),
        containers: vec![ContainerResources {
            name: "main".to_owned(),
            devices: vec![ContainerDevices {
                resource_name: resource.to_owned(),
                device_ids: ids.iter().map(|id| (*id).to_owned()).collect(),
            }],
            dynamic_resources: vec![],
        }],
    }
}

fn labelled(id: &str, labels: &[(&str, &str)]) -> Container {
    Container {
        id: id.to_owned(),
        metadata: None,
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
    }
}

fn process(pid: u32, container_id: Option<&str>) -> ProcessInfo {
    ProcessInfo {
        pid,
        name: Some("python3".into()),
        used_bytes: Some(1 << 30),
        allocator: None,
        details: ProcessDetails {
            container_id: container_id.map(Into::into),
            ..ProcessDetails::default()
        },
    }
}

fn reading(processes: Vec<ProcessInfo>) -> SlowReading {
    SlowReading::listing(Timestamp::from_unix_millis(1_700_000_000_000), Some(processes))
}

#[test]
fn replica_suffixes_are_stripped_for_the_match_and_kept() {
    assert_eq!(split_replica("GPU-abc::3"), ("GPU-abc", Some("3")));
    assert_eq!(split_replica("MIG-abc::0"), ("MIG-abc", Some("0")));
    assert_eq!(split_replica("GPU-abc"), ("GPU-abc", None));
    // Nothing on one side is no replica.
    assert_eq!(split_replica("GPU-abc::"), ("GPU-abc::", None));
    assert_eq!(split_replica("::3"), ("::3", None));
}

/// GKE's device plugin names time-shared replicas `nvidiaN/vgpuK`, MIG
/// partitions `nvidiaN/giM`, and both at once `nvidiaN/giM/vgpuK`; the
/// NVIDIA device plugin (and EKS) suffixes shared IDs with `::K`.
#[test]
fn gke_and_device_plugin_sharing_ids_split_into_device_and_replica() {
    assert_eq!(split_replica("nvidia6/vgpu0"), ("nvidia6", Some("0")));
    assert_eq!(split_replica("nvidia6/vgpu12"), ("nvidia6", Some("12")));
    assert_eq!(split_replica("nvidia0/gi2"), ("nvidia0/gi2", None));
    assert_eq!(split_replica("nvidia0/gi2/vgpu3"), ("nvidia0/gi2", Some("3")));
    assert_eq!(split_replica("nvidia6::4"), ("nvidia6", Some("4")));
    assert_eq!(split_replica(&format!("{GPU0}::2")), (GPU0, Some("2")));
    // Not a replica: no number, or nothing before it.
    assert_eq!(split_replica("nvidia6/vgpu"), ("nvidia6/vgpu", None));
    assert_eq!(split_replica("nvidia6/vgpux"), ("nvidia6/vgpux", None));
    assert_eq!(split_replica("/vgpu1"), ("/vgpu1", None));
}

#[test]
fn gke_mig_partitions_match_the_mig_device_by_parent_and_gpu_instance() {
    let mut on_gpu_2 = mig(5, MIG);
    if let Some(info) = on_gpu_2.mig.as_mut() {
        info.parent_index = 2;
        info.gpu_instance_id = Some(7);
    }
    assert!(device_matches(&on_gpu_2, "nvidia2/gi7"));
    assert!(!device_matches(&on_gpu_2, "nvidia2/gi1"), "another GPU instance");
    assert!(!device_matches(&on_gpu_2, "nvidia5/gi7"), "another GPU");
    assert!(!device_matches(&on_gpu_2, "nvidia2"), "the whole GPU is not the partition");
    assert!(!device_matches(&gpu(2, GPU0), "nvidia2/gi7"), "the partition is not the whole GPU");
    assert!(!device_matches(&on_gpu_2, "nvidia2/gi"));
    assert!(!device_matches(&on_gpu_2, "nvidia2/gi7/x"));
    // Without a known GPU instance ID nothing can match it.
    let mut unknown = on_gpu_2.clone();
    if let Some(info) = unknown.mig.as_mut() {
        info.gpu_instance_id = None;
    }
    assert!(!device_matches(&unknown, "nvidia2/gi7"));
}

#[test]
fn allocations_of_gke_time_sharing_and_mig_ids_keep_their_replicas() {
    let response = ListPodResourcesResponse {
        pod_resources: vec![
            pod("a", "nvidia.com/gpu", &["nvidia6/vgpu0"]),
            pod("b", "nvidia.com/gpu", &["nvidia6/vgpu1"]),
            pod("c", "nvidia.com/gpu", &["nvidia0/gi2"]),
            pod("d", "nvidia.com/gpu", &["nvidia0/gi2/vgpu1"]),
        ],
    };
    let (kept, _) = allocations(response, 10);
    let ids: Vec<(&str, Option<&str>)> = kept
        .iter()
        .map(|entry| (entry.device_id.as_str(), entry.allocation.replica.as_deref()))
        .collect();
    assert_eq!(
        ids,
        [
            ("nvidia6", Some("0")),
            ("nvidia6", Some("1")),
            ("nvidia0/gi2", None),
            ("nvidia0/gi2", Some("1"))
        ]
    );
}

/// A container holding GPUs through a DRA `ResourceClaim`.
fn claimed(pod_name: &str, claim: &str, devices: &[(&str, &str)]) -> PodResources {
    let mut holder = pod(pod_name, "nvidia.com/gpu", &[]);
    holder.containers[0].devices.clear();
    holder.containers[0].dynamic_resources = vec![DynamicResource {
        claim_name: claim.to_owned(),
        claim_namespace: "ml".to_owned(),
        claim_resources: devices
            .iter()
            .map(|(driver, device)| ClaimResource {
                driver_name: (*driver).to_owned(),
                pool_name: "node-1".to_owned(),
                device_name: (*device).to_owned(),
            })
            .collect(),
    }];
    holder
}

/// Issue 34, item 4: a GPU held through a DRA claim is allocated to its
/// pod, with the claim's name and namespace.
#[test]
fn dra_claims_allocate_gpus_with_the_claims_name_and_namespace() {
    let response = ListPodResourcesResponse {
        pod_resources: vec![
            claimed("train-0", "train-gpus", &[("gpu.nvidia.com", "gpu-0")]),
            claimed("infer-0", "infer-gpu", &[("gpu.nvidia.com", MIG)]),
            // Named by placement, not by anything a reading carries; and
            // another vendor's driver: no allocation.
            claimed("small", "mig-claim", &[("gpu.nvidia.com", "gpu-0-mig-1g10gb-19-0")]),
            claimed("nic", "net-claim", &[("dra.example.com", "gpu-0")]),
        ],
    };
    let (kept, dropped) = allocations(response, 10);
    assert_eq!(dropped, 0);
    let ids: Vec<&str> = kept.iter().map(|entry| entry.device_id.as_str()).collect();
    assert_eq!(ids, ["nvidia0", MIG]);
    let attribution = Attribution { allocations: Some(kept), containers: None, allocatable: None };
    let mut whole = reading(vec![]);
    attribution.join(&gpu(0, GPU0), &mut whole);
    let expected = PodAllocation {
        pod: "train-0".into(),
        namespace: "ml".into(),
        container: "main".into(),
        resource: "gpu.nvidia.com".into(),
        replica: None,
        claim: Some("train-gpus".into()),
        claim_namespace: Some("ml".into()),
    };
    assert_eq!(whole.allocations, Some(vec![expected]));
    let mut on_mig = reading(vec![]);
    attribution.join(&mig(1, MIG), &mut on_mig);
    let claims: Vec<_> =
        on_mig.allocations.unwrap().into_iter().map(|a| a.claim.unwrap()).collect();
    assert_eq!(claims, ["infer-gpu"]);
}

#[test]
fn dra_device_names_map_to_vramd_device_ids() {
    assert_eq!(dra_device_id("gpu-3").as_deref(), Some("nvidia3"));
    assert_eq!(dra_device_id(GPU0).as_deref(), Some(GPU0));
    assert_eq!(dra_device_id(MIG).as_deref(), Some(MIG));
    for other in ["gpu-", "gpu-x", "gpu-0-mig-1g10gb-19-0", "gpu-vfio-0", "GPU-", "GPU-x", ""] {
        assert_eq!(dra_device_id(other), None, "{other}");
    }
}

#[test]
fn only_nvidia_gpu_and_mig_resources_count() {
    for name in ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"] {
        assert!(is_gpu_resource(name), "{name}");
    }
    for name in ["nvidia.com/gpus", "example.com/gpu", "cpu", "nvidia.com/", "amd.com/gpu"] {
        assert!(!is_gpu_resource(name), "{name}");
    }
}

#[test]
fn kubelet_ids_match_by_uuid_or_by_index_name_for_whole_gpus() {
    assert!(device_matches(&gpu(0, GPU0), GPU0));
    assert!(device_matches(&gpu(0, GPU0), &GPU0.to_ascii_lowercase()));
    assert!(device_matches(&gpu(3, GPU0), "nvidia3"));
    assert!(!device_matches(&gpu(3, GPU0), "nvidia30"));
    assert!(!device_matches(&gpu(3, GPU0), "nvidia"));
    assert!(device_matches(&mig(1, MIG), MIG));
    // A MIG device's own index is no `nvidiaN` name.
    assert!(!device_matches(&mig(1, MIG), "nvidia1"));
    assert!(!device_matches(&gpu(0, GPU0), MIG));
}

#[test]
fn allocations_keep_gpus_and_mig_devices_up_to_the_bound() {
    let response = ListPodResourcesResponse {
        pod_resources: vec![
            pod("a", "nvidia.com/gpu", &[GPU0]),
            pod("b", "nvidia.com/mig-1g.10gb", &[MIG]),
            pod("c", "example.com/nic", &["eth1"]),
            pod("d", "nvidia.com/gpu", &["GPU-x::0", "GPU-x::1"]),
        ],
    };
    let (kept, dropped) = allocations(response.clone(), 100);
    assert_eq!(dropped, 0);
    let ids: Vec<&str> = kept.iter().map(|entry| entry.device_id.as_str()).collect();
    assert_eq!(ids, [GPU0, MIG, "GPU-x", "GPU-x"]);
    assert_eq!(kept[3].allocation.replica.as_deref(), Some("1"));
    assert_eq!(kept[1].allocation.resource, "nvidia.com/mig-1g.10gb");
    let (kept, dropped) = allocations(response, 2);
    assert_eq!((kept.len(), dropped), (2, 2));
}

#[test]
fn containers_are_named_from_the_kubelets_labels() {
    let id = "AB".repeat(32);
    let response = ListContainersResponse {
        containers: vec![
            labelled(
                &id,
                &[
                    ("io.kubernetes.pod.name", "train-0"),
                    ("io.kubernetes.pod.namespace", "ml"),
                    ("io.kubernetes.pod.uid", "0b7c3a52-1c4e-4f7a-9d61-2a1f1e0c9b11"),
                    ("io.kubernetes.container.name", "trainer"),
                ],
            ),
            // Started outside Kubernetes (no pod labels): skipped.
            labelled(&"cd".repeat(32), &[("maintainer", "someone")]),
        ],
    };
    let (table, dropped) = containers(response.clone(), 10);
    assert_eq!(dropped, 0);
    assert_eq!(table.len(), 1);
    let owner = &table[&"ab".repeat(32)];
    assert_eq!((owner.pod.as_str(), owner.namespace.as_str()), ("train-0", "ml"));
    assert_eq!(owner.container, "trainer");
    assert_eq!(owner.pod_uid.as_deref(), Some("0b7c3a52-1c4e-4f7a-9d61-2a1f1e0c9b11"));
    let (table, dropped) = containers(response, 0);
    assert_eq!((table.len(), dropped), (0, 1));
}

#[test]
fn the_join_labels_processes_and_lists_each_devices_allocations() {
    let (table, _) = containers(
        ListContainersResponse {
            containers: vec![labelled(
                &"ab".repeat(32),
                &[
                    ("io.kubernetes.pod.name", "train-0"),
                    ("io.kubernetes.pod.namespace", "ml"),
                    ("io.kubernetes.pod.uid", "uid-1"),
                    ("io.kubernetes.container.name", "trainer"),
                ],
            )],
        },
        10,
    );
    let (kept, _) = allocations(
        ListPodResourcesResponse {
            pod_resources: vec![
                pod("train-0", "nvidia.com/mig-1g.10gb", &[MIG]),
                // Listed twice (by UUID and by name): one allocation.
                pod("whole", "nvidia.com/gpu", &[GPU0, "nvidia0"]),
            ],
        },
        10,
    );
    let attribution =
        Attribution { allocations: Some(kept), containers: Some(table), allocatable: None };

    let mut on_mig = reading(vec![process(7, Some(&"ab".repeat(32))), process(8, None)]);
    attribution.join(&mig(1, MIG), &mut on_mig);
    let expected = PodAllocation {
        pod: "train-0".into(),
        namespace: "ml".into(),
        container: "main".into(),
        resource: "nvidia.com/mig-1g.10gb".into(),
        replica: None,
        claim: None,
        claim_namespace: None,
    };
    assert_eq!(on_mig.allocations, Some(vec![expected]));
    let processes = on_mig.processes.as_ref().unwrap();
    assert_eq!(processes[0].details.pod.as_deref(), Some("train-0"));
    assert_eq!(processes[0].details.container.as_deref(), Some("trainer"));
    assert_eq!(processes[0].details.pod_uid.as_deref(), Some("uid-1"));
    assert_eq!(processes[1].details.pod, None);

    let mut whole = reading(vec![]);
    attribution.join(&gpu(0, GPU0), &mut whole);
    assert_eq!(whole.allocations.as_ref().map(Vec::len), Some(1));

    // Answered, and no pod holds it: an empty list, not an absent one.
    let mut idle = reading(vec![]);
    attribution.join(&gpu(2, "GPU-idle"), &mut idle);
    assert_eq!(idle.allocations, Some(vec![]));

    // The kubelet never answered: allocations unknown.
    let unknown =
        Attribution { allocations: None, containers: Some(HashMap::new()), allocatable: None };
    let mut reading = reading(vec![]);
    unknown.join(&gpu(0, GPU0), &mut reading);
    assert_eq!(reading.allocations, None);
}

#[test]
fn a_reports_pod_stays_where_the_runtime_does_not_know_the_container() {
    let attribution =
        Attribution { allocations: None, containers: Some(HashMap::new()), allocatable: None };
    let mut from_report = process(9, Some(&"ef".repeat(32)));
    from_report.details.pod = Some("from-report".into());
    let mut reading = reading(vec![from_report]);
    attribution.join(&gpu(0, GPU0), &mut reading);
    let details = &reading.processes.as_ref().unwrap()[0].details;
    assert_eq!(details.pod.as_deref(), Some("from-report"));
}

#[test]
fn a_refresh_keeps_the_strings_of_unchanged_owners_for_the_processes_it_labels() {
    let answer = |pod: &str| ListContainersResponse {
        containers: vec![labelled(
            &"ab".repeat(32),
            &[
                ("io.kubernetes.pod.name", pod),
                ("io.kubernetes.pod.namespace", "ml"),
                ("io.kubernetes.container.name", "trainer"),
            ],
        )],
    };
    let label = |table: HashMap<String, PodRef>| {
        let attribution =
            Attribution { allocations: None, containers: Some(table), allocatable: None };
        let mut labelled = reading(vec![process(7, Some(&"ab".repeat(32)))]);
        attribution.join(&gpu(0, GPU0), &mut labelled);
        labelled.processes.unwrap().remove(0).details
    };
    let (first, _) = containers(answer("train-0"), 10);
    let (mut same, _) = containers(answer("train-0"), 10);
    share_unchanged(&mut same, Some(&first));
    let (before, after) = (label(first.clone()), label(same));
    let (Some(a), Some(b)) = (&before.pod, &after.pod) else { panic!("labelled: {after:?}") };
    assert!(crate::model::SharedStr::ptr_eq(a, b), "an unchanged owner keeps its strings");

    // A container whose labels changed takes the new answer's.
    let (mut moved, _) = containers(answer("train-1"), 10);
    share_unchanged(&mut moved, Some(&first));
    assert_eq!(label(moved).pod.as_deref(), Some("train-1"));
}

#[test]
fn allocatable_gpus_are_listed_once_without_replicas_and_joined_per_device() {
    let devices = |resource: &str, ids: &[&str]| ContainerDevices {
        resource_name: resource.to_owned(),
        device_ids: ids.iter().map(|id| (*id).to_owned()).collect(),
    };
    let answer = proto::AllocatableResourcesResponse {
        devices: vec![
            devices("nvidia.com/gpu", &[&format!("{GPU0}::0"), &format!("{GPU0}::1")]),
            devices("nvidia.com/mig-1g.10gb", &[MIG]),
            devices("example.com/sriov", &["nvidia1"]),
        ],
    };
    let (ids, dropped) = allocatable_devices(answer.clone(), 64);
    assert_eq!(ids, [GPU0, MIG], "each GPU once, replicas stripped, other resources skipped");
    assert_eq!(dropped, 0);
    assert_eq!(allocatable_devices(answer, 1), (vec![GPU0.to_owned()], 1));

    let attribution = Attribution {
        allocations: None,
        containers: None,
        allocatable: Some(vec![GPU0.to_owned()]),
    };
    let mut listed = reading(vec![]);
    attribution.join(&gpu(0, GPU0), &mut listed);
    assert_eq!(listed.details.kubelet_allocatable, Some(true));
    let mut other = reading(vec![]);
    attribution.join(&gpu(1, "GPU-00000000-0000-0000-0000-000000000001"), &mut other);
    assert_eq!(other.details.kubelet_allocatable, Some(false), "listed by the kubelet: no");
    let mut unknown = reading(vec![]);
    Attribution::default().join(&gpu(0, GPU0), &mut unknown);
    assert_eq!(unknown.details.kubelet_allocatable, None, "not asked: absent, not false");
}
