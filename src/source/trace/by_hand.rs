//! A `fast` or `slow` line read by hand when it has exactly the layout the
//! recorder writes: no whitespace, fields in the model types' order, no
//! escapes in strings, and only the fields a replay benchmark's readings
//! and the simulator carry. Anything else, including every value the serde
//! path would refuse, gives `None` and is left to that path, whose records
//! and messages are the ones a user sees: this one only ever says "yes,
//! and this is the same record" or "not mine".
//!
//! Owns: [`parse_reading_line`] and [`recorded_reading_start`]. Depends only on `model` and `format`.
//!
//! Why: serde spends most of a replay's parse on each key (read, checked as
//! UTF-8, matched against every field name) and on its generic visitors;
//! here a key is one comparison against the single name that may come
//! next, and numbers are read in place. Floats go through `str::parse`,
//! which rounds correctly, as serde_json's `float_roundtrip` does.

use super::format::TraceRecord;
use crate::model::{
    AllocatorRange, AllocatorStats, FastReading, MemoryInfo, ProcessDetails, ProcessInfo,
    SharedStr, SlowDetails, SlowReading, Timestamp,
};

/// The record of `line` when it is a `fast` or `slow` line in the
/// recorder's layout that the serde path would accept, else `None`.
pub(super) fn parse_reading_line(line: &[u8]) -> Option<TraceRecord> {
    let (slow, start) = recorded_reading_start(line)?;
    let mut cursor = Cursor { bytes: line, at: start };
    let device = u32::try_from(cursor.integer()?).ok()?;
    // The reading's fields follow the device's as if they opened an object.
    let record = if slow {
        TraceRecord::Slow { device, reading: Box::new(cursor.slow_fields()?) }
    } else {
        TraceRecord::Fast { device, reading: cursor.fast_fields()? }
    };
    (cursor.at == line.len()).then_some(record)
}

