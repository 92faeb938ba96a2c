//! The checks an allocator report and an OOM event document share: the
//! document version, device UUIDs, the raw `memory_stats()` dictionary
//! (finite, non-negative, within 2^53, the six keys the accounting reads),
//! snapshot summaries and figures against the device's total, and why a
//! document was refused ([`ReportError`]).
//!
//! Depends on `model` only; the documents themselves are `report`'s and
//! `oom`'s, which call these checks.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::{AllocatorRange, AllocatorStats, SnapshotSummary};

/// The document version this vramd reads, of reports and OOM events alike.
pub const VERSION: u64 = 1;

/// Why a report was refused (400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("not a valid report document: {0}")]
    Malformed(String),
    #[error("unsupported report version {found}; this vramd reads version {VERSION}")]
    Version { found: u64 },
    #[error("`at` is not an RFC 3339 time: {0}")]
    BadTime(String),
    #[error("{count} devices in one report; at most {max} (ingest.max_devices)")]
    TooManyDevices { count: usize, max: usize },
    #[error("device {uuid}: {count} memory_stats keys; at most {max} (ingest.max_stats)")]
    TooManyStats { uuid: String, count: usize, max: usize },
    #[error("device {uuid}: memory_stats[{key}] must be a non-negative finite number, got {value}")]
    BadNumber { uuid: String, key: String, value: String },
    #[error("device {uuid}: memory_stats[{key}] is {value}; {reason}")]
    OutOfRange { uuid: String, key: String, value: String, reason: &'static str },
    #[error(
        "device {uuid}: {field} is {value} bytes, more than the device's total memory ({total} bytes)"
    )]
    BeyondDevice { uuid: String, field: &'static str, value: u64, total: u64 },
    #[error("device {uuid}: memory_stats lacks {key}")]
    MissingStat { uuid: String, key: &'static str },
    #[error("device {uuid}: {reason}")]
    Inconsistent { uuid: String, reason: String },
    #[error("device uuid `{0}` is not a GPU-… or MIG-… UUID")]
    BadUuid(String),
    #[error("device {0} appears twice")]
    DuplicateDevice(String),
}

/// `memory_stats()` keys whose value may be negative (-1 means unset).
pub(super) const SIGNED_KEYS: &[&str] = &["max_split_size"];

pub(super) const ALLOCATED: &str = "allocated_bytes.all.current";
pub(super) const RESERVED: &str = "reserved_bytes.all.current";
pub(super) const ACTIVE: &str = "active_bytes.all.current";
pub(super) const INACTIVE_SPLIT: &str = "inactive_split_bytes.all.current";
pub(super) const RETRIES: &str = "num_alloc_retries";
pub(super) const OOMS: &str = "num_ooms";
/// The interval's range of `allocated` and `reserved` (`vramd_reporter`
/// 0.3 on): optional, but all four or none.
pub(super) const INTERVAL_KEYS: [&str; 4] = [
    "allocated_bytes.all.interval_min",
    "allocated_bytes.all.interval_max",
    "reserved_bytes.all.interval_min",
    "reserved_bytes.all.interval_max",
];

/// Reads a version-1 document of type `T`. The version is checked first,
/// so a future document gets the clearer error rather than a complaint
/// about a field this version lacks.
pub(super) fn versioned_document<T: serde::de::DeserializeOwned>(
    body: &[u8],
) -> Result<T, ReportError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ReportError::Malformed(e.to_string()))?;
    match value.get("version").and_then(Value::as_u64) {
        Some(VERSION) => {}
        Some(found) => return Err(ReportError::Version { found }),
        None => return Err(ReportError::Malformed("`version` must be the number 1".into())),
    }
    serde_json::from_value(value).map_err(|e| ReportError::Malformed(e.to_string()))
}

/// A device UUID as NVML writes it, within a bound.
pub(super) fn check_uuid(uuid: &str) -> Result<(), ReportError> {
    if !(uuid.starts_with("GPU-") || uuid.starts_with("MIG-")) || uuid.len() > 96 {
        return Err(ReportError::BadUuid(uuid.to_owned()));
    }
    Ok(())
}

