//! The fast tier's shared threads: one thread samples every device of its
//! crew at each grid point, so 8 devices at 100 Hz cost 100 wake-ups a
//! second instead of 800.
//!
//! Owns: the fleet of fast crews of one sampler: the home crew, which
//! every fast tier joins, and any crew left holding a call that ran past
//! the hand-off limit (one fast interval, at least 50 ms); their threads;
//! the hand-off; the rejoin; and the one watchdog that looks at the home
//! crew's call in flight. A call still running at that limit is left alone
//! on its thread, and every other member moves to a fresh home crew. So a
//! hung call delays the other devices by at most that limit (plus starting
//! a thread), and is never started twice (a member is called only by the
//! thread of the crew that lists it). When the call returns, its thread
//! hands its device back to the home crew and ends, so a call that was
//! only slow (a busy host descheduling the thread) costs one thread start,
//! not a thread for good. Fast threads never outnumber fast devices.
//!
//! The same watchdog owns every call's deadline: at each look it asks the
//! tier of every fast call in flight, and the slow tiers once one of them
//! can be due (`TierShared::check_deadline`, which counts, marks stale and
//! logs), and sleeps to the earliest deadline or hand-off look, so the 16
//! tiers of 8 GPUs cost one wake-up per deadline period rather than 16, and
//! a look between calls takes a few uncontended locks. It runs on a
//! thread of its own, which parks to its next look: at 100 Hz with several
//! GPUs it looks 20 times a second (one look per hand-off limit is what
//! the bound takes: a call can start just after any look), and on the
//! runtime every look also woke a tokio worker and its timer. Tests
//! driving paused time keep it on the runtime (`runtime_ticks`).
//!
//! Must not depend on history or telemetry.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tracing::{info, warn};

use super::Context;
use super::tier::TierShared;
use super::worker::{Ticker, sample_at};

/// The least time a fast call runs before the other devices leave its
/// thread (real time). A constant, not a setting: it is also how often the
/// watchdog looks while several devices share the thread, and 50 ms keeps
/// both a hung driver's cost to the others (5 samples at 100 Hz) and the
/// looks (20 a second, a fifth of the fast thread's wake-ups) small; no
/// user has a reason to trade one for the other.
const HAND_OFF_FLOOR: Duration = Duration::from_millis(50);

/// A fast tier in a crew. Dropping it (when the tier leaves the fleet)
/// resolves the tier task's `ended`.
struct Member {
    shared: Arc<TierShared>,
    _left: oneshot::Sender<()>,
}

/// Every fast crew of one sampler.
pub(crate) struct Fleet {
    context: Arc<Context>,
    /// Lock order: the fleet's state before any crew's.
    state: Mutex<FleetState>,
    /// Wakes the watchdog task (paused-time tests), asleep while the home
    /// crew has nothing to hand off, when the home crew gains a member.
    nudge: Notify,
    /// The watchdog's thread, woken instead where it runs on one.
    watcher: OnceLock<Thread>,
    /// The slow tiers whose deadlines the watchdog owns (one per device
    /// sampled, so bounded by `sampler.max_devices`).
    slow: Mutex<Vec<Arc<TierShared>>>,
    /// Set at cancel before the crews' threads are woken for it: what they
    /// look at once a tick instead of the token, which takes a lock.
    stopping: AtomicBool,
}

#[derive(Default)]
struct FleetState {
    /// The crew that fast tiers join and handed-off devices rejoin; `None`
    /// until the first join, and again once its members all left.
    home: Option<Arc<Crew>>,
    /// Every crew whose thread runs: the home crew and those holding a
    /// call that overran. Their threads are woken at cancel.
    crews: Vec<Arc<Crew>>,
}

struct Crew {
    /// Whether this is the fleet's home crew (written under the fleet's
    /// lock, read by the crew's thread once per tick).
    home: AtomicBool,
    state: Mutex<CrewState>,
    thread: Mutex<Option<Thread>>,
}

#[derive(Default)]
struct CrewState {
    /// Shared with the crew's thread for the length of a tick, so a tick
    /// takes one reference rather than one per member; changed (rarely:
    /// a join, a leave, a hand-off) by copy on write.
    members: Arc<Vec<Arc<Member>>>,
    /// The member being called, and since when. Found in `members` only
    /// at a hand-off, so a sample pays no search.
    current: Option<(Arc<Member>, Instant)>,
    /// Set by a hand-off: the rest of this tick's members are no longer
    /// this thread's.
    split: bool,
}

