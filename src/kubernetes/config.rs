//! `[kubernetes]`: pod attribution from the kubelet and the container
//! runtime (CRI), over their unix sockets. Depends only on `setting`.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setting::{Form, Keys, hours, mins, ms, non_zero, secs};

/// `[kubernetes]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// label GPUs and processes with their pods, from the kubelet and the container runtime
    pub enabled: bool,
    /// the kubelet's pod-resources gRPC socket (device allocations)
    pub pod_resources_socket: PathBuf,
    /// the CRI runtime socket (containerd; /var/run/crio/crio.sock for CRI-O)
    pub runtime_socket: PathBuf,
    // Real time, not scaled by `source.speed`: the kubelet runs on the
    // host's clock.
    /// how often both APIs are asked, in real time
    pub refresh_interval: Duration,
    /// deadline of one call, connecting included
    pub call_timeout: Duration,
    /// least time between a refresh and one made at once for a process in a container not asked about before
    pub lookup_interval: Duration,
    // Paid once per new container ID, on the slow tier's thread of the
    // device; bounded below sampler.call_timeout by app::Config.
    /// longest a slow reading waits for the refresh that places a container first seen in it; 0 exports it unlabelled until then
    pub lookup_wait: Duration,
    /// pod containers (runtime) and GPU allocations (kubelet) kept at most; answers are decoded up to 8 KiB per entry
    pub max_containers: NonZeroUsize,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            pod_resources_socket: PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"),
            runtime_socket: PathBuf::from("/run/containerd/containerd.sock"),
            refresh_interval: secs(10),
            call_timeout: secs(2),
            lookup_interval: secs(1),
            lookup_wait: ms(500),
            max_containers: non_zero(1024),
        }
    }
}

impl KubernetesConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.flag("enabled");
        keys.words("pod_resources_socket", Form::Path, "path");
        keys.words("runtime_socket", Form::Path, "path");
        keys.duration("refresh_interval", self.refresh_interval, secs(1), hours(1));
        keys.duration("call_timeout", self.call_timeout, ms(10), mins(1))
            .note(", at most kubernetes.refresh_interval");
        keys.duration("lookup_interval", self.lookup_interval, ms(100), hours(1));
        keys.duration("lookup_wait", self.lookup_wait, Duration::ZERO, secs(10))
            .note(", less than sampler.call_timeout");
        keys.count("max_containers", self.max_containers.get() as u64, 1, 100_000);
    }
}
