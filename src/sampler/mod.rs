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
//! Depends on: `source` (the trait only), `ingest` (reports to join),
//! `history`, `telemetry`, `model`.
//! Knows nothing of analysis or HTTP.

mod call;
mod config;
mod crew;
mod layout;
pub mod probe;
pub mod probe_config;
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
use crate::ingest::ReportStore;
use crate::model::{DeviceInfo, ErrorKind, SlowReading};
use crate::source::DeviceSource;
use crate::telemetry::Telemetry;

pub use config::SamplerConfig;

use call::{CallOutcome, call_with_deadline, wait_with_deadline};

/// How the sampler paces and bounds its work: `[sampler]` (through
/// `Deref`), and what the wiring derives from the chosen source.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerSettings {
    /// `[sampler]`.
    pub config: SamplerConfig,
    /// Deadline for listing devices (initialising NVML can take seconds).
    pub discovery_timeout: Duration,
    /// Source seconds per real second: intervals are divided by this, so a
    /// simulated or replayed host produces samples at the configured spacing
    /// of its own clock, only faster.
    pub speed: f64,
    /// Tier threads tick on the runtime's timer rather than sleeping to
    /// their ticks themselves: only for tests that drive paused time (it
    /// costs a runtime wakeup per sample).
    pub runtime_ticks: bool,
}

impl std::ops::Deref for SamplerSettings {
    type Target = SamplerConfig;
    fn deref(&self) -> &SamplerConfig {
        &self.config
    }
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
    /// Allocator reports joined onto each slow reading's processes.
    pub reports: Option<Arc<ReportStore>>,
    /// When sampling began: the grid every tier ticks on.
    pub origin: tokio::time::Instant,
    /// Joined onto each slow reading after the process cap.
    pub attribute: Option<Attribute>,
}

/// Labels one device's slow reading with facts from outside the source
/// (Kubernetes pods and allocations); it must only read published state,
/// never wait, since it runs on the sampling path.
pub type Attribute = Arc<dyn Fn(&DeviceInfo, &mut SlowReading) + Send + Sync>;

/// Runs until `cancel` fires: discovers devices (retrying with backoff while
/// the source is unavailable), then samples them.
pub async fn run(
    source: Arc<dyn DeviceSource>,
    store: Arc<HistoryStore>,
    telemetry: Arc<Telemetry>,
    settings: SamplerSettings,
    reports: Option<Arc<ReportStore>>,
    attribute: Option<Attribute>,
    cancel: CancellationToken,
) {
    let origin = tokio::time::Instant::now();
    let context = Arc::new(Context {
        source,
        store,
        telemetry,
        settings,
        cancel,
        reports,
        origin,
        attribute,
    });
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
                if infos.len() > context.settings.max_devices.get() {
                    tracing::warn!(
                        listed = infos.len(),
                        kept = context.settings.max_devices.get(),
                        "more devices than sampler.max_devices; the rest are not monitored"
                    );
                    infos.truncate(context.settings.max_devices.get());
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
