//! One process's figures over the samples of a chunk that list it: its
//! NVML usage, its allocator statistics (active stored less allocated),
//! then their interval ranges, each group with where it is present and
//! each figure a series of its own.
//!
//! Depends on: `presence`, `codec`, `history::points`.

use crate::model::{AllocatorRange, AllocatorStats};

use super::super::super::points::ProcessPoint;
use super::super::codec::{BitReader, BitWriter, read_series, write_series};
use super::presence::{
    add_reserved, read_presence_into, read_used_presence, write_presence, write_used,
};

type Field = fn(&AllocatorStats) -> u64;

/// The allocator figures in stored order; active is stored less allocated.
pub(in crate::history::columnar) const ALLOCATOR_FIELDS: [Field; 6] = [
    |stats| stats.allocated_bytes,
    |stats| stats.reserved_bytes,
    |stats| stats.active_bytes.wrapping_sub(stats.allocated_bytes),
    |stats| stats.inactive_split_bytes,
    |stats| stats.alloc_retries,
    |stats| stats.ooms,
];

type RangeField = fn(&AllocatorRange) -> u64;

/// The interval's range (issue 32), stored after the allocator figures,
/// present or absent per sample that has allocator figures.
pub(in crate::history::columnar) const RANGE_FIELDS: [RangeField; 4] = [
    |range| range.allocated_min_bytes,
    |range| range.allocated_max_bytes,
    |range| range.reserved_min_bytes,
    |range| range.reserved_max_bytes,
];

/// Buffers an encoder reuses from one process to the next.
#[derive(Default)]
pub(in crate::history::columnar) struct Scratch {
    pub values: Vec<u64>,
    pub present: Vec<bool>,
    pub reserved: Vec<u64>,
    pub less: Vec<u64>,
}

pub(in crate::history::columnar) fn write_figures(
    out: &mut BitWriter,
    series: &[ProcessPoint],
    scratch: &mut Scratch,
) {
    let Scratch { values, present, reserved, less } = scratch;
    let stats = || series.iter().filter_map(ProcessPoint::allocator_stats);
    let every_stats = series.iter().all(|point| point.allocator_stats().is_some());
    reserved.clear();
    if every_stats {
        reserved.extend(stats().map(|stats| stats.reserved_bytes));
    }
    present.clear();
    present.extend(series.iter().map(|point| point.used_bytes().is_some()));
    values.clear();
    values.extend(series.iter().filter_map(ProcessPoint::used_bytes));
    write_used(out, present, values, every_stats.then_some(&reserved[..]), less);
    present.clear();
    present.extend(series.iter().map(|point| point.allocator().is_some()));
    write_presence(out, present);
    for field in ALLOCATOR_FIELDS {
        values.clear();
        values.extend(stats().map(field));
        write_series(out, values);
    }
    present.clear();
    present.extend(stats().map(|stats| stats.interval.is_some()));
    write_presence(out, present);
    for field in RANGE_FIELDS {
        values.clear();
        values.extend(stats().filter_map(|stats| stats.interval.as_ref()).map(field));
        write_series(out, values);
    }
}

/// Buffers a decoder reuses from one process to the next.
#[derive(Default)]
pub(in crate::history::columnar) struct ReadScratch {
    used_present: Vec<bool>,
    stats_present: Vec<bool>,
    range_present: Vec<bool>,
    /// Usage, then each allocator figure, then each range figure, one
    /// column after another.
    values: Vec<u64>,
}

/// Appends one process's `count` samples to `points`.
pub(in crate::history::columnar) fn read_figures(
    input: &mut BitReader<'_>,
    pid: u32,
    count: usize,
    scratch: &mut ReadScratch,
    points: &mut Vec<ProcessPoint>,
) -> Option<()> {
    let ReadScratch { used_present, stats_present, range_present, values } = scratch;
    used_present.clear();
    stats_present.clear();
    range_present.clear();
    values.clear();
    let (used_count, less_reserved) = read_used_presence(input, count, used_present)?;
    read_series(input, used_count, values)?;
    let stats_count = read_presence_into(input, count, stats_present)?;
    for _ in ALLOCATOR_FIELDS {
        read_series(input, stats_count, values)?;
    }
    let range_count = read_presence_into(input, stats_count, range_present)?;
    for _ in RANGE_FIELDS {
        read_series(input, range_count, values)?;
    }
    let (used, rest) = values.split_at_mut_checked(used_count)?;
    let (stats, ranges) = rest.split_at_checked(stats_count * ALLOCATOR_FIELDS.len())?;
    if less_reserved {
        add_reserved(used, stats.get(stats_count..2 * stats_count)?)?;
    }
    let stat = |field: usize, index: usize| stats.get(field * stats_count + index).copied();
    let range = |field: usize, index: usize| ranges.get(field * range_count + index).copied();
    let (mut used, mut next_stats, mut next_range) = (used.iter(), 0, 0);
    for (&has_used, &has_stats) in used_present.iter().zip(stats_present.iter()) {
        let used_bytes = if has_used { Some(*used.next()?) } else { None };
        let allocator = if has_stats {
            let index = next_stats;
            next_stats += 1;
            let interval = if *range_present.get(index)? {
                let at = next_range;
                next_range += 1;
                Some(AllocatorRange {
                    allocated_min_bytes: range(0, at)?,
                    allocated_max_bytes: range(1, at)?,
                    reserved_min_bytes: range(2, at)?,
                    reserved_max_bytes: range(3, at)?,
                })
            } else {
                None
            };
            let allocated = stat(0, index)?;
            Some(AllocatorStats {
                allocated_bytes: allocated,
                reserved_bytes: stat(1, index)?,
                active_bytes: stat(2, index)?.wrapping_add(allocated),
                inactive_split_bytes: stat(3, index)?,
                alloc_retries: stat(4, index)?,
                ooms: stat(5, index)?,
                interval,
            })
        } else {
            None
        };
        points.push(ProcessPoint::new(pid, used_bytes, allocator));
    }
    Some(())
}
