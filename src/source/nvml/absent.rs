//! Values a device does not report: absent, and logged once per device and
//! value rather than on every sample.

use std::collections::HashSet;

use nvml_wrapper::error::NvmlError;
use parking_lot::Mutex;
use tracing::info;

/// Remembers which (device, value) pairs were already logged as absent.
#[derive(Default)]
pub(super) struct AbsentLog {
    seen: Mutex<HashSet<(u32, &'static str)>>,
}

/// Upper bound on remembered pairs: devices × values is small, but the set
/// must not grow without limit if indices ever churn.
const MAX_REMEMBERED: usize = 4_096;

impl AbsentLog {
    /// Turns an optional value's result into `Some`/`None`, logging the
    /// first time a device cannot give it. A lost GPU is not "absent": it
    /// is returned as an error so the whole read fails.
    pub(super) fn value<T>(
        &self,
        index: u32,
        what: &'static str,
        result: Result<T, NvmlError>,
    ) -> Result<Option<T>, NvmlError> {
        match result {
            Ok(value) => Ok(Some(value)),
            Err(NvmlError::GpuLost) => Err(NvmlError::GpuLost),
            Err(error) => {
                self.note(index, what, &error);
                Ok(None)
            }
        }
    }

    /// Logs, the first time for this device and value, why it is absent.
    pub(super) fn note(&self, index: u32, what: &'static str, error: &NvmlError) {
        let mut seen = self.seen.lock();
        if seen.len() >= MAX_REMEMBERED || !seen.insert((index, what)) {
            return;
        }
        drop(seen);
        let reason = match error {
            NvmlError::NotSupported => "not supported by this device".to_owned(),
            NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound => {
                "not provided by this driver version".to_owned()
            }
            NvmlError::NoPermission => "not permitted for this user".to_owned(),
            other => other.to_string(),
        };
        info!(gpu = index, value = what, reason = %reason, "value left out of the metrics");
    }
}
