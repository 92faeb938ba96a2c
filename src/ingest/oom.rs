//! The OOM event document (version 1) a workload's reporter POSTs the
//! moment an allocation fails, its validation, the per-reporter rate limit
//! of events, and the join of an event onto an NVML process.
//!
//! Strict like reports: an event that is not exactly right is refused with
//! a reason and changes nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::model::{OomEvent, ProcessInfo, SnapshotSummary, Timestamp};

use super::rate::{RateWindow, Refused, WINDOW};
use super::report::Reporter;
use super::validate::{
    ReportError, check_exact, check_snapshot, check_uuid, check_within_device, checked_stats,
    versioned_document,
};

/// Longest snapshot path accepted (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// The OOM event document (version 1). Read strictly: unknown fields are
/// refused.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = OomEventDocument, example = json!(example_event()))]
pub struct OomDocument {
    /// Document version; this vramd reads version 1.
    #[schema(minimum = 1, maximum = 1, example = 1)]
    #[expect(dead_code, reason = "checked by `versioned_document` before the document is typed")]
    version: u64,
    reporter: Reporter,
    /// When the allocation failed (RFC 3339).
    #[schema(format = DateTime, example = "2026-11-21T01:00:00.123Z")]
    at: String,
    /// The device's UUID as NVML reports it (`GPU-…` or `MIG-…`).
    #[schema(pattern = "^(GPU|MIG)-", max_length = 96)]
    uuid: String,
    /// The device's index as the process sees it.
    #[schema(maximum = 4294967295_u64)]
    index: u32,
    /// The size of the allocation that failed, in bytes (1 to 2^53).
    #[schema(minimum = 1, maximum = 9007199254740992_u64)]
    requested_bytes: u64,
    /// Device memory free at that moment (the OOM observer's `device_free`).
    #[serde(default)]
    #[schema(maximum = 9007199254740992_u64)]
    device_free_bytes: Option<u64>,
    /// The allocator's largest free block, when known without a snapshot
    /// summary (JAX's `largest_free_block_bytes`).
    #[serde(default)]
    #[schema(maximum = 9007199254740992_u64)]
    largest_free_block_bytes: Option<u64>,
    /// `torch.cuda.memory_stats()` at that moment, checked as in an
    /// allocator report (at most `ingest.max_stats` keys).
    #[serde(default)]
    #[schema(schema_with = super::report::memory_stats_schema)]
    memory_stats: BTreeMap<String, Value>,
    /// A summary of the allocator snapshot taken at the OOM.
    #[serde(default)]
    snapshot: Option<SnapshotSummary>,
    /// Where the reporter wrote the full snapshot (`_dump_snapshot`), on its
    /// own file system; at most 4096 bytes.
    #[serde(default)]
    #[schema(max_length = 4096)]
    snapshot_path: Option<String>,
}

/// The example event of docs/api.md.
pub fn example_event() -> Value {
    json!({
        "version": 1,
        "reporter": {"pid": 4242, "hostname": "node-1"},
        "at": "2026-11-21T01:00:00.123Z",
        "uuid": "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20",
        "index": 0,
        "requested_bytes": 2147483648_u64,
        "device_free_bytes": 402653184,
        "memory_stats": {
            "allocated_bytes.all.current": 70866960384_u64,
            "reserved_bytes.all.current": 79456894976_u64,
            "active_bytes.all.current": 70866960384_u64,
            "inactive_split_bytes.all.current": 6442450944_u64,
            "num_alloc_retries": 4,
            "num_ooms": 1
        },
        "snapshot": {"segments": 212, "total_bytes": 79456894976_u64, "allocated_bytes": 70866960384_u64, "largest_free_block_bytes": 805306368},
        "snapshot_path": "/tmp/vramd-snapshots/oom-4242-1.pickle"
    })
}

