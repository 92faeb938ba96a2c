//! The fleet's watchdog: the one observer of every tier call's deadline.
//!
//! Owns: the watchdog's thread (or, in tests driving paused time, its
//! task), its looks, the hand-off of the home crew's other members when
//! its call in flight runs past the limit, and the slow tiers in its care.
//! At each look it asks the tier of every fast call in flight, and the
//! slow tiers once one of them can be due (`TierShared::check_deadline`,
//! which counts, marks stale and logs), and sleeps to the earliest
//! deadline or hand-off look, so the 16 tiers of 8 GPUs cost one wake-up
//! per deadline period rather than 16, and a look between calls takes a
//! few uncontended locks. It parks on a thread of its own: at 100 Hz with
//! several GPUs it looks 20 times a second (one look per hand-off limit is
//! what the bound takes: a call can start just after any look), and on the
//! runtime every look also woke a tokio worker and its timer.
//!
//! Must not depend on history or telemetry.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tracing::{info, warn};

use super::super::tier::TierShared;
use super::{Fleet, Member};

impl Fleet {
    /// Starts the watchdog's thread, and a task that only wakes it at
    /// cancel; false where no thread can be started.
    pub(super) fn watch_on_thread(self: &Arc<Self>) -> bool {
        let handle = Handle::current();
        let spawned = std::thread::Builder::new().name("vramd-watch".to_owned()).spawn({
            let fleet = self.clone();
            move || fleet.watch_parked(&handle)
        });
        match spawned {
            Ok(joined) => {
                // Set once, here, before anything could wake it.
                let _ = self.watcher.set(joined.thread().clone());
                let (fleet, thread) = (self.clone(), joined.thread().clone());
                tokio::spawn(async move {
                    fleet.context.cancel.cancelled().await;
                    // Also here, should the watchdog's thread be gone.
                    fleet.stopping.store(true, Ordering::Release);
                    thread.unpark();
                });
                true
            }
            Err(error) => {
                warn!(error = %error, "cannot start the fast sampler's watchdog thread; it runs on the runtime");
                false
            }
        }
    }

    /// Puts a slow tier's deadlines in the watchdog's care while the guard
    /// lives. A guard, not a call at the end: a device task aborted or
    /// unwinding (a `JoinSet` dropped at a relisting) must not leave its
    /// tier watched for good.
    pub(crate) fn watch_deadline<'a>(&'a self, shared: &'a Arc<TierShared>) -> WatchedDeadline<'a> {
        self.slow.lock().push(shared.clone());
        self.nudge();
        WatchedDeadline { fleet: self, shared }
    }

    /// Wakes the watchdog to look again now.
    pub(super) fn nudge(&self) {
        match self.watcher.get() {
            Some(thread) => thread.unpark(),
            None => self.nudge.notify_one(),
        }
    }

    /// One look: hands the home crew's other members off when its call in
    /// flight has run the hand-off limit, and checks the deadline of every
    /// crew's call in flight and, when one may be due, of every slow tier.
    /// Returns when to look next: the earliest deadline, hand-off look, or
    /// deadline of a call starting now; `None` with no tier at all.
    fn check(self: &Arc<Self>, now: Instant, looks: &mut Looks) -> Option<Instant> {
        let (hand_off_look, members) = self.hand_off(now, &mut looks.in_flight);
        // A fast call that starts after this look is due no earlier than
        // this, whatever the hand-off limit (it can be longer than the call
        // timeout: one fast interval).
        let new_call_due = members.then(|| now + self.context.settings.call_timeout);
        let mut next = earliest(hand_off_look, new_call_due);
        // Outside the fleet's lock: a verdict records a failure and logs.
        for member in looks.in_flight.drain(..) {
            next = earliest(next, Some(member.shared.check_deadline(now)));
        }
        // The slow tiers only when one can be due: a call that starts
        // after this look (in a tier watched now or later) is due no
        // earlier than now plus the call timeout, so at 100 Hz the 20
        // looks a second leave them alone but about once per
        // `sampler.call_timeout`. With none to watch, every look asks.
        if looks.slow_due.is_none_or(|due| now >= due) {
            let soonest = now + self.context.settings.call_timeout;
            // Copied out, as the fast calls are: a verdict logs, and a
            // tier task joining or leaving takes this lock on the runtime.
            looks.slow.extend(self.slow.lock().iter().cloned());
            looks.slow_due = looks
                .slow
                .drain(..)
                .map(|tier| tier.check_deadline(now))
                .min()
                .map(|due| due.min(soonest));
        }
        earliest(next, looks.slow_due)
    }

