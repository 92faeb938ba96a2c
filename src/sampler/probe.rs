//! The CUDA probe scheduler: when each device is probed, whether it is safe
//! to, and what the outcome does to the device's probe state in history.
//!
//! Owns: the per-device due times, the safety gates (NVML free floor,
//! compute mode, unsafe alerts), the backoff of a failing device, and the
//! deadline around each probe. One task probes devices strictly one at a
//! time, so two probe contexts never coexist. Depends on: `source::probe`
//! (the trait only), `history`, `model`; knows of alerts only through the
//! [`ProbeGate`] the wiring passes in.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::history::{DeviceHistory, HistoryStore, ProbeAttempt};
use crate::model::{ComputeMode, ProbeFailure, ProbeFailureKind, ProbeReading, ProbeSkipReason};
use crate::source::probe::{ProbeRequest, Prober};

use super::call::{CallOutcome, call_with_deadline};

/// Time a probe's blocking call gets beyond `request.timeout` to kill and
/// reap its child before the scheduler gives up on it.
const REAP_GRACE: Duration = Duration::from_secs(5);
/// How often the scheduler looks for the sampler's first cycle.
const STARTUP_POLL: Duration = Duration::from_millis(100);

/// How the scheduler paces and bounds probes.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeSettings {
    /// Time between probes of one device, in source time.
    pub interval: Duration,
    /// Ceiling of the wait after repeated failures, in source time.
    pub max_backoff: Duration,
    /// Source seconds per real second (simulation runs faster).
    pub speed: f64,
    /// NVML free memory below which a device is not probed.
    pub min_free_bytes: u64,
    pub request: ProbeRequest,
}

impl ProbeSettings {
    fn real(&self, interval: Duration) -> Duration {
        crate::clock::real_interval(interval, self.speed).max(Duration::from_millis(1))
    }

    /// Source time until the next attempt after `consecutive_failures`
    /// failures in a row: the interval, doubled per failure, capped.
    pub fn retry_delay(&self, consecutive_failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(consecutive_failures.min(20));
        self.interval.saturating_mul(factor).min(self.max_backoff).max(self.interval)
    }

    /// Source time until a skipped device is looked at again: sooner than
    /// a full interval, so a device whose memory frees up is probed soon.
    pub fn skip_delay(&self) -> Duration {
        (self.interval / 4).max(Duration::from_secs(60)).min(self.interval)
    }
}

/// Whether an alert that makes probing unsafe is firing on a device.
pub trait ProbeGate: Send + Sync {
    /// True while an out-of-memory or allocator-retry alert fires on the
    /// device with this UUID: the workload is already short of memory.
    fn unsafe_alert_firing(&self, uuid: &str) -> bool;
}

/// Why a device must not be probed now, if it must not.
pub fn skip_reason(
    device: &DeviceHistory,
    min_free_bytes: u64,
    gate: &dyn ProbeGate,
) -> Option<ProbeSkipReason> {
    let live = device.live();
    let Some(memory) = live.fast.as_ref().and_then(|reading| reading.memory) else {
        return Some(ProbeSkipReason::NoReading);
    };
    if memory.free_bytes < min_free_bytes {
        return Some(ProbeSkipReason::LowFree);
    }
    let mode = live.slow.as_ref().and_then(|reading| reading.details.compute_mode);
    if matches!(mode, Some(ComputeMode::ExclusiveProcess | ComputeMode::Prohibited)) {
        return Some(ProbeSkipReason::ExclusiveProcess);
    }
    if gate.unsafe_alert_firing(&device.info().uuid) {
        return Some(ProbeSkipReason::AlertFiring);
    }
    None
}

