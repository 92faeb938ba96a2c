//! The fleet's watchdog: the one observer of every tier call's deadline.
//!
//! Owns: the watchdog's thread (or, in tests driving paused time, its
//! task), its looks, and the hand-off of a home crew's other members when
//! its call in flight runs past the limit. At each look it asks the tier
//! of every call in flight, fast or slow (`TierShared::check_deadline`,
//! which counts, marks stale and logs), and sleeps to the earliest
//! deadline or hand-off look, so the 16 tiers of 8 GPUs cost one wake-up
//! per deadline period rather than 16, and a look between calls takes a
//! few uncontended locks. It parks on a thread of its own: at 100 Hz with
//! several GPUs it looks 20 times a second (one look per hand-off limit is
//! what the bound takes: a fast call can start just after any look), and
//! on the runtime every look also woke a tokio worker and its timer. The
//! slow crew asks for no looks of its own between calls: a slow call is
//! seen at the next look the fast crew, a deadline or another call in
//! flight asks for (at most a hand-off limit away while several devices
//! share the fast thread, a `sampler.call_timeout` otherwise).
//!
//! Must not depend on history or telemetry.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::runtime::Handle;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{Fleet, Member, Squad};

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
                warn!(error = %error, "cannot start the sampler's watchdog thread; it runs on the runtime");
                false
            }
        }
    }

    /// Wakes the watchdog to look again now.
    pub(super) fn nudge(&self) {
        match self.watcher.get() {
            Some(thread) => thread.unpark(),
            None => self.nudge.notify_one(),
        }
    }

    /// One look: hands a home crew's other members off when its call in
    /// flight has run the hand-off limit, and checks the deadline of every
    /// crew's call in flight. Returns when to look next: the earliest
    /// deadline, hand-off look, or deadline of a call starting now; `None`
    /// with no tier at all.
    fn check(self: &Arc<Self>, now: Instant, in_flight: &mut Vec<Arc<Member>>) -> Option<Instant> {
        let mut next = None;
        let mut members = false;
        for squad in self.squads() {
            let (hand_off_look, listed) = self.hand_off(squad, now, in_flight);
            next = earliest(next, hand_off_look);
            members |= listed;
        }
        // A call that starts after this look is due no earlier than this,
        // whatever the hand-off limit (it can be longer than the call
        // timeout: one fast interval).
        next = earliest(next, members.then(|| now + self.context.settings.call_timeout));
        // Outside the squads' locks: a verdict records a failure and logs.
        for member in in_flight.drain(..) {
            next = earliest(next, Some(member.shared.check_deadline(now)));
        }
        next
    }

    /// The hand-off half of `check` for one squad: collects each crew's
    /// call in flight into `in_flight`, hands off if the home crew's is
    /// overdue, and says when the next hand-off look is due and whether any
    /// crew has members.
    fn hand_off(
        self: &Arc<Self>,
        squad: &Squad,
        now: Instant,
        in_flight: &mut Vec<Arc<Member>>,
    ) -> (Option<Instant>, bool) {
        let limit = squad.hand_off_after;
        let mut crews = squad.state.lock();
        let mut members = false;
        for crew in &crews.crews {
            let state = crew.state.lock();
            members |= !state.members.is_empty();
            in_flight.extend(state.current.as_ref().map(|(member, _)| member.clone()));
        }
        let Some(home) = crews.home.clone() else {
            return (None, members);
        };
        let mut state = home.state.lock();
        if state.members.len() <= 1 {
            // Alone on its thread: a hang here delays no one.
            return (None, members);
        }
        let Some((calling, started)) = &state.current else {
            return (squad.looks_between_calls.then(|| now + limit), members);
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
            tier = %squad.tier,
            moved = others.len(),
            after = ?limit,
            "a call has not returned; the other devices move to a fresh sampler thread"
        );
        let crew = self.launch(squad, others);
        crews.crews.push(crew.clone());
        crews.home = Some(crew);
        (Some(now + limit), members)
    }

    /// The fleet's watchdog, until the sampler is cancelled; then it wakes
    /// every crew's thread so shutdown does not wait out a sleep to a tick.
    pub(super) async fn watch(self: Arc<Self>) {
        let mut in_flight = Vec::new();
        loop {
            let next = self.check(Instant::now(), &mut in_flight);
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
        // Scratch space for the calls in flight, so a look allocates nothing.
        let mut in_flight = Vec::new();
        // The token too: should the runtime drop the task that sets the
        // flag, the watchdog still ends (and then sets it for the crews).
        while !self.stopping.load(Ordering::Acquire) && !self.context.cancel.is_cancelled() {
            let now = Instant::now();
            let next = self.check(now, &mut in_flight);
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
        for squad in self.squads() {
            for crew in &squad.state.lock().crews {
                if let Some(thread) = crew.thread.lock().as_ref() {
                    thread.unpark();
                }
            }
        }
    }
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
