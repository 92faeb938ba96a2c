//! The fast tier's shared threads: one thread samples every device of its
//! crew at each grid point, so 8 devices at 100 Hz cost 100 wake-ups a
//! second instead of 800.
//!
//! Owns: the crew's thread, its member list, and the hand-off. The crew's
//! watchdog (a runtime task) looks at the call in flight once per hand-off
//! limit (one fast interval, at least 50 ms); a call still running at that
//! limit is left alone on its thread, and every other member moves to a
//! fresh crew with a thread of its own. So a hung call delays the other
//! devices by at most that limit (plus starting a thread), is never started
//! twice (a member is called only by the thread of the crew that lists
//! it), and the stuck thread keeps only that device, sampling it on its own
//! if the call ever returns. Fast threads never outnumber fast devices.
//!
//! Deadlines, counting and staleness stay with each device's tier watchdog
//! (`tier`); a crew only decides who calls whom. Must not depend on
//! history or telemetry.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{info, warn};

use super::Context;
use super::tier::TierShared;
use super::worker::{Ticker, sample_once};

/// The least time a fast call runs before the other devices leave its
/// thread (real time).
const HAND_OFF_FLOOR: Duration = Duration::from_millis(50);

/// A fast tier in a crew. Dropping it (when the tier leaves the crew)
/// resolves the tier watchdog's `ended`.
struct Member {
    shared: Arc<TierShared>,
    _left: oneshot::Sender<()>,
}

pub(crate) struct Crew {
    /// The sampler's own context: its cancel stops the crew.
    context: Arc<Context>,
    /// Members still to join (`join`); the thread retires only once none
    /// are left to come and none remain.
    pending: AtomicUsize,
    state: Mutex<CrewState>,
}

#[derive(Default)]
struct CrewState {
    members: Vec<Arc<Member>>,
    /// The member being called, and since when. Found in `members` only
    /// at a hand-off, so a sample pays no search.
    current: Option<(Arc<Member>, Instant)>,
    /// Set by a hand-off: the rest of this tick's members are no longer
    /// this thread's.
    split: bool,
}

impl Crew {
    /// Starts a crew's thread and watchdog for `expected` fast tiers that
    /// will `join`.
    pub(crate) fn start(context: &Arc<Context>, expected: usize) -> Arc<Self> {
        Self::launch(context, expected, Vec::new())
    }

    fn launch(context: &Arc<Context>, pending: usize, members: Vec<Arc<Member>>) -> Arc<Self> {
        let crew = Arc::new(Self {
            context: context.clone(),
            pending: AtomicUsize::new(pending),
            state: Mutex::new(CrewState { members, current: None, split: false }),
        });
        let handle = Handle::current();
        let (done, ended) = oneshot::channel::<()>();
        let spawned = std::thread::Builder::new().name("vramd-fast".to_owned()).spawn({
            let (crew, handle) = (crew.clone(), handle.clone());
            move || {
                let _done = done;
                crew.pace(&handle);
            }
        });
        let thread = match spawned {
            Ok(joined) => Some(joined.thread().clone()),
            Err(error) => {
                warn!(error = %error, "cannot start a fast sampler thread; the fast tier samples on the blocking pool");
                let (done, fallback) = oneshot::channel::<()>();
                let (pooled, handle) = (crew.clone(), handle.clone());
                drop(tokio::task::spawn_blocking(move || {
                    let _done = done;
                    pooled.pace(&handle);
                }));
                tokio::spawn(crew.clone().watch(fallback, None));
                return crew;
            }
        };
        tokio::spawn(crew.clone().watch(ended, thread));
        crew
    }

