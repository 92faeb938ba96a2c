//! Following the source's device layout after discovery.
//!
//! Owns: the running device tasks (each with its own cancellation), and
//! listing the devices again when the source's layout generation moves (a
//! MIG reconfiguration): devices no longer listed stop sampling and leave
//! the store with their history, so their series go instead of going stale;
//! new ones start sampling; devices listed again unchanged keep theirs.
//!
//! Depends on: `source` (the trait), `history`, `telemetry`. A failed or
//! stuck listing only delays the change: the kept devices sample on, and a
//! listing stuck in the driver is waited on again, never started twice.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::history::DeviceHistory;
use crate::model::{DeviceInfo, ErrorKind};
use crate::source::SourceError;

use super::call::{CallOutcome, call_with_deadline, wait_with_deadline};
use super::crew::Fleet;
use super::{Context, FirstCycle, tier};

type Listing = Result<Vec<DeviceInfo>, SourceError>;

/// The sampling tasks, one per device, and the layout they sample.
pub(super) struct Running {
    generation: u64,
    /// The fast crews every device's fast tier joins.
    fleet: Arc<Fleet>,
    tasks: JoinSet<()>,
    /// Each device's stop switch, by (index, UUID).
    stops: HashMap<(u32, String), CancellationToken>,
    stuck: Option<JoinHandle<Listing>>,
}

impl Running {
    pub(super) fn new(generation: u64, fleet: Arc<Fleet>) -> Self {
        Self { generation, fleet, tasks: JoinSet::new(), stops: HashMap::new(), stuck: None }
    }

    pub(super) fn spawn(
        &mut self,
        context: &Arc<Context>,
        device: Arc<DeviceHistory>,
        first_cycle: Arc<FirstCycle>,
    ) {
        let stop = context.cancel.child_token();
        let own = Context { cancel: stop.clone(), ..Context::clone(context) };
        self.stops.insert(key(device.info()), stop);
        let fleet = self.fleet.clone();
        self.tasks.spawn(tier::run_device(Arc::new(own), device, first_cycle, fleet));
    }
}

fn key(info: &DeviceInfo) -> (u32, String) {
    (info.index, info.uuid.clone())
}

/// Joins the device tasks until they all end (cancelled, or a replayed
/// trace ended), checking the layout generation once per slow interval.
pub(super) async fn follow(context: &Arc<Context>, mut running: Running) {
    let mut ticker = tokio::time::interval(context.settings.real(context.settings.slow_interval));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            joined = running.tasks.join_next() => match joined {
                None => return,
                Some(Err(error)) if !error.is_cancelled() => {
                    warn!(error = %error, "a device sampling task ended abnormally");
                }
                Some(_) => {}
            },
            _ = ticker.tick() => {
                let now = context.source.layout_generation();
                if now != running.generation && !context.cancel.is_cancelled() {
                    relist(context, &mut running, now).await;
                }
            }
        }
    }
}

async fn relist(context: &Arc<Context>, running: &mut Running, generation: u64) {
    let deadline = context.settings.discovery_timeout;
    let outcome = match running.stuck.take() {
        Some(handle) => wait_with_deadline(deadline, handle).await,
        None => {
            let source = context.source.clone();
            call_with_deadline(deadline, move || source.devices()).await
        }
    };
    let mut infos = match outcome {
        CallOutcome::Done(Ok(infos)) => infos,
        CallOutcome::Done(Err(error)) => {
            context.telemetry.count_error(error.kind());
            warn!(error = %error, "listing devices after a layout change failed; trying again");
            return;
        }
        CallOutcome::TimedOut(handle) => {
            context.telemetry.count_error(ErrorKind::Timeout);
            running.stuck = Some(handle);
            return;
        }
        CallOutcome::Panicked(message) => {
            context.telemetry.count_error(ErrorKind::Panicked);
            warn!(reason = %message, "listing devices after a layout change panicked");
            return;
        }
    };
    running.generation = generation;
    infos.truncate(context.settings.max_devices.get());
    let changed = context.store.relist(infos);
    let mut parents = BTreeSet::new();
    for gone in &changed.removed {
        if let Some(stop) = running.stops.remove(&key(gone.info())) {
            stop.cancel();
        }
        parents.extend(gone.info().mig.as_ref().map(|mig| mig.parent_index));
    }
    parents.extend(
        changed.added.iter().filter_map(|new| new.info().mig.as_ref().map(|mig| mig.parent_index)),
    );
    let first_cycle = Arc::new(FirstCycle::new(changed.added.len() * 2, context.store.clone()));
    for new in &changed.added {
        running.spawn(context, new.clone(), first_cycle.clone());
    }
    for gpu in parents {
        context.telemetry.count_mig_reconfiguration(gpu);
    }
    info!(
        added = changed.added.len(),
        removed = changed.removed.len(),
        "devices listed again after a layout change"
    );
}
