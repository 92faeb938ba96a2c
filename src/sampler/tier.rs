//! One device's sampling: a fast and a slow tier side by side, each on its
//! squad's shared thread (`crew`), which paces them, calls the source and
//! stores what it read. What differs between the two is their lane's
//! (`lane`), chosen once when the tier starts; this is the code both
//! share. Every call's deadline is owned by the fleet's one watchdog
//! (`crew`), which calls `check_deadline` for each call in flight; a task
//! per tier only waits for the tier to end.
//!
//! A tier is called by one thread at a time, one call at a time, so a call stuck
//! in the driver is never started twice; the watchdog counts it as a
//! timeout at its deadline, marks the tier stale, and then counts every
//! period it is still stuck. Its late answer is dropped. Both sides write
//! the tier's state under one lock, so a late watchdog verdict can never
//! overwrite a newer reading.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::clock::wall_now;
use crate::history::{DeviceHistory, OutOfOrder};
use crate::model::{ErrorKind, Timestamp};
use crate::source::{DeviceSource, SourceError, Tier};
use crate::telemetry::CallTimer;

use super::crew::Fleet;
use super::lane::{Fast, Lane, Slow};
use super::worker::{self, Answer};
use super::{Context, FirstCycle};

/// Samples one device until its context is cancelled: each tier in its
/// squad's home crew of `fleet`.
pub(crate) async fn run_device(
    context: Arc<Context>,
    device: Arc<DeviceHistory>,
    first_cycle: Arc<FirstCycle>,
    fleet: Arc<Fleet>,
) {
    tokio::join!(
        run_tier(context.clone(), device.clone(), first_cycle.clone(), &Fast, fleet.clone()),
        run_tier(context, device, first_cycle, &Slow, fleet),
    );
}

/// What a tier's thread, its task and the fleet's watchdog share.
pub(crate) struct TierShared {
    pub(crate) context: Arc<Context>,
    pub(crate) device: Arc<DeviceHistory>,
    first_cycle: Arc<FirstCycle>,
    /// Which tier this is, and what that tier does differently.
    lane: &'static dyn Lane,
    /// Real time between ticks.
    pub(crate) period: Duration,
    /// The promise /readyz checks: the next step within one period, its
    /// call's deadline, and as much again for a busy machine (at least 1 s).
    patience: Duration,
    timer: CallTimer,
    /// `vramd_sample_cpu_seconds` of this tier.
    cpu_timer: CallTimer,
    /// Samples started, to pick the ones whose CPU time is measured.
    samples: AtomicU32,
    state: Mutex<TierState>,
    /// Set by the tier's task when the tier's context is cancelled.
    stopped: AtomicBool,
}

#[derive(Default)]
struct TierState {
    health: TierHealth,
    /// The call in flight, if any.
    call: Option<InFlight>,
    /// Whether this tier's first attempt was counted towards readiness.
    first_done: bool,
}

struct InFlight {
    started: Instant,
    /// Past its deadline: counted, the tier marked stale, its answer unwanted.
    overdue: bool,
    /// When an overdue call is next counted as still running: once a
    /// period, however often the watchdog looks.
    recount_at: Option<Instant>,
}

/// One sample in 2^this has its CPU time measured
/// (`vramd_sample_cpu_seconds`; the help text says 16).
const CPU_MEASURED_BITS: u32 = 4;

/// Whether sample number `count` has its CPU time measured: one in 16,
/// picked along the golden-ratio sequence rather than every 16th, so that
/// work done every few samples is measured in its share. The slow ring
/// seals every 4th sample (with moving processes) and merges every 32nd:
/// every 16th sample would always, or never, be one of those.
fn cpu_measured(count: u32) -> bool {
    count.wrapping_mul(0x9E37_79B9) >> (32 - CPU_MEASURED_BITS) == 0
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_time() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(now.tv_nsec).unwrap_or(0);
    Duration::new(seconds, nanos)
}

async fn run_tier(
    context: Arc<Context>,
    device: Arc<DeviceHistory>,
    first_cycle: Arc<FirstCycle>,
    lane: &'static dyn Lane,
    fleet: Arc<Fleet>,
) {
    let period = lane.period(&context.settings);
    let patience = period
        .saturating_add(context.settings.call_timeout)
        .saturating_add(period.max(Duration::from_secs(1)));
    let timer = context.telemetry.call_timer(lane.tier().as_str());
    let cpu_timer = context.telemetry.cpu_timer(lane.tier().as_str());
    let shared = Arc::new(TierShared {
        timer,
        cpu_timer,
        samples: AtomicU32::new(0),
        context,
        device,
        first_cycle,
        lane,
        period,
        patience,
        state: Mutex::new(TierState::default()),
        stopped: AtomicBool::new(false),
    });
    shared.promise(wall_now());
    let ended = fleet.join(shared.clone());
    watch(&shared, ended).await;
}