    /// The hand-off half of `check`: collects each crew's call in flight
    /// into `in_flight`, hands off if the home crew's is overdue, and says
    /// when the next hand-off look is due and whether any crew has members.
    fn hand_off(
        self: &Arc<Self>,
        now: Instant,
        in_flight: &mut Vec<Arc<Member>>,
    ) -> (Option<Instant>, bool) {
        let limit = self.hand_off_after();
        let mut fleet = self.state.lock();
        let mut members = false;
        for crew in &fleet.crews {
            let state = crew.state.lock();
            members |= !state.members.is_empty();
            in_flight.extend(state.current.as_ref().map(|(member, _)| member.clone()));
        }
        let Some(home) = fleet.home.clone() else {
            return (None, members);
        };
        let mut state = home.state.lock();
        if state.members.len() <= 1 {
            // Alone on its thread: a hang here delays no one.
            return (None, members);
        }
        let Some((calling, started)) = &state.current else {
            return (Some(now + limit), members);
        };
        if now < *started + limit {
            return (Some(*started + limit), members);
        }
        // A member that left the fleet (its device stopped) while its call
        // hangs holds up the others all the same: all of them move.
        let stuck = state.members.iter().position(|m| Arc::ptr_eq(m, calling));
        let mut others = Arc::unwrap_or_clone(std::mem::take(&mut state.members));
        state.members = Arc::new(stuck.map(|stuck| others.remove(stuck)).into_iter().collect());
        state.split = true;
        // Before the lock goes: the thread, seeing `split` as its call
        // returns, must also see that it is no longer home, and hand back.
        home.home.store(false, Ordering::Release);
        drop(state);
        info!(
            moved = others.len(),
            after = ?limit,
            "a fast call has not returned; the other devices move to a fresh sampler thread"
        );
        let crew = self.launch(others);
        fleet.crews.push(crew.clone());
        fleet.home = Some(crew);
        (Some(now + limit), members)
    }

    /// The fleet's watchdog, until the sampler is cancelled; then it wakes
    /// every crew's thread so shutdown does not wait out a sleep to a tick.
    pub(super) async fn watch(self: Arc<Self>) {
        let mut looks = Looks::default();
        loop {
            let next = self.check(Instant::now(), &mut looks);
            tokio::select! {
                () = self.context.cancel.cancelled() => break,
                () = self.nudge.notified() => {}
                () = sleep_until(next) => {}
            }
        }
        self.wake_crews();
    }

    /// `watch` on the watchdog's own thread: parks to the next look, woken
    /// early by a nudge or the cancel.
    fn watch_parked(self: Arc<Self>, handle: &Handle) {
        // The runtime's clock (tokio `Instant`s in the crews' state).
        let _runtime = handle.enter();
        let mut looks = Looks::default();
        // The token too: should the runtime drop the task that sets the
        // flag, the watchdog still ends (and then sets it for the crews).
        while !self.stopping.load(Ordering::Acquire) && !self.context.cancel.is_cancelled() {
            let now = Instant::now();
            let next = self.check(now, &mut looks);
            match next {
                Some(at) if at > now => std::thread::park_timeout(at - now),
                Some(_) => {}
                None => std::thread::park(),
            }
        }
        self.wake_crews();
    }

    /// Every crew's thread, woken at cancel so shutdown does not wait out
    /// a sleep to a tick.
    fn wake_crews(&self) {
        self.stopping.store(true, Ordering::Release);
        for crew in &self.state.lock().crews {
            if let Some(thread) = crew.thread.lock().as_ref() {
                thread.unpark();
            }
        }
    }
}

/// What the watchdog keeps from one look to the next.
#[derive(Default)]
struct Looks {
    /// Scratch space for the calls in flight, so a look allocates nothing.
    in_flight: Vec<Arc<Member>>,
    /// The same for the slow tiers.
    slow: Vec<Arc<TierShared>>,
    /// The earliest a slow tier's call can be due, as of the last look at
    /// them; `None` before the first.
    slow_due: Option<Instant>,
}

/// The earlier of two times to look, either of which may be absent.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    a.into_iter().chain(b).min()
}

/// Sleeps until `at`, or for ever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A slow tier in the fleet watchdog's care; dropping it takes it out.
pub(crate) struct WatchedDeadline<'a> {
    fleet: &'a Fleet,
    shared: &'a Arc<TierShared>,
}

impl Drop for WatchedDeadline<'_> {
    fn drop(&mut self) {
        self.fleet.slow.lock().retain(|other| !Arc::ptr_eq(other, self.shared));
    }
}
