//! The bounded hand-over between the threads that read a replayed trace and
//! the sampler's threads that ask for its records, one queue per lane (a
//! device's fast tier, slow tier or probe outcomes, or the trace's OOM
//! events), for the daemon's streamed replay.
//!
//! Owns: [`Queues`] and the rule that keeps one slow reader from stalling
//! the others. Depends only on the trace's own types.
//!
//! One reading thread (the *main* feeder) reads the file once, in order, and
//! pushes each record onto its lane's queue, waiting while that queue is
//! full. The sampler reads devices on separate threads at different paces
//! (a slow tier every few seconds, a fast one several times a second, a
//! lane nobody reads), so a full queue must not hold back a lane whose
//! reader is waiting: when the main feeder finds its queue full while a
//! lane it feeds is empty and wanted, the full lane is *detached* and gets
//! a feeder of its own (a second reading of the file, from the start, that
//! skips the records already handed over). A detached lane waits only on
//! its own reader, so no reader waits on another's, and every queue holds
//! at most `capacity` records whatever the file's length.

use std::collections::VecDeque;

use parking_lot::{Condvar, Mutex};

use super::format::TraceRecord;

/// Who pushes a lane's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Feeder {
    /// The one thread that reads the whole file for every attached lane.
    Main,
    /// A thread of the lane's own, after it was detached.
    Own,
}

/// What became of a push.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Pushed {
    /// Queued.
    Queued,
    /// The lane has a feeder of its own now: the caller skips its records.
    NotMine,
    /// The main feeder detached the full lane instead of waiting for it;
    /// its own feeder must skip the first `handed_over` records of the lane.
    Detached { handed_over: u64 },
    /// The replay was dropped: the feeder stops.
    Closed,
}

/// What a reader of a lane gets.
#[derive(Debug, PartialEq)]
pub(super) enum Taken {
    Record(TraceRecord),
    /// The lane has no record now, but its feeder may still push one (only
    /// from [`Queues::try_take`]).
    NotYet,
    /// Every record of the lane was handed out.
    Ended,
    /// Reading the trace failed before the lane's end.
    Failed(String),
}

/// How a lane's feeding ended.
#[derive(Clone, Debug)]
enum End {
    Finished,
    Failed(String),
}

#[derive(Debug)]
struct Lane {
    records: VecDeque<TraceRecord>,
    feeder: Feeder,
    end: Option<End>,
    /// A reader found the lane empty and wants its next record.
    wanted: bool,
    /// Records pushed so far, by whichever feeder.
    handed_over: u64,
}

#[derive(Debug)]
struct State {
    lanes: Vec<Lane>,
    closed: bool,
    buffered: usize,
    peak_buffered: usize,
}

/// Every lane's queue, under one lock: the records are few and each
/// hand-over is short, so one lock keeps the rule above simple to check.
#[derive(Debug)]
pub(super) struct Queues {
    state: Mutex<State>,
    /// Wakes feeders (room, a wanted lane, closing) and readers (a record,
    /// an end).
    changed: Condvar,
    capacity: usize,
}

impl Queues {
    /// `lanes` queues of at most `capacity` records each (at least 1), all
    /// fed by the main feeder.
    pub fn new(lanes: usize, capacity: usize) -> Self {
        let lane = || Lane {
            records: VecDeque::new(),
            feeder: Feeder::Main,
            end: None,
            wanted: false,
            handed_over: 0,
        };
        let lanes = std::iter::repeat_with(lane).take(lanes).collect();
        let state = State { lanes, closed: false, buffered: 0, peak_buffered: 0 };
        Self { state: Mutex::new(state), changed: Condvar::new(), capacity: capacity.max(1) }
    }

