//! Per-process activity: SM and memory-bandwidth utilization from
//! `nvmlDeviceGetProcessUtilization`, attached to the slow tier's process
//! list.
//!
//! The driver buffers samples and returns those newer than a last-seen
//! timestamp, listing only processes that were busy; so each device's
//! newest sample timestamp is kept and passed on the next read (each read
//! covers exactly the period since the previous one), and a listed process
//! without a sample in an answer was idle (0), not unknown. Only a device
//! or driver without the call leaves the values absent.
//!
//! Must not depend on anything beyond `model` and the NVML source's own
//! helpers.

use std::collections::HashMap;

use nvml_wrapper::Device;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessUtilizationSample;
use parking_lot::Mutex;

use crate::model::ProcessInfo;

use super::absent::AbsentLog;

/// The newest sample timestamp (driver µs) seen per device index. One entry
/// per monitored device, so bounded by `sampler.max_devices`.
#[derive(Default)]
pub(super) struct ProcessActivity {
    last_seen: Mutex<HashMap<u32, u64>>,
}

impl ProcessActivity {
    /// Sets each process's utilization from the samples since the previous
    /// read of this device. A lost GPU fails the read.
    pub(super) fn annotate(
        &self,
        index: u32,
        device: &Device<'_>,
        absent: &AbsentLog,
        processes: &mut [ProcessInfo],
    ) -> Result<(), NvmlError> {
        let last_seen = self.last_seen.lock().get(&index).copied();
        let mut samples = match device.process_utilization_stats(last_seen) {
            Ok(samples) => samples,
            // No sample newer than `last_seen`: nobody was busy.
            Err(NvmlError::NotFound) => Vec::new(),
            Err(NvmlError::GpuLost) => return Err(NvmlError::GpuLost),
            Err(error) => {
                absent.note(index, "process utilization", &error);
                return Ok(());
            }
        };
        if let Some(newest) = samples.iter().map(|sample| sample.timestamp).max() {
            let mut seen = self.last_seen.lock();
            let entry = seen.entry(index).or_insert(newest);
            *entry = (*entry).max(newest);
        }
        apply(&mut samples, processes);
        Ok(())
    }
}

/// Each process gets its newest sample's values, 0 without one.
fn apply(samples: &mut [ProcessUtilizationSample], processes: &mut [ProcessInfo]) {
    // By PID, newest last: each process finds its sample by a binary search,
    // not a scan of every sample (256 × 256 comparisons on a full device).
    samples.sort_unstable_by_key(|sample| (sample.pid, sample.timestamp));
    for process in processes {
        let end = samples.partition_point(|sample| sample.pid <= process.pid);
        let newest = end.checked_sub(1).map(|last| &samples[last]);
        let newest = newest.filter(|sample| sample.pid == process.pid);
        process.details.sm_utilization_percent = Some(newest.map_or(0, |s| s.sm_util.min(100)));
        process.details.memory_utilization_percent =
            Some(newest.map_or(0, |s| s.mem_util.min(100)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32, timestamp: u64, sm_util: u32) -> ProcessUtilizationSample {
        ProcessUtilizationSample {
            pid,
            timestamp,
            sm_util,
            mem_util: sm_util / 2,
            enc_util: 0,
            dec_util: 0,
        }
    }

    fn process(pid: u32) -> ProcessInfo {
        ProcessInfo {
            pid,
            name: None,
            used_bytes: None,
            allocator: None,
            details: Default::default(),
        }
    }

    #[test]
    fn the_newest_sample_wins_and_a_process_without_one_was_idle() {
        let mut processes = [process(1), process(2)];
        apply(&mut [sample(1, 10, 90), sample(1, 30, 40), sample(1, 20, 70)], &mut processes);
        assert_eq!(processes[0].details.sm_utilization_percent, Some(40));
        assert_eq!(processes[0].details.memory_utilization_percent, Some(20));
        assert_eq!(processes[1].details.sm_utilization_percent, Some(0));
        // A corrupt percentage is clamped, not exported as 250 %.
        apply(&mut [sample(2, 40, 250)], &mut processes);
        assert_eq!(processes[1].details.sm_utilization_percent, Some(100));
    }
}