/// Runs until `cancel` fires: after the sampler's first cycle, probes every
/// device when it is due, one at a time.
pub async fn run(
    prober: Arc<dyn Prober>,
    store: Arc<HistoryStore>,
    gate: Arc<dyn ProbeGate>,
    settings: ProbeSettings,
    cancel: CancellationToken,
) {
    while !store.cycle_completed() {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(STARTUP_POLL) => {}
        }
    }
    info!(prober = prober.name(), interval = ?settings.interval, "CUDA probe scheduled");
    let mut scheduler = Scheduler { prober, settings, due: HashMap::new(), stuck: None };
    loop {
        let now = Instant::now();
        let devices = store.devices();
        // Due times follow the device list, not every UUID ever listed.
        scheduler.due.retain(|uuid, _| devices.iter().any(|device| device.info().uuid == *uuid));
        // CUDA cannot create a context on a GPU whose memory is split into
        // MIG devices: such a GPU is probed through its MIG devices only.
        let mig_parents: Vec<&str> = devices
            .iter()
            .filter_map(|device| device.info().mig.as_ref().map(|mig| mig.parent_uuid.as_str()))
            .collect();
        for device in &devices {
            if cancel.is_cancelled() {
                return;
            }
            let uuid = &device.info().uuid;
            if mig_parents.contains(&uuid.as_str()) {
                continue;
            }
            // Marked on every pass, not once: a device history made anew
            // (rediscovery) must show as covered too.
            device.update_probe(|state| state.scheduled = true);
            if *scheduler.due.entry(uuid.clone()).or_insert(now) > Instant::now() {
                continue;
            }
            if let Some(handle) = &scheduler.stuck {
                if !handle.is_finished() {
                    break;
                }
                info!("a probe stuck past its deadline has returned; probing resumes");
                scheduler.stuck = None;
            }
            let next = scheduler.visit(device, gate.as_ref()).await;
            scheduler.due.insert(uuid.clone(), Instant::now() + next);
        }
        match scheduler.stuck.as_mut() {
            // Nothing can be probed until the stuck call returns: wait for
            // it rather than waking every few milliseconds to find it still
            // running.
            Some(handle) if !handle.is_finished() => {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    _ = handle => {}
                }
            }
            _ => {
                let settings = &scheduler.settings;
                let earliest = scheduler.due.values().min().copied();
                let wake = earliest
                    .unwrap_or_else(|| Instant::now() + settings.real(settings.interval))
                    .max(Instant::now() + Duration::from_millis(10));
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep_until(wake) => {}
                }
            }
        }
    }
}

type ProbeResult = Result<ProbeReading, ProbeFailure>;

struct Scheduler {
    prober: Arc<dyn Prober>,
    settings: ProbeSettings,
    due: HashMap<String, Instant>,
    /// A probe call still running past its deadline plus the reaping
    /// grace: no other probe starts until it returns.
    stuck: Option<JoinHandle<ProbeResult>>,
}

impl Scheduler {
    /// Skips or probes one due device, records the outcome, and returns
    /// the real time until it is due again.
    async fn visit(&mut self, device: &DeviceHistory, gate: &dyn ProbeGate) -> Duration {
        let at = device.newest_at().unwrap_or_else(crate::clock::wall_now);
        if let Some(reason) = skip_reason(device, self.settings.min_free_bytes, gate) {
            debug!(uuid = %device.info().uuid, reason = reason.as_str(), "probe skipped");
            device.update_probe(|state| state.record_skip(at, reason));
            return self.settings.real(self.settings.skip_delay());
        }
        // Only this scheduler writes the probe state, so what it says before
        // the attempt still holds after it.
        let (previous_failure, last_kind) = device.read_probe(|state| match &state.last_attempt {
            Some((_, ProbeAttempt::Failed { kind, .. })) => {
                (state.consecutive_failures, Some(*kind))
            }
            _ => (state.consecutive_failures, None),
        });
        match self.attempt(device).await {
            Ok(reading) => {
                if previous_failure > 0 {
                    info!(uuid = %device.info().uuid, "CUDA probe recovered");
                }
                debug!(
                    uuid = %device.info().uuid,
                    cuda_free = reading.cuda_free_bytes,
                    seconds = reading.duration_seconds,
                    "probe done"
                );
                device.update_probe(|state| state.record_success(reading));
                self.settings.real(self.settings.interval)
            }
            Err(failure) => {
                let failures = previous_failure.saturating_add(1);
                let retry = self.settings.retry_delay(failures);
                if last_kind != Some(failure.kind) {
                    warn!(
                        uuid = %device.info().uuid,
                        kind = failure.kind.as_str(),
                        reason = %failure.message,
                        retry_in = ?retry,
                        "CUDA probe failed"
                    );
                }
                device.update_probe(|state| state.record_failure(at, failure));
                self.settings.real(retry)
            }
        }
    }

    async fn attempt(&mut self, device: &DeviceHistory) -> ProbeResult {
        let prober = self.prober.clone();
        let info = device.info().clone();
        let request = self.settings.request.clone();
        let deadline = request.timeout.saturating_add(REAP_GRACE);
        match call_with_deadline(deadline, move || prober.probe(&info, &request)).await {
            CallOutcome::Done(result) => result,
            CallOutcome::Panicked(message) => Err(ProbeFailure::new(
                ProbeFailureKind::Crashed,
                format!("the probe call ended abnormally: {message}"),
            )),
            CallOutcome::TimedOut(handle) => {
                self.stuck = Some(handle);
                Err(ProbeFailure::new(
                    ProbeFailureKind::Timeout,
                    format!("no answer within {deadline:?}; not probing again until it returns"),
                ))
            }
        }
    }
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
