//! The slow tier's ring: process figures stored as compressed columns.
//!
//! The newest samples are kept as they were recorded, so the analyzer's
//! per-pass reads of what just arrived cost what they did: up to
//! [`SLOW_MERGED_LEN`] while they share one process list (figures holding
//! still cost nothing more per sample), but only [`SLOW_CHUNK_LEN`]
//! different lists. The run is then sealed into a [`SlowChunk`], every
//! process's figures a series of their own (see `codec` for the encoding),
//! and shared with readers as an `Arc` that never changes. Young chunks
//! are merged into one of 32 samples, and those into one of
//! [`SLOW_MERGED_LEN`], so the per-chunk headers are paid once per 256
//! samples. A reader takes the lock only to clone the chunk pointers and
//! the open samples; sealed chunks are decoded outside it.
//!
//! Depends on: `history::points`, `model::Timestamp`.

mod chunk;
pub mod codec;
mod figures;

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::model::Timestamp;

use super::points::SlowPoint;
use super::ring::OutOfOrder;

use chunk::SlowChunk;
pub use figures::{FigureRow, FigureSample, ProcessFigure};

/// Different process lists kept as recorded before they are sealed into
/// a chunk: few, as each is stored whole (104 bytes a process, the size of
/// `ProcessPoint`), and sealing them is cheap (the encoder allocates
/// nothing per figure; the merges below pay for the headers).
pub const SLOW_CHUNK_LEN: usize = 4;

/// Samples per chunk once the young chunks are merged: long enough that a
/// chunk's per-process headers (a PID, each figure's first value) cost a
/// small part of a byte per sample.
pub const SLOW_MERGED_LEN: usize = 256;

/// Samples per chunk at each level of merging, shortest first: sealed
/// chunks are merged into one of the first length once they hold that
/// many, and those into one of the next. With one level, the young chunks
/// waiting for it would hold up to 63 chunks' headers; the middle level
/// keeps that to 7 + 7 while each sample is encoded three times, not two.
const SLOW_MERGE_LEVELS: [usize; 2] = [32, SLOW_MERGED_LEN];

pub struct SlowRing {
    state: Mutex<SlowState>,
    capacity: usize,
    chunk_len: usize,
}

struct SlowState {
    sealed: VecDeque<Arc<SlowChunk>>,
    sealed_len: usize,
    open: Vec<SlowPoint>,
    /// Lists among `open` not shared with the sample before.
    open_lists: usize,
    newest: Option<Timestamp>,
}

