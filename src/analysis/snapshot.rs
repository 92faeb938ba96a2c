//! What one analysis pass found, per device, and the board that publishes
//! the latest pass to its readers: the alert rules (the facts), `/metrics`
//! and the REST API (the summaries).
//!
//! The analysis task replaces the snapshot after each pass; readers clone
//! an `Arc` and never wait on a pass.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::model::{AllocatorStats, DeviceInfo, MemoryInfo, OomEvent, ProbeReading, Timestamp};

use super::leak::LeakFinding;
use super::summary::DeviceAnalysis;

/// One pass over every listed device, in the store's order.
#[derive(Clone, Debug, Default)]
pub struct AnalysisSnapshot {
    /// The pass's clock (the newest sample); `None` before the first pass.
    pub at: Option<Timestamp>,
    pub devices: Vec<DeviceSnapshot>,
}

impl AnalysisSnapshot {
    /// The published summary of the device with `uuid`.
    pub fn analysis(&self, uuid: &str) -> Option<&DeviceAnalysis> {
        self.devices.iter().find(|device| device.facts.info.uuid == uuid).map(|d| &d.analysis)
    }
}

/// One device's findings: the facts the alert rules judge, and the summary
/// published on `/metrics` and the REST API.
#[derive(Clone, Debug)]
pub struct DeviceSnapshot {
    pub facts: DeviceFacts,
    pub analysis: DeviceAnalysis,
}

/// What the rules need about one device beyond its summary: identity,
/// health, the latest reading, processes, Xid errors and the probe.
#[derive(Clone, Debug)]
pub struct DeviceFacts {
    pub info: DeviceInfo,
    /// Not lost: answered its latest fast read, or not read yet (no
    /// failure either); `device_lost` fires on `!up`.
    pub up: bool,
    /// Why the latest fast read failed, when it did.
    pub failure: Option<String>,
    pub memory: Option<MemoryInfo>,
    pub processes: Vec<ProcessFacts>,
    pub xid_in_window: Option<u64>,
    /// The latest successful CUDA probe of the device, while current.
    pub probe: Option<ProbeReading>,
    /// Allocator OOM events that arrived within the OOM window, oldest
    /// first: each is an OOM as it happened, ahead of any `num_ooms` step.
    pub oom_events: Vec<Arc<OomEvent>>,
}

#[derive(Clone, Debug)]
pub struct ProcessFacts {
    pub pid: u32,
    pub name: Option<crate::model::SharedStr>,
    /// Latest allocator statistics, when the process reports them.
    pub allocator: Option<AllocatorStats>,
    /// The snapshot summary the process reported with it, if any.
    pub snapshot: Option<crate::model::SnapshotSummary>,
    /// A preallocated pool's ceiling (JAX `bytes_limit`), if reported.
    pub pool_limit_bytes: Option<u64>,
    pub retries_in_window: Option<u64>,
    /// Whether those retries are the driver trace's (no reporter speaks).
    pub retries_from_driver: bool,
    pub ooms_in_window: Option<u64>,
    pub leak: Option<LeakFinding>,
}

/// The latest published analysis.
#[derive(Default)]
pub struct AnalysisBoard {
    latest: RwLock<Arc<AnalysisSnapshot>>,
}

impl AnalysisBoard {
    pub fn latest(&self) -> Arc<AnalysisSnapshot> {
        self.latest.read().clone()
    }

    pub fn analysis(&self, uuid: &str) -> Option<DeviceAnalysis> {
        self.latest.read().analysis(uuid).cloned()
    }

    pub fn publish(&self, snapshot: Arc<AnalysisSnapshot>) {
        *self.latest.write() = snapshot;
    }
}
