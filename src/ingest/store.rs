//! The latest allocator report of every reporter, the per-reporter rate
//! limit, and the join of reports onto NVML's processes.

use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::time::Instant;

use crate::model::{ProcessInfo, SlowReading};

use super::rate::{RateWindow, Refused};
use super::report::{AllocatorReport, ReportedDevice, Reporter};

/// Bounds and timing of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLimits {
    pub ttl: Duration,
    pub rate_limit_per_second: usize,
    pub max_reporters: usize,
}

struct Entry {
    report: AllocatorReport,
    /// Device UUID → the NVML PID the device's report was joined to.
    matched: BTreeMap<String, u32>,
    /// Reports in the current one-second rate window.
    rate: RateWindow,
}

/// What `GET /api/v1/allocator-reports` shows of one device report.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ReportView {
    pub reporter: Reporter,
    pub at: String,
    pub uuid: String,
    pub index: u32,
    /// The host PID it was joined to; absent while unmatched.
    pub matched_pid: Option<u32>,
    pub matched: bool,
    pub stats: Option<crate::model::AllocatorStats>,
    pub snapshot: Option<crate::model::SnapshotSummary>,
}

pub struct ReportStore {
    limits: StoreLimits,
    entries: Mutex<BTreeMap<(String, u32), Entry>>,
}

impl ReportStore {
    pub fn new(limits: StoreLimits) -> Self {
        Self { limits, entries: Mutex::new(BTreeMap::new()) }
    }

    /// Takes a report (replacing the reporter's previous one), unless the
    /// reporter is over its rate or the store is full.
    pub fn accept(&self, mut report: AllocatorReport, now: Instant) -> Result<(), Refused> {
        let key = (report.reporter.hostname.clone(), report.reporter.pid);
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.get_mut(&key) {
            let limit = self.limits.rate_limit_per_second;
            if let Err(retry_after) = entry.rate.admit(now, limit) {
                return Err(Refused::RateLimited { what: "reports", limit, retry_after });
            }
            // A device still reported keeps its join; a dropped one loses it.
            entry
                .matched
                .retain(|uuid, _| report.devices.iter().any(|device| &device.uuid == uuid));
            report.reporter.share_from(&entry.report.reporter);
            entry.report = report;
            return Ok(());
        }
        if entries.len() >= self.limits.max_reporters {
            return Err(Refused::TooManyReporters {
                full: "are already tracked",
                max: self.limits.max_reporters,
                retry_after: self.limits.ttl,
            });
        }
        entries
            .insert(key, Entry { report, matched: BTreeMap::new(), rate: RateWindow::first(now) });
        Ok(())
    }

    /// Attaches live reports to the processes of one device's slow reading:
    /// by host PID, else by the PID inside the process's namespace (when
    /// exactly one listed process has it). Reports older than the TTL
    /// (against the reading's time) are dropped; a report joined to a
    /// process that is no longer listed leaves with it.
    pub fn attach(&self, uuid: &str, reading: &mut SlowReading) {
        let Some(processes) = reading.processes.as_mut() else { return };
        let at = reading.at;
        let ttl = self.limits.ttl;
        let mut entries = self.entries.lock();
        // Age in either direction: a report dated in the future (a skewed
        // clock) must not live forever either.
        entries.retain(|_, entry| {
            at.duration_since(entry.report.at)
                .or_else(|| entry.report.at.duration_since(at))
                .is_some_and(|age| age <= ttl)
        });
        for entry in entries.values_mut() {
            let Some(device) = entry.report.devices.iter().find(|device| device.uuid == uuid)
            else {
                continue;
            };
            if let Some(&pid) = entry.matched.get(uuid)
                && !processes.iter().any(|process| process.pid == pid)
            {
                // The process exited: its report goes with it.
                entry.matched.remove(uuid);
                entry.report.devices.retain(|device| device.uuid != uuid);
                continue;
            }
            let target = reporter_slot(entry.report.reporter.pid, processes);
            let Some(process) = target.and_then(|slot| processes.get_mut(slot)) else { continue };
            join(process, device, &entry.report.reporter);
            entry.matched.insert(uuid.to_owned(), process.pid);
        }
        // Reports emptied by exits are forgotten.
        entries.retain(|_, entry| !entry.report.devices.is_empty());
    }

    /// Every device report, matched or not.
    pub fn views(&self) -> Vec<ReportView> {
        let entries = self.entries.lock();
        entries
            .values()
            .flat_map(|entry| {
                entry.report.devices.iter().map(move |device| ReportView {
                    reporter: entry.report.reporter.clone(),
                    at: entry.report.at.to_rfc3339(),
                    uuid: device.uuid.clone(),
                    index: device.index,
                    matched_pid: entry.matched.get(&device.uuid).copied(),
                    matched: entry.matched.contains_key(&device.uuid),
                    stats: device.stats,
                    snapshot: device.snapshot,
                })
            })
            .collect()
    }
}

#[cfg(test)]
impl ReportStore {
    pub fn reporters(&self) -> usize {
        self.entries.lock().len()
    }
}

/// Where the reporter `pid` is among `processes`: the process with that host
/// PID, else the one process whose namespace PID it is (none when several
/// containers have it).
pub(super) fn reporter_slot(pid: u32, processes: &[ProcessInfo]) -> Option<usize> {
    processes.iter().position(|process| process.pid == pid).or_else(|| {
        let mut candidates = processes
            .iter()
            .enumerate()
            .filter(|(_, process)| process.details.namespace_pid == Some(pid));
        match (candidates.next(), candidates.next()) {
            (Some((slot, _)), None) => Some(slot),
            _ => None,
        }
    })
}

fn join(process: &mut ProcessInfo, device: &ReportedDevice, reporter: &Reporter) {
    // The workload's own word on its pod; the container runtime's, joined
    // later by Kubernetes attribution, wins where it answers.
    let details = &mut process.details;
    if details.pod.is_none() {
        details.pod.clone_from(&reporter.pod);
        details.namespace.clone_from(&reporter.namespace);
        details.container.clone_from(&reporter.container);
    }
    // A source that already knows the allocator figures (the simulator)
    // keeps them; a report fills them in for NVML's processes.
    process.allocator = process.allocator.or(device.stats);
    details.snapshot = details.snapshot.or(device.snapshot);
    details.pool_limit_bytes = details.pool_limit_bytes.or(device.pool_limit_bytes);
}
