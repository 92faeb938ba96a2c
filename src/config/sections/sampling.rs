//! `[sampler]`, `[history]`, `[nvml]` and `[probe]`: how devices are read
//! (cadence, deadlines, caps, the driver library and what it is asked),
//! probed, and how long their readings are kept.
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
use crate::config::schema::{
    GIB, KIB, MIB, TIB, days, hours, mins, ms, non_zero, secs, section, within,
};
use crate::config::walk::Values;

use super::PATH;

section! {
    /// `[sampler]`: how often and how patiently devices are read.
    pub struct SamplerConfig "sampler" {
        /// how often memory and utilization are read
        fast_interval "fast_interval": Duration = ms(250), Time(ms(10), hours(1));
        /// how often processes, clocks, power and health are read
        slow_interval "slow_interval": Duration = secs(1),
            Time(ms(100), hours(1)) => ", at least sampler.fast_interval";
        /// deadline of one driver call; a later answer is discarded
        call_timeout "call_timeout": Duration = secs(2), Time(ms(1), mins(1));
        /// processes kept per device and sample, largest first
        max_processes_per_device "max_processes_per_device": NonZeroUsize = non_zero(64),
            Int(1, 1_024);
        /// longest wait between attempts to list devices when the source is unavailable
        discovery_retry_max "discovery_retry_max": Duration = secs(60), Time(secs(1), hours(1));
        // A host has at most 8 GPUs, or 56 MIG devices; a trace claiming
        // thousands would cost a task each and megabytes of /metrics.
        /// devices monitored at most, from any source; the rest are left out and logged
        max_devices "max_devices": NonZeroUsize = non_zero(64), Int(1, 1_024);
        // Driver calls run on these threads; a call stuck in the driver
        // holds one, and each device and tier has at most one stuck call.
        /// threads for blocking driver and file calls at most
        max_blocking_threads "max_blocking_threads": NonZeroUsize = non_zero(64), Int(4, 1_024);
    }
}

section! {
    /// `[history]`: the per-device ring buffers. Capacity per device and
    /// tier is `retention / interval` samples.
    pub struct HistoryConfig "history" {
        /// how far back history reaches
        retention "retention": Duration = hours(1),
            Time(secs(1), days(7)) => ", at most 10000000 fast samples";
    }
}

section! {
    /// `[nvml]`: the real driver source (used when neither `source.simulate`
    /// nor `source.replay` is set). `library_path` is not checked for
    /// existence at load time.
    pub struct NvmlConfig "nvml" {
        /// load NVML from this file instead of the system's libnvidia-ml.so.1
        library_path "library_path": Option<PathBuf> = None, Words(PATH);
        /// exit with status 1 when NVML cannot be initialised, instead of retrying
        require_gpu "require_gpu": bool = false, Words("true or false");
        // NVML init can take seconds with persistence mode off.
        /// deadline for initialising NVML and listing devices
        init_timeout "init_timeout": Duration = secs(30), Time(ms(100), mins(10));
        /// read PCIe TX/RX throughput on the slow tier (blocks ~20ms per direction)
        pcie_throughput "pcie_throughput": bool = false, Words("true or false");
        /// longest process command line kept, truncated beyond; 0 turns them off
        max_cmdline_bytes "max_cmdline_bytes": ByteSize = ByteSize(256), Size(0, 64 * KIB);
        /// watch NVML Xid error events on a dedicated thread
        xid_events "xid_events": bool = true, Words("true or false");
    }
}

section! {
    /// `[probe]`: the CUDA driver probe, run in a short-lived child process.
    pub struct ProbeConfig "probe" {
        /// run the CUDA driver probe (a short-lived child process per device)
        enabled "enabled": bool = true, Words("true or false");
        /// how often each device is probed, in source time
        interval "interval": Duration = mins(15), Time(mins(1), hours(24));
        /// a probe child still running after this is killed and counted as a timeout
        timeout "timeout": Duration = mins(1), Time(secs(1), mins(10));
        /// never probe a device with less NVML free memory than this
        min_free_bytes "min_free": ByteSize = ByteSize(2 * GIB), Size(256 * MIB, TIB);
        /// free memory no probe allocation may go below
        margin_bytes "margin": ByteSize = ByteSize(GIB), Size(64 * MIB, TIB);
        /// block whose allocation and release are timed
        block_bytes "block_size": ByteSize = ByteSize(64 * MIB), Size(MIB, 16 * GIB);
        /// allocation and release pairs timed per probe
        samples "samples": u32 = 5, Int(1, 100);
        // Off by default: the search briefly takes a device's free memory
        // down to probe.margin, which a workload allocating then would feel.
        /// search for the largest allocatable block (briefly takes free memory down to
        /// probe.margin)
        headroom "headroom": bool = false, Words("true or false");
        /// the largest-block search stops after this, keeping its best answer
        headroom_time_budget "headroom_time_budget": Duration = secs(10),
            Time(ms(100), mins(5)) => ", less than probe.timeout";
        /// longest wait between probes of a device whose probes keep failing
        max_backoff "max_backoff": Duration = hours(6),
            Time(mins(1), days(7)) => ", at least probe.interval";
        /// load the CUDA driver from this file instead of the system's libcuda.so.1
        cuda_library "cuda_library": Option<PathBuf> = None, Words(PATH);
    }
}
