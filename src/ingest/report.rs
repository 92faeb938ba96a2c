//! The allocator report document (version 1): its shape, which the parser
//! reads and the OpenAPI document is generated from, and the validated
//! [`AllocatorReport`].
//!
//! Strict: a report that is not exactly right is refused with a reason and
//! changes nothing. The raw `torch.cuda.memory_stats()` dictionary is read
//! for the keys the accounting model uses. Owns the report's own checks
//! (reporter names, each device once, the pool limit, figures within the
//! device's total); the checks it shares with OOM events are `validate`'s.
//! Depends on `model` and `validate` only.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::model::{AllocatorStats, SharedStr, SnapshotSummary, Timestamp};

use super::validate::{
    ACTIVE, ALLOCATED, INACTIVE_SPLIT, MAX_EXACT_U64, OOMS, RESERVED, RETRIES, SIGNED_KEYS,
    check_snapshot, check_uuid, check_within_device, checked_stats, versioned_document,
};
pub use super::validate::{ReportError, VERSION};

/// Who sent a report.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Reporter {
    /// The PID as the process sees it (inside its container).
    #[schema(maximum = 4294967295_u64)]
    pub pid: u32,
    #[schema(max_length = 253)]
    pub hostname: String,
    #[schema(value_type = Option<String>, max_length = 253)]
    pub pod: Option<SharedStr>,
    #[schema(value_type = Option<String>, max_length = 253)]
    pub namespace: Option<SharedStr>,
    #[schema(value_type = Option<String>, max_length = 253)]
    pub container: Option<SharedStr>,
}

/// The allocator report document (version 1) that workloads POST. It is
/// read strictly: unknown fields are refused.
// The parser reads this type and the OpenAPI schema is generated from it,
// so the two cannot drift; `parse` validates it into an `AllocatorReport`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AllocatorReport, example = json!(example_report()))]
pub struct ReportDocument {
    /// Document version; this vramd reads version 1.
    #[schema(minimum = 1, maximum = 1, example = 1)]
    #[expect(dead_code, reason = "checked by `versioned_document` before the document is typed")]
    version: u64,
    reporter: Reporter,
    /// When the statistics were read (RFC 3339).
    #[schema(format = DateTime, example = "2026-11-21T01:00:00.123Z")]
    at: String,
    /// One entry per device the process can see (at most
    /// `ingest.max_devices`, each UUID once).
    devices: Vec<DeviceDocument>,
}

/// One device's statistics in an allocator report.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = DeviceReport)]
struct DeviceDocument {
    /// The device's UUID as NVML reports it (`GPU-…` or `MIG-…`).
    #[schema(
        pattern = "^(GPU|MIG)-",
        max_length = 96,
        example = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20"
    )]
    uuid: String,
    /// The device's index as the process sees it.
    #[schema(maximum = 4294967295_u64)]
    index: u32,
    /// The raw `torch.cuda.memory_stats(i)` dictionary: key to number (at
    /// most `ingest.max_stats` keys). Every value must be finite, and sizes
    /// and counts non-negative (`max_split_size` may be -1). vramd reads
    /// `allocated_bytes.all.current`, `reserved_bytes.all.current`,
    /// `active_bytes.all.current`, `inactive_split_bytes.all.current`,
    /// `num_alloc_retries` and `num_ooms`, all required unless the
    /// dictionary is empty (an allocator never used); allocated must not
    /// exceed reserved. Optional, all four or none: the range over the
    /// reporter's interval, `allocated_bytes.all.interval_min` and
    /// `_max`, `reserved_bytes.all.interval_min` and `_max`, each holding
    /// the current value.
    #[schema(schema_with = memory_stats_schema)]
    memory_stats: BTreeMap<String, Value>,
    /// A summary of `torch.cuda.memory_snapshot()` for this device.
    #[serde(default)]
    snapshot: Option<SnapshotSummary>,
}

/// The example report of docs/api.md.
pub fn example_report() -> serde_json::Value {
    json!({
        "version": 1,
        "reporter": {"pid": 4242, "hostname": "node-1", "pod": "train-0", "namespace": "ml", "container": "trainer"},
        "at": "2026-11-21T01:00:00.123Z",
        "devices": [{
            "uuid": "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20",
            "index": 0,
            "memory_stats": {
                "allocated_bytes.all.current": 6442450944_u64,
                "reserved_bytes.all.current": 8589934592_u64,
                "active_bytes.all.current": 6442450944_u64,
                "inactive_split_bytes.all.current": 1073741824_u64,
                "num_alloc_retries": 3,
                "num_ooms": 0
            },
            "snapshot": {"segments": 40, "total_bytes": 8589934592_u64, "allocated_bytes": 6442450944_u64, "largest_free_block_bytes": 268435456}
        }]
    })
}

/// A validated report.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorReport {
    pub reporter: Reporter,
    pub at: Timestamp,
    pub devices: Vec<ReportedDevice>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReportedDevice {
    pub uuid: String,
    pub index: u32,
    /// `None` when the dictionary was empty (the allocator was never used
    /// on that device).
    pub stats: Option<AllocatorStats>,
    pub snapshot: Option<SnapshotSummary>,
    /// `bytes_limit`, which only a preallocating allocator (JAX) reports.
    pub pool_limit_bytes: Option<u64>,
}

/// Bounds a report must respect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportLimits {
    pub max_devices: usize,
    pub max_stats: usize,
}

/// Longest host, pod, namespace or container name accepted (a DNS name).
pub const MAX_NAME_BYTES: usize = 253;

/// JAX's allocator ceiling, carried raw by the reporter (docs/api.md, "JAX").
const POOL_LIMIT: &str = "bytes_limit";