    /// Adds a device's fast tier; what it returns resolves when the tier
    /// leaves the crew (its device stopped, or its trace ended).
    pub(crate) fn join(&self, shared: Arc<TierShared>) -> oneshot::Receiver<()> {
        let (left, ended) = oneshot::channel();
        self.state.lock().members.push(Arc::new(Member { shared, _left: left }));
        let _ =
            self.pending.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        ended
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

    /// The crew's loop, on its own thread.
    fn pace(&self, handle: &Handle) {
        let _runtime = handle.enter();
        let context = &self.context;
        let mut ticker = Ticker::new(context, context.origin, self.period(), handle);
        // Reused every tick: no allocation per sample once it has grown.
        let mut batch: Vec<Arc<Member>> = Vec::new();
        while ticker.wait(&context.cancel) {
            {
                let mut state = self.state.lock();
                state.split = false;
                if state.members.is_empty() && self.pending.load(Ordering::Acquire) == 0 {
                    return;
                }
                batch.extend(state.members.iter().cloned());
            }
            for member in &batch {
                if !self.begin(member) {
                    break;
                }
                let leaves =
                    member.shared.context.cancel.is_cancelled() || sample_once(&member.shared);
                if !self.end(member, leaves) {
                    break;
                }
            }
            batch.clear();
        }
    }

    /// Marks `member`'s call as in flight; false when a hand-off took the
    /// rest of this tick's members away.
    fn begin(&self, member: &Arc<Member>) -> bool {
        let mut state = self.state.lock();
        if state.split {
            return false;
        }
        state.current = Some((member.clone(), Instant::now()));
        true
    }

    /// Clears the call in flight and drops `member` if it `leaves`; false
    /// when a hand-off happened meanwhile.
    fn end(&self, member: &Arc<Member>, leaves: bool) -> bool {
        let mut state = self.state.lock();
        state.current = None;
        if leaves {
            state.members.retain(|m| !Arc::ptr_eq(m, member));
        }
        !state.split
    }

    /// Looks at the call in flight; hands the other members off when it has
    /// run the hand-off limit. Returns when to look next, or `None` once this
    /// crew has a single member and none to come (nothing to hand off, so
    /// a one-GPU host pays no watchdog wake-ups).
    fn check(&self, now: Instant) -> Option<Instant> {
        let limit = self.hand_off_after();
        let mut state = self.state.lock();
        if state.members.len() <= 1 && self.pending.load(Ordering::Acquire) == 0 {
            // Alone on its thread for good: a hang here delays no one.
            return None;
        }
        let Some((calling, started)) = &state.current else {
            return Some(now + limit);
        };
        if now < *started + limit {
            return Some(*started + limit);
        }
        // A member that left the crew (its device stopped) is not looked
        // for in vain: nothing is handed off for it.
        let stuck = state.members.iter().position(|m| Arc::ptr_eq(m, calling));
        let Some(stuck) = stuck.filter(|_| state.members.len() > 1) else {
            // The others have yet to join; they are handed off once here.
            return Some(now + limit);
        };
        let mut others = std::mem::take(&mut state.members);
        let kept = others.remove(stuck);
        state.members.push(kept);
        state.split = true;
        drop(state);
        info!(
            moved = others.len(),
            after = ?limit,
            "a fast call has not returned; the other devices move to a fresh sampler thread"
        );
        Self::launch(&self.context, 0, others);
        Some(now + limit)
    }

    /// The crew's watchdog: until the sampler is cancelled, the crew's
    /// thread ends, or it is left a single member.
    async fn watch(
        self: Arc<Self>,
        mut ended: oneshot::Receiver<()>,
        thread: Option<std::thread::Thread>,
    ) {
        while let Some(next) = self.check(Instant::now()) {
            tokio::select! {
                () = self.context.cancel.cancelled() => break,
                _ = &mut ended => return,
                () = tokio::time::sleep_until(next) => {}
            }
        }
        if self.context.cancel.is_cancelled() {
            // Shutdown does not wait out the thread's sleep to its tick.
            if let Some(thread) = thread {
                thread.unpark();
            }
        } else {
            // A single member: only cancel still needs this thread woken.
            tokio::select! {
                () = self.context.cancel.cancelled() => {
                    if let Some(thread) = thread {
                        thread.unpark();
                    }
                }
                _ = &mut ended => {}
            }
        }
    }
}
