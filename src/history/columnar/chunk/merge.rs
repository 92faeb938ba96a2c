//! Young chunks merged into one, column by column from their encoded
//! figures: a process's figures are decoded one series at a time and
//! written again over all the parts' samples, so the per-process headers
//! are paid once for the merged run. The parts' other processes are passed
//! over without decoding them.
//!
//! Depends on: its parent (`chunk`'s layout) and `codec`.

use std::collections::HashMap;

use super::super::codec::{BitReader, BitWriter, read_series, skip_series, write_series};
use super::{
    ALLOCATOR_FIELDS, Header, RANGE_FIELDS, SlowChunk, read_presence, write_layouts, write_presence,
};

impl SlowChunk {
    /// One chunk holding `chunks`' samples in order, made column by column
    /// from their encoded figures: only one figure of one process is ever
    /// held decoded, never the samples' process lists.
    pub fn merge(chunks: &[&SlowChunk]) -> Option<Self> {
        let first = chunks.first()?.first;
        let last = chunks.last()?.last;
        let mut parts = chunks
            .iter()
            .map(|chunk| Header::read(&chunk.bytes))
            .collect::<Option<Vec<Header<'_>>>>()?;
        // Sized once from the parts' bytes (the merged chunk pays their
        // headers once, so it is about that size or less): grown by
        // doubling, each freed step stayed in the heap.
        let mut out = BitWriter::with_capacity(chunks.iter().map(|chunk| chunk.bytes.len()).sum());
        let mut scratch = Vec::new();
        let len: usize = parts.iter().map(|part| part.len).sum();
        out.write_number(len as u64);
        let times: Vec<u64> = parts.iter().flat_map(|part| part.times.iter().copied()).collect();
        write_series(&mut out, &times, &mut scratch);
        for bit in parts.iter().flat_map(|part| part.capped.iter()) {
            out.write_bit(*bit);
        }
        for bit in parts.iter().flat_map(|part| part.listed.iter()) {
            out.write_bit(*bit);
        }
        // The merged roster, in the order first seen; each part's slots
        // mapped onto it.
        let mut roster: Vec<u32> = Vec::new();
        let mut slot_of: HashMap<u32, usize> = HashMap::new();
        let mut mapped: Vec<Vec<usize>> = Vec::with_capacity(parts.len());
        for part in &parts {
            let slots = part
                .pids
                .iter()
                .map(|&pid| {
                    *slot_of.entry(pid).or_insert_with(|| {
                        roster.push(pid);
                        roster.len() - 1
                    })
                })
                .collect();
            mapped.push(slots);
        }
        out.write_number(roster.len() as u64);
        let pids: Vec<u64> = roster.iter().map(|&pid| u64::from(pid)).collect();
        write_series(&mut out, &pids, &mut scratch);
        let layouts: Vec<Vec<usize>> = parts
            .iter()
            .zip(&mapped)
            .flat_map(|(part, slots)| {
                part.layouts.iter().map(move |layout| {
                    layout.iter().map(|&slot| slots.get(slot).copied().unwrap_or(0)).collect()
                })
            })
            .collect();
        write_layouts(&mut out, layouts.iter().map(Vec::as_slice), roster.len());

        // Where each part's figures of each of its roster entries begin.
        let mut sections: Vec<HashMap<usize, (BitReader<'_>, usize)>> = Vec::new();
        for (part, slots) in parts.iter_mut().zip(&mapped) {
            let mut starts = HashMap::with_capacity(slots.len());
            for (&merged, &count) in slots.iter().zip(&part.counts) {
                starts.insert(merged, (part.input.clone(), count));
                skip_figures(&mut part.input, count)?;
            }
            sections.push(starts);
        }
        for merged in 0..roster.len() {
            let mut readers: Vec<(BitReader<'_>, usize)> =
                sections.iter_mut().filter_map(|starts| starts.remove(&merged)).collect();
            merge_figures(&mut out, &mut readers, &mut scratch)?;
        }
        Some(Self { first, last, len, bytes: out.finish() })
    }
}

/// Reads one process's figures from each part in turn and writes them as
/// one process's figures over all the parts' samples: its NVML usage, its
/// allocator statistics, then their interval ranges (over the samples that
/// have statistics), each a group of presence bits and series.
fn merge_figures(
    out: &mut BitWriter,
    readers: &mut [(BitReader<'_>, usize)],
    scratch: &mut Vec<i64>,
) -> Option<()> {
    let counts: Vec<usize> = readers.iter().map(|&(_, count)| count).collect();
    merge_group(out, readers, &counts, 1, scratch)?;
    let with_stats = merge_group(out, readers, &counts, ALLOCATOR_FIELDS.len(), scratch)?;
    merge_group(out, readers, &with_stats, RANGE_FIELDS.len(), scratch)?;
    Some(())
}

/// One group of a process's figures over the parts: each part's presence
/// bits over its `counts` entries, written as one, then each of `fields`
/// series over the entries present, written as one. Gives how many
/// entries each part had present. Each part's stream is read in its own
/// order (presence, then each field), so the parts may be read in turn.
fn merge_group(
    out: &mut BitWriter,
    readers: &mut [(BitReader<'_>, usize)],
    counts: &[usize],
    fields: usize,
    scratch: &mut Vec<i64>,
) -> Option<Vec<usize>> {
    let mut present = Vec::new();
    let mut present_counts = Vec::with_capacity(readers.len());
    for ((input, _), &count) in readers.iter_mut().zip(counts) {
        let part = read_presence(input, count)?;
        present_counts.push(part.iter().filter(|&&p| p).count());
        present.extend(part);
    }
    write_presence(out, &present);
    let mut values = Vec::new();
    for _ in 0..fields {
        values.clear();
        for ((input, _), &count) in readers.iter_mut().zip(&present_counts) {
            read_series(input, count, &mut values)?;
        }
        write_series(out, &values, scratch);
    }
    Some(present_counts)
}

/// Passes over one process's figures without decoding them.
fn skip_figures(input: &mut BitReader<'_>, count: usize) -> Option<()> {
    let used = read_presence(input, count)?.iter().filter(|&&p| p).count();
    skip_series(input, used)?;
    let stats = read_presence(input, count)?.iter().filter(|&&p| p).count();
    for _ in ALLOCATOR_FIELDS {
        skip_series(input, stats)?;
    }
    let ranges = read_presence(input, stats)?.iter().filter(|&&p| p).count();
    for _ in RANGE_FIELDS {
        skip_series(input, ranges)?;
    }
    Some(())
}
