//! The latest alerts, as the HTTP surfaces read them, and the stream of
//! state changes. (Device analyses have their own board in `analysis`.)
//!
//! The evaluation task replaces the snapshot after each evaluation;
//! readers clone an `Arc` and never wait on an evaluation.
//!
//! Each state change gets a sequence number, and the latest few are kept,
//! so a stream reader that reconnects (SSE `Last-Event-ID`) is given what
//! it missed instead of losing it. Numbers restart with the daemon; the
//! board's `epoch` tells a reader which run its number belongs to.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::broadcast;

use super::model::{Alert, Transition};

/// A state change with its place in this run's sequence (1, 2, …).
#[derive(Clone, Debug, PartialEq)]
pub struct NumberedTransition {
    pub seq: u64,
    pub transition: Transition,
}

/// What a reader resuming after a sequence number is given before the live
/// changes.
#[derive(Debug, Default, PartialEq)]
pub struct Backlog {
    /// Changes after the reader's number that are no longer kept.
    pub missed: u64,
    /// Kept changes after the reader's number, oldest first.
    pub replay: Vec<NumberedTransition>,
}

/// Published results of the latest evaluation.
pub struct AlertBoard {
    alerts: RwLock<Arc<Vec<Alert>>>,
    /// Held while a change is numbered, kept and sent, and while a reader
    /// subscribes: a reader sees each change exactly once, either in its
    /// backlog or live.
    recent: Mutex<Recent>,
    events: broadcast::Sender<NumberedTransition>,
    epoch: u64,
}

struct Recent {
    last_seq: u64,
    kept: VecDeque<NumberedTransition>,
    capacity: usize,
}

impl AlertBoard {
    /// `stream_capacity` bounds both the changes buffered for slow stream
    /// readers (one further behind is told it lagged) and those kept for
    /// readers that reconnect. `epoch` must differ between runs of the
    /// daemon (its start time does), so that a number from an earlier run
    /// is never taken for one of this run.
    pub fn new(stream_capacity: usize, epoch: u64) -> Self {
        let capacity = stream_capacity.max(1);
        let (events, _) = broadcast::channel(capacity);
        Self {
            alerts: RwLock::new(Arc::new(Vec::new())),
            recent: Mutex::new(Recent { last_seq: 0, kept: VecDeque::new(), capacity }),
            events,
            epoch,
        }
    }

    pub fn alerts(&self) -> Arc<Vec<Alert>> {
        self.alerts.read().clone()
    }

    /// Which run of the daemon this board's sequence numbers belong to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The live changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<NumberedTransition> {
        self.events.subscribe()
    }

    /// The live changes, and the backlog of those after `after`: `None`
    /// when `after` is not a number this board gave out (a later one), so
    /// the reader cannot know what it missed.
    pub fn subscribe_after(
        &self,
        after: u64,
    ) -> (broadcast::Receiver<NumberedTransition>, Option<Backlog>) {
        let recent = self.recent.lock();
        let receiver = self.events.subscribe();
        if after > recent.last_seq {
            return (receiver, None);
        }
        let oldest_kept = recent.kept.front().map_or(recent.last_seq + 1, |first| first.seq);
        let missed = oldest_kept.saturating_sub(after + 1);
        let replay = recent.kept.iter().filter(|kept| kept.seq > after).cloned().collect();
        (receiver, Some(Backlog { missed, replay }))
    }

    /// Publishes one evaluation's results.
    pub fn publish(&self, alerts: Vec<Alert>, transitions: &[Transition]) {
        *self.alerts.write() = Arc::new(alerts);
        let mut recent = self.recent.lock();
        for transition in transitions {
            recent.last_seq += 1;
            let numbered =
                NumberedTransition { seq: recent.last_seq, transition: transition.clone() };
            if recent.kept.len() == recent.capacity {
                recent.kept.pop_front();
            }
            recent.kept.push_back(numbered.clone());
            // No subscriber is not an error: nobody is listening.
            let _ = self.events.send(numbered);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::model::{AlertKey, AlertState};
    use crate::model::RuleId;

    fn change(pid: u32) -> Transition {
        let key = AlertKey { rule: RuleId::MemoryHigh, uuid: "GPU-a".into(), pid: Some(pid) };
        Transition { from: None, alert: Alert::for_test(key, AlertState::Pending) }
    }

    fn seqs(backlog: &Backlog) -> Vec<u64> {
        backlog.replay.iter().map(|kept| kept.seq).collect()
    }

    #[test]
    fn a_reader_resuming_gets_exactly_the_changes_after_its_number() {
        let board = AlertBoard::new(8, 1);
        board.publish(Vec::new(), &[change(1), change(2), change(3)]);
        let (mut live, backlog) = board.subscribe_after(1);
        let backlog = backlog.unwrap();
        assert_eq!((backlog.missed, seqs(&backlog)), (0, vec![2, 3]));
        board.publish(Vec::new(), &[change(4)]);
        assert_eq!(live.try_recv().unwrap().seq, 4);
        assert!(live.try_recv().is_err(), "nothing twice");

        let (_, up_to_date) = board.subscribe_after(4);
        assert_eq!(up_to_date.unwrap(), Backlog::default());
    }

    #[test]
    fn a_reader_further_behind_than_the_kept_changes_is_told_how_many_it_missed() {
        let board = AlertBoard::new(2, 1);
        board.publish(Vec::new(), &[change(1), change(2), change(3), change(4), change(5)]);
        let backlog = board.subscribe_after(1).1.unwrap();
        assert_eq!((backlog.missed, seqs(&backlog)), (2, vec![4, 5]));
        let from_start = board.subscribe_after(0).1.unwrap();
        assert_eq!(from_start.missed, 3);
    }

    #[test]
    fn a_number_this_run_never_gave_out_has_no_backlog() {
        let board = AlertBoard::new(4, 1);
        board.publish(Vec::new(), &[change(1)]);
        assert_eq!(board.subscribe_after(7).1, None);
    }
}
