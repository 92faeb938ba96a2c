//! Queues, batches, retries and counts deliveries: one bounded queue and one
//! worker task per notifier.
//!
//! [`DispatchHandle::submit`] only pushes onto the queues (a short,
//! uncontended lock, never an `.await`), so the alert engine is never held
//! up by a receiver. A full queue drops its oldest entry. Each worker takes
//! everything queued as one batch, delivers it, and retries a failure with
//! exponential backoff (100 ms doubling up to `notify.retry_backoff_max`, at
//! most `notify.max_retries` times) before giving the batch up. A slow or
//! dead receiver therefore delays only its own worker.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::alerts::{Alert, AlertState, Transition};
use crate::telemetry::NotificationOutcome::{Dropped, Failed, Sent};
use crate::telemetry::Telemetry;

use super::{Notifier, NotifyConfig};

/// First wait before a retry; doubles on each further failure.
const INITIAL_BACKOFF: Duration = Duration::from_millis(100);

/// One notifier's queue.
struct Lane {
    name: &'static str,
    capacity: usize,
    queue: Mutex<VecDeque<Alert>>,
    /// Woken when something is queued.
    wake: Notify,
    telemetry: Arc<Telemetry>,
    max_retries: u32,
    backoff_max: Duration,
}

impl Lane {
    fn push(&self, alerts: impl IntoIterator<Item = Alert>) {
        let mut dropped = 0_u64;
        {
            let mut queue = self.queue.lock();
            for alert in alerts {
                if queue.len() >= self.capacity {
                    queue.pop_front();
                    dropped += 1;
                }
                queue.push_back(alert);
            }
        }
        if dropped > 0 {
            self.telemetry.count_notifications(self.name, Dropped, dropped);
            debug!(notifier = self.name, dropped, "notification queue full; dropped the oldest");
        }
        self.wake.notify_one();
    }
}

/// Starts one worker per notifier and returns the handle the alert engine
/// submits to. Workers stop when `cancel` is cancelled, abandoning whatever
/// is queued or in flight (firing alerts then expire in Alertmanager by
/// their `endsAt`).
///
/// Must be called from within a tokio runtime (it spawns the workers).
pub fn spawn(
    notifiers: Vec<Arc<dyn Notifier>>,
    config: &NotifyConfig,
    telemetry: Arc<Telemetry>,
    cancel: CancellationToken,
) -> DispatchHandle {
    let (lanes, workers): (Vec<_>, Vec<_>) = notifiers
        .into_iter()
        .map(|notifier| {
            telemetry.register_notifier(notifier.name());
            let lane = Arc::new(Lane {
                name: notifier.name(),
                capacity: config.queue_capacity.get(),
                queue: Mutex::new(VecDeque::new()),
                wake: Notify::new(),
                telemetry: telemetry.clone(),
                max_retries: config.max_retries,
                backoff_max: config.retry_backoff_max,
            });
            let worker = tokio::spawn(run_worker(lane.clone(), notifier, cancel.clone()));
            (lane, worker)
        })
        .unzip();
    DispatchHandle { lanes: lanes.into(), workers: Arc::new(Mutex::new(workers)) }
}

