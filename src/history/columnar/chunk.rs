//! A sealed run of slow-tier samples, stored column by column.
//!
//! Layout (one bit stream, see `codec`): the sample count; the sample times
//! as a series; a bit per sample for "the process cap cut the list" and
//! one for "a list was read"; the roster, every PID listed in the chunk in
//! the order first seen, as a series; each listed sample's layout (which
//! roster entries, in list order), one bit when it is the previous
//! sample's; then per roster entry, over the samples that list it, its
//! NVML usage and its allocator statistics, each with where it is present
//! (all, none, or a bit per sample) and each figure as a series of its
//! own. A process's active bytes are stored less its allocated bytes: the
//! two move together, so the difference mostly holds still.
//!
//! Absent stays absent: a figure a sample lacked decodes as `None`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::{AllocatorRange, AllocatorStats, Timestamp};

use super::super::points::{ProcessPoint, SlowPoint};

mod merge;
use super::codec::{BitReader, BitWriter, bit_length, read_series, write_series};

/// Consecutive lists (numbered among the listed samples) that hold one
/// process at one position.
struct PositionRun {
    first: u32,
    count: u32,
    position: u32,
}

/// Samples in `[first, last]`, encoded.
pub struct SlowChunk {
    first: Timestamp,
    last: Timestamp,
    len: usize,
    pub(super) bytes: Box<[u8]>,
}

/// The stored chunk did not decode: a bug in this module, never input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a stored chunk of {len} slow-tier samples did not decode")]
pub struct CorruptChunk {
    pub len: usize,
}

const PRESENT_NONE: u64 = 0;
const PRESENT_ALL: u64 = 1;
const PRESENT_SOME: u64 = 2;

fn stamp_to_bits(at: Timestamp) -> u64 {
    at.unix_millis() as u64
}

pub(super) fn bits_to_stamp(bits: u64) -> Timestamp {
    Timestamp::from_unix_millis(bits as i64)
}

impl SlowChunk {
    /// Encodes `points` (oldest first); `None` for no points.
    pub fn encode(points: &[SlowPoint]) -> Option<Self> {
        let (first, last) = (points.first()?.at(), points.last()?.at());
        let mut out = BitWriter::default();
        let mut scratch = Vec::new();
        out.write_number(points.len() as u64);
        let times: Vec<u64> = points.iter().map(|point| stamp_to_bits(point.at())).collect();
        write_series(&mut out, &times, &mut scratch);
        for point in points {
            out.write_bit(point.capped());
        }
        for point in points {
            out.write_bit(point.processes().is_some());
        }

        // Where each process is in the lists, as runs over consecutive
        // lists at one position (one run per process while the list keeps
        // its order), and each list's layout, shared while it repeats: no
        // copy of the processes' figures is made, however many.
        let lists: Vec<&Arc<[ProcessPoint]>> =
            points.iter().filter_map(SlowPoint::shared_processes).collect();
        let mut roster: Vec<u32> = Vec::new();
        let mut slot_of: HashMap<u32, usize> = HashMap::new();
        let mut runs: Vec<Vec<PositionRun>> = Vec::new();
        let mut layouts: Vec<Arc<[usize]>> = Vec::with_capacity(lists.len());
        for (index, list) in lists.iter().enumerate() {
            let index = index as u32;
            let layout: Vec<usize> = list
                .iter()
                .enumerate()
                .map(|(position, process)| {
                    let slot = *slot_of.entry(process.pid).or_insert_with(|| {
                        roster.push(process.pid);
                        runs.push(Vec::new());
                        roster.len() - 1
                    });
                    if let Some(series) = runs.get_mut(slot) {
                        let position = position as u32;
                        match series.last_mut() {
                            Some(run)
                                if run.position == position && run.first + run.count == index =>
                            {
                                run.count += 1;
                            }
                            _ => series.push(PositionRun { first: index, count: 1, position }),
                        }
                    }
                    slot
                })
                .collect();
            let layout = match layouts.last() {
                Some(previous) if **previous == *layout => previous.clone(),
                _ => Arc::from(layout),
            };
            layouts.push(layout);
        }
        out.write_number(roster.len() as u64);
        let pids: Vec<u64> = roster.iter().map(|&pid| u64::from(pid)).collect();
        write_series(&mut out, &pids, &mut scratch);
        write_layouts(&mut out, layouts.iter().map(|layout| &layout[..]), roster.len());
        let mut series = Vec::new();
        for process_runs in &runs {
            series.clear();
            for run in process_runs {
                for index in run.first..run.first + run.count {
                    let list = lists.get(index as usize).map(|list| &list[..]).unwrap_or(&[]);
                    series.extend(list.get(run.position as usize).copied());
                }
            }
            write_figures(&mut out, &series, &mut scratch);
        }
        Some(Self { first, last, len: points.len(), bytes: out.finish() })
    }

    pub fn first(&self) -> Timestamp {
        self.first
    }

