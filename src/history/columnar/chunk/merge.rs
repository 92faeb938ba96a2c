//! Young chunks merged into one, column by column from their encoded
//! figures: a process's figures are decoded one series at a time and
//! written again over all the parts' samples, so the per-process headers
//! are paid once for the merged run. The parts' other processes are passed
//! over without decoding them.
//!
//! Depends on: its parent (`chunk`'s layout) and `codec`.

use std::collections::HashMap;

use super::super::codec::{BitReader, BitWriter, read_series, skip_series, write_series};
use super::presence::{
    LESS_RESERVED_MIN_SAMPLES, add_reserved, read_presence_into, read_used_presence, skip_presence,
    skip_used_presence, write_presence, write_used,
};
use super::process::{ALLOCATOR_FIELDS, RANGE_FIELDS, Scratch};
use super::{Header, SlowChunk, write_layouts};

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
        let mut scratch = Scratch::default();
        let len: usize = parts.iter().map(|part| part.len).sum();
        out.write_number(len as u64);
        let times: Vec<u64> = parts.iter().flat_map(|part| part.times.iter().copied()).collect();
        write_series(&mut out, &times);
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
        write_series(&mut out, &pids);
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

        // Where each part's figures of each merged roster entry begin.
        let mut sections: Vec<Vec<Option<PartFigures<'_>>>> = Vec::new();
        for (part, slots) in parts.iter_mut().zip(&mapped) {
            let mut starts = vec![None; roster.len()];
            for (&merged, &count) in slots.iter().zip(&part.counts) {
                let figures = PartFigures {
                    input: part.input.clone(),
                    entries: count,
                    with_stats: 0,
                    present: 0,
                };
                *starts.get_mut(merged)? = Some(figures);
                skip_figures(&mut part.input, count)?;
            }
            sections.push(starts);
        }
        let mut readers = Vec::with_capacity(parts.len());
        for merged in 0..roster.len() {
            readers.clear();
            readers.extend(sections.iter_mut().filter_map(|starts| starts.get_mut(merged)?.take()));
            merge_figures(&mut out, &mut readers, &mut scratch)?;
        }
        Some(Self { first, last, len, bytes: out.finish() })
    }
}

/// Where one part's figures of one process are read from.
#[derive(Clone)]
struct PartFigures<'a> {
    input: BitReader<'a>,
    /// The part's samples that list the process.
    entries: usize,
    /// Of those, the ones with allocator statistics.
    with_stats: usize,
    /// Of the entries the group being merged covers, those present.
    present: usize,
}

/// Reads one process's figures from each part in turn and writes them as
/// one process's figures over all the parts' samples: its NVML usage, its
/// allocator statistics, then their interval ranges (over the samples that
/// have statistics), each a group of presence bits and series.
fn merge_figures(
    out: &mut BitWriter,
    parts: &mut [PartFigures<'_>],
    scratch: &mut Scratch,
) -> Option<()> {
    merge_used(out, parts, scratch)?;
    merge_group(out, parts, |part| part.entries, ALLOCATOR_FIELDS.len(), scratch)?;
    for part in parts.iter_mut() {
        part.with_stats = part.present;
    }
    merge_group(out, parts, |part| part.with_stats, RANGE_FIELDS.len(), scratch)
}

/// A process's NVML usage over the parts, each part's made whole (a part
/// may store it less reserved bytes) and written as one, less reserved
/// where every part has allocator statistics in every sample and that
/// saves bits enough (`write_used`). Leaves each reader at the part's
/// allocator figures.
fn merge_used(
    out: &mut BitWriter,
    parts: &mut [PartFigures<'_>],
    scratch: &mut Scratch,
) -> Option<()> {
    let Scratch { values: used, present, reserved, less } = scratch;
    present.clear();
    used.clear();
    reserved.clear();
    let mut every_stats = true;
    // Reserved bytes are read only where they are used: to make a part's
    // usage whole, or to weigh the merged usage less reserved.
    let weighed = parts.iter().map(|part| part.entries).sum::<usize>() >= LESS_RESERVED_MIN_SAMPLES;
    for part in parts.iter_mut() {
        let (count, less_reserved) = read_used_presence(&mut part.input, part.entries, present)?;
        let start = used.len();
        read_series(&mut part.input, count, used)?;
        // The part's reserved bytes, read ahead on a copy of the reader.
        let mut ahead = part.input.clone();
        let part_every_stats = skip_presence(&mut ahead, part.entries)? == part.entries;
        if part_every_stats && (weighed || less_reserved) {
            let reserved_start = reserved.len();
            skip_series(&mut ahead, part.entries)?;
            read_series(&mut ahead, part.entries, reserved)?;
            if less_reserved {
                add_reserved(used.get_mut(start..)?, reserved.get(reserved_start..)?)?;
            }
        } else if less_reserved {
            return None;
        }
        every_stats &= part_every_stats;
    }
    write_used(out, present, used, (every_stats && weighed).then_some(&reserved[..]), less);
    Some(())
}

/// One group of a process's figures over the parts: each part's presence
/// bits over the entries `covered` gives, written as one, then each of
/// `fields` series over the entries present, written as one. Each part's
/// stream is read in its own order (presence, then each field), so the
/// parts may be read in turn.
fn merge_group(
    out: &mut BitWriter,
    parts: &mut [PartFigures<'_>],
    covered: fn(&PartFigures<'_>) -> usize,
    fields: usize,
    scratch: &mut Scratch,
) -> Option<()> {
    let Scratch { values, present, .. } = scratch;
    present.clear();
    for part in parts.iter_mut() {
        let entries = covered(part);
        part.present = read_presence_into(&mut part.input, entries, present)?;
    }
    write_presence(out, present);
    for _ in 0..fields {
        values.clear();
        for part in parts.iter_mut() {
            read_series(&mut part.input, part.present, values)?;
        }
        write_series(out, values);
    }
    Some(())
}

/// Passes over one process's figures without decoding them.
fn skip_figures(input: &mut BitReader<'_>, count: usize) -> Option<()> {
    let used = skip_used_presence(input, count)?;
    skip_series(input, used)?;
    let stats = skip_presence(input, count)?;
    for _ in ALLOCATOR_FIELDS {
        skip_series(input, stats)?;
    }
    let ranges = skip_presence(input, stats)?;
    for _ in RANGE_FIELDS {
        skip_series(input, ranges)?;
    }
    Some(())
}
