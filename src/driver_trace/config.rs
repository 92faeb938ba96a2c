//! `[driver_trace]`: whether the eBPF trace of libcuda's allocation calls
//! runs, and its bounds. Depends only on `setting`.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setting::{ByteSize, Form, KIB, Keys, MIB, hours, ms, non_zero, secs};

/// Whether the driver trace runs (`driver_trace.mode`).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TraceMode {
    /// On when the daemon holds the privilege (root, or CAP_SYS_ADMIN and
    /// CAP_SYS_PTRACE), else off with one log line.
    #[default]
    Auto,
    /// On; start-up fails (exit 1) without the privilege, naming what is missing.
    On,
    Off,
}

impl TraceMode {
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// `[driver_trace]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DriverTraceConfig {
    /// trace every GPU process's CUDA allocations with eBPF uprobes on libcuda: "auto" (when privileged), "on" or "off"
    pub mode: TraceMode,
    /// processes whose allocations are kept at once; events of further processes are dropped and counted
    pub max_processes: NonZeroUsize,
    /// live allocations kept per process; further ones are counted but not kept (their bytes are missing)
    pub max_live_allocations: NonZeroUsize,
    /// contexts, and threads with a current context, followed per process to tell which device an allocation is on; beyond, a thread's allocations count on the process's lowest listed device
    pub max_contexts: NonZeroUsize,
    /// traced calls handled per second; beyond, they wait in the ring buffer, which drops (and counts) what does not fit
    pub max_events_per_second: NonZeroUsize,
    /// size of the kernel's ring buffer of traced calls (32 bytes each, 40 with its header), rounded up to a power of two; it counts twice in the daemon's RSS (the kernel maps it twice)
    pub ring_buffer_bytes: ByteSize,
    /// distinct libcuda files (device and inode) probed, or tried and refused, at most
    pub max_libraries: NonZeroUsize,
    /// an out-of-memory failure not followed within this by a successful allocation at least as large is an OOM (allocator_oom); one that is, a retry
    pub oom_retry_window: Duration,
    /// how often listed processes whose maps named no libcuda yet have their /proc/PID/maps read for one not probed yet (a process's maps that named one are not read again while it stays listed), and exited processes forgotten
    pub discovery_interval: Duration,
}

impl Default for DriverTraceConfig {
    fn default() -> Self {
        Self {
            mode: TraceMode::Auto,
            max_processes: non_zero(1024),
            max_live_allocations: non_zero(65_536),
            max_contexts: non_zero(256),
            max_events_per_second: non_zero(200_000),
            ring_buffer_bytes: ByteSize(MIB),
            max_libraries: non_zero(16),
            oom_retry_window: ms(250),
            discovery_interval: secs(1),
        }
    }
}

impl DriverTraceConfig {
    pub fn check(&self, keys: &mut Keys) {
        let modes = TraceMode::ALL.iter().map(|mode| mode.as_str()).collect();
        keys.words("mode", Form::Choice(modes), "\"auto\", \"on\" or \"off\"");
        keys.count("max_processes", self.max_processes.get() as u64, 1, 100_000);
        keys.count("max_live_allocations", self.max_live_allocations.get() as u64, 1, 10_000_000);
        keys.count("max_contexts", self.max_contexts.get() as u64, 1, 65_536);
        keys.count("max_events_per_second", self.max_events_per_second.get() as u64, 1, 10_000_000);
        keys.size("ring_buffer_bytes", self.ring_buffer_bytes, 4 * KIB, 1024 * MIB);
        keys.count("max_libraries", self.max_libraries.get() as u64, 1, 1024);
        keys.duration("oom_retry_window", self.oom_retry_window, ms(200), ms(800));
        keys.duration("discovery_interval", self.discovery_interval, ms(100), hours(1));
    }
}
