//! The tiers' shared threads: one thread samples every device of its crew
//! at each grid point, so 8 devices at 100 Hz cost 100 wake-ups a second
//! instead of 800, and 8 slow reads a second run back to back on one
//! thread instead of waking 8. Back to back is also what keeps the slow
//! read cheap: a thread woken once a second for one device finds its
//! caches cold, and the same NVML calls then cost 2-3 times what they cost
//! in a loop over every device (docs/performance.md, issue 37).
//!
//! Owns: per tier, a squad: the home crew, which every tier of that kind
//! joins, and any crew left holding a call that ran past the hand-off
//! limit (one fast interval, at least 50 ms; on the slow thread a quarter
//! of the slow interval, at least the fast thread's); their
//! threads; the rejoin. The one watchdog (`watchdog`) owns every deadline
//! and decides the hand-off: a call still running at that limit is left
//! alone on its thread, and every other member moves to a fresh home crew.
//! So a hung call delays the other devices by at most that limit (plus
//! one look of the watchdog and starting a thread), and is never started
//! twice (a member is called only by the thread of the crew that lists
//! it). When the call returns, its thread hands its device back to the
//! home crew and ends, so a call that was only slow (a busy host
//! descheduling the thread) costs one thread start, not a thread for good.
//! A squad's threads never outnumber its devices.
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

use super::lane::{Fast, Lane, Slow};
use super::tier::TierShared;
use super::worker::{Ticker, sample_at};
use super::{Context, SamplerSettings};
use crate::model::Tier;

mod watchdog;

/// The least time a call runs before the other devices leave its thread
/// (real time). A constant, not a setting: it is also how often the
/// watchdog looks while several devices share the fast thread, and 50 ms
/// keeps both a hung driver's cost to the others (5 samples at 100 Hz) and
/// the looks (20 a second, a fifth of the fast thread's wake-ups) small; no
/// user has a reason to trade one for the other.
const HAND_OFF_FLOOR: Duration = Duration::from_millis(50);

/// The slow thread hands off at this part of the slow interval (and never
/// sooner than the fast thread). A slow read is milliseconds on a GPU, and
/// about 45 ms a device with PCIe throughput on: a quarter of a second at
/// the defaults leaves such a read alone, where the fast thread's 50 ms
/// at 100 Hz would start a thread for it every second, and still delays
/// the other devices' slow reads by a quarter of their interval at most.
const SLOW_HAND_OFF_PARTS: u32 = 4;

/// A tier in a crew. Dropping it (when the tier leaves the fleet) resolves
/// the tier task's `ended`.
struct Member {
    shared: Arc<TierShared>,
    _left: oneshot::Sender<()>,
}

/// Every crew of one sampler: a squad per tier, and their watchdog.
pub(crate) struct Fleet {
    context: Arc<Context>,
    fast: Squad,
    slow: Squad,
    /// Wakes the watchdog task (paused-time tests), asleep while the home
    /// crews have nothing to hand off, when a home crew gains a member.
    nudge: Notify,
    /// The watchdog's thread, woken instead where it runs on one.
    watcher: OnceLock<Thread>,
    /// Set at cancel before the crews' threads are woken for it: what they
    /// look at once a tick instead of the token, which takes a lock.
    stopping: AtomicBool,
}

/// The crews of one tier.
struct Squad {
    tier: Tier,
    /// Real time between ticks.
    period: Duration,
    /// Real time a tick may start after its grid point, at random (drawn
    /// once per tick for the whole crew: each device is still read at
    /// every phase of a periodic job).
    jitter: Duration,
    /// How long a call may run before the crew's other members are handed
    /// off, which is also how often the watchdog looks while the fast
    /// thread is shared: one fast interval, at least 50 ms; for the slow
    /// thread a quarter of the slow interval, at least the fast one's.
    hand_off_after: Duration,
    /// Whether the watchdog looks for a hand-off between calls too. The
    /// fast crew calls almost without pause (100 Hz), so it looks every
    /// hand-off limit; the slow crew's calls are a few milliseconds a
    /// second, and a slow call in flight is seen at the looks the fast
    /// crew or the deadlines make anyway.
    looks_between_calls: bool,
    /// Lock order: a squad's state before any of its crews'.
    state: Mutex<SquadState>,
}

#[derive(Default)]
struct SquadState {
    /// The crew that its tiers join and handed-off devices rejoin; `None`
    /// until the first join, and again once its members all left.
    home: Option<Arc<Crew>>,
    /// Every crew whose thread runs: the home crew and those holding a
    /// call that overran. Their threads are woken at cancel.
    crews: Vec<Arc<Crew>>,
}