    pub fn last(&self) -> Timestamp {
        self.last
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes of encoded samples (without this struct and its allocation).
    pub fn encoded_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The sample times alone, oldest first: cheap, they come first.
    pub fn times(&self) -> Result<Vec<Timestamp>, CorruptChunk> {
        let corrupt = CorruptChunk { len: self.len };
        let mut input = BitReader::new(&self.bytes);
        let len = read_len(&mut input).ok_or(corrupt)?;
        let mut times = Vec::with_capacity(len);
        read_series(&mut input, len, &mut times).ok_or(corrupt)?;
        Ok(times.into_iter().map(bits_to_stamp).collect())
    }

    /// Every sample, oldest first. Consecutive equal process lists share
    /// one allocation, as they did when recorded.
    pub fn decode(&self) -> Result<Vec<SlowPoint>, CorruptChunk> {
        self.decode_inner().ok_or(CorruptChunk { len: self.len })
    }

    fn decode_inner(&self) -> Option<Vec<SlowPoint>> {
        let Header { mut input, len, times, capped, listed, pids, layouts, counts } =
            Header::read(&self.bytes)?;
        let mut per_process = Vec::with_capacity(pids.len());
        for (&pid, &count) in pids.iter().zip(&counts) {
            per_process.push(read_figures(&mut input, pid, count)?.into_iter());
        }

        let mut samples = Vec::with_capacity(len);
        let mut layouts = layouts.into_iter();
        let mut previous: Option<Arc<[ProcessPoint]>> = None;
        for ((bits, capped), listed) in times.into_iter().zip(capped).zip(listed) {
            let processes = if listed {
                let layout = layouts.next()?;
                let list = layout
                    .iter()
                    .map(|&slot| per_process.get_mut(slot)?.next())
                    .collect::<Option<Vec<ProcessPoint>>>()?;
                let shared = match &previous {
                    Some(previous) if **previous == *list => previous.clone(),
                    _ => Arc::from(list),
                };
                previous = Some(shared.clone());
                Some(shared)
            } else {
                None
            };
            samples.push(SlowPoint::from_parts(bits_to_stamp(bits), processes, capped));
        }
        Some(samples)
    }
}

/// Everything before the per-process figures, read; `input` is left at
/// the first process's figures.
pub(super) struct Header<'a> {
    pub input: BitReader<'a>,
    pub len: usize,
    pub times: Vec<u64>,
    pub capped: Vec<bool>,
    pub listed: Vec<bool>,
    pub pids: Vec<u32>,
    /// Per listed sample, its roster entries in list order.
    pub layouts: Vec<Arc<[usize]>>,
    /// Per roster entry, the samples that list it.
    pub counts: Vec<usize>,
}

impl<'a> Header<'a> {
    pub fn read(bytes: &'a [u8]) -> Option<Self> {
        let mut input = BitReader::new(bytes);
        let len = read_len(&mut input)?;
        let mut times = Vec::with_capacity(len);
        read_series(&mut input, len, &mut times)?;
        let capped = (0..len).map(|_| input.read_bit()).collect::<Option<Vec<bool>>>()?;
        let listed = (0..len).map(|_| input.read_bit()).collect::<Option<Vec<bool>>>()?;
        let roster_len = read_len(&mut input)?;
        let mut pids = Vec::with_capacity(roster_len);
        read_series(&mut input, roster_len, &mut pids)?;
        let pids =
            pids.into_iter().map(|pid| u32::try_from(pid).ok()).collect::<Option<Vec<_>>>()?;
        let index_width = bit_length((roster_len as u64).saturating_sub(1));
        let mut layouts: Vec<Arc<[usize]>> = Vec::new();
        let mut counts = vec![0usize; roster_len];
        for _ in listed.iter().filter(|&&listed| listed) {
            let layout = match (input.read_bit()?, layouts.last()) {
                (true, Some(previous)) => previous.clone(),
                (true, None) => return None,
                (false, _) => {
                    // A PID may be listed twice in one list (compute and
                    // graphics), so the roster does not bound the count.
                    let count = read_len(&mut input)?;
                    (0..count)
                        .map(|_| {
                            let slot = usize::try_from(input.read(index_width)?).ok()?;
                            (slot < roster_len).then_some(slot)
                        })
                        .collect::<Option<Arc<[usize]>>>()?
                }
            };
            for &slot in layout.iter() {
                *counts.get_mut(slot)? += 1;
            }
            layouts.push(layout);
        }
        Some(Self { input, len, times, capped, listed, pids, layouts, counts })
    }
}

/// Writes the layouts of the listed samples, a bit when one is the
/// previous sample's.
fn write_layouts<'l>(
    out: &mut BitWriter,
    layouts: impl Iterator<Item = &'l [usize]>,
    roster_len: usize,
) {
    let index_width = bit_length((roster_len as u64).saturating_sub(1));
    let mut previous: Option<&[usize]> = None;
    for layout in layouts {
        let same = previous == Some(layout);
        out.write_bit(same);
        if !same {
            out.write_number(layout.len() as u64);
            for &slot in layout {
                out.write(slot as u64, index_width);
            }
        }
        previous = Some(layout);
    }
}

fn read_len(input: &mut BitReader<'_>) -> Option<usize> {
    let len = usize::try_from(input.read_number()?).ok()?;
    // A chunk is a ring's chunk: far fewer samples than this.
    (len <= 1 << 20).then_some(len)
}

