//! The thread a device's tier samples on.
//!
//! Owns: one long-lived thread per device and tier, which waits for its
//! tick, calls the source and hands the answer to the tier (`tier`) to
//! store, until the sampler is cancelled or a replayed trace ends. Waking
//! one thread per sample is the whole hand-off: no task, queue or timer per
//! call. Ticks follow the runtime's clock (so paused test time drives them)
//! and every tier of a period ticks on the same grid, so the runtime wakes
//! once for all devices' fast ticks.
//!
//! Must not depend on history or telemetry: deadlines, counting and
//! staleness stay with the tier's watchdog, which a call stuck here never
//! blocks.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::warn;

use crate::model::{FastReading, SlowReading};
use crate::source::{DeviceSource, SourceError, Tier};

use super::tier::TierShared;

// Not boxed: a reading lives for one tick and moves once; boxing would add
// an allocation per sample and save nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Reading {
    Fast(FastReading),
    Slow(SlowReading),
}

/// What a call gave back: the source's result, or the message of a panic
/// inside it.
pub(crate) type Answer = Result<Result<Reading, SourceError>, String>;

/// Starts the tier's thread; what it returns resolves when the thread
/// ends. Where no thread can be started, the same loop runs on the blocking
/// pool instead (holding one of its threads for as long).
pub(crate) fn start(shared: Arc<TierShared>) -> oneshot::Receiver<()> {
    let handle = Handle::current();
    let name = format!("vramd-{}-{}", shared.tier, shared.device.info().index);
    let (done, ended) = oneshot::channel::<()>();
    let spawned = std::thread::Builder::new().name(name).spawn({
        let (shared, handle) = (shared.clone(), handle.clone());
        move || {
            let _done = done;
            pace(&shared, &handle);
        }
    });
    let Err(error) = spawned else {
        return ended;
    };
    let index = shared.device.info().index;
    warn!(gpu = index, tier = %shared.tier, error = %error, "cannot start a sampler thread; this tier samples on the blocking pool");
    let (done, ended) = oneshot::channel::<()>();
    drop(tokio::task::spawn_blocking(move || {
        let _done = done;
        pace(&shared, &handle);
    }));
    ended
}

/// The tier's loop, on its own thread: tick, call, hand the answer over.
fn pace(shared: &TierShared, handle: &Handle) {
    // The runtime's clock and timers, from outside its workers.
    let _runtime = handle.enter();
    let context = &shared.context;
    // Ticks on a grid from the sampler's start: all devices' tiers of one
    // period fall due together.
    let mut ticker = tokio::time::interval_at(context.origin, shared.period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let source = &*context.source;
    let index = shared.device.info().index;
    loop {
        let ticked = handle.block_on(async {
            tokio::select! {
                biased;
                () = context.cancel.cancelled() => false,
                _ = ticker.tick() => true,
            }
        });
        if !ticked || context.cancel.is_cancelled() {
            break;
        }
        if shared.backing_off(Instant::now()) {
            continue;
        }
        shared.call_started();
        let started = Instant::now();
        let answer = call(source, index, shared.tier);
        if shared.call_answered(answer, started.elapsed()) {
            break;
        }
    }
}

fn call(source: &dyn DeviceSource, index: u32, tier: Tier) -> Answer {
    catch_unwind(AssertUnwindSafe(|| match tier {
        Tier::Fast => source.read_fast(index).map(Reading::Fast),
        Tier::Slow => source.read_slow(index).map(Reading::Slow),
    }))
    .map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|text| (*text).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned());
        message.unwrap_or_else(|| "a source call panicked".to_owned())
    })
}
