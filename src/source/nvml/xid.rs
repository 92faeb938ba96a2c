//! Xid errors: NVML critical-error events, watched on a dedicated thread
//! (waiting on an event set blocks), counted per device and code, with the
//! time of each device's latest one (a counter's first increment is
//! invisible to `increase()`; the timestamp is not).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use parking_lot::Mutex;
use tracing::{error, info, warn};

use crate::clock::ScaledClock;
use crate::model::Timestamp;

/// How long one wait blocks. The driver's wait returns at the event, so
/// this only bounds how late the thread notices it should stop, which is
/// at shutdown, when nothing waits for it. A short wait was a wake-up
/// twice a second, for a thread that exists to sleep (issue 37: as much
/// CPU as the whole fast tier).
const WAIT_MS: u32 = 60_000;
/// Pause after a wait failed because a GPU is lost.
const LOST_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);
/// Distinct codes counted per device; rarer codes beyond go to "other".
const MAX_CODES_PER_DEVICE: usize = 64;

/// Counts by device index, then by code (`"79"`, or `"other"`).
pub(super) type XidCounts = Arc<Mutex<HashMap<u32, BTreeMap<String, u64>>>>;
/// When each device's latest Xid arrived. One entry per device index NVML
/// identifies, so bounded by the device count.
pub(super) type XidLast = Arc<Mutex<HashMap<u32, Timestamp>>>;

/// Where the watcher writes what it sees.
#[derive(Clone, Default)]
pub(super) struct XidBook {
    pub counts: XidCounts,
    pub last: XidLast,
}

/// What the common Xid codes mean, for the log line.
pub fn meaning(xid: u64) -> &'static str {
    match xid {
        13 => "graphics engine exception (often an application fault, e.g. out-of-bounds access)",
        31 => "GPU memory page fault (often an application fault)",
        43 => "GPU stopped processing: a channel was reset after an application fault",
        48 => "double-bit ECC error: the GPU needs a reset",
        63 => "ECC page retirement or row remapping recorded",
        64 => "ECC page retirement or row remapping failed",
        74 => "NVLink error",
        79 => "GPU has fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error: the affected application was stopped",
        95 => "uncontained ECC error: the GPU needs a reset",
        119 => "GSP RPC timeout",
        120 => "GSP error",
        _ => "see NVIDIA's Xid documentation",
    }
}

/// Starts the watcher for `devices` device indices. The thread ends soon
/// after `stop` is set. Failing to register is logged and ends the watcher:
/// Xid counting is then absent, the rest of sampling unaffected.
pub(super) fn spawn(
    nvml: &'static Nvml,
    devices: u32,
    book: XidBook,
    clock: ScaledClock,
    stop: Arc<AtomicBool>,
) {
    let spawned = std::thread::Builder::new().name("vramd-xid".into()).spawn(move || {
        if let Err(error) = watch(nvml, devices, &book, &clock, &stop) {
            warn!(error = %error, "Xid events cannot be watched; vramd_xid_errors_total stays absent");
        }
    });
    if let Err(error) = spawned {
        warn!(error = %error, "cannot start the Xid watcher thread");
    }
}

fn watch(
    nvml: &Nvml,
    devices: u32,
    book: &XidBook,
    clock: &ScaledClock,
    stop: &AtomicBool,
) -> Result<(), NvmlError> {
    let mut set = nvml.create_event_set()?;
    let mut watched: Vec<u32> = Vec::new();
    for index in 0..devices {
        let device = nvml.device_by_index(index)?;
        let supported = device
            .supported_event_types()
            .is_ok_and(|types| types.contains(EventTypes::CRITICAL_XID_ERROR));
        if !supported {
            info!(gpu = index, "this GPU does not deliver Xid events");
            continue;
        }
        match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(updated) => {
                set = updated;
                watched.push(index);
            }
            Err(failure) => {
                // NVML frees the set on a failed registration: build a new
                // one holding the devices that did register.
                info!(gpu = index, error = %failure.error, "cannot watch Xid events of this GPU");
                set = nvml.create_event_set()?;
                for &kept in &watched {
                    set = nvml
                        .device_by_index(kept)?
                        .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                        .map_err(|failure| failure.error)?;
                }
            }
        }
    }
    if watched.is_empty() {
        return Ok(());
    }
    while !stop.load(Ordering::Relaxed) {
        match set.wait(WAIT_MS) {
            Ok(event) => {
                let index = event.device.index().ok();
                let code = match event.event_data {
                    Some(XidError::Value(code)) => Some(code),
                    Some(XidError::Unknown) | None => None,
                };
                record(book, index, code, clock.now());
            }
            Err(NvmlError::Timeout) => {}
            Err(NvmlError::GpuLost) => {
                // A lost GPU keeps failing waits; pause instead of spinning.
                std::thread::sleep(LOST_PAUSE);
            }
            Err(other) => {
                error!(error = %other, "waiting for Xid events failed; stopping the watcher");
                return Err(other);
            }
        }
    }
    Ok(())
}

fn record(book: &XidBook, index: Option<u32>, code: Option<u64>, at: Timestamp) {
    let Some(index) = index else {
        warn!(xid = ?code, "Xid event from a device NVML cannot identify");
        return;
    };
    match code {
        Some(code) => error!(gpu = index, xid = code, meaning = meaning(code), "Xid error"),
        None => error!(gpu = index, "Xid error with an unknown code"),
    }
    let label = code.map_or_else(|| "unknown".to_owned(), |code| code.to_string());
    book.last.lock().insert(index, at);
    let mut counts = book.counts.lock();
    let per_device = counts.entry(index).or_default();
    let room = per_device.contains_key(&label) || per_device.len() < MAX_CODES_PER_DEVICE;
    let count = per_device.entry(if room { label } else { "other".to_owned() }).or_insert(0);
    *count = count.saturating_add(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_codes_have_meanings() {
        for code in [13, 31, 43, 48, 63, 64, 74, 79, 92, 94, 95, 119, 120] {
            assert_ne!(meaning(code), meaning(1), "Xid {code}");
        }
    }

    #[test]
    fn codes_beyond_the_bound_are_counted_as_other() {
        let book = XidBook::default();
        let at = |millis| Timestamp::from_unix_millis(millis);
        for code in 0..(MAX_CODES_PER_DEVICE as u64 + 10) {
            record(&book, Some(0), Some(code), at(1_000));
        }
        record(&book, Some(0), Some(5), at(2_000));
        assert_eq!(book.last.lock().get(&0), Some(&at(2_000)));
        assert_eq!(book.last.lock().get(&1), None);
        let counts = book.counts.lock();
        let per_device = &counts[&0];
        assert_eq!(per_device.len(), MAX_CODES_PER_DEVICE + 1);
        assert_eq!(per_device["other"], 10);
        assert_eq!(per_device["5"], 2);
    }
}
