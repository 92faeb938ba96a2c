//! A bounded, time-ordered ring buffer that readers can snapshot without
//! holding up the writer.
//!
//! Items are kept in fixed-size chunks. Full chunks are sealed into
//! `Arc<[T]>` and never change again, so a reader takes the lock only long
//! enough to clone the chunk pointers (and copy the one open chunk), then
//! scans without any lock while the sampler keeps pushing.
//!
//! Depends on: `model::Timestamp` only.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::model::Timestamp;

/// Largest chunk; bounds both the copy a snapshot makes under the lock and
/// the slack above `capacity` the ring may hold.
pub const MAX_CHUNK_LEN: usize = 256;

/// Something that knows when it happened.
pub trait Stamped {
    fn at(&self) -> Timestamp;
}

/// A push was refused because it would break time order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("sample at {at:?} is older than the newest one at {newest:?}")]
pub struct OutOfOrder {
    pub at: Timestamp,
    pub newest: Timestamp,
}

pub struct Ring<T> {
    state: Mutex<RingState<T>>,
    capacity: usize,
    chunk_len: usize,
}

struct RingState<T> {
    sealed: VecDeque<Arc<[T]>>,
    sealed_len: usize,
    open: Vec<T>,
    newest: Option<Timestamp>,
}

impl<T: Stamped + Clone> Ring<T> {
    /// A ring that always keeps at least the newest `capacity` items (and at
    /// most `capacity + chunk length - 1`). A capacity of 0 is treated as 1.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let chunk_len = capacity.min(MAX_CHUNK_LEN);
        Self {
            state: Mutex::new(RingState {
                sealed: VecDeque::new(),
                sealed_len: 0,
                open: Vec::with_capacity(chunk_len),
                newest: None,
            }),
            capacity,
            chunk_len,
        }
    }

    /// Appends an item; O(1) amortised (sealing copies a chunk once).
    pub fn push(&self, item: T) -> Result<(), OutOfOrder> {
        let evicted = {
            let mut state = self.state.lock();
            if let Some(newest) = state.newest
                && item.at() < newest
            {
                return Err(OutOfOrder { at: item.at(), newest });
            }
            state.newest = Some(item.at());
            state.open.push(item);
            if state.open.len() >= self.chunk_len {
                let full = std::mem::replace(&mut state.open, Vec::with_capacity(self.chunk_len));
                state.sealed_len += full.len();
                state.sealed.push_back(Arc::from(full));
            }
            // Checked on every push, not only when a chunk seals, so the
            // ring never holds more than `capacity + chunk_len - 1` items.
            let mut evicted = Vec::new();
            while let Some(front) = state.sealed.front() {
                let remaining = state.sealed_len - front.len() + state.open.len();
                if remaining < self.capacity {
                    break;
                }
                state.sealed_len -= front.len();
                if let Some(chunk) = state.sealed.pop_front() {
                    evicted.push(chunk);
                }
            }
            evicted
        };
        // Freed outside the lock: a chunk of process lists can take a while.
        drop(evicted);
        Ok(())
    }

    pub fn len(&self) -> usize {
        let state = self.state.lock();
        state.sealed_len + state.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `visit` for every item with `from <= at <= to`, oldest first,
    /// under the lock. For the few newest items only (an evaluation reading
    /// what arrived since the last one): a long range would hold up the
    /// writer, so take a [`Ring::snapshot`] for those.
    pub fn visit_recent(&self, from: Timestamp, to: Timestamp, mut visit: impl FnMut(&T)) {
        let state = self.state.lock();
        // Sealed chunks are never empty and end in time order.
        let first_chunk =
            state.sealed.partition_point(|chunk| chunk.last().is_some_and(|last| last.at() < from));
        let sealed = state.sealed.iter().skip(first_chunk).flat_map(|chunk| chunk.iter());
        for item in sealed.chain(state.open.iter()) {
            let at = item.at();
            if at >= from && at <= to {
                visit(item);
            }
        }
    }

    /// A consistent, lock-free view of the current contents.
    pub fn snapshot(&self) -> Snapshot<T> {
        let state = self.state.lock();
        Snapshot { chunks: state.sealed.iter().cloned().collect(), open: state.open.clone() }
    }
}

/// Where a run of consecutive items lies in a [`Snapshot`]: a chunk (the
/// open one last) and positions within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    part: usize,
    start: usize,
    end: usize,
}

impl Span {
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// The contents of a ring at one moment, oldest first.
#[derive(Clone)]
pub struct Snapshot<T> {
    chunks: Vec<Arc<[T]>>,
    open: Vec<T>,
}

impl<T: Stamped> Snapshot<T> {
    fn slices(&self) -> impl Iterator<Item = &[T]> {
        self.chunks.iter().map(|chunk| &chunk[..]).chain(std::iter::once(&self.open[..]))
    }

    /// Items with `from <= at <= to`, oldest first, found by binary search
    /// within each chunk and skipping whole chunks outside the range.
    pub fn range(&self, from: Timestamp, to: Timestamp) -> impl Iterator<Item = &T> {
        self.range_slices(from, to).flatten()
    }

    /// [`Snapshot::range`] as the slices it walks, oldest first, for a
    /// reader that copies a long window and wants each part's length first.
    pub fn range_slices(&self, from: Timestamp, to: Timestamp) -> impl Iterator<Item = &[T]> {
        self.slices()
            .filter(move |slice| match (slice.first(), slice.last()) {
                (Some(first), Some(last)) => last.at() >= from && first.at() <= to,
                _ => false,
            })
            .map(move |slice| {
                let start = slice.partition_point(|item| item.at() < from);
                let end = slice.partition_point(|item| item.at() <= to);
                slice.get(start..end).unwrap_or(&[])
            })
    }

