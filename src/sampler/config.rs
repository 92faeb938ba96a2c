//! `[sampler]`: how often and how patiently devices are read. The sampler
//! reads this struct directly; `app::Config` aggregates it and `config`
//! loads it. Depends only on `setting`.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::setting::{Keys, hours, mins, ms, non_zero, secs};

/// `[sampler]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SamplerConfig {
    /// how often memory and utilization are read
    pub fast_interval: Duration,
    /// how often processes, clocks, power and health are read
    pub slow_interval: Duration,
    // A training step of exactly the slow interval would be seen at one
    // phase only, its floor read by luck (issue 32).
    /// each slow read starts this much at most after its tick, at random, so reads see every phase of a periodic job; 0 reads on the tick
    pub slow_jitter: Duration,
    /// deadline of one driver call; a later answer is discarded
    pub call_timeout: Duration,
    /// processes kept per device and sample, largest first
    pub max_processes_per_device: NonZeroUsize,
    /// longest wait between attempts to list devices when the source is unavailable
    pub discovery_retry_max: Duration,
    // A host has at most 8 GPUs, or 56 MIG devices; a trace claiming
    // thousands would cost a task each and megabytes of /metrics.
    /// devices monitored at most, from any source; the rest are left out and logged
    pub max_devices: NonZeroUsize,
    // Driver calls run on these threads; a call stuck in the driver holds
    // one, and each device and tier has at most one stuck call.
    /// threads for blocking driver and file calls at most
    pub max_blocking_threads: NonZeroUsize,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            fast_interval: ms(250),
            slow_interval: secs(1),
            slow_jitter: secs(1),
            call_timeout: secs(2),
            max_processes_per_device: non_zero(64),
            discovery_retry_max: secs(60),
            max_devices: non_zero(64),
            max_blocking_threads: non_zero(64),
        }
    }
}

impl SamplerConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.duration("fast_interval", self.fast_interval, ms(10), hours(1));
        keys.duration("slow_interval", self.slow_interval, ms(100), hours(1))
            .note(", at least sampler.fast_interval");
        keys.duration("slow_jitter", self.slow_jitter, Duration::ZERO, hours(1))
            .note(", used up to sampler.slow_interval");
        keys.duration("call_timeout", self.call_timeout, ms(1), mins(1));
        keys.count(
            "max_processes_per_device",
            self.max_processes_per_device.get() as u64,
            1,
            1_024,
        );
        keys.duration("discovery_retry_max", self.discovery_retry_max, secs(1), hours(1));
        keys.count("max_devices", self.max_devices.get() as u64, 1, 1_024);
        keys.count("max_blocking_threads", self.max_blocking_threads.get() as u64, 4, 1_024);
    }
}
