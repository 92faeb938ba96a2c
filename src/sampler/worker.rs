//! The thread a device's tier makes its source calls on.
//!
//! Owns: one long-lived thread per device and tier, started with the tier
//! and ended when the tier drops its [`TierWorker`] (after the call in
//! flight, if any, returns). Handing a call to a thread that is already
//! running costs one wake-up, where the blocking pool paid for a task, a
//! queue and often a new thread; and a source can keep per-device state
//! (NVML handles) warm between calls.
//!
//! Must not depend on history or telemetry: deadlines, counting and
//! staleness stay with the tier loop (`tier`), which waits for the answer
//! with its deadline and never hands a second call to a thread still stuck
//! in the first.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use tokio::sync::oneshot;
use tracing::warn;

use crate::model::{FastReading, SlowReading};
use crate::source::{DeviceSource, SourceError, Tier};

// Not boxed: a reading lives for one tick and moves once; boxing would add
// an allocation per sample and save nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Reading {
    Fast(FastReading),
    Slow(SlowReading),
}

pub(crate) type ReadResult = Result<Reading, SourceError>;

/// What a call gave back: the source's result, or the message of a panic
/// inside it.
pub(crate) type Answer = Result<ReadResult, String>;

/// Where a call's answer arrives; kept by the tier while a call is stuck.
pub(crate) type Pending = oneshot::Receiver<Answer>;

/// A device tier's calls, made on its own thread.
pub(crate) struct TierWorker {
    source: Arc<dyn DeviceSource>,
    index: u32,
    tier: Tier,
    /// `None` when the thread could not be started (or ended): calls then
    /// go to the blocking pool, and the next call tries a thread again.
    requests: Option<SyncSender<oneshot::Sender<Answer>>>,
    spawn_failure_logged: bool,
}

impl TierWorker {
    pub(crate) fn new(source: Arc<dyn DeviceSource>, index: u32, tier: Tier) -> Self {
        let mut worker = Self { source, index, tier, requests: None, spawn_failure_logged: false };
        worker.spawn();
        worker
    }

    fn spawn(&mut self) {
        // One slot: the tier never starts a call before the last answered.
        let (requests, calls) = sync_channel(1);
        let source = self.source.clone();
        let (index, tier) = (self.index, self.tier);
        let spawned = std::thread::Builder::new()
            .name(format!("vramd-{tier}-{index}"))
            .spawn(move || serve(&*source, index, tier, &calls));
        match spawned {
            Ok(_) => self.requests = Some(requests),
            Err(error) => {
                if !self.spawn_failure_logged {
                    warn!(gpu = index, tier = %tier, error = %error, "cannot start a sampler thread; this tier's calls use the blocking pool");
                    self.spawn_failure_logged = true;
                }
            }
        }
    }

    /// Starts one call and returns where its answer will arrive.
    pub(crate) fn start(&mut self) -> Pending {
        let (reply, answer) = oneshot::channel();
        if self.requests.is_none() {
            self.spawn();
        }
        let reply = match &self.requests {
            Some(requests) => match requests.try_send(reply) {
                Ok(()) => return answer,
                Err(TrySendError::Full(reply) | TrySendError::Disconnected(reply)) => {
                    self.requests = None;
                    reply
                }
            },
            None => reply,
        };
        let source = self.source.clone();
        let (index, tier) = (self.index, self.tier);
        // Dropped handle: the answer comes back through `reply`.
        drop(tokio::task::spawn_blocking(move || {
            let _gone = reply.send(call(&*source, index, tier));
        }));
        answer
    }
}

/// The thread's loop: one call per request until the tier goes away.
fn serve(
    source: &dyn DeviceSource,
    index: u32,
    tier: Tier,
    calls: &Receiver<oneshot::Sender<Answer>>,
) {
    while let Ok(reply) = calls.recv() {
        // A tier that gave up waiting (deadline, shutdown) has dropped its
        // end: the late answer is no longer current and is dropped here.
        let _gone = reply.send(call(source, index, tier));
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