    /// Pushes `record` onto `lane` for `feeder`, waiting while it is full
    /// unless (main feeder only) another of its lanes is wanted and empty.
    pub fn push(&self, lane: usize, record: TraceRecord, feeder: Feeder) -> Pushed {
        let mut state = self.state.lock();
        loop {
            if state.closed {
                return Pushed::Closed;
            }
            let State { lanes, buffered, peak_buffered, .. } = &mut *state;
            let Some(queue) = lanes.get_mut(lane) else { return Pushed::NotMine };
            if queue.feeder != feeder {
                return Pushed::NotMine;
            }
            if queue.records.len() < self.capacity {
                queue.records.push_back(record);
                queue.handed_over = queue.handed_over.saturating_add(1);
                *buffered = buffered.saturating_add(1);
                *peak_buffered = (*peak_buffered).max(*buffered);
                if std::mem::take(&mut queue.wanted) {
                    self.changed.notify_all();
                }
                return Pushed::Queued;
            }
            let starving = feeder == Feeder::Main
                && lanes.iter().enumerate().any(|(index, other)| {
                    index != lane
                        && other.feeder == Feeder::Main
                        && other.wanted
                        && other.records.is_empty()
                });
            if starving && let Some(queue) = lanes.get_mut(lane) {
                queue.feeder = Feeder::Own;
                return Pushed::Detached { handed_over: queue.handed_over };
            }
            self.changed.wait(&mut state);
        }
    }

    /// The next record of `lane`, waiting for one while its feeder may
    /// still push; `Ended` for a lane that does not exist.
    pub fn take(&self, lane: usize) -> Taken {
        self.next(lane, true)
    }

    /// [`Queues::take`] without waiting: `NotYet` when the lane is empty.
    pub fn try_take(&self, lane: usize) -> Taken {
        self.next(lane, false)
    }

    fn next(&self, lane: usize, wait: bool) -> Taken {
        let mut state = self.state.lock();
        loop {
            let closed = state.closed;
            let State { lanes, buffered, .. } = &mut *state;
            let Some(queue) = lanes.get_mut(lane) else { return Taken::Ended };
            if let Some(record) = queue.records.pop_front() {
                *buffered = buffered.saturating_sub(1);
                if queue.records.len() + 1 == self.capacity {
                    // Its feeder may be waiting for room.
                    self.changed.notify_all();
                }
                return Taken::Record(record);
            }
            match &queue.end {
                Some(End::Finished) => return Taken::Ended,
                Some(End::Failed(reason)) => return Taken::Failed(reason.clone()),
                None if closed => return Taken::Ended,
                None => {}
            }
            if !queue.wanted {
                queue.wanted = true;
                // The main feeder may be waiting on another, full lane.
                self.changed.notify_all();
            }
            if !wait {
                return Taken::NotYet;
            }
            self.changed.wait(&mut state);
        }
    }

    /// Ends every lane `feeder` feeds (`lane`: only that one, for an own
    /// feeder), as finished or failed; what is queued is still handed out.
    pub fn end(&self, feeder: Feeder, lane: Option<usize>, failure: Option<&str>) {
        let mut state = self.state.lock();
        let end = failure.map_or(End::Finished, |reason| End::Failed(reason.to_owned()));
        for (index, queue) in state.lanes.iter_mut().enumerate() {
            if queue.feeder == feeder
                && lane.is_none_or(|lane| lane == index)
                && queue.end.is_none()
            {
                queue.end = Some(end.clone());
            }
        }
        self.changed.notify_all();
    }

    /// Stops every feeder and reader: the replay is being dropped.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }

    /// Records queued now, over all lanes.
    pub fn buffered(&self) -> usize {
        self.state.lock().buffered
    }

    /// The most records ever queued at once, over all lanes.
    pub fn peak_buffered(&self) -> usize {
        self.state.lock().peak_buffered
    }

    /// Whether `lane` has a feeder of its own.
    #[cfg(test)]
    pub fn detached(&self, lane: usize) -> bool {
        self.state.lock().lanes.get(lane).is_some_and(|queue| queue.feeder == Feeder::Own)
    }
}