impl TierShared {
    pub(crate) fn tier(&self) -> Tier {
        self.lane.tier()
    }

    fn promise(&self, now: Timestamp) {
        self.device.progress().stepped(self.tier(), now.saturating_add(self.patience));
    }

    /// Whether the tier's device stopped sampling (it left the layout, or
    /// the sampler is cancelled): an atomic, so a shared thread can look
    /// before every call at no cost.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Notes that a call starts at `now` (on the tier's thread); false,
    /// and no call to make, while the tier backs off from a lost device.
    pub(crate) fn call_started(&self, now: Instant) -> bool {
        let mut state = self.state.lock();
        if state.health.retry_at.is_some_and(|at| now < at) {
            drop(state);
            // Backing off from a lost device is sampling as planned.
            self.promise(wall_now());
            return false;
        }
        state.call = Some(InFlight { started: now, overdue: false, recount_at: None });
        true
    }

    /// One call of this tier, announced by `call_started` at `started`, as
    /// its lane makes it. True when the tier has nothing more to read.
    pub(crate) fn sample(&self, started: Instant) -> bool {
        // The thread's CPU clock has no vDSO path: each read is a system
        // call, a tenth of a fast sample. One sample in 16 pays for it
        // (`cpu_measured`); the histogram's mean is the same.
        let measured = cpu_measured(self.samples.fetch_add(1, Ordering::Relaxed));
        let cpu_before = measured.then(thread_cpu_time);
        let ended = self.lane.sample(self, started);
        if let Some(before) = cpu_before {
            self.cpu_timer.observe(thread_cpu_time().saturating_sub(before));
        }
        ended
    }

    /// Makes the call that `call_started` announced (at `started`) on the
    /// calling thread: `read` this tier of the device from the source, then
    /// `store` a reading (this tier's lane says how). True when this tier
    /// has nothing more to read (a replayed trace ended).
    pub(crate) fn read_and_store<R>(
        &self,
        started: Instant,
        read: impl FnOnce(&dyn DeviceSource, u32) -> Result<R, SourceError>,
        store: impl FnOnce(&DeviceHistory, R) -> Result<(), OutOfOrder>,
    ) -> bool {
        let index = self.device.info().index;
        let answer = worker::call(|| read(&*self.context.source, index));
        self.call_answered(answer, started.elapsed(), store)
    }

    /// Takes the answer of the call that `call_started` announced, storing
    /// a reading with `store`. Returns true when this tier has nothing more
    /// to read (a replayed trace ended).
    fn call_answered<R>(
        &self,
        answer: Answer<R>,
        took: Duration,
        store: impl FnOnce(&DeviceHistory, R) -> Result<(), OutOfOrder>,
    ) -> bool {
        let context = &self.context;
        self.timer.observe(took);
        let mut state = self.state.lock();
        let state = &mut *state;
        if state.call.take().is_some_and(|call| call.overdue) {
            // Past its deadline and no longer current: dropped. The
            // watchdog already counted it and marked the tier stale.
            context.telemetry.call_unstuck();
            return false;
        }
        let index = self.device.info().index;
        // One wall-clock read per answer: the success and the next promise.
        let now = wall_now();
        let finished = match answer {
            Ok(Ok(reading)) => {
                let stored = store(&self.device, reading);
                self.stored(stored, &mut state.health, now);
                false
            }
            Ok(Err(SourceError::TraceEnded { .. })) => {
                info!(gpu = index, tier = %self.tier(), "replayed trace has no more readings for this device and tier");
                true
            }
            Ok(Err(error)) => {
                let (kind, message) = (error.kind(), error.to_string());
                self.fail(&mut state.health, kind, message);
                false
            }
            Err(panic) => {
                self.fail(&mut state.health, ErrorKind::Panicked, panic);
                false
            }
        };
        if finished {
            self.device.progress().ended(self.tier());
        } else {
            // Answered, one way or another (a reading, or an error the
            // source gave); a call stuck past its deadline keeps no promise.
            self.promise(now);
        }
        self.first_attempt_done(state);
        finished
    }

    fn first_attempt_done(&self, state: &mut TierState) {
        if !state.first_done {
            state.first_done = true;
            self.first_cycle.attempt_finished();
        }
    }