/// Where a figure is present among a process's samples.
fn write_presence(out: &mut BitWriter, present: &[bool]) {
    if present.iter().all(|&p| p) {
        out.write(PRESENT_ALL, 2);
    } else if present.iter().all(|&p| !p) {
        out.write(PRESENT_NONE, 2);
    } else {
        out.write(PRESENT_SOME, 2);
        for &p in present {
            out.write_bit(p);
        }
    }
}

pub(super) fn read_presence(input: &mut BitReader<'_>, count: usize) -> Option<Vec<bool>> {
    match input.read(2)? {
        PRESENT_ALL => Some(vec![true; count]),
        PRESENT_NONE => Some(vec![false; count]),
        PRESENT_SOME => (0..count).map(|_| input.read_bit()).collect(),
        _ => None,
    }
}

type Field = fn(&AllocatorStats) -> u64;

/// The allocator figures in stored order; active is stored less allocated.
const ALLOCATOR_FIELDS: [Field; 6] = [
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
const RANGE_FIELDS: [RangeField; 4] = [
    |range| range.allocated_min_bytes,
    |range| range.allocated_max_bytes,
    |range| range.reserved_min_bytes,
    |range| range.reserved_max_bytes,
];

fn write_figures(out: &mut BitWriter, series: &[ProcessPoint], scratch: &mut Vec<i64>) {
    let used: Vec<Option<u64>> = series.iter().map(ProcessPoint::used_bytes).collect();
    write_presence(out, &used.iter().map(Option::is_some).collect::<Vec<_>>());
    write_series(out, &used.into_iter().flatten().collect::<Vec<_>>(), scratch);
    let stats: Vec<Option<AllocatorStats>> = series.iter().map(ProcessPoint::allocator).collect();
    write_presence(out, &stats.iter().map(Option::is_some).collect::<Vec<_>>());
    let present: Vec<AllocatorStats> = stats.into_iter().flatten().collect();
    let mut column = Vec::with_capacity(present.len());
    for field in ALLOCATOR_FIELDS {
        column.clear();
        column.extend(present.iter().map(field));
        write_series(out, &column, scratch);
    }
    write_presence(out, &present.iter().map(|stats| stats.interval.is_some()).collect::<Vec<_>>());
    let ranges: Vec<AllocatorRange> = present.iter().filter_map(|stats| stats.interval).collect();
    for field in RANGE_FIELDS {
        column.clear();
        column.extend(ranges.iter().map(field));
        write_series(out, &column, scratch);
    }
}

fn read_figures(input: &mut BitReader<'_>, pid: u32, count: usize) -> Option<Vec<ProcessPoint>> {
    let used_present = read_presence(input, count)?;
    let mut used = Vec::new();
    read_series(input, used_present.iter().filter(|&&p| p).count(), &mut used)?;
    let stats_present = read_presence(input, count)?;
    let stats_count = stats_present.iter().filter(|&&p| p).count();
    let mut columns: [Vec<u64>; 6] = Default::default();
    for column in &mut columns {
        read_series(input, stats_count, column)?;
    }
    let [allocated, reserved, active_over, inactive, retries, ooms] = columns;
    let range_present = read_presence(input, stats_count)?;
    let range_count = range_present.iter().filter(|&&p| p).count();
    let mut range_columns: [Vec<u64>; 4] = Default::default();
    for column in &mut range_columns {
        read_series(input, range_count, column)?;
    }
    let [allocated_min, allocated_max, reserved_min, reserved_max] = range_columns;
    let mut ranges =
        allocated_min.into_iter().zip(allocated_max).zip(reserved_min).zip(reserved_max).map(
            |(
                ((allocated_min_bytes, allocated_max_bytes), reserved_min_bytes),
                reserved_max_bytes,
            )| {
                AllocatorRange {
                    allocated_min_bytes,
                    allocated_max_bytes,
                    reserved_min_bytes,
                    reserved_max_bytes,
                }
            },
        );
    let intervals: Option<Vec<Option<AllocatorRange>>> = range_present
        .into_iter()
        .map(|has_range| if has_range { ranges.next().map(Some) } else { Some(None) })
        .collect();
    let mut intervals = intervals?.into_iter();
    let mut stats = allocated
        .into_iter()
        .zip(reserved)
        .zip(active_over)
        .zip(inactive)
        .zip(retries)
        .zip(ooms)
        .map(|(((((allocated, reserved), active_over), inactive), retries), ooms)| {
            AllocatorStats {
                allocated_bytes: allocated,
                reserved_bytes: reserved,
                active_bytes: active_over.wrapping_add(allocated),
                inactive_split_bytes: inactive,
                alloc_retries: retries,
                ooms,
                interval: intervals.next().flatten(),
            }
        });
    let mut used = used.into_iter();
    used_present
        .into_iter()
        .zip(stats_present)
        .map(|(has_used, has_stats)| {
            let used = if has_used { Some(used.next()?) } else { None };
            let stats = if has_stats { Some(stats.next()?) } else { None };
            Some(ProcessPoint::new(pid, used, stats))
        })
        .collect()
}
