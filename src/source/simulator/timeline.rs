//! When things happen in each scenario, and which workload a device runs.
//!
//! Owns: the public timeline constants (onsets, rates, durations) that alert
//! and analyzer tests may rely on, and the dispatch from a scenario to the
//! workload of one device at one instant. The per-scenario dynamics live in
//! `training`, `leak`, `spike` and `tenants`; the steady ones here.
//! Depends on: the simulator's `process` and `scenario` only.

use std::time::Duration;

use super::devices::MIB;
use super::process::{self, Gpu, INFERENCE_LOAD, SimProcess};
use super::{leak, spike, tenants, training};
use crate::model::ScenarioKind;

/// `training-fragmentation`: length of one grow → retry → OOM cycle. The OOM
/// happens at the end of each cycle (20:00, 40:00, …).
pub const TRAINING_CYCLE: Duration = Duration::from_secs(20 * 60);
/// `training-fragmentation`: reserved grows from the start of each cycle
/// until this offset into it, one step every [`TRAINING_GROWTH_STEP`].
pub const TRAINING_GROWTH_END: Duration = Duration::from_secs(12 * 60);
pub const TRAINING_GROWTH_STEP: Duration = Duration::from_secs(30);
/// `training-fragmentation`: allocator retries start this far into each
/// cycle (when free memory has run low) and continue until the OOM.
pub const TRAINING_RETRIES_ONSET: Duration = TRAINING_GROWTH_END;

/// `leak`: when GPU 0's process starts to leak, and how fast.
pub const LEAK_ONSET: Duration = Duration::from_secs(2 * 60);
pub const LEAK_RATE_BYTES_PER_SECOND: u64 = 40 * MIB;
/// `leak`: free memory left (at least) once the leak saturates.
pub const LEAK_HEADROOM_BYTES: u64 = 256 * MIB;

/// `oom-spike`: the spike on GPU 0 starts here and lasts [`SPIKE_DURATION`].
pub const SPIKE_START: Duration = Duration::from_secs(10 * 60);
pub const SPIKE_DURATION: Duration = Duration::from_secs(4);
/// `oom-spike`: when, inside the spike, the allocator retries once and then
/// raises an OOM (`alloc_retries` and `ooms` go 0 → 1 and stay there).
pub const SPIKE_OOM_AFTER: Duration = Duration::from_secs(2);
/// `oom-spike`: `reserved + used` during the spike, as a fraction of total.
pub const SPIKE_USED_FRACTION: f64 = 0.98;

/// `multi-tenant`: when GPU 0's first process starts to grow, and how fast.
pub const TENANT_GROWTH_ONSET: Duration = Duration::from_secs(60);
pub const TENANT_GROWTH_RATE_BYTES_PER_SECOND: u64 = 5 * MIB;
/// `multi-tenant`: free memory left (at least) once the growth saturates.
pub const TENANT_HEADROOM_BYTES: u64 = 512 * MIB;

/// `device-lost`: when the last GPU falls off the bus.
pub const DEVICE_LOST_AT: Duration = Duration::from_secs(5 * 60);

/// The state of one device at one instant.
#[derive(Clone, Debug)]
pub(super) struct Workload {
    pub processes: Vec<SimProcess>,
    /// Mean GPU utilization, 0–1, before noise. Zero means exactly zero.
    pub load: f64,
}

/// What `gpu` runs under `scenario` at `gpu.t_ms`.
pub(super) fn workload(scenario: ScenarioKind, gpu: &Gpu) -> Workload {
    match scenario {
        ScenarioKind::SteadyInference | ScenarioKind::DeviceLost => steady_inference(gpu),
        ScenarioKind::TrainingFragmentation => training::workload(gpu),
        ScenarioKind::Leak => leak::workload(gpu),
        ScenarioKind::OomSpike => spike::workload(gpu),
        ScenarioKind::MultiTenant => tenants::workload(gpu),
        ScenarioKind::Idle => Workload { processes: Vec::new(), load: 0.0 },
    }
}

/// The device that `scenario` loses, if any: the last one.
pub(super) fn lost_device(scenario: ScenarioKind, gpus: u32) -> Option<u32> {
    match scenario {
        ScenarioKind::DeviceLost => Some(gpus.saturating_sub(1)),
        _ => None,
    }
}

/// Whether `gpu` is lost at its time.
pub(super) fn is_lost(scenario: ScenarioKind, gpu: &Gpu) -> bool {
    lost_device(scenario, gpu.gpus) == Some(gpu.index) && gpu.t_ms >= millis(DEVICE_LOST_AT)
}

/// Inference servers on every GPU; odd GPUs also host a Triton server
/// (so not every device looks the same), all flat.
fn steady_inference(gpu: &Gpu) -> Workload {
    let mut processes = vec![process::inference_server(gpu, 0)];
    if gpu.index % 2 == 1 {
        processes.push(SimProcess::opaque(gpu.pid(1), "tritonserver", 3_072 * MIB));
    }
    Workload { processes, load: INFERENCE_LOAD }
}

/// A duration as whole milliseconds; the constants here are all small.
pub(super) const fn millis(duration: Duration) -> u64 {
    duration.as_secs().saturating_mul(1_000).saturating_add(duration.subsec_millis() as u64)
}

/// Bytes grown at `rate_per_second` over `elapsed_ms`, saturating.
pub(super) fn grown(rate_per_second: u64, elapsed_ms: u64) -> u64 {
    let bytes = u128::from(rate_per_second) * u128::from(elapsed_ms) / 1_000;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_are_ordered_as_documented() {
        assert!(TRAINING_RETRIES_ONSET < TRAINING_CYCLE);
        assert_eq!(millis(TRAINING_GROWTH_END) % millis(TRAINING_GROWTH_STEP), 0);
        assert!(SPIKE_OOM_AFTER < SPIKE_DURATION);
        assert_eq!(millis(Duration::from_millis(1_500)), 1_500);
    }

    #[test]
    fn growth_is_linear_and_saturates_instead_of_overflowing() {
        assert_eq!(grown(40 * MIB, 1_000), 40 * MIB);
        assert_eq!(grown(40 * MIB, 500), 20 * MIB);
        assert_eq!(grown(u64::MAX, u64::MAX), u64::MAX);
    }

    #[test]
    fn only_the_last_device_is_lost_and_only_in_device_lost() {
        assert_eq!(lost_device(ScenarioKind::DeviceLost, 8), Some(7));
        assert_eq!(lost_device(ScenarioKind::DeviceLost, 1), Some(0));
        assert_eq!(lost_device(ScenarioKind::Leak, 8), None);
    }
}
