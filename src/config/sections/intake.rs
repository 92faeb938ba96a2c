//! `[ingest]` and `[kubernetes]`: what vramd learns beyond the driver,
//! allocator reports and OOM events POSTed by workloads and pod attribution
//! from the kubelet and the container runtime, with their bounds.
//!
//! Schema entries only (see `sections`); depends on the config schema
//! machinery and nothing outside `config`.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::error::ConfigError;
use crate::config::field::{ByteSize, de, ser};
use crate::config::keys::Accepts::{Int, Size, Time, Words};
use crate::config::keys::KeySpec;
use crate::config::schema::{GIB, KIB, MIB, TIB, hours, mins, ms, non_zero, secs, section, within};
use crate::config::walk::Values;

section! {
    /// `[ingest]`: allocator reports POSTed by workloads.
    pub struct IngestConfig "ingest" {
        /// file holding the bearer token writers from other hosts must send
        token_file "token_file": Option<PathBuf> = None,
            Words("path; not set by default (loopback only)");
        /// age after which an allocator report no longer counts
        ttl "ttl": Duration = secs(30), Time(secs(1), hours(1));
        /// allocator reports per second from one reporter
        rate_limit_per_second "rate_limit": NonZeroUsize = non_zero(10), Int(1, 1_000);
        /// reporters tracked at once
        max_reporters "max_reporters": NonZeroUsize = non_zero(1024), Int(1, 100_000);
        /// devices in one allocator report
        max_devices "max_devices": NonZeroUsize = non_zero(16), Int(1, 64);
        /// memory_stats keys per device in a report
        max_stats "max_stats": NonZeroUsize = non_zero(1024), Int(1, 65_536);
        /// allocator OOM events kept per device; the oldest is dropped beyond
        max_oom_events "max_oom_events": NonZeroUsize = non_zero(64), Int(1, 10_000);
        /// directory for allocator snapshots uploaded to OOM events
        snapshot_dir "snapshot_dir": Option<PathBuf> = None,
            Words("path; not set by default (uploads refused)");
        /// bytes of all uploaded snapshots together; the oldest upload goes first beyond
        max_snapshot_bytes "max_snapshot_bytes": ByteSize = ByteSize(4 * GIB), Size(MIB, 16 * TIB);
        /// bytes of one uploaded snapshot
        max_snapshot_upload "max_snapshot_upload": ByteSize = ByteSize(GIB), Size(KIB, 64 * GIB);
    }
}

section! {
    /// `[kubernetes]`: pod attribution from the kubelet and the container
    /// runtime (CRI), over their unix sockets.
    pub struct KubernetesConfig "kubernetes" {
        /// label GPUs and processes with their pods, from the kubelet and the container runtime
        enabled "enabled": bool = false, Words("true or false");
        /// the kubelet's pod-resources gRPC socket (device allocations)
        pod_resources_socket "pod_resources_socket": PathBuf =
            PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"), Words("path");
        /// the CRI runtime socket (containerd; /var/run/crio/crio.sock for CRI-O)
        runtime_socket "runtime_socket": PathBuf =
            PathBuf::from("/run/containerd/containerd.sock"), Words("path");
        /// how often both APIs are asked, in real time
        refresh_interval "refresh_interval": Duration = secs(10), Time(secs(1), hours(1));
        /// deadline of one call, connecting included
        call_timeout "call_timeout": Duration = secs(2),
            Time(ms(10), mins(1)) => ", at most kubernetes.refresh_interval";
        /// pod containers (runtime) and GPU allocations (kubelet) kept at most; answers are decoded up to 8 KiB per entry
        max_containers "max_containers": NonZeroUsize = non_zero(1024), Int(1, 100_000);
    }
}
