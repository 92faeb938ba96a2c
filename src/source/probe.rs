//! The CUDA probe seam: what the probe scheduler asks a device through.
//!
//! Owns: the [`Prober`] trait and [`ProbeRequest`]. Implementations: the
//! real probe in a child process (`source::cuda`) and the simulator.
//! Depends on: `model`. Like [`super::DeviceSource`], every call blocks (it
//! starts and waits for a process), so callers run it off the runtime.

use std::path::PathBuf;
use std::time::Duration;

use crate::model::{DeviceInfo, ProbeFailure, ProbeReading};

/// What one probe measures, and its bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeRequest {
    /// Size of the block whose allocation and release are timed.
    pub block_bytes: u64,
    /// Allocation/release pairs timed.
    pub samples: u32,
    /// Free memory no probe allocation may take the device below.
    pub margin_bytes: u64,
    /// Search for the largest allocatable block, stopping after this.
    pub headroom_time_budget: Option<Duration>,
    /// The probe is abandoned (its child killed) after this, real time.
    pub timeout: Duration,
    /// CUDA driver library to load; `libcuda.so.1` when not set.
    pub cuda_library: Option<PathBuf>,
    /// NVML library the probe reads its comparison values from.
    pub nvml_library: Option<PathBuf>,
}

/// Something that can run the CUDA probe on a device.
pub trait Prober: Send + Sync + 'static {
    /// Short name for logs: `cuda-child`, `simulator`.
    fn name(&self) -> &'static str;

    /// Probes one device and returns within `request.timeout` (plus the
    /// time to reap a killed child). Blocking.
    fn probe(
        &self,
        device: &DeviceInfo,
        request: &ProbeRequest,
    ) -> Result<ProbeReading, ProbeFailure>;
}