/// The notifiers' queues and workers, as the alert engine holds them:
/// cheap to clone, never blocks.
#[derive(Clone)]
pub struct DispatchHandle {
    lanes: Arc<[Arc<Lane>]>,
    workers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl DispatchHandle {
    /// Queues the firing and resolved alerts among `transitions` for every
    /// notifier (pending alerts, and those that ended before they fired,
    /// are not delivered: nobody was told they fired). Returns at once.
    pub fn submit(&self, transitions: &[Transition]) {
        let deliverable: Vec<&Alert> = transitions
            .iter()
            .map(|transition| &transition.alert)
            .filter(|alert| match alert.state {
                AlertState::Firing => true,
                AlertState::Resolved => alert.firing_since.is_some(),
                AlertState::Pending => false,
            })
            .collect();
        if deliverable.is_empty() {
            return;
        }
        for lane in self.lanes.iter() {
            lane.push(deliverable.iter().map(|alert| (*alert).clone()));
        }
    }

    /// Queues a periodic re-send of the firing alerts among `firing`, except
    /// those already waiting in a notifier's queue. Returns at once.
    pub fn resend(&self, firing: &[Alert]) {
        for lane in self.lanes.iter() {
            let queued: HashSet<String> =
                lane.queue.lock().iter().map(|alert| alert.id.clone()).collect();
            let alerts = firing
                .iter()
                .filter(|alert| alert.state == AlertState::Firing && !queued.contains(&alert.id))
                .cloned()
                .collect::<Vec<_>>();
            if !alerts.is_empty() {
                lane.push(alerts);
            }
        }
    }

    /// Waits for the workers to stop (after the cancellation token given to
    /// [`spawn`] is cancelled). Returns at once on later calls.
    pub async fn join(&self) {
        let workers = std::mem::take(&mut *self.workers.lock());
        for worker in workers {
            if let Err(error) = worker.await
                && error.is_panic()
            {
                warn!(error = %error, "a notification worker panicked");
            }
        }
    }
}

async fn run_worker(lane: Arc<Lane>, notifier: Arc<dyn Notifier>, cancel: CancellationToken) {
    let mut failing = false;
    loop {
        let batch: Vec<Alert> = lane.queue.lock().drain(..).collect();
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            () = lane.wake.notified(), if batch.is_empty() => {}
            () = deliver_with_retries(&lane, notifier.as_ref(), &batch, &mut failing), if !batch.is_empty() => {}
        }
    }
}

/// Delivers `batch`, retrying with backoff; counts the outcome and logs
/// only when the notifier starts failing or recovers.
async fn deliver_with_retries(
    lane: &Lane,
    notifier: &dyn Notifier,
    batch: &[Alert],
    failing: &mut bool,
) {
    let count = u64::try_from(batch.len()).unwrap_or(u64::MAX);
    let mut backoff = INITIAL_BACKOFF.min(lane.backoff_max);
    let mut attempt = 0_u32;
    loop {
        let started = tokio::time::Instant::now();
        let result = notifier.deliver(batch).await;
        lane.telemetry.observe_notification(lane.name, started.elapsed());
        match result {
            Ok(()) => {
                lane.telemetry.count_notifications(lane.name, Sent, count);
                if std::mem::take(failing) {
                    info!(notifier = lane.name, alerts = count, "notification delivery recovered");
                }
                return;
            }
            Err(error) => {
                if !std::mem::replace(failing, true) {
                    warn!(
                        notifier = lane.name,
                        alerts = count,
                        error = %error,
                        "notification delivery failing; retrying with backoff"
                    );
                } else {
                    debug!(notifier = lane.name, attempt, error = %error, "notification delivery failed again");
                }
                if attempt >= lane.max_retries {
                    lane.telemetry.count_notifications(lane.name, Failed, count);
                    debug!(
                        notifier = lane.name,
                        alerts = count,
                        attempts = attempt + 1,
                        "notification batch given up"
                    );
                    return;
                }
                attempt += 1;
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2).min(lane.backoff_max);
            }
        }
    }
}

#[cfg(test)]
impl DispatchHandle {
    /// The notifiers' names, in the order given to [`spawn`].
    pub fn notifiers(&self) -> Vec<&'static str> {
        self.lanes.iter().map(|lane| lane.name).collect()
    }

    /// How many alerts wait in `notifier`'s queue (not counting a batch in
    /// flight); `None` for an unknown notifier.
    pub fn queued(&self, notifier: &str) -> Option<usize> {
        self.lanes.iter().find(|lane| lane.name == notifier).map(|lane| lane.queue.lock().len())
    }
}
