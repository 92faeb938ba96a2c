//! `[probe]`: the CUDA driver probe, run in a short-lived child process,
//! and its scheduler. Depends only on `setting`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setting::{ByteSize, Form, GIB, Keys, MIB, TIB, days, hours, mins, ms, secs};

/// `[probe]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    /// run the CUDA driver probe (a short-lived child process per device)
    pub enabled: bool,
    /// how often each device is probed, in source time
    pub interval: Duration,
    /// a probe child still running after this is killed and counted as a timeout
    pub timeout: Duration,
    /// never probe a device with less NVML free memory than this
    #[serde(rename = "min_free")]
    pub min_free_bytes: ByteSize,
    /// free memory no probe allocation may go below
    #[serde(rename = "margin")]
    pub margin_bytes: ByteSize,
    /// block whose allocation and release are timed
    #[serde(rename = "block_size")]
    pub block_bytes: ByteSize,
    /// allocation and release pairs timed per probe
    pub samples: u32,
    // Off by default: the search briefly takes a device's free memory down
    // to probe.margin, which a workload allocating then would feel.
    /// search for the largest allocatable block (briefly takes free memory down to probe.margin)
    pub headroom: bool,
    /// the largest-block search stops after this, keeping its best answer
    pub headroom_time_budget: Duration,
    /// longest wait between probes of a device whose probes keep failing
    pub max_backoff: Duration,
    /// load the CUDA driver from this file instead of the system's libcuda.so.1
    pub cuda_library: Option<PathBuf>,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interval: mins(15),
            timeout: mins(1),
            min_free_bytes: ByteSize(2 * GIB),
            margin_bytes: ByteSize(GIB),
            block_bytes: ByteSize(64 * MIB),
            samples: 5,
            headroom: false,
            headroom_time_budget: secs(10),
            max_backoff: hours(6),
            cuda_library: None,
        }
    }
}

impl ProbeConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.flag("enabled");
        keys.duration("interval", self.interval, mins(1), hours(24));
        keys.duration("timeout", self.timeout, secs(1), mins(10));
        keys.size("min_free", self.min_free_bytes, 256 * MIB, TIB);
        keys.size("margin", self.margin_bytes, 64 * MIB, TIB);
        keys.size("block_size", self.block_bytes, MIB, 16 * GIB);
        keys.count("samples", self.samples, 1, 100);
        keys.flag("headroom");
        keys.duration("headroom_time_budget", self.headroom_time_budget, ms(100), mins(5))
            .note(", less than probe.timeout");
        keys.duration("max_backoff", self.max_backoff, mins(1), days(7))
            .note(", at least probe.interval");
        keys.words("cuda_library", Form::Path, "path; not set by default");
    }
}