impl Fleet {
    /// A fleet with no crew yet, and its watchdog.
    pub(crate) fn start(context: &Arc<Context>) -> Arc<Self> {
        let fleet = Arc::new(Self {
            context: context.clone(),
            state: Mutex::new(FleetState::default()),
            nudge: Notify::new(),
            watcher: OnceLock::new(),
            slow: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
        });
        if context.settings.runtime_ticks || !fleet.watch_on_thread() {
            tokio::spawn(fleet.clone().watch());
        }
        fleet
    }

    /// Starts the watchdog's thread, and a task that only wakes it at
    /// cancel; false where no thread can be started.
    fn watch_on_thread(self: &Arc<Self>) -> bool {
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
    fn nudge(&self) {
        match self.watcher.get() {
            Some(thread) => thread.unpark(),
            None => self.nudge.notify_one(),
        }
    }

    /// Adds a device's fast tier to the home crew (starting one if there is
    /// none); what it returns resolves when the tier leaves the fleet (its
    /// device stopped, or its trace ended).
    pub(crate) fn join(self: &Arc<Self>, shared: Arc<TierShared>) -> oneshot::Receiver<()> {
        let (left, ended) = oneshot::channel();
        self.take_in(vec![Arc::new(Member { shared, _left: left })]);
        ended
    }

    /// Puts `members` into the home crew, or makes them a new home crew.
    fn take_in(self: &Arc<Self>, members: Vec<Arc<Member>>) {
        let mut fleet = self.state.lock();
        match &fleet.home {
            Some(home) => {
                let mut crew = home.state.lock();
                Arc::make_mut(&mut crew.members).extend(members);
                if crew.members.len() > 1 {
                    self.nudge();
                }
            }
            None => {
                let crew = self.launch(members);
                fleet.crews.push(crew.clone());
                fleet.home = Some(crew);
                self.nudge();
            }
        }
    }

    /// Live fast threads (one per crew).
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.state.lock().crews.len()
    }

    fn period(&self) -> Duration {
        self.context.settings.real(self.context.settings.fast_interval)
    }

    /// How long a call may run before the others are handed off, which is
    /// also how often the watchdog looks: one fast interval, but at least
    /// `HAND_OFF_FLOOR` so that at 100 Hz the watchdog's own wake-ups cost
    /// a fifth of the thread's.
    fn hand_off_after(&self) -> Duration {
        self.period().max(HAND_OFF_FLOOR)
    }

    /// Starts a home crew's thread for `members` (the caller holds the
    /// fleet's lock and lists it).
    fn launch(self: &Arc<Self>, members: Vec<Arc<Member>>) -> Arc<Crew> {
        let crew = Arc::new(Crew {
            home: AtomicBool::new(true),
            state: Mutex::new(CrewState {
                members: Arc::new(members),
                current: None,
                split: false,
            }),
            thread: Mutex::new(None),
        });
        let handle = Handle::current();
        let spawned = std::thread::Builder::new().name("vramd-fast".to_owned()).spawn({
            let (fleet, crew, handle) = (self.clone(), crew.clone(), handle.clone());
            move || fleet.pace(&crew, &handle)
        });
        match spawned {
            Ok(joined) => *crew.thread.lock() = Some(joined.thread().clone()),
            Err(error) => {
                warn!(error = %error, "cannot start a fast sampler thread; the fast tier samples on the blocking pool");
                let (fleet, pooled) = (self.clone(), crew.clone());
                drop(tokio::task::spawn_blocking(move || fleet.pace(&pooled, &handle)));
            }
        }
        crew
    }

    /// A crew's loop, on its own thread, until the sampler is cancelled,
    /// its members all left, or it handed its device back.
    fn pace(&self, crew: &Arc<Crew>, handle: &Handle) {
        let _runtime = handle.enter();
        let context = &self.context;
        let mut ticker = Ticker::new(context, context.origin, self.period(), handle);
        while ticker.wait(&context.cancel, &|| self.stopping.load(Ordering::Acquire)) {
            let batch = {
                let mut state = crew.state.lock();
                state.split = false;
                state.members.clone()
            };
            if batch.is_empty() && self.retire(crew) {
                return;
            }
            for member in batch.iter() {
                // One clock read for the crew's watchdog and the tier's
                // call both.
                let now = Instant::now();
                if !crew.begin(member, now) {
                    break;
                }
                let leaves = member.shared.stopped() || sample_at(&member.shared, now);
                if !crew.end(member, leaves) {
                    break;
                }
            }
            // Before a hand-back, which would otherwise copy the list.
            drop(batch);
            if !crew.home.load(Ordering::Acquire) && self.hand_back(crew) {
                return;
            }
        }
        self.retire(crew);
    }

