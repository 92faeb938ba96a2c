//! The sampler: discovers devices, then reads each one on two tiers, on a
//! timer, and writes the readings into history.
//!
//! # How a device is read
//!
//! **Discovery.** [`run`] lists the source's devices (on the blocking
//! pool, under `discovery_timeout`; `call`), retrying with backoff while
//! the source is down, keeps at most `max_devices`, and hands the list to
//! `layout`, which starts one tokio task per device and lists again when
//! the source's layout generation moves (a MIG reconfiguration), stopping
//! the devices that left and starting the new ones.
//!
//! **Tiers and lanes.** A device task (`tier::run_device`) runs two tiers
//! side by side: fast (memory, utilization; every `fast_interval`) and
//! slow (processes, health; every `slow_interval`). Everything that
//! differs between the two is decided once, when the tier starts, by its
//! lane (`lane::Fast`, `lane::Slow`): its interval, which source call it
//! makes and how a reading or failure is stored (the
//! slow lane applies the process cap). The rest (`tier::TierShared`) is one
//! code path for both: a tier's state under one lock, its call timer, its
//! readiness promise, failure logging and the back-off from a lost device.
//! The tier's task itself only waits for the tier to end or the sampler to
//! be cancelled.
//!
//! **Threads that sleep to their ticks.** No sample goes through the
//! runtime. The fast tiers of all devices share one thread, their crew's
//! (`crew`), which at each tick samples its members in turn; the slow
//! tiers share another, whose tick comes up to `slow_jitter` after its
//! grid point (drawn once per tick). Every thread ticks on its tier's grid
//! from the sampler's start (`worker::Grid`; a missed tick is skipped, not
//! caught up on) and parks between ticks, so a sample wakes only the
//! thread that takes it; read back to back, the slow reads find their
//! caches warm, which a thread per device woken once a second did not. A
//! tick is: `call_started` (no call while backing off from a lost
//! device), the source call (a panic in it caught), `call_answered`
//! (stored, or counted and logged as a failure).
//!
//! **The watchdog.** One watchdog per sampler (`crew::watchdog`), on a
//! thread of its own, owns every call's deadline: it looks at each call in
//! flight, fast or slow, counts a call past `call_timeout` as a
//! timeout and marks its tier stale, then counts each period it is still
//! stuck (`still_running`); a stuck call is never started twice, and its
//! late answer is dropped. It also owns the hand-offs: a call still
//! running at its thread's limit (one fast interval, at least 50 ms; on
//! the slow thread a quarter of the slow interval, at least that) keeps its
//! thread alone and the other members of its crew move to a fresh home
//! crew, so a hung driver delays the other devices by at most that long
//! (and one look); when the call returns, its device rejoins the home crew
//! and its thread ends, so a tier's threads never outnumber devices.
//!
//! **Readiness.** After every step each tier promises its next one by a
//! wall time (`history::SamplingProgress`); `/readyz` reports the broken
//! promises. The first attempt of every tier marks the first cycle done.
//!
//! `probe` schedules the CUDA probe beside all this, one device at a time.
//!
//! Owns: discovery, scheduling, the deadline on every source call, the
//! per-device process cap, and counting what went wrong.
//! Depends on: `source` (the trait only), `history`, `telemetry`, `model`,
//! `clock`; never on `ingest` or `kubernetes`: what they add to a slow
//! reading is joined by the source it reads (`source::join`). Knows nothing
//! of analysis or HTTP.

mod call;
mod config;
mod crew;
mod lane;
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
use crate::model::ErrorKind;
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