impl Reporter {
    /// Reporter strings are kept for as long as the document lives:
    /// bounded, so a client cannot make the daemon hold arbitrary text.
    pub(super) fn check_names(&self) -> Result<(), ReportError> {
        let names = [
            ("reporter.hostname", Some(self.hostname.as_str())),
            ("reporter.pod", self.pod.as_deref()),
            ("reporter.namespace", self.namespace.as_deref()),
            ("reporter.container", self.container.as_deref()),
        ];
        for (field, value) in names {
            if let Some(value) = value
                && value.len() > MAX_NAME_BYTES
            {
                return Err(ReportError::Malformed(format!(
                    "{field} is {} bytes long; at most {MAX_NAME_BYTES}",
                    value.len()
                )));
            }
        }
        Ok(())
    }

    /// Takes `previous`'s strings where they are equal to this report's: a
    /// reporter sends the same pod names report after report, and the join
    /// puts them on its process at every slow sample, so they stay one
    /// allocation for as long as the reporter does.
    pub(super) fn share_from(&mut self, previous: &Reporter) {
        for (mine, known) in [
            (&mut self.pod, &previous.pod),
            (&mut self.namespace, &previous.namespace),
            (&mut self.container, &previous.container),
        ] {
            if mine == known {
                mine.clone_from(known);
            }
        }
    }
}

/// Parses and validates a report body.
pub fn parse(body: &[u8], limits: &ReportLimits) -> Result<AllocatorReport, ReportError> {
    let raw: ReportDocument = versioned_document(body)?;
    let at = Timestamp::parse_rfc3339(&raw.at).map_err(ReportError::BadTime)?;
    raw.reporter.check_names()?;
    if raw.devices.len() > limits.max_devices {
        return Err(ReportError::TooManyDevices {
            count: raw.devices.len(),
            max: limits.max_devices,
        });
    }
    let mut devices: Vec<ReportedDevice> = Vec::with_capacity(raw.devices.len());
    for device in raw.devices {
        check_uuid(&device.uuid)?;
        if devices.iter().any(|seen| seen.uuid == device.uuid) {
            return Err(ReportError::DuplicateDevice(device.uuid));
        }
        let stats = checked_stats(&device.uuid, &device.memory_stats, limits.max_stats)?;
        check_snapshot(&device.uuid, device.snapshot)?;
        // A device the process never allocated on (every visible device of
        // a data-parallel rank is reported) says nothing: not kept.
        if stats.is_none() && device.snapshot.is_none() {
            continue;
        }
        // Checked as a non-negative finite number by `checked_stats`; a pool
        // limit below what is in use is not a limit.
        let pool_limit_bytes = device
            .memory_stats
            .get(POOL_LIMIT)
            .and_then(Value::as_f64)
            .map(|limit| limit as u64)
            .filter(|&limit| stats.is_some_and(|stats| limit >= stats.allocated_bytes));
        devices.push(ReportedDevice {
            uuid: device.uuid,
            index: device.index,
            stats,
            snapshot: device.snapshot,
            pool_limit_bytes,
        });
    }
    Ok(AllocatorReport { reporter: raw.reporter, at, devices })
}

/// `memory_stats` as validation reads it, for the OpenAPI document: empty,
/// or the six keys vramd reads plus any others, every value a number from
/// 0 to 2^53 (`max_split_size` may also be -1), at most 1024 keys (the
/// default of `ingest.max_stats`). What a schema cannot say (allocated
/// within reserved, sizes within the device's total) the descriptions do.
pub fn memory_stats_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Type};
    let figure = || {
        ObjectBuilder::new()
            .schema_type(Type::Number)
            .minimum(Some(0))
            .maximum(Some(MAX_EXACT_U64 as usize))
    };
    let unset = ObjectBuilder::new().schema_type(Type::Number).enum_values(Some([-1]));
    let mut used = ObjectBuilder::new()
        .schema_type(Type::Object)
        .min_properties(Some(1))
        .max_properties(Some(DEFAULT_MAX_STATS))
        .additional_properties(Some(figure()))
        .property(SIGNED_KEYS[0], AnyOfBuilder::new().item(unset).item(figure()));
    for key in [ALLOCATED, RESERVED, ACTIVE, INACTIVE_SPLIT, RETRIES, OOMS] {
        used = used.property(key, figure()).required(key);
    }
    let never_used = ObjectBuilder::new().schema_type(Type::Object).max_properties(Some(0));
    AnyOfBuilder::new()
        .description(Some(
            "`torch.cuda.memory_stats()`: empty (an allocator never used), or with the six keys \
vramd reads; allocated, active and inactive_split within reserved.",
        ))
        .item(never_used)
        .item(used)
        .into()
}

/// `ingest.max_stats` by default: the bound the OpenAPI document states.
const DEFAULT_MAX_STATS: usize = 1024;

/// Refuses a report whose allocator holds more than its device has: a
/// device's `total_bytes` is what its newest reading says (`total_of`),
/// and a device not yet read is not checked. Since validation already
/// keeps allocated, active and inactive-split within reserved, reserved
/// and the snapshot's total are the figures to compare.
pub fn check_device_totals(
    report: &AllocatorReport,
    total_of: impl Fn(&str) -> Option<u64>,
) -> Result<(), ReportError> {
    for device in &report.devices {
        let Some(total) = total_of(&device.uuid) else { continue };
        check_within_device(
            &device.uuid,
            total,
            [
                ("reserved_bytes.all.current", device.stats.map(|stats| stats.reserved_bytes)),
                ("snapshot.total_bytes", device.snapshot.map(|snapshot| snapshot.total_bytes)),
            ],
        )?;
    }
    Ok(())
}
