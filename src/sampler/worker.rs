//! What a sampling thread does at a tick: the grid it sleeps to (with the
//! slow tier's jitter), and one call of one tier with a panic in the source
//! caught. The threads themselves are their crews' (`crew`). A thread
//! sleeps to its next tick itself, so a sample wakes nothing but that
//! thread (the runtime's timer would wake a runtime worker to wake it).
//! Every tier of a period ticks on the same grid from the sampler's start.
//! Where the settings ask for it (tests driving paused time), ticks follow
//! the runtime's clock instead.
//!
//! Must not depend on history or telemetry: deadlines, counting and
//! staleness stay with the fleet's watchdog (`crew`), which a call stuck
//! here never blocks.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::source::SourceError;

use super::tier::TierShared;

/// What a call gave back: the source's result, or the message of a panic
/// inside it.
pub(crate) type Answer<R> = Result<Result<R, SourceError>, String>;

/// One tick of one tier on the calling thread, `now` being when the call
/// starts (a crew reads the clock once for its own watchdog and the call):
/// call the source unless the tier is backing off, and hand the answer
/// over. True when the tier has nothing more to read (a replayed trace
/// ended).
pub(crate) fn sample_at(shared: &TierShared, now: Instant) -> bool {
    if !shared.call_started(now) {
        return false;
    }
    shared.sample(now)
}

pub(crate) enum Ticker<'a> {
    /// Sleeps on the thread itself; the watchdog unparks it on cancel.
    Thread(Grid),
    /// The runtime's timer: follows paused test time, at the price of a
    /// runtime wakeup per tick.
    Runtime(Interval, &'a Handle),
}

impl<'a> Ticker<'a> {
    /// Ticks on the grid from `origin`: on the thread itself, or on the
    /// runtime's timer where the settings ask for it.
    pub(crate) fn new(
        context: &super::Context,
        origin: Instant,
        period: Duration,
        handle: &'a Handle,
    ) -> Self {
        if context.settings.runtime_ticks {
            let mut interval = tokio::time::interval_at(origin, period);
            interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
            Ticker::Runtime(interval, handle)
        } else {
            Ticker::Thread(Grid::new(origin, period))
        }
    }

    /// Waits for the next tick; false once the sampler is cancelled.
    /// `stopping` is how a thread sleeping to its ticks learns of the
    /// cancel: the token itself, or a cheaper flag set before the thread
    /// is woken for it (the token takes a lock, once a tick).
    pub(crate) fn wait(&mut self, cancel: &CancellationToken, stopping: &dyn Fn() -> bool) -> bool {
        match self {
            Ticker::Thread(grid) => grid.wait(stopping),
            Ticker::Runtime(interval, handle) => {
                let ticked = handle.block_on(async {
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => false,
                        _ = interval.tick() => true,
                    }
                });
                ticked && !cancel.is_cancelled()
            }
        }
    }
}

/// Ticks every `period` from `next`; a tick missed (a slow call, a busy
/// machine) is skipped, not caught up on, like `MissedTickBehavior::Skip`.
/// With a `jitter`, each wake-up comes a random time up to it after its
/// grid point; the grid itself never moves, so the rate is the period's.
pub(crate) struct Grid {
    next: Instant,
    period: Duration,
    pub(crate) jitter: Duration,
    /// The current grid point's delay, drawn once per tick.
    delay: Option<Duration>,
    rng: fastrand::Rng,
}

impl Grid {
    fn new(origin: Instant, period: Duration) -> Self {
        Self {
            next: origin,
            period,
            jitter: Duration::ZERO,
            delay: None,
            rng: fastrand::Rng::new(),
        }
    }

    /// Sleeps to the next grid point (and its delay); false once
    /// `stopping` says so. Asks it once per tick and after an early wake.
    fn wait(&mut self, stopping: &dyn Fn() -> bool) -> bool {
        let mut woken = false;
        loop {
            let now = Instant::now();
            let wake = self.next + self.delay();
            if now >= wake {
                self.next = self.after(now);
                self.delay = None;
                return !stopping();
            }
            // Before the tick: the unpark at cancel (given before or during
            // this park), or a spurious wake.
            if woken && stopping() {
                return false;
            }
            std::thread::park_timeout(wake - now);
            woken = true;
        }
    }

    /// The current tick's delay after its grid point: uniform below
    /// `jitter`, drawn once per tick.
    fn delay(&mut self) -> Duration {
        let jitter = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        let rng = &mut self.rng;
        *self.delay.get_or_insert_with(|| match jitter {
            0 => Duration::ZERO,
            span => Duration::from_nanos(rng.u64(0..span)),
        })
    }

    /// The first grid point after `now` (at or past `self.next`).
    /// `examples/nvml-floor.rs` paces itself the same way (`tick`): keep
    /// the two in step, or the floor stops measuring what vramd pays.
    fn after(&self, now: Instant) -> Instant {
        let behind = now.saturating_duration_since(self.next);
        // On time, the usual case: no 128-bit division (a library call).
        if behind < self.period {
            return self.next.checked_add(self.period).unwrap_or(now + self.period);
        }
        let behind = behind.as_nanos();
        let steps = behind / self.period.as_nanos().max(1) + 1;
        u32::try_from(steps)
            .ok()
            .and_then(|steps| self.period.checked_mul(steps))
            .and_then(|ahead| self.next.checked_add(ahead))
            .unwrap_or(now + self.period)
    }
}

/// Calls `read` on this thread; a panic inside it becomes its message.
pub(crate) fn call<R>(read: impl FnOnce() -> Result<R, SourceError>) -> Answer<R> {
    catch_unwind(AssertUnwindSafe(read)).map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|text| (*text).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned());
        message.unwrap_or_else(|| "a source call panicked".to_owned())
    })
}

#[cfg(test)]
mod grid_tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::Grid;

    #[test]
    fn jittered_ticks_see_every_phase_and_keep_the_rate() {
        let origin = Instant::now();
        let period = Duration::from_secs(1);
        let mut grid = Grid::new(origin, period);
        grid.jitter = period;
        grid.rng = fastrand::Rng::with_seed(7);
        let mut phases = Vec::new();
        for tick in 0..200_u32 {
            let point = grid.next;
            assert_eq!(point, origin + period * tick, "the grid itself never moves");
            let delay = grid.delay();
            assert!(delay < period, "{delay:?}");
            assert_eq!(grid.delay(), delay, "one draw per tick");
            phases.push(delay.as_millis() / 100);
            // The wake-up, as `wait` takes it.
            grid.next = grid.after(point + delay);
            grid.delay = None;
        }
        // A 1 s training step sampled every 1 s: every tenth of its phase
        // is seen, not one phase forever.
        for decile in 0..10 {
            assert!(phases.contains(&decile), "phase {decile} never seen: {phases:?}");
        }
        let mut plain = Grid::new(origin, period);
        assert_eq!(plain.delay(), Duration::ZERO, "no jitter: on the tick");
    }

    #[test]
    fn a_late_tick_skips_to_the_next_grid_point() {
        let origin = Instant::now();
        let grid = Grid::new(origin, Duration::from_millis(10));
        // On time: the next tick is one period on.
        assert_eq!(grid.after(origin), origin + Duration::from_millis(10));
        // 35 ms late: ticks at 10, 20, 30 are skipped, not caught up on.
        assert_eq!(
            grid.after(origin + Duration::from_millis(35)),
            origin + Duration::from_millis(40)
        );
        // Exactly on a later point: the one after it.
        assert_eq!(
            grid.after(origin + Duration::from_millis(20)),
            origin + Duration::from_millis(30)
        );
    }
}