    /// [`Snapshot::range`] as the places of its runs, for a reader that
    /// walks a long range over several calls and keeps its place.
    pub fn range_spans(&self, from: Timestamp, to: Timestamp) -> Vec<Span> {
        self.slices()
            .enumerate()
            .filter_map(|(part, slice)| {
                let start = slice.partition_point(|item| item.at() < from);
                let end = slice.partition_point(|item| item.at() <= to);
                (start < end).then_some(Span { part, start, end })
            })
            .collect()
    }

    /// The items at `span`, one of this snapshot's [`Snapshot::range_spans`].
    pub fn span(&self, span: &Span) -> &[T] {
        let part = self.chunks.get(span.part).map_or(&self.open[..], |chunk| &chunk[..]);
        part.get(span.start..span.end).unwrap_or(&[])
    }

    /// Number of items in `[from, to]`, without visiting them.
    pub fn count_in(&self, from: Timestamp, to: Timestamp) -> usize {
        self.range_slices(from, to).map(<[T]>::len).sum()
    }

    pub fn newest(&self) -> Option<&T> {
        self.open.last().or_else(|| self.chunks.last().and_then(|chunk| chunk.last()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl<T: Stamped> Snapshot<T> {
        pub fn len(&self) -> usize {
            self.slices().map(<[T]>::len).sum()
        }

        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        pub fn iter(&self) -> impl Iterator<Item = &T> {
            self.slices().flatten()
        }
    }
    use proptest::prelude::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Item(i64);

    impl Stamped for Item {
        fn at(&self) -> Timestamp {
            Timestamp::from_unix_millis(self.0)
        }
    }

    fn ts(millis: i64) -> Timestamp {
        Timestamp::from_unix_millis(millis)
    }

    #[test]
    fn keeps_at_least_capacity_and_at_most_capacity_plus_a_chunk() {
        let ring = Ring::new(1000);
        for i in 0..10_000 {
            ring.push(Item(i)).unwrap();
            let len = ring.len();
            assert!(len <= 1000 + MAX_CHUNK_LEN, "len {len} after {i}");
            assert!(len >= (i as usize + 1).min(1000), "len {len} after {i}");
        }
        let snapshot = ring.snapshot();
        assert_eq!(snapshot.newest(), Some(&Item(9_999)));
        let values: Vec<i64> = snapshot.iter().map(|item| item.0).collect();
        assert!(values.windows(2).all(|pair| pair[1] == pair[0] + 1), "contiguous after wrap");
    }

    #[test]
    fn refuses_items_older_than_the_newest() {
        let ring = Ring::new(10);
        ring.push(Item(5)).unwrap();
        ring.push(Item(5)).unwrap();
        assert_eq!(ring.push(Item(4)), Err(OutOfOrder { at: ts(4), newest: ts(5) }));
        assert_eq!(ring.len(), 2);
    }

    #[test]
    fn snapshot_is_unaffected_by_later_pushes() {
        let ring = Ring::new(4);
        for i in 0..3 {
            ring.push(Item(i)).unwrap();
        }
        let snapshot = ring.snapshot();
        for i in 3..50 {
            ring.push(Item(i)).unwrap();
        }
        let seen: Vec<i64> = snapshot.iter().map(|item| item.0).collect();
        assert_eq!(seen, vec![0, 1, 2]);
    }

    #[test]
    fn zero_capacity_still_keeps_the_newest_item() {
        let ring = Ring::new(0);
        ring.push(Item(1)).unwrap();
        ring.push(Item(2)).unwrap();
        assert_eq!(ring.snapshot().newest(), Some(&Item(2)));
        assert!(ring.len() <= 1);
    }

    #[test]
    fn visit_recent_sees_exactly_the_range() {
        let ring = Ring::new(1000);
        for i in 0..2000 {
            ring.push(Item(i)).unwrap();
        }
        let mut seen = Vec::new();
        ring.visit_recent(ts(1990), ts(1995), |item| seen.push(item.0));
        assert_eq!(seen, vec![1990, 1991, 1992, 1993, 1994, 1995]);
        let mut across_chunks = Vec::new();
        ring.visit_recent(ts(1500), ts(1999), |item| across_chunks.push(item.0));
        assert_eq!(across_chunks.len(), 500);
        assert_eq!(across_chunks.first(), Some(&1500));
    }

    proptest! {
        #[test]
        fn range_matches_a_linear_filter(
            steps in proptest::collection::vec(0i64..5, 1..2000),
            capacity in 1usize..700,
            from in 0i64..6000,
            span in 0i64..6000,
        ) {
            let ring = Ring::new(capacity);
            let mut at = 0;
            for step in steps {
                at += step;
                ring.push(Item(at)).unwrap();
            }
            let snapshot = ring.snapshot();
            let to = from + span;
            let expected: Vec<i64> =
                snapshot.iter().map(|item| item.0).filter(|&t| t >= from && t <= to).collect();
            let got: Vec<i64> = snapshot.range(ts(from), ts(to)).map(|item| item.0).collect();
            prop_assert_eq!(snapshot.count_in(ts(from), ts(to)), expected.len());
            prop_assert_eq!(got, expected);
        }
    }
}