/// Whether `line` starts as the recorder writes a `slow` (`true`) or `fast`
/// line, up to its device index, and where that index starts.
pub(super) fn recorded_reading_start(line: &[u8]) -> Option<(bool, usize)> {
    const FAST: &[u8] = br#"{"record":"fast","device":"#;
    const SLOW: &[u8] = br#"{"record":"slow","device":"#;
    if line.starts_with(FAST) {
        Some((false, FAST.len()))
    } else if line.starts_with(SLOW) {
        Some((true, SLOW.len()))
    } else {
        None
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn fast_fields(&mut self) -> Option<FastReading> {
        let at = self.required(b"at", Self::timestamp)?;
        let memory = self.optional(b"memory", Self::memory)?;
        let gpu_utilization = self.optional(b"gpu_utilization", Self::ratio)?;
        let memory_bandwidth_utilization =
            self.optional(b"memory_bandwidth_utilization", Self::ratio)?;
        self.close()?;
        Some(FastReading { at, memory, gpu_utilization, memory_bandwidth_utilization })
    }

    fn slow_fields(&mut self) -> Option<SlowReading> {
        let at = self.required(b"at", Self::timestamp)?;
        let processes = self.optional(b"processes", |cursor| cursor.list(Self::process))?;
        let temperature_celsius = self.optional(b"temperature_celsius", Self::float)?;
        let power_usage_watts = self.optional(b"power_usage_watts", Self::float)?;
        let power_limit_watts = self.optional(b"power_limit_watts", Self::float)?;
        let details = self.optional(b"details", Self::slow_details)?.unwrap_or_default();
        let processes_left_out = self.optional(b"processes_left_out", Self::integer)?;
        self.close()?;
        Some(SlowReading {
            at,
            processes,
            temperature_celsius,
            power_usage_watts,
            power_limit_watts,
            details,
            allocations: None,
            processes_left_out: usize::try_from(processes_left_out.unwrap_or(0)).ok()?,
        })
    }

    /// The scalar details only; a line with any nested one is serde's.
    fn slow_details(&mut self) -> Option<SlowDetails> {
        self.open()?;
        let small = |cursor: &mut Self| u32::try_from(cursor.integer()?).ok();
        let sm_clock_mhz = self.optional(b"sm_clock_mhz", small)?;
        let memory_clock_mhz = self.optional(b"memory_clock_mhz", small)?;
        let throttle_reasons = self.optional(b"throttle_reasons", Self::integer)?;
        let persistence_mode = self.optional(b"persistence_mode", Self::boolean)?;
        let mig_enabled = self.optional(b"mig_enabled", Self::boolean)?;
        let pcie_tx_bytes_per_second = self.optional(b"pcie_tx_bytes_per_second", Self::integer)?;
        let pcie_rx_bytes_per_second = self.optional(b"pcie_rx_bytes_per_second", Self::integer)?;
        let energy_millijoules = self.optional(b"energy_millijoules", Self::integer)?;
        let pstate = |cursor: &mut Self| u8::try_from(cursor.at_most(15)?).ok();
        let performance_state = self.optional(b"performance_state", pstate)?;
        let encoder_utilization_percent =
            self.optional(b"encoder_utilization_percent", Self::percent)?;
        let decoder_utilization_percent =
            self.optional(b"decoder_utilization_percent", Self::percent)?;
        let last_xid_unix_ms = self.optional(b"last_xid_unix_ms", Self::timestamp)?;
        let kubelet_allocatable = self.optional(b"kubelet_allocatable", Self::boolean)?;
        self.close()?;
        Some(SlowDetails {
            sm_clock_mhz,
            memory_clock_mhz,
            throttle_reasons,
            persistence_mode,
            mig_enabled,
            pcie_tx_bytes_per_second,
            pcie_rx_bytes_per_second,
            energy_millijoules,
            performance_state,
            encoder_utilization_percent,
            decoder_utilization_percent,
            last_xid_unix_ms,
            kubelet_allocatable,
            ..SlowDetails::default()
        })
    }

    fn process(&mut self) -> Option<ProcessInfo> {
        self.open()?;
        let pid = self.required(b"pid", |cursor| u32::try_from(cursor.integer()?).ok())?;
        let name = self.optional(b"name", |cursor| cursor.string().map(SharedStr::from))?;
        let used_bytes = self.optional(b"used_bytes", Self::integer)?;
        let allocator = self.optional(b"allocator", Self::allocator)?;
        let details = self.optional(b"details", Self::process_details)?.unwrap_or_default();
        self.close()?;
        Some(ProcessInfo { pid, name, used_bytes, allocator, details })
    }

    /// The utilization figures only; a line with any other detail is serde's.
    fn process_details(&mut self) -> Option<ProcessDetails> {
        self.open()?;
        let namespace_pid =
            self.optional(b"namespace_pid", |cursor| u32::try_from(cursor.integer()?).ok())?;
        let sm_utilization_percent = self.optional(b"sm_utilization_percent", Self::percent)?;
        let memory_utilization_percent =
            self.optional(b"memory_utilization_percent", Self::percent)?;
        let pool_limit_bytes = self.optional(b"pool_limit_bytes", Self::integer)?;
        self.close()?;
        Some(ProcessDetails {
            namespace_pid,
            sm_utilization_percent,
            memory_utilization_percent,
            pool_limit_bytes,
            ..ProcessDetails::default()
        })
    }

    fn allocator(&mut self) -> Option<AllocatorStats> {
        self.open()?;
        let allocated_bytes = self.required(b"allocated_bytes", Self::integer)?;
        let reserved_bytes = self.required(b"reserved_bytes", Self::integer)?;
        let active_bytes = self.required(b"active_bytes", Self::integer)?;
        let inactive_split_bytes = self.required(b"inactive_split_bytes", Self::integer)?;
        let alloc_retries = self.required(b"alloc_retries", Self::integer)?;
        let ooms = self.required(b"ooms", Self::integer)?;
        let interval = self.optional(b"interval", |cursor| {
            cursor.open()?;
            let range = AllocatorRange {
                allocated_min_bytes: cursor.required(b"allocated_min_bytes", Self::integer)?,
                allocated_max_bytes: cursor.required(b"allocated_max_bytes", Self::integer)?,
                reserved_min_bytes: cursor.required(b"reserved_min_bytes", Self::integer)?,
                reserved_max_bytes: cursor.required(b"reserved_max_bytes", Self::integer)?,
            };
            cursor.close()?;
            Some(range)
        })?;
        self.close()?;
        Some(AllocatorStats {
            allocated_bytes,
            reserved_bytes,
            active_bytes,
            inactive_split_bytes,
            alloc_retries,
            ooms,
            interval,
        })
    }

    /// Memory info whose parts are within its total (else serde's message).
    fn memory(&mut self) -> Option<MemoryInfo> {
        self.open()?;
        let total_bytes = self.required(b"total_bytes", Self::integer)?;
        let reserved_bytes = self.optional(b"reserved_bytes", Self::integer)?;
        let used_bytes = self.required(b"used_bytes", Self::integer)?;
        let free_bytes = self.required(b"free_bytes", Self::integer)?;
        self.close()?;
        let parts = [Some(used_bytes), Some(free_bytes), reserved_bytes];
        parts.into_iter().flatten().all(|part| part <= total_bytes).then_some(MemoryInfo {
            total_bytes,
            reserved_bytes,
            used_bytes,
            free_bytes,
        })
    }

    /// `"name":value` next (after a comma unless first in its object), read
    /// by `value`; `Some(None)` when the next field is another one.
    fn optional<T>(
        &mut self,
        name: &[u8],
        value: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<Option<T>> {
        let first = self.at > 0 && self.bytes.get(self.at - 1) == Some(&b'{');
        let rest = self.bytes.get(self.at..)?;
        let rest = if first { Some(rest) } else { rest.strip_prefix(b",") };
        let Some(after) = rest
            .and_then(|rest| rest.strip_prefix(b"\""))
            .and_then(|rest| rest.strip_prefix(name))
            .and_then(|rest| rest.strip_prefix(b"\":"))
        else {
            return Some(None);
        };
        self.at = self.bytes.len() - after.len();
        value(self).map(Some)
    }

    fn required<T>(
        &mut self,
        name: &[u8],
        value: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<T> {
        self.optional(name, value)?
    }

    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        self.byte(b'[')?;
        let mut items = Vec::new();
        if self.byte(b']').is_some() {
            return Some(items);
        }
        loop {
            items.push(item(self)?);
            if self.byte(b']').is_some() {
                return Some(items);
            }
            self.byte(b',')?;
        }
    }

    fn open(&mut self) -> Option<()> {
        self.byte(b'{')
    }

    fn close(&mut self) -> Option<()> {
        self.byte(b'}')
    }

    fn byte(&mut self, expected: u8) -> Option<()> {
        (*self.bytes.get(self.at)? == expected).then(|| self.at += 1)
    }

    /// A JSON integer without sign or leading zero that fits a `u64`.
    fn integer(&mut self) -> Option<u64> {
        let digits = self.digits();
        if digits.is_empty() || (digits.len() > 1 && digits.first() == Some(&b'0')) {
            return None;
        }
        digits.iter().try_fold(0u64, |value, digit| {
            value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
        })
    }

    fn at_most(&mut self, high: u64) -> Option<u64> {
        self.integer().filter(|value| *value <= high)
    }

    fn percent(&mut self) -> Option<u32> {
        u32::try_from(self.at_most(100)?).ok()
    }

    fn timestamp(&mut self) -> Option<Timestamp> {
        let millis = i64::try_from(self.integer()?).ok()?;
        Timestamp::checked(millis).ok()
    }

    /// A non-negative, finite JSON number.
    fn float(&mut self) -> Option<f64> {
        let start = self.at;
        let whole = self.digits();
        if whole.is_empty() || (whole.len() > 1 && whole.first() == Some(&b'0')) {
            return None;
        }
        if self.byte(b'.').is_some() && self.digits().is_empty() {
            return None;
        }
        if matches!(self.bytes.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.bytes.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits().is_empty() {
                return None;
            }
        }
        let text = std::str::from_utf8(self.bytes.get(start..self.at)?).ok()?;
        text.parse::<f64>().ok().filter(|value| value.is_finite())
    }

    fn ratio(&mut self) -> Option<f64> {
        self.float().filter(|value| (0.0..=1.0).contains(value))
    }

    fn boolean(&mut self) -> Option<bool> {
        let rest = self.bytes.get(self.at..)?;
        let (value, length) = if rest.starts_with(b"true") {
            (true, 4)
        } else if rest.starts_with(b"false") {
            (false, 5)
        } else {
            return None;
        };
        self.at += length;
        Some(value)
    }

    /// A string with no escape and no control character, as UTF-8.
    fn string(&mut self) -> Option<&'a str> {
        self.byte(b'"')?;
        let rest = self.bytes.get(self.at..)?;
        let length =
            rest.iter().position(|byte| *byte == b'"' || *byte == b'\\' || *byte < 0x20)?;
        if rest.get(length) != Some(&b'"') {
            return None;
        }
        self.at += length + 1;
        std::str::from_utf8(rest.get(..length)?).ok()
    }

    fn digits(&mut self) -> &'a [u8] {
        let rest = self.bytes.get(self.at..).unwrap_or_default();
        let length = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
        self.at += length;
        rest.get(..length).unwrap_or_default()
    }
}
