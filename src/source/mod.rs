//! The device-source seam: what the sampler reads devices through.
//!
//! Owns: the [`DeviceSource`] trait, its error type, and the implementations
//! that exist (simulator, trace replay, NVML availability) and the
//! decorators that wrap them (`join`: facts from outside the source joined
//! onto slow readings; the trace recorder).
//! Depends on: `model`, `clock`. Knows nothing of history, analysis or HTTP.
//!
//! Every method is a *blocking* call (a driver call, file I/O). The sampler
//! runs each on `spawn_blocking` with a deadline; implementations never need
//! to be async and must never panic on driver or file input.

mod config;
pub mod cuda;
pub mod join;
pub mod nvml;
pub mod probe;
pub mod procfs;
pub mod simulator;
pub mod trace;

pub use config::{MAX_SPEED, Simulation, SimulatorConfig, SourceConfig, SourceSelection};

use std::borrow::Cow;
use std::sync::Arc;

use crate::model::{DeviceInfo, ErrorKind, FastReading, SlowReading};

/// A set of devices that can be listed and read.
pub trait DeviceSource: Send + Sync + 'static {
    /// Short name for logs and metrics: `simulator`, `replay`, `nvml`.
    fn name(&self) -> &'static str;

    /// Lists the devices to monitor, in index order.
    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError>;

    /// Reads the fast tier (memory, utilization) of the device at `index`.
    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError>;

    /// Reads the slow tier (processes, temperature, power, …) of the device,
    /// keeping at most `max_processes` processes in
    /// [`crate::model::ProcessInfo::cap_order`] (the rest counted in
    /// `processes_left_out`). A source cuts as early as it can, before any
    /// per-process work (a `/proc` read, a join), so processes past the cap
    /// cost only their listing.
    fn read_slow(&self, index: u32, max_processes: usize) -> Result<SlowReading, SourceError>;

    /// Changes whenever the devices this source would list differ from its
    /// last listing (a MIG reconfiguration); the sampler then lists again.
    /// Sources whose device set never changes keep the default.
    fn layout_generation(&self) -> u64 {
        0
    }
}

/// A shared source is a source, so wrappers like the recorder can take one.
impl<T: DeviceSource + ?Sized> DeviceSource for Arc<T> {
    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        (**self).devices()
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        (**self).read_fast(index)
    }

    fn read_slow(&self, index: u32, max_processes: usize) -> Result<SlowReading, SourceError> {
        (**self).read_slow(index, max_processes)
    }

    fn layout_generation(&self) -> u64 {
        (**self).layout_generation()
    }
}

/// Why a source call produced no reading.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SourceError {
    /// The device stopped answering (NVML `GPU_IS_LOST`, a simulated loss).
    #[error("device {index} is lost: {reason}")]
    DeviceLost { index: u32, reason: String },
    /// No device with that index exists in this source.
    #[error("no device with index {index}")]
    UnknownDevice { index: u32 },
    /// The driver or library cannot be used at all.
    #[error("source unavailable: {reason}")]
    Unavailable { reason: String },
    /// A driver call failed for a reason other than the above. `call` is
    /// borrowed from the driver binding, owned when replayed from a trace.
    #[error("driver call {call} failed on device {index}: {reason}")]
    Driver { index: u32, call: Cow<'static, str>, reason: String },
    /// A replayed trace has no more readings of this tier for the device.
    #[error("the trace has no more {tier} readings for device {index}")]
    TraceEnded { index: u32, tier: Tier },
    /// Writing a recorded trace failed; the reading itself was fine but is
    /// reported as an error so the operator learns the trace is incomplete.
    #[error("writing the trace {path} failed: {reason}")]
    Record { path: String, reason: String },
}

impl SourceError {
    /// Stable label value for `vramd_source_errors_total{kind}`.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SourceError::DeviceLost { .. } => ErrorKind::DeviceLost,
            SourceError::UnknownDevice { .. } => ErrorKind::UnknownDevice,
            SourceError::Unavailable { .. } => ErrorKind::Unavailable,
            SourceError::Driver { .. } => ErrorKind::Driver,
            SourceError::TraceEnded { .. } => ErrorKind::TraceEnded,
            SourceError::Record { .. } => ErrorKind::Record,
        }
    }
}

/// The two sampling tiers (defined with the readings they produce).
pub use crate::model::Tier;