    /// One look at the call in flight; returns when to look next.
    pub(crate) fn check_deadline(&self, now: Instant) -> Instant {
        let timeout = self.context.settings.call_timeout;
        let mut state = self.state.lock();
        let state = &mut *state;
        match state.call.as_mut() {
            // A call starting from now on is due no earlier than this.
            None => now + timeout,
            Some(call) if !call.overdue => {
                let deadline = call.started + timeout;
                if now < deadline {
                    return deadline;
                }
                call.overdue = true;
                let recount_at = now + self.period;
                call.recount_at = Some(recount_at);
                self.context.telemetry.call_stuck();
                let message = format!("no answer within {timeout:?}");
                self.fail(&mut state.health, ErrorKind::Timeout, message);
                self.first_attempt_done(state);
                recount_at
            }
            Some(InFlight { recount_at: Some(at), .. }) if now < *at => *at,
            Some(call) => {
                let recount_at = now + self.period;
                call.recount_at = Some(recount_at);
                // Still inside the driver: each tick it misses is counted,
                // and no second call is started behind it.
                let message = "the previous call has not returned".to_owned();
                self.fail(&mut state.health, ErrorKind::StillRunning, message);
                recount_at
            }
        }
    }

    /// Notes how storing a reading went.
    fn stored(&self, result: Result<(), OutOfOrder>, health: &mut TierHealth, now: Timestamp) {
        let (device, tier) = (&*self.device, self.tier());
        match result {
            Ok(()) => {
                device.progress().succeeded(tier, now);
                health.reset_backoff();
                if let Some(kind) = health.failing.take() {
                    info!(gpu = device.info().index, tier = %tier, after = kind.as_str(), "device readings recovered");
                }
            }
            Err(out_of_order) => {
                self.fail(health, ErrorKind::OutOfOrder, out_of_order.to_string());
            }
        }
    }

    fn fail(&self, health: &mut TierHealth, kind: ErrorKind, message: String) {
        let (context, device, tier) = (&*self.context, &*self.device, self.tier());
        context.telemetry.count_error(kind);
        let index = device.info().index;
        if health.failing != Some(kind) {
            warn!(gpu = index, uuid = %device.info().uuid, tier = %tier, kind = kind.as_str(), error = %message, "device read failed");
            health.failing = Some(kind);
        } else {
            debug!(gpu = index, tier = %tier, kind = kind.as_str(), error = %message, "device read failed again");
        }
        if kind == ErrorKind::DeviceLost {
            health.back_off(context);
        }
        self.lane.record_failure(device, kind, message);
    }
}

/// Waits until the tier's context is cancelled or the tier leaves its
/// crew. At a cancel it marks the tier stopped: its crew's thread calls it
/// no more and drops it at its next tick (at once when the whole sampler
/// is cancelled, whose watchdog wakes every crew).
async fn watch(shared: &TierShared, ended: oneshot::Receiver<()>) {
    tokio::select! {
        () = shared.context.cancel.cancelled() => shared.stopped.store(true, Ordering::Release),
        _ = ended => {}
    }
}

/// Remembers the last failure kind, so a failure is logged when it starts
/// or changes kind, not on every tick; and backs off from a lost device.
#[derive(Default)]
struct TierHealth {
    failing: Option<ErrorKind>,
    /// Consecutive `device_lost` answers.
    lost_streak: u32,
    /// While a device is lost, the next tick at which to try it again.
    retry_at: Option<Instant>,
}

impl TierHealth {
    /// A lost GPU is retried after 1 s, 2 s, 4 s … up to
    /// `sampler.discovery_retry_max` (source time), not on every tick.
    fn back_off(&mut self, context: &Context) {
        self.lost_streak = self.lost_streak.saturating_add(1);
        let doublings = self.lost_streak.saturating_sub(1).min(16);
        let backoff = std::time::Duration::from_secs(1u64 << doublings)
            .min(context.settings.discovery_retry_max);
        self.retry_at = Some(Instant::now() + context.settings.real(backoff));
    }

    fn reset_backoff(&mut self) {
        self.lost_streak = 0;
        self.retry_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::cpu_measured;

    #[test]
    fn one_sample_in_16_is_measured_at_every_phase_of_periodic_work() {
        let measured: Vec<u32> = (0..4_096).filter(|&count| cpu_measured(count)).collect();
        assert!(measured.len().abs_diff(256) <= 4, "{} of 4,096 measured", measured.len());
        // Work every 4th or 32nd sample (a seal, a merge) is measured in
        // its share: each phase gets about its fraction of the measured.
        for period in [4u32, 16, 32] {
            let mut at_phase = vec![0usize; period as usize];
            for &count in &measured {
                at_phase[(count % period) as usize] += 1;
            }
            let share = measured.len() / period as usize;
            for (phase, &count) in at_phase.iter().enumerate() {
                assert!(
                    count.abs_diff(share) <= share / 2 + 1,
                    "period {period}, phase {phase}: {count} of 256 measured (share {share})"
                );
            }
        }
    }
}
