//! The sampler: discovers devices, then reads each one on two tiers and
//! writes the readings into history.
//!
//! Owns: scheduling (one tokio task per device, running a fast and a slow
//! tier), the deadline on every source call, the per-device process cap,
//! and counting what went wrong. The fast tiers of all devices share one
//! thread that samples them in turn at each grid point (`crew`); a call
//! that hangs past one fast interval (at least 50 ms) keeps that thread
//! and the other devices move to a fresh one, so a stuck driver delays the
//! others by at most that long; once the call returns, its device rejoins
//! the shared thread. Each slow tier has a thread of its own.
//! Every tier call has a deadline, owned by the fleet's one watchdog, on a
//! thread of its own (discovery runs on `spawn_blocking` with a deadline),
//! and a call stuck past its deadline is never duplicated.
//!
//! Depends on: `source` (the trait only), `history`, `telemetry`, `model`,
//! `clock`; never on `ingest` or `kubernetes`: what they add to a slow
//! reading is joined by the source it reads (`source::join`).
//! Knows nothing of analysis or HTTP.

mod call;
mod crew;
mod layout;
pub mod probe;
mod tier;
mod worker;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::history::HistoryStore;
use crate::model::ErrorKind;
use crate::source::DeviceSource;
use crate::telemetry::Telemetry;

use call::{CallOutcome, call_with_deadline, wait_with_deadline};

/// How the sampler paces and bounds its work.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerSettings {
    pub fast_interval: Duration,
    pub slow_interval: Duration,
    pub call_timeout: Duration,
    /// Deadline for listing devices (initialising NVML can take seconds).
    pub discovery_timeout: Duration,
    pub max_processes_per_device: usize,
    /// Devices monitored at most (`sampler.max_devices`); a source that
    /// lists more has the rest left out, logged.
    pub max_devices: usize,
    pub discovery_retry_max: Duration,
    /// Source seconds per real second: intervals are divided by this, so a
    /// simulated or replayed host produces samples at the configured spacing
    /// of its own clock, only faster.
    pub speed: f64,
    /// Tier threads tick on the runtime's timer rather than sleeping to
    /// their ticks themselves: only for tests that drive paused time (it
    /// costs a runtime wakeup per sample).
    pub runtime_ticks: bool,
}

impl SamplerSettings {
    fn real(&self, interval: Duration) -> Duration {
        crate::clock::real_interval(interval, self.speed).max(Duration::from_micros(100))
    }
}

/// Everything a sampling task needs, shared.
#[derive(Clone)]
pub(crate) struct Context {
    pub source: Arc<dyn DeviceSource>,
    pub store: Arc<HistoryStore>,
    pub telemetry: Arc<Telemetry>,
    pub settings: SamplerSettings,
    pub cancel: CancellationToken,
    /// When sampling began: the grid every tier ticks on.
    pub origin: tokio::time::Instant,
}

/// Runs until `cancel` fires: discovers devices (retrying with backoff while
/// the source is unavailable), then samples them.
pub async fn run(
    source: Arc<dyn DeviceSource>,
    store: Arc<HistoryStore>,
    telemetry: Arc<Telemetry>,
    settings: SamplerSettings,
    cancel: CancellationToken,
) {
    let origin = tokio::time::Instant::now();
    let context = Arc::new(Context { source, store, telemetry, settings, cancel, origin });
    let fleet = crew::Fleet::start(&context);
    sample(context, fleet).await;
}

/// Discovers devices, then samples them with `fleet` (which tests keep to
/// count its threads).
async fn sample(context: Arc<Context>, fleet: Arc<crew::Fleet>) {
    let generation = context.source.layout_generation();
    let Some(devices) = discover(&context).await else {
        return;
    };
    let first_cycle = Arc::new(FirstCycle::new(devices.len() * 2, context.store.clone()));
    let mut running = layout::Running::new(generation, fleet);
    for device in devices {
        running.spawn(&context, device, first_cycle.clone());
    }
    layout::follow(&context, running).await;
}

/// Lists devices, retrying with exponential backoff until it works or the
/// sampler is cancelled. Marks the first cycle complete after the first
/// failed attempt too: the daemon is ready to say the source is down.
async fn discover(context: &Arc<Context>) -> Option<Vec<Arc<crate::history::DeviceHistory>>> {
    let mut backoff = Duration::from_secs(1).min(context.settings.discovery_retry_max);
    let mut last_failure: Option<String> = None;
    let mut stuck: Option<tokio::task::JoinHandle<_>> = None;
    loop {
        let outcome = match stuck.take() {
            // A listing still stuck in the driver (a hung nvmlInit) is
            // waited on again rather than joined by a second one.
            Some(handle) => wait_with_deadline(context.settings.discovery_timeout, handle).await,
            None => {
                let source = context.source.clone();
                call_with_deadline(context.settings.discovery_timeout, move || source.devices())
                    .await
            }
        };
        let failure = match outcome {
            CallOutcome::Done(Ok(mut infos)) => {
                context.telemetry.set_source_up(true);
                info!(source = context.source.name(), devices = infos.len(), "devices discovered");
                if infos.len() > context.settings.max_devices {
                    tracing::warn!(
                        listed = infos.len(),
                        kept = context.settings.max_devices,
                        "more devices than sampler.max_devices; the rest are not monitored"
                    );
                    infos.truncate(context.settings.max_devices);
                }
                let devices = context.store.set_devices(infos);
                if devices.is_empty() {
                    context.store.mark_cycle_completed();
                }
                return Some(devices);
            }
            CallOutcome::Done(Err(error)) => {
                context.telemetry.count_error(error.kind());
                error.to_string()
            }
            CallOutcome::TimedOut(handle) => {
                stuck = Some(handle);
                context.telemetry.count_error(ErrorKind::Timeout);
                format!("listing devices took longer than {:?}", context.settings.discovery_timeout)
            }
            CallOutcome::Panicked(message) => {
                context.telemetry.count_error(ErrorKind::Panicked);
                format!("listing devices panicked: {message}")
            }
        };
        context.telemetry.set_source_up(false);
        if last_failure.as_deref() != Some(failure.as_str()) {
            warn!(
                source = context.source.name(),
                reason = %failure,
                retry_in = ?backoff,
                "device source unavailable; serving without devices until it answers (try --simulate for a simulated host)"
            );
            last_failure = Some(failure);
        }
        context.store.mark_cycle_completed();
        tokio::select! {
            () = context.cancel.cancelled() => return None,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(context.settings.discovery_retry_max);
    }
}

/// Counts down the first attempt of every device tier, then marks the
/// store ready.
pub(crate) struct FirstCycle {
    remaining: AtomicUsize,
    store: Arc<HistoryStore>,
}

impl FirstCycle {
    fn new(attempts: usize, store: Arc<HistoryStore>) -> Self {
        Self { remaining: AtomicUsize::new(attempts), store }
    }

    pub(crate) fn attempt_finished(&self) {
        let before = self
            .remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| left.checked_sub(1));
        if before == Ok(1) {
            self.store.mark_cycle_completed();
        }
    }
}
