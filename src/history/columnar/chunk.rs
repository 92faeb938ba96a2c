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

use crate::model::Timestamp;

use super::super::points::{ProcessPoint, SlowPoint};

mod merge;
mod presence;
mod process;
use super::codec::{BitReader, BitWriter, bit_length, read_series, write_series};
pub(super) use presence::{read_presence_into, read_used_presence, skip_used_presence};
use process::{ReadScratch, Scratch, read_figures, write_figures};

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
        // Sized for a few bytes a process-sample (copied out at its exact
        // size when done), so it is not grown through every size below.
        let listed: usize = points.iter().filter_map(SlowPoint::processes).map(<[_]>::len).sum();
        let mut out = BitWriter::with_capacity(64 + points.len() + listed * 8);
        let mut scratch = Scratch::default();
        out.write_number(points.len() as u64);
        let times: Vec<u64> = points.iter().map(|point| stamp_to_bits(point.at())).collect();
        write_series(&mut out, &times);
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
        let mut layout: Vec<usize> = Vec::new();
        for (index, list) in lists.iter().enumerate() {
            let index = index as u32;
            layout.clear();
            let previous = layouts.last();
            layout.extend(list.iter().enumerate().map(|(position, process)| {
                // A list mostly holds the processes of the one before in
                // the same order: their slots are found without hashing.
                let same = previous.and_then(|previous| previous.get(position)).copied();
                let slot = match same {
                    Some(slot) if roster.get(slot) == Some(&process.pid) => slot,
                    _ => *slot_of.entry(process.pid).or_insert_with(|| {
                        roster.push(process.pid);
                        runs.push(Vec::new());
                        roster.len() - 1
                    }),
                };
                if let Some(series) = runs.get_mut(slot) {
                    let position = position as u32;
                    match series.last_mut() {
                        Some(run) if run.position == position && run.first + run.count == index => {
                            run.count += 1;
                        }
                        _ => series.push(PositionRun { first: index, count: 1, position }),
                    }
                }
                slot
            }));
            let layout = match layouts.last() {
                Some(previous) if **previous == *layout => previous.clone(),
                _ => Arc::from(&layout[..]),
            };
            layouts.push(layout);
        }
        out.write_number(roster.len() as u64);
        let pids: Vec<u64> = roster.iter().map(|&pid| u64::from(pid)).collect();
        write_series(&mut out, &pids);
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
    #[cfg(test)]
    pub fn decode(&self) -> Result<Vec<SlowPoint>, CorruptChunk> {
        self.decode_between(
            Timestamp::from_unix_millis(i64::MIN),
            Timestamp::from_unix_millis(i64::MAX),
        )
    }

    /// The samples with `from <= at <= to`, oldest first: the figures are
    /// decoded whole (a series reads from its start), but process lists
    /// are built only for the samples asked for.
    pub fn decode_between(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<SlowPoint>, CorruptChunk> {
        self.decode_inner(from, to).ok_or(CorruptChunk { len: self.len })
    }

    fn decode_inner(&self, from: Timestamp, to: Timestamp) -> Option<Vec<SlowPoint>> {
        let Header { mut input, len, times, capped, listed, pids, layouts, counts } =
            Header::read(&self.bytes)?;
        // Every process's samples, one roster entry after another.
        let mut points = Vec::with_capacity(counts.iter().sum());
        let mut next_of = Vec::with_capacity(pids.len());
        let mut scratch = ReadScratch::default();
        for (&pid, &count) in pids.iter().zip(&counts) {
            next_of.push(points.len());
            read_figures(&mut input, pid, count, &mut scratch, &mut points)?;
        }
        let mut take = |slot: usize| -> Option<ProcessPoint> {
            let next = next_of.get_mut(slot)?;
            let point = points.get(*next).copied();
            *next += 1;
            point
        };

        let wanted = times.iter().filter(|&&bits| (from..=to).contains(&bits_to_stamp(bits)));
        let mut samples = Vec::with_capacity(wanted.count().min(len));
        let mut layouts = layouts.into_iter();
        let mut previous: Option<Arc<[ProcessPoint]>> = None;
        for ((bits, capped), listed) in times.into_iter().zip(capped).zip(listed) {
            let at = bits_to_stamp(bits);
            let wanted = (from..=to).contains(&at);
            let processes = if listed {
                let layout = layouts.next()?;
                if !wanted {
                    for &slot in layout.iter() {
                        take(slot)?;
                    }
                    continue;
                }
                let list =
                    layout.iter().map(|&slot| take(slot)).collect::<Option<Vec<ProcessPoint>>>()?;
                let shared = match &previous {
                    Some(previous) if **previous == *list => previous.clone(),
                    _ => Arc::from(list),
                };
                previous = Some(shared.clone());
                Some(shared)
            } else {
                None
            };
            if wanted {
                samples.push(SlowPoint::from_parts(at, processes, capped));
            }
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
