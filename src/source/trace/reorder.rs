//! Putting a trace's records into time order within a bounded window.
//!
//! Owns: [`Reorder`]. Depends only on `model` and `format`.
//!
//! A recording is written as the sampler's threads return, so readings of
//! different devices and tiers may be written a little out of time order;
//! each lane (device and tier) is in order (the reader checks it). Played in
//! file order, an evaluation boundary crossed by one device's reading would
//! be judged before another device's slightly earlier reading arrived. The
//! window holds the latest `capacity` records and hands out the earliest;
//! a record earlier than one already handed out is handed out at once and
//! counted as late, never dropped. Records without a time (errors, failed
//! probes) take the latest time seen before them, so on a time-ordered
//! trace the output is exactly the file order.

use std::collections::VecDeque;

use super::format::TraceRecord;
use crate::model::Timestamp;

pub(super) struct Reorder {
    capacity: usize,
    /// In (time, file position) order. A deque rather than a heap: a
    /// recording is nearly in order, so a record almost always goes at the
    /// back, and records are moved only when they are not.
    held: VecDeque<Held>,
    /// Position in the file of the next record: ties keep file order.
    sequence: u64,
    /// The latest time seen so far, the key of records without one.
    latest_seen: Option<Timestamp>,
    /// The key of the latest record handed out.
    handed_out: Option<Timestamp>,
    late: u64,
}

struct Held {
    key: Option<Timestamp>,
    sequence: u64,
    record: TraceRecord,
}

impl Held {
    fn order(&self) -> (Option<Timestamp>, u64) {
        (self.key, self.sequence)
    }
}

impl Reorder {
    /// A window of `capacity` records (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            held: VecDeque::with_capacity(capacity.saturating_add(1).min(1 << 16)),
            sequence: 0,
            latest_seen: None,
            handed_out: None,
            late: 0,
        }
    }

    /// Takes `record`; returns the earliest held one once the window is
    /// full.
    pub fn push(&mut self, record: TraceRecord) -> Option<TraceRecord> {
        let key = match record.at() {
            Some(at) => {
                self.latest_seen = Some(self.latest_seen.map_or(at, |seen| seen.max(at)));
                Some(at)
            }
            None => self.latest_seen,
        };
        if self.handed_out.is_some_and(|handed_out| key < Some(handed_out)) {
            self.late = self.late.saturating_add(1);
        }
        let held = Held { key, sequence: self.sequence, record };
        let after = self.held.iter().rposition(|earlier| earlier.order() <= held.order());
        self.held.insert(after.map_or(0, |position| position + 1), held);
        self.sequence = self.sequence.saturating_add(1);
        if self.held.len() > self.capacity { self.pop() } else { None }
    }

    /// The earliest held record, once the file is read to its end.
    pub fn pop(&mut self) -> Option<TraceRecord> {
        let held = self.held.pop_front()?;
        self.handed_out = self.handed_out.max(held.key);
        Some(held.record)
    }

    /// Records that came after a later one had been handed out: more out of
    /// order than the window holds.
    pub fn late(&self) -> u64 {
        self.late
    }
}
