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
//! a feeder of its own (a second reading of the file from that record on,
//! that passes over other lanes' lines unparsed). A detached lane waits only on
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
#[derive(Debug, PartialEq)]
pub(super) enum Pushed {
    /// Queued.
    Queued,
    /// The lane has a feeder of its own now: the caller skips its records.
    NotMine,
    /// The main feeder detached the full lane instead of waiting for it:
    /// the record is handed back for the lane's own feeder to push first.
    Detached(Box<TraceRecord>),
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
    /// A reader waits for the lane's next record.
    wanted: bool,
    /// The lane's feeder waits for room.
    feeder_waiting: bool,
    /// Records pushed so far, by whichever feeder.
    handed_over: u64,
    /// Records of the lane in the whole file (counted at start-up): once
    /// all were handed over, the lane is at its end without reading on.
    total: u64,
}

impl Lane {
    fn complete(&self) -> bool {
        self.handed_over >= self.total
    }
}

#[derive(Debug)]
struct State {
    lanes: Vec<Lane>,
    /// The lane whose room the main feeder waits for.
    main_waits_on: Option<usize>,
    closed: bool,
    buffered: usize,
    peak_buffered: usize,
}

/// A lane's two wake-ups: a record for its readers, room for its feeder.
#[derive(Debug, Default)]
struct Signals {
    arrived: Condvar,
    room: Condvar,
}

/// Every lane's queue, under one lock: each hand-over is short, and one
/// lock keeps the rule above simple to check. Each lane has its own
/// wake-ups, and a feeder is woken only once its lane is half empty, so a
/// full queue costs one wake-up per half queue, not one per record.
#[derive(Debug)]
pub(super) struct Queues {
    state: Mutex<State>,
    signals: Vec<Signals>,
    capacity: usize,
}

impl Queues {
    /// One queue of at most `capacity` records (at least 1) per entry of
    /// `lanes`: the lane's records in the file, and who feeds it first.
    pub fn new(lanes: &[(u64, Feeder)], capacity: usize) -> Self {
        let signals = lanes.iter().map(|_| Signals::default()).collect();
        let lanes = lanes
            .iter()
            .map(|&(total, feeder)| Lane {
                records: VecDeque::new(),
                feeder,
                end: None,
                wanted: false,
                feeder_waiting: false,
                handed_over: 0,
                total,
            })
            .collect();
        let state =
            State { lanes, main_waits_on: None, closed: false, buffered: 0, peak_buffered: 0 };
        Self { state: Mutex::new(state), signals, capacity: capacity.max(1) }
    }

    /// Pushes `record` onto `lane` for `feeder`, waiting while it is full
    /// unless (main feeder only) another of its lanes is wanted and empty.
    pub fn push(&self, lane: usize, record: TraceRecord, feeder: Feeder) -> Pushed {
        let Some(signals) = self.signals.get(lane) else { return Pushed::NotMine };
        let mut state = self.state.lock();
        loop {
            if state.closed {
                return Pushed::Closed;
            }
            let State { lanes, buffered, peak_buffered, main_waits_on, .. } = &mut *state;
            let Some(queue) = lanes.get_mut(lane) else { return Pushed::NotMine };
            // A record past the lane's count: the file grew since start-up.
            if queue.feeder != feeder || queue.complete() {
                return Pushed::NotMine;
            }
            if queue.records.len() < self.capacity {
                queue.records.push_back(record);
                queue.handed_over = queue.handed_over.saturating_add(1);
                *buffered = buffered.saturating_add(1);
                *peak_buffered = (*peak_buffered).max(*buffered);
                if std::mem::take(&mut queue.wanted) || queue.complete() {
                    signals.arrived.notify_all();
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
            let Some(queue) = lanes.get_mut(lane) else { return Pushed::NotMine };
            if starving {
                queue.feeder = Feeder::Own;
                return Pushed::Detached(Box::new(record));
            }
            queue.feeder_waiting = true;
            if feeder == Feeder::Main {
                *main_waits_on = Some(lane);
            }
            signals.room.wait(&mut state);
            if let Some(queue) = state.lanes.get_mut(lane) {
                queue.feeder_waiting = false;
            }
            if feeder == Feeder::Main {
                state.main_waits_on = None;
            }
        }
    }

    /// The next record of `lane`, waiting for one while its feeder may
    /// still push; `Ended` for a lane that does not exist. A reader waiting
    /// here is one the main feeder does not keep waiting (see above).
    pub fn take(&self, lane: usize) -> Taken {
        self.next(lane, true)
    }

    /// [`Queues::take`] without waiting: `NotYet` when the lane is empty.
    /// A reader that polls is never starved: it does not make the main
    /// feeder detach a lane (the OOM events, rare, would detach them all).
    pub fn try_take(&self, lane: usize) -> Taken {
        self.next(lane, false)
    }

    fn next(&self, lane: usize, wait: bool) -> Taken {
        let Some(signals) = self.signals.get(lane) else { return Taken::Ended };
        let mut state = self.state.lock();
        loop {
            let State { lanes, buffered, main_waits_on, closed, .. } = &mut *state;
            let Some(queue) = lanes.get_mut(lane) else { return Taken::Ended };
            if let Some(record) = queue.records.pop_front() {
                *buffered = buffered.saturating_sub(1);
                if queue.feeder_waiting && queue.records.len() <= self.capacity / 2 {
                    signals.room.notify_one();
                }
                return Taken::Record(record);
            }
            match &queue.end {
                _ if queue.complete() => return Taken::Ended,
                Some(End::Finished) => return Taken::Ended,
                Some(End::Failed(reason)) => return Taken::Failed(reason.clone()),
                None if *closed => return Taken::Ended,
                None => {}
            }
            if !wait {
                return Taken::NotYet;
            }
            if !queue.wanted {
                queue.wanted = true;
                // The main feeder may be waiting on another, full lane.
                if queue.feeder == Feeder::Main
                    && let Some(blocking) = *main_waits_on
                    && let Some(blocked) = self.signals.get(blocking)
                {
                    blocked.room.notify_one();
                }
            }
            signals.arrived.wait(&mut state);
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
                if let Some(signals) = self.signals.get(index) {
                    signals.arrived.notify_all();
                }
            }
        }
    }

    /// Stops every feeder and reader: the replay is being dropped.
    pub fn close(&self) {
        self.state.lock().closed = true;
        for signals in &self.signals {
            signals.arrived.notify_all();
            signals.room.notify_all();
        }
    }

    /// Whether every record of `lane` was handed over (its feeder may stop).
    pub fn complete(&self, lane: usize) -> bool {
        self.state.lock().lanes.get(lane).is_none_or(Lane::complete)
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
