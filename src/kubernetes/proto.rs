//! The protobuf messages vramd exchanges with the kubelet and the container
//! runtime, derived by hand (no build script, no `protoc`), and the gRPC
//! method paths they travel on.
//!
//! Owns: only the messages and fields vramd reads; protobuf decoding skips
//! every other field, so an upstream addition cannot break them. Field
//! numbers and types follow the upstream definitions:
//! - `k8s.io/kubelet/pkg/apis/podresources/v1/api.proto` (package `v1`,
//!   service `PodResourcesLister`), read at kubernetes/kubelet commit
//!   63b3249 (2026-07-23); unchanged in these fields since v1 went GA in
//!   Kubernetes 1.20, except the DRA messages (`DynamicResource`,
//!   `ClaimResource`), whose driver, pool and device names came in 1.31.
//!   Those were not re-read against the upstream file in this change: the
//!   tags follow the published proto as quoted in the Kubernetes
//!   documentation (claim_name = 2, claim_namespace = 3, claim_resources =
//!   4; driver_name = 2, pool_name = 3, device_name = 4).
//! - `k8s.io/cri-api/pkg/apis/runtime/v1/api.proto` (package `runtime.v1`,
//!   service `RuntimeService`), read at kubernetes/cri-api commit 791729b
//!   (kubernetes-1.37.0-beta.0, 2026-07-23).
//!
//! The fake servers in `tests/support` encode with these same structs.
//! Depends on nothing but `prost`.

use std::collections::HashMap;

/// `/v1.PodResourcesLister/List`.
pub const POD_RESOURCES_LIST: &str = "/v1.PodResourcesLister/List";
/// `/v1.PodResourcesLister/GetAllocatableResources` (GA in Kubernetes
/// 1.28; an older kubelet answers `Unimplemented`).
pub const POD_RESOURCES_GET_ALLOCATABLE: &str = "/v1.PodResourcesLister/GetAllocatableResources";
/// `/runtime.v1.RuntimeService/ListContainers`.
pub const RUNTIME_LIST_CONTAINERS: &str = "/runtime.v1.RuntimeService/ListContainers";

/// `v1.ListPodResourcesRequest` (no fields).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodResourcesRequest {}

/// `v1.ListPodResourcesResponse`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `v1.AllocatableResourcesRequest` (no fields).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AllocatableResourcesRequest {}

/// `v1.AllocatableResourcesResponse`: every device the kubelet could hand
/// out, allocated or not (cpu_ids = 2 and memory not read).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AllocatableResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<ContainerDevices>,
}

/// `v1.PodResources` (cpu_ids = 4 and memory = 5 not read).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `v1.ContainerResources` (cpu_ids = 3, memory = 4 not read).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    /// Devices allocated through Dynamic Resource Allocation (with the
    /// kubelet's `KubeletPodResourcesDynamicResources` gate).
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

/// `v1.DynamicResource`: one `ResourceClaim` of the container (tag 1, the
/// class name, was removed upstream).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DynamicResource {
    #[prost(string, tag = "2")]
    pub claim_name: String,
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

/// `v1.ClaimResource`: one allocated device, named by its DRA driver, pool
/// and device name (Kubernetes 1.31+; cdi_devices = 1 and share_id = 5 not
/// read).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ClaimResource {
    #[prost(string, tag = "2")]
    pub driver_name: String,
    #[prost(string, tag = "3")]
    pub pool_name: String,
    #[prost(string, tag = "4")]
    pub device_name: String,
}

/// `v1.ContainerDevices` (topology = 3 not read).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

/// `runtime.v1.ListContainersRequest`: vramd sends no filter, so the
/// `ContainerFilter` message (tag 1) is never encoded.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListContainersRequest {}

/// `runtime.v1.ListContainersResponse`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListContainersResponse {
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<Container>,
}

/// `runtime.v1.Container`: the ID, the metadata and the labels the kubelet
/// sets (`io.kubernetes.pod.name`, …); sandbox ID, image, state, timestamps
/// and annotations (tags 2, 4–7, 9, 10) not read.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(map = "string, string", tag = "8")]
    pub labels: HashMap<String, String>,
}

/// `runtime.v1.ContainerMetadata` (attempt = 2 not read).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
}