/// Parses and validates an event body into an [`OomEvent`] whose `id`,
/// `pid` and `received_at` the intake fills in.
pub fn parse(body: &[u8], max_stats: usize) -> Result<OomEvent, ReportError> {
    let raw: OomDocument = versioned_document(body)?;
    let at = Timestamp::parse_rfc3339(&raw.at).map_err(ReportError::BadTime)?;
    raw.reporter.check_names()?;
    if let Some(path) = &raw.snapshot_path
        && path.len() > MAX_PATH_BYTES
    {
        return Err(ReportError::Malformed(format!(
            "snapshot_path is {} bytes long; at most {MAX_PATH_BYTES}",
            path.len()
        )));
    }
    let uuid = raw.uuid;
    check_uuid(&uuid)?;
    let stats = checked_stats(&uuid, &raw.memory_stats, max_stats)?;
    check_exact(
        &uuid,
        [
            ("requested_bytes", Some(raw.requested_bytes)),
            ("device_free_bytes", raw.device_free_bytes),
            ("largest_free_block_bytes", raw.largest_free_block_bytes),
        ],
    )?;
    check_snapshot(&uuid, raw.snapshot)?;
    if raw.requested_bytes == 0 {
        return Err(ReportError::Inconsistent {
            uuid,
            reason: "requested_bytes is 0; no allocation of nothing fails".into(),
        });
    }
    Ok(OomEvent {
        id: 0,
        uuid,
        index: raw.index,
        reporter_pid: raw.reporter.pid,
        hostname: raw.reporter.hostname,
        pid: None,
        at,
        received_at: at,
        requested_bytes: raw.requested_bytes,
        device_free_bytes: raw.device_free_bytes,
        largest_free_block_bytes: raw.largest_free_block_bytes,
        stats,
        snapshot: raw.snapshot,
        snapshot_path: raw.snapshot_path,
        driver: None,
    })
}

/// Refuses an event whose figures exceed the device's total memory (a
/// device not yet read is not checked).
pub fn check_device_total(event: &OomEvent, total: Option<u64>) -> Result<(), ReportError> {
    let Some(total) = total else { return Ok(()) };
    check_within_device(
        &event.uuid,
        total,
        [
            ("device_free_bytes", event.device_free_bytes),
            ("largest_free_block_bytes", event.largest_free_block_bytes),
            ("reserved_bytes.all.current", event.stats.map(|stats| stats.reserved_bytes)),
            ("snapshot.total_bytes", event.snapshot.map(|snapshot| snapshot.total_bytes)),
        ],
    )
}

/// The host PID of the process that raised `event`, joined as reports are.
pub fn join(event: &OomEvent, processes: &[ProcessInfo]) -> Option<u32> {
    let slot = super::store::reporter_slot(event.reporter_pid, processes)?;
    processes.get(slot).map(|process| process.pid)
}

/// Event ids and the per-reporter rate limit of events.
pub struct OomIntake {
    next_id: AtomicU64,
    rate_limit_per_second: usize,
    max_reporters: usize,
    /// (hostname, pid) → events in its current one-second window.
    windows: Mutex<HashMap<(String, u32), RateWindow>>,
}

impl OomIntake {
    pub fn new(rate_limit_per_second: usize, max_reporters: usize) -> Self {
        Self {
            next_id: AtomicU64::new(1),
            rate_limit_per_second,
            max_reporters,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one event of `event`'s reporter against its rate, or refuses it.
    pub fn admit(&self, event: &OomEvent, now: Instant) -> Result<(), Refused> {
        let mut windows = self.windows.lock();
        let key = (event.hostname.clone(), event.reporter_pid);
        if !windows.contains_key(&key) && windows.len() >= self.max_reporters {
            // Only reporters heard from within the last second are tracked.
            windows.retain(|_, window| window.is_current(now));
            if windows.len() >= self.max_reporters {
                return Err(Refused::TooManyReporters {
                    full: "already sent OOM events this second",
                    max: self.max_reporters,
                    retry_after: WINDOW,
                });
            }
        }
        let limit = self.rate_limit_per_second;
        windows
            .entry(key)
            .or_insert_with(|| RateWindow::open(now))
            .admit(now, limit)
            .map_err(|retry_after| Refused::RateLimited { what: "OOM events", limit, retry_after })
    }

    /// The next event id.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}