/// Refuses the first size or count past 2^53 (see [`MAX_EXACT`]).
pub(super) fn check_exact<'f>(
    uuid: &str,
    figures: impl IntoIterator<Item = (&'f str, Option<u64>)>,
) -> Result<(), ReportError> {
    let beyond = figures.into_iter().find_map(|(field, value)| {
        value.filter(|&value| value > MAX_EXACT_U64).map(|value| (field, value))
    });
    match beyond {
        Some((field, value)) => Err(ReportError::OutOfRange {
            uuid: uuid.to_owned(),
            key: field.into(),
            value: value.to_string(),
            reason: BEYOND_EXACT,
        }),
        None => Ok(()),
    }
}

/// A snapshot summary's total and count within 2^53, and its parts within
/// its total (so all four are bounded).
pub(super) fn check_snapshot(
    uuid: &str,
    snapshot: Option<SnapshotSummary>,
) -> Result<(), ReportError> {
    let Some(snapshot) = snapshot else { return Ok(()) };
    check_exact(
        uuid,
        [
            ("snapshot.total_bytes", Some(snapshot.total_bytes)),
            ("snapshot.segments", Some(snapshot.segments)),
        ],
    )?;
    if snapshot.allocated_bytes > snapshot.total_bytes
        || snapshot.largest_free_block_bytes > snapshot.total_bytes
    {
        return Err(ReportError::Inconsistent {
            uuid: uuid.to_owned(),
            reason: "snapshot allocated or largest free block exceeds its total".into(),
        });
    }
    Ok(())
}

/// Refuses the first figure above the device's total memory.
pub(super) fn check_within_device(
    uuid: &str,
    total: u64,
    figures: impl IntoIterator<Item = (&'static str, Option<u64>)>,
) -> Result<(), ReportError> {
    let beyond = figures.into_iter().find_map(|(field, value)| {
        value.filter(|&value| value > total).map(|value| (field, value))
    });
    match beyond {
        Some((field, value)) => {
            Err(ReportError::BeyondDevice { uuid: uuid.to_owned(), field, value, total })
        }
        None => Ok(()),
    }
}

/// At most `max_stats` keys, every `memory_stats` figure checked (finite,
/// non-negative unless it may be -1, within 2^53), then the keys the
/// accounting reads.
pub(super) fn checked_stats(
    uuid: &str,
    stats: &BTreeMap<String, Value>,
    max_stats: usize,
) -> Result<Option<AllocatorStats>, ReportError> {
    if stats.len() > max_stats {
        return Err(ReportError::TooManyStats {
            uuid: uuid.to_owned(),
            count: stats.len(),
            max: max_stats,
        });
    }
    for (key, value) in stats {
        // Every figure must be a finite number. Sizes and counts must not
        // be negative; a few settings legitimately are (PyTorch reports
        // `max_split_size` as -1 when it is unset).
        let may_be_negative = SIGNED_KEYS.contains(&key.as_str());
        let valid = value
            .as_f64()
            .is_some_and(|number| number.is_finite() && (number >= 0.0 || may_be_negative));
        if !valid {
            return Err(ReportError::BadNumber {
                uuid: uuid.to_owned(),
                key: key.clone(),
                value: value.to_string(),
            });
        }
        // An integer just above 2^53 rounds down to it as a double: read
        // integers exactly, so the bound is the one the schema states.
        let beyond = value.as_u64().is_some_and(|number| number > MAX_EXACT_U64);
        let reason = if beyond {
            Some(BEYOND_EXACT)
        } else {
            value.as_f64().and_then(|number| out_of_range(number, may_be_negative))
        };
        if let Some(reason) = reason {
            return Err(ReportError::OutOfRange {
                uuid: uuid.to_owned(),
                key: key.clone(),
                value: value.to_string(),
                reason,
            });
        }
    }
    stats_of(uuid, stats)
}

fn stats_of(
    uuid: &str,
    stats: &BTreeMap<String, Value>,
) -> Result<Option<AllocatorStats>, ReportError> {
    if stats.is_empty() {
        return Ok(None);
    }
    let get = |key: &'static str| {
        stats
            .get(key)
            .and_then(Value::as_f64)
            .map(|number| number as u64)
            .ok_or_else(|| ReportError::MissingStat { uuid: uuid.to_owned(), key })
    };
    let parsed = AllocatorStats {
        allocated_bytes: get(ALLOCATED)?,
        reserved_bytes: get(RESERVED)?,
        active_bytes: get(ACTIVE)?,
        inactive_split_bytes: get(INACTIVE_SPLIT)?,
        alloc_retries: get(RETRIES)?,
        ooms: get(OOMS)?,
        interval: interval_of(stats, &get)?,
    };
    if parsed.allocated_bytes > parsed.reserved_bytes {
        return Err(ReportError::Inconsistent {
            uuid: uuid.to_owned(),
            reason: format!(
                "allocated ({}) exceeds reserved ({})",
                parsed.allocated_bytes, parsed.reserved_bytes
            ),
        });
    }
    if let Some(range) = parsed.interval {
        let around = |name: &str, min: u64, current: u64, max: u64| {
            (min > current || current > max).then(|| ReportError::Inconsistent {
                uuid: uuid.to_owned(),
                reason: format!(
                    "the interval's {name} range {min}..{max} does not hold the current {current}"
                ),
            })
        };
        let (allocated, reserved) = (parsed.allocated_bytes, parsed.reserved_bytes);
        let ranges = [
            ("allocated", range.allocated_min_bytes, allocated, range.allocated_max_bytes),
            ("reserved", range.reserved_min_bytes, reserved, range.reserved_max_bytes),
        ];
        if let Some(error) = ranges.into_iter().find_map(|(n, min, c, max)| around(n, min, c, max))
        {
            return Err(error);
        }
    }
    if !parsed.is_consistent() {
        return Err(ReportError::Inconsistent {
            uuid: uuid.to_owned(),
            reason: "active or inactive_split exceed what reserved allows".into(),
        });
    }
    Ok(Some(parsed))
}

