//! Bounded in-memory history of every device, and its newest state.
//!
//! Owns: per-device ring buffers (fast and slow tier), the live state the
//! sampler last wrote, the peak tracker, window queries and the readiness
//! flag. Depends on: `model`. Knows nothing of sources, analysis or HTTP;
//! the sampler writes here and everything downstream only reads.

mod columnar;
mod config;
mod device;
mod peak;
mod points;
mod probe;
mod progress;
mod query;
mod ring;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

use crate::model::{DeviceInfo, OomEvent, Timestamp};

pub use columnar::{
    FigureRow, FigureSample, ProcessFigure, SLOW_CHUNK_LEN, SLOW_MERGED_LEN, SlowSnapshot, codec,
};
pub use config::HistoryConfig;
pub use device::{DeviceHistory, LiveState, ReadFailure, Sizing};
pub use peak::PeakTracker;
pub use points::{FastPoint, ProcessPoint, SlowPoint};
pub use probe::{ProbeAttempt, ProbeState};
pub use progress::{SamplingProgress, Stale};
pub use query::{
    Aggregate, Bucket, BucketCursor, Buckets, PointCursor, QueryError, RawPoints, WindowAnswer,
    WindowQuery,
};
pub use ring::{MAX_CHUNK_LEN, OutOfOrder, Ring, Snapshot, Span, Stamped};

/// What a new listing changed ([`HistoryStore::relist`]).
pub struct Relisted {
    /// New devices, whose sampling must start.
    pub added: Vec<Arc<DeviceHistory>>,
    /// Devices no longer listed, whose sampling must stop.
    pub removed: Vec<Arc<DeviceHistory>>,
}

/// All devices' histories. Devices are set when discovered and kept while
/// the source lists them (a lost device stays listed, marked down; a MIG
/// device removed by a reconfiguration goes).
pub struct HistoryStore {
    sizing: Sizing,
    devices: RwLock<Vec<Arc<DeviceHistory>>>,
    cycle_completed: AtomicBool,
    /// Signalled when something arrived that must be judged before the
    /// next analysis tick (an OOM event); one stored permit, so a burst
    /// asks for one pass.
    urgent: tokio::sync::Notify,
}

impl HistoryStore {
    pub fn new(sizing: Sizing) -> Self {
        Self {
            sizing,
            devices: RwLock::new(Vec::new()),
            cycle_completed: AtomicBool::new(false),
            urgent: tokio::sync::Notify::new(),
        }
    }

    /// Keeps `event` in `device`'s ring and asks for an analysis pass now:
    /// an allocation that failed is alerted within a second, not at the
    /// next `analysis.evaluation_interval` tick.
    pub fn record_oom(&self, device: &DeviceHistory, event: OomEvent) -> Arc<OomEvent> {
        let stored = device.record_oom(event);
        self.urgent.notify_one();
        stored
    }

    /// Completes once something was recorded that must be judged now
    /// ([`Self::record_oom`]) since the previous time it completed.
    pub async fn judgement_requested(&self) {
        self.urgent.notified().await;
    }

    /// Replaces the device list with freshly discovered devices and returns
    /// their histories, in the order given.
    pub fn set_devices(&self, infos: Vec<DeviceInfo>) -> Vec<Arc<DeviceHistory>> {
        let histories: Vec<Arc<DeviceHistory>> =
            infos.into_iter().map(|info| Arc::new(DeviceHistory::new(info, self.sizing))).collect();
        *self.devices.write() = histories.clone();
        histories
    }

    /// Replaces the device list after a new listing (a MIG
    /// reconfiguration) and says what changed. A device listed again with
    /// the same index and UUID keeps its history; one not listed any more
    /// is dropped with its history, so its series go rather than go stale.
    pub fn relist(&self, infos: Vec<DeviceInfo>) -> Relisted {
        let mut devices = self.devices.write();
        let mut old = std::mem::take(&mut *devices);
        let mut added = Vec::new();
        for info in infos {
            let same =
                |d: &Arc<DeviceHistory>| d.info().index == info.index && d.info().uuid == info.uuid;
            match old.iter().position(same) {
                Some(at) => devices.push(old.swap_remove(at)),
                None => {
                    let history = Arc::new(DeviceHistory::new(info, self.sizing));
                    devices.push(history.clone());
                    added.push(history);
                }
            }
        }
        Relisted { added, removed: old }
    }