impl SlowRing {
    /// A ring that always keeps at least the newest `capacity` samples (and
    /// fewer than `capacity` + 2 × [`SLOW_MERGED_LEN`]). A capacity of 0
    /// is 1.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let chunk_len = capacity.min(SLOW_CHUNK_LEN);
        Self {
            state: Mutex::new(SlowState {
                sealed: VecDeque::new(),
                sealed_len: 0,
                open: Vec::new(),
                open_lists: 0,
                newest: None,
            }),
            capacity,
            chunk_len,
        }
    }

    /// Appends a sample; sealing a full chunk encodes it (once a chunk).
    pub fn push(&self, point: SlowPoint) -> Result<(), OutOfOrder> {
        let evicted = {
            let mut state = self.state.lock();
            if let Some(newest) = state.newest
                && point.at() < newest
            {
                return Err(OutOfOrder { at: point.at(), newest });
            }
            state.newest = Some(point.at());
            let shared = state.open.last().is_some_and(|last| {
                match (last.shared_processes(), point.shared_processes()) {
                    (Some(before), Some(now)) => Arc::ptr_eq(before, now),
                    (before, now) => before.is_none() && now.is_none(),
                }
            });
            if !shared {
                state.open_lists += 1;
            }
            state.open.push(point);
            if state.open_lists >= self.chunk_len
                || state.open.len() >= self.capacity.min(SLOW_MERGED_LEN)
            {
                let full = std::mem::take(&mut state.open);
                state.open_lists = 0;
                if let Some(chunk) = SlowChunk::encode(&full) {
                    state.sealed_len += chunk.len();
                    state.sealed.push_back(Arc::new(chunk));
                }
                self.merge_young(&mut state);
            }
            let mut evicted = Vec::new();
            while let Some(front) = state.sealed.front() {
                let remaining = state.sealed_len - front.len() + state.open.len();
                if remaining < self.capacity {
                    break;
                }
                state.sealed_len -= front.len();
                evicted.extend(state.sealed.pop_front());
            }
            evicted
        };
        drop(evicted);
        Ok(())
    }

    /// Re-encodes the young chunks at the back as one, level by level
    /// ([`SLOW_MERGE_LEVELS`]), once they hold a merged chunk's worth,
    /// figure by figure (no process list is rebuilt). Under the lock: about
    /// a millisecond at 256 processes for the last level, once every 256
    /// samples.
    fn merge_young(&self, state: &mut SlowState) {
        for level in SLOW_MERGE_LEVELS {
            let merged_len = self.capacity.min(level);
            let young =
                state.sealed.iter().rev().take_while(|chunk| chunk.len() < merged_len).count();
            let start = state.sealed.len() - young;
            let young_len: usize = state.sealed.range(start..).map(|chunk| chunk.len()).sum();
            if young < 2 || young_len < merged_len {
                continue;
            }
            let young: Vec<&SlowChunk> =
                state.sealed.range(start..).map(|chunk| &**chunk).collect();
            if let Some(merged) = SlowChunk::merge(&young) {
                state.sealed.truncate(start);
                state.sealed.push_back(Arc::new(merged));
            }
        }
    }

    pub fn len(&self) -> usize {
        let state = self.state.lock();
        state.sealed_len + state.open.len()
    }

    /// Calls `visit` for every sample with `from <= at <= to`, oldest
    /// first. Open samples are visited under the lock (the few newest, as
    /// an evaluation reads what arrived since the last one); a range that
    /// reaches into sealed chunks is read outside it.
    pub fn visit_recent(&self, from: Timestamp, to: Timestamp, mut visit: impl FnMut(&SlowPoint)) {
        let state = self.state.lock();
        let sealed = sealed_between(&state.sealed, from, to);
        let in_range = |point: &&SlowPoint| point.at() >= from && point.at() <= to;
        if sealed.is_empty() {
            state.open.iter().filter(in_range).for_each(visit);
            return;
        }
        let open: Vec<SlowPoint> = state.open.iter().filter(in_range).cloned().collect();
        drop(state);
        for chunk in &sealed {
            chunk.decode_between(from, to).unwrap_or_default().iter().for_each(&mut visit);
        }
        open.iter().for_each(visit);
    }

    /// [`SlowRing::visit_recent`] reading only `figures` of each process
    /// (`figures`): a range that reaches into sealed chunks decodes only
    /// those series of them, outside the lock.
    pub fn visit_recent_figures<const N: usize>(
        &self,
        from: Timestamp,
        to: Timestamp,
        figures: [ProcessFigure; N],
        mut visit: impl FnMut(&FigureSample<'_, N>),
    ) {
        let mut rows = Vec::new();
        let state = self.state.lock();
        let sealed = sealed_between(&state.sealed, from, to);
        let in_range = |point: &&SlowPoint| point.at() >= from && point.at() <= to;
        if sealed.is_empty() {
            for point in state.open.iter().filter(in_range) {
                figures::visit_point(point, figures, &mut rows, &mut visit);
            }
            return;
        }
        let open: Vec<SlowPoint> = state.open.iter().filter(in_range).cloned().collect();
        drop(state);
        visit_sealed_figures(&sealed, from, to, figures, &mut visit);
        for point in &open {
            figures::visit_point(point, figures, &mut rows, &mut visit);
        }
    }

    /// A consistent, lock-free view of the current contents.
    pub fn snapshot(&self) -> SlowSnapshot {
        let state = self.state.lock();
        SlowSnapshot { chunks: state.sealed.iter().cloned().collect(), open: state.open.clone() }
    }
}

/// The contents of a [`SlowRing`] at one moment, oldest first. Sealed
/// chunks are decoded as a reader reaches them.
#[derive(Clone)]
pub struct SlowSnapshot {
    chunks: Vec<Arc<SlowChunk>>,
    open: Vec<SlowPoint>,
}