struct Crew {
    /// Which squad the crew belongs to.
    tier: Tier,
    /// Whether this is its squad's home crew (written under the squad's
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
        let settings = &context.settings;
        let fast_hand_off = Fast.period(settings).max(HAND_OFF_FLOOR);
        let slow_hand_off = (Slow.period(settings) / SLOW_HAND_OFF_PARTS).max(fast_hand_off);
        let fleet = Arc::new(Self {
            context: context.clone(),
            fast: Squad::of(&Fast, settings, fast_hand_off, true),
            slow: Squad::of(&Slow, settings, slow_hand_off, false),
            nudge: Notify::new(),
            watcher: OnceLock::new(),
            stopping: AtomicBool::new(false),
        });
        if context.settings.runtime_ticks || !fleet.watch_on_thread() {
            tokio::spawn(fleet.clone().watch());
        }
        fleet
    }

    fn squad(&self, tier: Tier) -> &Squad {
        match tier {
            Tier::Fast => &self.fast,
            Tier::Slow => &self.slow,
        }
    }

    fn squads(&self) -> [&Squad; 2] {
        [&self.fast, &self.slow]
    }

    /// Adds a device's tier to its squad's home crew (starting one if
    /// there is none); what it returns resolves when the tier leaves the
    /// fleet (its device stopped, or its trace ended).
    pub(crate) fn join(self: &Arc<Self>, shared: Arc<TierShared>) -> oneshot::Receiver<()> {
        let (left, ended) = oneshot::channel();
        let squad = self.squad(shared.tier());
        self.take_in(squad, vec![Arc::new(Member { shared, _left: left })]);
        ended
    }

    /// Puts `members` into `squad`'s home crew, or makes them a new home
    /// crew.
    fn take_in(self: &Arc<Self>, squad: &Squad, members: Vec<Arc<Member>>) {
        let mut state = squad.state.lock();
        match &state.home {
            Some(home) => self.add_to(home, members),
            None => {
                let crew = self.launch(squad, members);
                state.crews.push(crew.clone());
                state.home = Some(crew);
                self.nudge();
            }
        }
    }

    /// Adds `members` to the home crew `home`, waking the watchdog once it
    /// has two to look after.
    fn add_to(&self, home: &Crew, members: impl IntoIterator<Item = Arc<Member>>) {
        let mut state = home.state.lock();
        Arc::make_mut(&mut state.members).extend(members);
        if state.members.len() > 1 {
            self.nudge();
        }
    }

    /// Live threads of one tier (one per crew).
    #[cfg(test)]
    pub(crate) fn threads(&self, tier: Tier) -> usize {
        self.squad(tier).state.lock().crews.len()
    }

    /// Starts a home crew's thread for `members` (the caller holds the
    /// squad's lock and lists it).
    fn launch(self: &Arc<Self>, squad: &Squad, members: Vec<Arc<Member>>) -> Arc<Crew> {
        let tier = squad.tier;
        let crew = Arc::new(Crew {
            tier,
            home: AtomicBool::new(true),
            state: Mutex::new(CrewState {
                members: Arc::new(members),
                current: None,
                split: false,
            }),
            thread: Mutex::new(None),
        });
        let handle = Handle::current();
        let spawned = std::thread::Builder::new().name(format!("vramd-{tier}")).spawn({
            let (fleet, crew, handle) = (self.clone(), crew.clone(), handle.clone());
            move || fleet.pace(&crew, &handle)
        });
        match spawned {
            Ok(joined) => *crew.thread.lock() = Some(joined.thread().clone()),
            Err(error) => {
                warn!(tier = %tier, error = %error, "cannot start a sampler thread; this tier samples on the blocking pool");
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
        let squad = self.squad(crew.tier);
        let mut ticker = Ticker::new(context, context.origin, squad.period, handle);
        if let Ticker::Thread(grid) = &mut ticker {
            grid.jitter = squad.jitter;
        }
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
        let mut squad = self.squad(crew.tier).state.lock();
        if !crew.state.lock().members.is_empty() && !self.context.cancel.is_cancelled() {
            return false;
        }
        if squad.home.as_ref().is_some_and(|home| Arc::ptr_eq(home, crew)) {
            squad.home = None;
        }
        crew.home.store(false, Ordering::Release);
        squad.crews.retain(|other| !Arc::ptr_eq(other, crew));
        true
    }

    /// A crew that lost its home to a hand-off, its call since returned,
    /// gives its device back to the home crew; true when its thread can
    /// end. With no home crew left, it becomes the home crew itself.
    fn hand_back(&self, crew: &Arc<Crew>) -> bool {
        let mut squad = self.squad(crew.tier).state.lock();
        let Some(home) = squad.home.clone() else {
            crew.home.store(true, Ordering::Release);
            squad.home = Some(crew.clone());
            return false;
        };
        let returning = std::mem::take(&mut crew.state.lock().members);
        let moved = returning.len();
        self.add_to(&home, returning.iter().cloned());
        squad.crews.retain(|other| !Arc::ptr_eq(other, crew));
        // A device that stopped while its call hung has nothing to rejoin.
        if moved > 0 {
            info!(tier = %crew.tier, moved, "a call returned; its device rejoins the shared sampler thread");
        }
        true
    }
}

impl Squad {
    /// The squad of `lane`'s tier: its period and jitter are the lane's.
    fn of(
        lane: &dyn Lane,
        settings: &SamplerSettings,
        hand_off_after: Duration,
        looks_between_calls: bool,
    ) -> Self {
        Self {
            tier: lane.tier(),
            period: lane.period(settings),
            jitter: lane.jitter(settings),
            hand_off_after,
            looks_between_calls,
            state: Mutex::default(),
        }
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
