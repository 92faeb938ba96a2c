//! One device's sampling task: a fast and a slow tier running side by side.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, info, warn};

use crate::clock::wall_now;
use crate::history::DeviceHistory;
use crate::model::{ErrorKind, FastReading, ProcessInfo, SlowReading};
use crate::source::{SourceError, Tier};

use super::call::{CallOutcome, call_with_deadline};
use super::{Context, FirstCycle};

pub(crate) async fn run_device(
    context: Arc<Context>,
    device: Arc<DeviceHistory>,
    first_cycle: Arc<FirstCycle>,
) {
    tokio::join!(
        run_tier(context.clone(), device.clone(), first_cycle.clone(), Tier::Fast),
        run_tier(context, device, first_cycle, Tier::Slow),
    );
}

// Not boxed: a reading lives for one tick and moves once; boxing would add
// an allocation per sample and save nothing.
#[allow(clippy::large_enum_variant)]
enum Reading {
    Fast(FastReading),
    Slow(SlowReading),
}

type ReadResult = Result<Reading, SourceError>;

async fn run_tier(
    context: Arc<Context>,
    device: Arc<DeviceHistory>,
    first_cycle: Arc<FirstCycle>,
    tier: Tier,
) {
    let interval = match tier {
        Tier::Fast => context.settings.fast_interval,
        Tier::Slow => context.settings.slow_interval,
    };
    let period = context.settings.real(interval);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut stuck: Option<JoinHandle<ReadResult>> = None;
    let mut first = true;
    let mut health = TierHealth::default();
    // The promise /readyz checks: the next step within one period, its
    // call's deadline, and as much again for a busy machine (at least 1 s).
    let patience = period
        .saturating_add(context.settings.call_timeout)
        .saturating_add(period.max(std::time::Duration::from_secs(1)));
    let promise = || device.progress().stepped(tier, wall_now().saturating_add(patience));
    promise();
    loop {
        tokio::select! {
            () = context.cancel.cancelled() => break,
            _ = ticker.tick() => {}
        }
        if health.retry_at.is_some_and(|at| Instant::now() < at) {
            // Backing off from a lost device is sampling as planned.
            promise();
            continue;
        }
        let finished = sample_once(&context, &device, tier, &mut stuck, &mut health).await;
        if finished {
            device.progress().ended(tier);
        } else if stuck.is_none() {
            // Answered, one way or another (a reading, or an error the
            // source gave); a call stuck past its deadline keeps no promise.
            promise();
        }
        if first {
            first = false;
            first_cycle.attempt_finished();
        }
        if finished {
            break;
        }
    }
    if stuck.is_some() {
        context.telemetry.call_unstuck();
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

/// One tick. Returns true when this tier has nothing more to read (a
/// replayed trace ended).
async fn sample_once(
    context: &Context,
    device: &DeviceHistory,
    tier: Tier,
    stuck: &mut Option<JoinHandle<ReadResult>>,
    health: &mut TierHealth,
) -> bool {
    if let Some(handle) = stuck {
        if !handle.is_finished() {
            // The previous call is still inside the driver: starting another
            // would only pile threads up behind the same lock.
            fail(
                context,
                device,
                tier,
                health,
                ErrorKind::StillRunning,
                "the previous call has not returned".into(),
            );
            return false;
        }
        // Its answer is past its deadline and no longer current: dropped.
        *stuck = None;
        context.telemetry.call_unstuck();
    }
    let index = device.info().index;
    let source = context.source.clone();
    let started = Instant::now();
    let outcome = call_with_deadline(context.settings.call_timeout, move || match tier {
        Tier::Fast => source.read_fast(index).map(Reading::Fast),
        Tier::Slow => source.read_slow(index).map(Reading::Slow),
    })
    .await;
    context.telemetry.observe_call(tier.as_str(), started.elapsed());
    match outcome {
        CallOutcome::Done(Ok(reading)) => {
            store(context, device, tier, reading, health);
            false
        }
        CallOutcome::Done(Err(SourceError::TraceEnded { .. })) => {
            info!(gpu = index, tier = %tier, "replayed trace has no more readings for this device and tier");
            true
        }
        CallOutcome::Done(Err(error)) => {
            fail(context, device, tier, health, error.kind(), error.to_string());
            false
        }
        CallOutcome::TimedOut(handle) => {
            *stuck = Some(handle);
            context.telemetry.call_stuck();
            let message = format!("no answer within {:?}", context.settings.call_timeout);
            fail(context, device, tier, health, ErrorKind::Timeout, message);
            false
        }
        CallOutcome::Panicked(message) => {
            fail(context, device, tier, health, ErrorKind::Panicked, message);
            false
        }
    }
}

fn store(
    context: &Context,
    device: &DeviceHistory,
    tier: Tier,
    reading: Reading,
    health: &mut TierHealth,
) {
    let result = match reading {
        Reading::Fast(reading) => device.record_fast(reading),
        Reading::Slow(mut reading) => {
            if let Some(reports) = &context.reports {
                reports.attach(&device.info().uuid, &mut reading);
            }
            let dropped = cap_processes(&mut reading, context.settings.max_processes_per_device);
            if let Some(attribute) = &context.attribute {
                attribute(device.info(), &mut reading);
            }
            device.record_slow(reading, dropped)
        }
    };
    match result {
        Ok(()) => {
            device.progress().succeeded(tier, wall_now());
            health.reset_backoff();
            if let Some(kind) = health.failing.take() {
                info!(gpu = device.info().index, tier = %tier, after = kind.as_str(), "device readings recovered");
            }
        }
        Err(out_of_order) => {
            fail(context, device, tier, health, ErrorKind::OutOfOrder, out_of_order.to_string());
        }
    }
}

fn fail(
    context: &Context,
    device: &DeviceHistory,
    tier: Tier,
    health: &mut TierHealth,
    kind: ErrorKind,
    message: String,
) {
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
    match tier {
        Tier::Fast => device.record_fast_failure(kind, message),
        Tier::Slow => device.record_slow_failure(kind, message),
    }
}

/// Keeps the `max` processes using the most memory (unknown usage last) and
/// returns how many were left out.
pub(crate) fn cap_processes(reading: &mut SlowReading, max: usize) -> usize {
    let Some(processes) = reading.processes.as_mut() else {
        return 0;
    };
    if processes.len() <= max {
        return 0;
    }
    processes.sort_by(|a: &ProcessInfo, b: &ProcessInfo| {
        b.used_bytes.cmp(&a.used_bytes).then(a.pid.cmp(&b.pid))
    });
    let dropped = processes.len() - max;
    processes.truncate(max);
    dropped
}