    /// Ends an empty crew (or one whose sampler is cancelled); false when a
    /// member joined meanwhile.
    fn retire(&self, crew: &Arc<Crew>) -> bool {
        let mut fleet = self.state.lock();
        if !crew.state.lock().members.is_empty() && !self.context.cancel.is_cancelled() {
            return false;
        }
        if fleet.home.as_ref().is_some_and(|home| Arc::ptr_eq(home, crew)) {
            fleet.home = None;
        }
        crew.home.store(false, Ordering::Release);
        fleet.crews.retain(|other| !Arc::ptr_eq(other, crew));
        true
    }

    /// A crew that lost its home to a hand-off, its call since returned,
    /// gives its device back to the home crew; true when its thread can
    /// end. With no home crew left, it becomes the home crew itself.
    fn hand_back(&self, crew: &Arc<Crew>) -> bool {
        let mut fleet = self.state.lock();
        let Some(home) = fleet.home.clone() else {
            crew.home.store(true, Ordering::Release);
            fleet.home = Some(crew.clone());
            return false;
        };
        let returning = std::mem::take(&mut crew.state.lock().members);
        let moved = returning.len();
        {
            let mut state = home.state.lock();
            Arc::make_mut(&mut state.members).extend(returning.iter().cloned());
            if state.members.len() > 1 {
                self.nudge();
            }
        }
        fleet.crews.retain(|other| !Arc::ptr_eq(other, crew));
        // A device that stopped while its call hung has nothing to rejoin.
        if moved > 0 {
            info!(moved, "a fast call returned; its device rejoins the shared sampler thread");
        }
        true
    }

    /// One look: hands the home crew's other members off when its call in
    /// flight has run the hand-off limit, and checks the deadline of every
    /// crew's call in flight and, when one may be due, of every slow tier.
    /// Returns when to look next: the earliest deadline, hand-off look, or
    /// deadline of a call starting now; `None` with no tier at all.
    fn check(self: &Arc<Self>, now: Instant, looks: &mut Looks) -> Option<Instant> {
        let mut next = self.hand_off(now, &mut looks.in_flight);
        // Outside the fleet's lock: a verdict records a failure and logs.
        for member in looks.in_flight.drain(..) {
            let due = member.shared.check_deadline(now);
            next = Some(next.map_or(due, |next| next.min(due)));
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
        match (next, looks.slow_due) {
            (Some(next), Some(slow)) => Some(next.min(slow)),
            (next, slow) => next.or(slow),
        }
    }

    /// The hand-off half of `check`: collects each crew's call in flight
    /// into `in_flight` and hands off if the home crew's is overdue.
    fn hand_off(
        self: &Arc<Self>,
        now: Instant,
        in_flight: &mut Vec<Arc<Member>>,
    ) -> Option<Instant> {
        let limit = self.hand_off_after();
        let mut fleet = self.state.lock();
        let mut members = false;
        for crew in &fleet.crews {
            let state = crew.state.lock();
            members |= !state.members.is_empty();
            in_flight.extend(state.current.as_ref().map(|(member, _)| member.clone()));
        }
        // A call that starts after this look is due no earlier than this.
        let next = members.then(|| now + self.context.settings.call_timeout);
        let Some(home) = fleet.home.clone() else {
            return next;
        };
        let mut state = home.state.lock();
        if state.members.len() <= 1 {
            // Alone on its thread: a hang here delays no one.
            return next;
        }
        let Some((calling, started)) = &state.current else {
            return Some(now + limit);
        };
        if now < *started + limit {
            return Some(*started + limit);
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
        Some(now + limit)
    }

    /// The fleet's watchdog, until the sampler is cancelled; then it wakes
    /// every crew's thread so shutdown does not wait out a sleep to a tick.
    async fn watch(self: Arc<Self>) {
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

impl Crew {
    /// Marks `member`'s call as in flight from `now`; false when a hand-off
    /// took the rest of this tick's members away.
    fn begin(&self, member: &Arc<Member>, now: Instant) -> bool {
        let mut state = self.state.lock();
        if state.split {
            return false;
        }
        state.current = Some((member.clone(), now));
        true
    }

    /// Clears the call in flight and drops `member` if it `leaves`; false
    /// when a hand-off happened meanwhile.
    fn end(&self, member: &Arc<Member>, leaves: bool) -> bool {
        let mut state = self.state.lock();
        state.current = None;
        if leaves {
            Arc::make_mut(&mut state.members).retain(|m| !Arc::ptr_eq(m, member));
        }
        !state.split
    }
}
