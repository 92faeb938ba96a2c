//! The body of a history answer, written as the client reads it.
//!
//! A full window is `api.max_history_points` entries, about 11 MiB of
//! JSON; written whole, 64 concurrent queries held over a gigabyte (issue
//! 35). Here the JSON is written a part of at most [`PART_ENTRIES`] entries
//! at a time and only when hyper asks for the next one, so a query holds
//! one part (about 110 KB of points, 240 KB of buckets) beyond the ring
//! chunks it reads, however many entries it lists or however slowly its
//! client reads.
//!
//! The bytes are exactly those `serde_json::to_vec` writes for the whole
//! answer: the head and tail come from serializing the answer with its list
//! empty, the entries from serializing each one.

use axum::body::{Body, Bytes};
use futures_util::stream;
use serde::Serialize;

use crate::history::{BucketCursor, PointCursor};

use super::history::point_dto;

/// Entries per part: about 110 KB of points (240 KB of buckets) and some
/// tens of microseconds of serializing, short enough to run on an async
/// worker between reads.
pub const PART_ENTRIES: usize = 512;

/// The list a history answer ends with, written out in parts.
pub enum Entries {
    Points(PointCursor),
    Buckets(BucketCursor),
}

impl Entries {
    /// Appends up to `max` more entries to `out`, each preceded by a comma
    /// unless it is the first of the list; false once none are left.
    fn write_part(
        &mut self,
        max: usize,
        first: &mut bool,
        out: &mut Vec<u8>,
    ) -> Result<bool, serde_json::Error> {
        for _ in 0..max {
            let written = match self {
                Self::Points(points) => points
                    .next()
                    .map(|point| point_dto(&point))
                    .map(|dto| write_entry(out, first, &dto)),
                Self::Buckets(buckets) => {
                    buckets.next().map(|bucket| write_entry(out, first, &bucket))
                }
            };
            match written {
                Some(result) => result?,
                None => return Ok(false),
            }
        }
        Ok(true)
    }
}

fn write_entry(
    out: &mut Vec<u8>,
    first: &mut bool,
    entry: &impl Serialize,
) -> Result<(), serde_json::Error> {
    if !*first {
        out.push(b',');
    }
    *first = false;
    serde_json::to_writer(out, entry)
}

/// The JSON of the answer whose last field is an empty list, split into
/// what comes before the list's entries and what comes after them.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("the history answer does not end with an empty list")]
pub struct NoTrailingList;

pub fn split_at_trailing_list(mut json: Vec<u8>) -> Result<(Vec<u8>, Bytes), NoTrailingList> {
    const EMPTY_LIST_END: &[u8] = b"[]}";
    if !json.ends_with(EMPTY_LIST_END) {
        return Err(NoTrailingList);
    }
    // Keeps the `[`; the tail is `]}`.
    let tail = json.split_off(json.len() - 2);
    Ok((json, Bytes::from(tail)))
}

enum Stage {
    Head(Vec<u8>, Entries, Bytes),
    Entries(Entries, Bytes, bool),
    Tail(Bytes),
    Done,
}

/// A body that sends `head`, then `entries` part by part, then `tail`.
pub fn streamed(head: Vec<u8>, entries: Entries, tail: Bytes) -> Body {
    let parts = stream::unfold(Stage::Head(head, entries, tail), |stage| async move {
        match stage {
            Stage::Head(head, entries, tail) => {
                Some((Ok(Bytes::from(head)), Stage::Entries(entries, tail, true)))
            }
            Stage::Entries(mut entries, tail, mut first) => {
                let mut part = Vec::with_capacity(PART_ENTRIES * 256);
                match entries.write_part(PART_ENTRIES, &mut first, &mut part) {
                    Ok(true) => Some((Ok(Bytes::from(part)), Stage::Entries(entries, tail, first))),
                    Ok(false) => Some((Ok(Bytes::from(part)), Stage::Tail(tail))),
                    Err(error) => Some((Err(error), Stage::Done)),
                }
            }
            Stage::Tail(tail) => Some((Ok(tail), Stage::Done)),
            Stage::Done => None,
        }
    });
    super::streamed_body(parts)
}