    pub fn devices(&self) -> Vec<Arc<DeviceHistory>> {
        self.devices.read().clone()
    }

    /// Finds a device by index (`"0"`, decimal without sign or leading
    /// zeros) or UUID (`"GPU-…"`, case-insensitive).
    pub fn find(&self, id: &str) -> Option<Arc<DeviceHistory>> {
        let devices = self.devices.read();
        // Strictly canonical: `00` or `+0` is not device 0 (`u32::from_str`
        // accepts both), so one device has exactly one index URL.
        if let Ok(index) = id.parse::<u32>()
            && index.to_string() == id
        {
            return devices.iter().find(|device| device.info().index == index).cloned();
        }
        devices.iter().find(|device| device.info().uuid.eq_ignore_ascii_case(id)).cloned()
    }

    /// The sampler has finished a full cycle over every device (or found
    /// there are none): `/readyz` turns ready.
    pub fn mark_cycle_completed(&self) {
        self.cycle_completed.store(true, Ordering::Release);
    }

    pub fn cycle_completed(&self) -> bool {
        self.cycle_completed.load(Ordering::Acquire)
    }

    /// Whether sampling keeps up at `now`: the one answer `/readyz` gives
    /// and systemd's watchdog is fed on, so the two never disagree.
    pub fn readiness(&self, now: Timestamp) -> Result<(), NotReady> {
        if !self.cycle_completed() {
            return Err(NotReady::FirstCycle);
        }
        let behind: Vec<(Arc<DeviceHistory>, Stale)> = self
            .devices()
            .into_iter()
            .flat_map(|device| {
                let stale = device.progress().stale(now);
                stale.into_iter().map(move |late| (device.clone(), late))
            })
            .collect();
        if behind.is_empty() { Ok(()) } else { Err(NotReady::Behind(behind)) }
    }
}

/// Why sampling is not keeping up ([`HistoryStore::readiness`]).
pub enum NotReady {
    /// The sampler has not completed a cycle over every device yet.
    FirstCycle,
    /// These device tiers broke their promise of a next step.
    Behind(Vec<(Arc<DeviceHistory>, Stale)>),
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReady::FirstCycle => {
                f.write_str("the sampler has not completed its first cycle yet")
            }
            NotReady::Behind(tiers) => write!(
                f,
                "the sampler has fallen behind on {} device tier{}",
                tiers.len(),
                if tiers.len() == 1 { "" } else { "s" }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn device(index: u32, uuid: &str) -> DeviceInfo {
        DeviceInfo {
            index,
            uuid: uuid.into(),
            name: "Test GPU".into(),
            pci_bus_id: None,
            driver_version: None,
            mig: None,
        }
    }

    #[test]
    fn a_relisting_keeps_unchanged_devices_and_drops_the_others() {
        let sizing = Sizing {
            fast_capacity: 4,
            slow_capacity: 4,
            peak_window: Duration::from_secs(1),
            oom_events: 1,
        };
        let store = HistoryStore::new(sizing);
        let before = store.set_devices(vec![
            device(0, "GPU-a"),
            device(10_000, "MIG-x"),
            device(10_001, "MIG-y"),
        ]);
        let changed = store.relist(vec![
            device(0, "GPU-a"),
            device(10_000, "MIG-z"),
            device(10_001, "MIG-y"),
        ]);
        let uuids = |devices: &[Arc<DeviceHistory>]| -> Vec<String> {
            devices.iter().map(|d| d.info().uuid.clone()).collect()
        };
        assert_eq!(uuids(&changed.added), ["MIG-z"], "same slot, new instance: a new device");
        assert_eq!(uuids(&changed.removed), ["MIG-x"]);
        let now = store.devices();
        assert_eq!(uuids(&now), ["GPU-a", "MIG-z", "MIG-y"]);
        assert!(Arc::ptr_eq(&now[0], &before[0]), "the unchanged GPU keeps its history");
        assert!(Arc::ptr_eq(&now[2], &before[2]));
        assert!(store.find("MIG-x").is_none(), "the removed device is gone from the API");
    }
}