impl SlowSnapshot {
    /// Samples with `from <= at <= to`, oldest first, skipping whole
    /// chunks outside the range and decoding the others one at a time.
    pub fn range(&self, from: Timestamp, to: Timestamp) -> impl Iterator<Item = SlowPoint> + '_ {
        let sealed = self
            .chunks
            .iter()
            .filter(move |chunk| chunk.last() >= from && chunk.first() <= to)
            .flat_map(move |chunk| chunk.decode_between(from, to).unwrap_or_default());
        let open = self.open.iter().cloned();
        sealed.chain(open).filter(move |point| point.at() >= from && point.at() <= to)
    }

    /// [`SlowSnapshot::range`] reading only `figures` of each process, as
    /// [`SlowRing::visit_recent_figures`] does.
    pub fn visit_figures<const N: usize>(
        &self,
        from: Timestamp,
        to: Timestamp,
        figures: [ProcessFigure; N],
        mut visit: impl FnMut(&FigureSample<'_, N>),
    ) {
        let sealed: Vec<Arc<SlowChunk>> = self
            .chunks
            .iter()
            .filter(|chunk| chunk.last() >= from && chunk.first() <= to)
            .cloned()
            .collect();
        visit_sealed_figures(&sealed, from, to, figures, &mut visit);
        let mut rows = Vec::new();
        for point in self.open.iter().filter(|point| point.at() >= from && point.at() <= to) {
            figures::visit_point(point, figures, &mut rows, &mut visit);
        }
    }

    /// Every sample, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = SlowPoint> + '_ {
        self.range(Timestamp::from_unix_millis(i64::MIN), Timestamp::from_unix_millis(i64::MAX))
    }

    /// Number of samples in `[from, to]`; decodes only the times of the
    /// chunks the range cuts.
    pub fn count_in(&self, from: Timestamp, to: Timestamp) -> usize {
        let sealed: usize = self
            .chunks
            .iter()
            .filter(|chunk| chunk.last() >= from && chunk.first() <= to)
            .map(|chunk| {
                if chunk.first() >= from && chunk.last() <= to {
                    chunk.len()
                } else {
                    let times = chunk.times().unwrap_or_default();
                    times.iter().filter(|&&at| at >= from && at <= to).count()
                }
            })
            .sum();
        sealed + self.open.iter().filter(|point| point.at() >= from && point.at() <= to).count()
    }

    pub fn newest(&self) -> Option<SlowPoint> {
        match self.open.last() {
            Some(point) => Some(point.clone()),
            None => self
                .chunks
                .last()
                .and_then(|chunk| chunk.decode_between(chunk.last(), chunk.last()).ok()?.pop()),
        }
    }

    pub fn len(&self) -> usize {
        self.chunks.iter().map(|chunk| chunk.len()).sum::<usize>() + self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Encoded bytes held by the sealed chunks, and the samples in them.
    pub fn sealed_footprint(&self) -> (usize, usize) {
        self.chunks.iter().fold((0, 0), |(bytes, samples), chunk| {
            (bytes + chunk.encoded_bytes(), samples + chunk.len())
        })
    }
}

fn visit_sealed_figures<const N: usize>(
    sealed: &[Arc<SlowChunk>],
    from: Timestamp,
    to: Timestamp,
    figures: [ProcessFigure; N],
    visit: &mut impl FnMut(&FigureSample<'_, N>),
) {
    for chunk in sealed {
        // Encoded by this module: a chunk that does not decode is a bug,
        // and its samples are left out rather than made up, as `range` does.
        let _ = chunk.visit_figures(figures, from, to, visit);
    }
}

/// The sealed chunks holding samples of `from..=to`, to be decoded after
/// the ring's lock is dropped.
fn sealed_between(
    sealed: &VecDeque<Arc<SlowChunk>>,
    from: Timestamp,
    to: Timestamp,
) -> Vec<Arc<SlowChunk>> {
    let first_chunk = sealed.partition_point(|chunk| chunk.last() < from);
    sealed.iter().skip(first_chunk).take_while(|chunk| chunk.first() <= to).cloned().collect()
}

#[cfg(test)]
mod tests;