/// The interval's range when the report carries one: none of its four
/// keys (an older reporter) is `None`; some but not all is an error naming
/// the first missing.
fn interval_of(
    stats: &BTreeMap<String, Value>,
    get: &impl Fn(&'static str) -> Result<u64, ReportError>,
) -> Result<Option<AllocatorRange>, ReportError> {
    if !INTERVAL_KEYS.iter().any(|key| stats.contains_key(*key)) {
        return Ok(None);
    }
    let [allocated_min, allocated_max, reserved_min, reserved_max] = INTERVAL_KEYS;
    Ok(Some(AllocatorRange {
        allocated_min_bytes: get(allocated_min)?,
        allocated_max_bytes: get(allocated_max)?,
        reserved_min_bytes: get(reserved_min)?,
        reserved_max_bytes: get(reserved_max)?,
    }))
}

/// Why a figure past [`MAX_EXACT`] is refused, wherever it stands.
const BEYOND_EXACT: &str =
    "above 2^53, beyond what any allocator counts or a JSON number holds exactly";

/// The largest integer a JSON number (an IEEE double) holds exactly: no
/// counter or size of a real allocator comes near it (8 PiB), and values
/// past it are rounded, so a report carrying one is refused, not believed.
const MAX_EXACT: f64 = 9_007_199_254_740_992.0;
pub(super) const MAX_EXACT_U64: u64 = 1 << 53;

/// Why a finite `memory_stats` value cannot be true, if it cannot.
fn out_of_range(number: f64, may_be_negative: bool) -> Option<&'static str> {
    if number > MAX_EXACT {
        Some(BEYOND_EXACT)
    } else if may_be_negative && number < 0.0 && number != -1.0 {
        Some("the only negative value it may take is -1 (unset)")
    } else {
        None
    }
}
