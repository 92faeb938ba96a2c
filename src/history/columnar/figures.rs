//! Reading chosen per-process figures of the slow tier, without the rest.
//!
//! A reader of a long window that follows one or two figures of every
//! process (process growth: NVML usage; the leak windows: allocator
//! `allocated` and NVML usage) decodes only those series of a sealed chunk
//! and skips the others (`codec::skip_series`), and gets each sample's
//! processes as rows of a buffer it reuses, not as a list allocated per
//! sample. Absent stays absent: a figure a sample lacked reads `None`.
//!
//! Depends on: `history::points`, the chunk layout (`chunk`), `codec`.

use crate::model::Timestamp;

use super::super::points::{ProcessPoint, SlowPoint};
use super::chunk::{
    Header, SlowChunk, bits_to_stamp, read_presence_into, read_used_presence, skip_used_presence,
};
use super::codec::{BitReader, read_series, skip_series};

/// A figure a slow sample stores for each listed process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessFigure {
    /// What NVML attributes to the process.
    NvmlUsed,
    /// Allocator `allocated_bytes.all.current`.
    Allocated,
    /// The lowest `allocated` of the reporter's interval where it sends
    /// one, else `allocated` ([`crate::model::AllocatorStats::floor_allocated_bytes`]):
    /// what a floor is read from.
    AllocatedFloor,
    /// Allocator `reserved_bytes.all.current`.
    Reserved,
    /// Allocator `active_bytes.all.current`.
    Active,
    /// Allocator `inactive_split_bytes.all.current`.
    InactiveSplit,
    /// Allocator `num_alloc_retries`.
    AllocRetries,
    /// Allocator `num_ooms`.
    Ooms,
}

impl ProcessFigure {
    /// The figure as `process` holds it.
    pub fn of(self, process: &ProcessPoint) -> Option<u64> {
        if self == Self::NvmlUsed {
            return process.used_bytes();
        }
        let stats = process.allocator()?;
        Some(match self {
            Self::NvmlUsed | Self::Allocated => stats.allocated_bytes,
            Self::AllocatedFloor => stats.floor_allocated_bytes(),
            Self::Reserved => stats.reserved_bytes,
            Self::Active => stats.active_bytes,
            Self::InactiveSplit => stats.inactive_split_bytes,
            Self::AllocRetries => stats.alloc_retries,
            Self::Ooms => stats.ooms,
        })
    }

    /// Its column among a chunk's allocator figures (`chunk`'s stored
    /// order); `None` for NVML usage.
    fn allocator_column(self) -> Option<usize> {
        match self {
            Self::NvmlUsed | Self::AllocatedFloor => None,
            Self::Allocated => Some(0),
            Self::Reserved => Some(1),
            Self::Active => Some(2),
            Self::InactiveSplit => Some(3),
            Self::AllocRetries => Some(4),
            Self::Ooms => Some(5),
        }
    }
}

/// One listed process of a sample, with the figures asked for, in the
/// order asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FigureRow<const N: usize> {
    pub pid: u32,
    pub values: [Option<u64>; N],
}

/// One slow sample as a figure reader sees it.
#[derive(Clone, Copy, Debug)]
pub struct FigureSample<'a, const N: usize> {
    pub at: Timestamp,
    /// Whether the process cap left some of the device's processes out.
    pub capped: bool,
    /// The listed processes in list order; `None` where the list was not read.
    pub processes: Option<&'a [FigureRow<N>]>,
}

/// `processes`' figures as rows into `rows` (cleared first).
pub fn rows_of<const N: usize>(
    processes: &[ProcessPoint],
    figures: [ProcessFigure; N],
    rows: &mut Vec<FigureRow<N>>,
) {
    rows.clear();
    rows.extend(
        processes
            .iter()
            .map(|process| FigureRow { pid: process.pid, values: figures.map(|f| f.of(process)) }),
    );
}

/// Visits `point` as a figure sample, its rows built into `rows`.
pub fn visit_point<const N: usize>(
    point: &SlowPoint,
    figures: [ProcessFigure; N],
    rows: &mut Vec<FigureRow<N>>,
    visit: &mut impl FnMut(&FigureSample<'_, N>),
) {
    let processes = point.processes().map(|list| {
        rows_of(list, figures, rows);
        &rows[..]
    });
    visit(&FigureSample { at: point.at(), capped: point.capped(), processes });
}

impl SlowChunk {
    /// Visits every sample of the chunk with `from <= at <= to`, oldest
    /// first, decoding only `figures` of each process.
    pub fn visit_figures<const N: usize>(
        &self,
        figures: [ProcessFigure; N],
        from: Timestamp,
        to: Timestamp,
        visit: &mut impl FnMut(&FigureSample<'_, N>),
    ) -> Option<()> {
        let Header { mut input, times, capped, listed, pids, layouts, counts, .. } =
            Header::read(&self.bytes)?;
        // Every process's rows of figures, one roster entry after another.
        let mut offsets = Vec::with_capacity(counts.len());
        let total: usize = counts.iter().sum();
        let mut columns: Vec<[Option<u64>; N]> = Vec::with_capacity(total);
        let mut scratch = FigureScratch::default();
        for &count in &counts {
            offsets.push(columns.len());
            read_process(&mut input, count, figures, &mut scratch, &mut columns)?;
        }
        let mut rows = Vec::new();
        let mut layouts = layouts.iter();
        for ((&bits, &capped), &listed) in times.iter().zip(&capped).zip(&listed) {
            let layout = if listed { Some(layouts.next()?) } else { None };
            let at = bits_to_stamp(bits);
            let wanted = at >= from && at <= to;
            let processes = match layout {
                Some(layout) => {
                    rows.clear();
                    for &slot in layout.iter() {
                        let offset = offsets.get_mut(slot)?;
                        if wanted {
                            let values = *columns.get(*offset)?;
                            rows.push(FigureRow { pid: *pids.get(slot)?, values });
                        }
                        *offset += 1;
                    }
                    Some(&rows[..])
                }
                None => None,
            };
            if wanted {
                visit(&FigureSample { at, capped, processes });
            }
        }
        Some(())
    }
}

/// Buffers a figure reader reuses from one process to the next: a read of
/// the few newest samples decodes a small chunk, where allocating them per
/// process would cost more than the decoding.
#[derive(Default)]
struct FigureScratch {
    decoded: Vec<u64>,
    allocated: Vec<u64>,
    used_present: Vec<bool>,
    stats_present: Vec<bool>,
    range_present: Vec<bool>,
}

/// One process's `count` samples of `figures` appended to `columns`, the
/// figures not asked for skipped.
fn read_process<const N: usize>(
    input: &mut BitReader<'_>,
    count: usize,
    figures: [ProcessFigure; N],
    scratch: &mut FigureScratch,
    columns: &mut Vec<[Option<u64>; N]>,
) -> Option<()> {
    let FigureScratch { decoded, allocated, used_present, stats_present, range_present } = scratch;
    let start = columns.len();
    columns.resize(start + count, [None; N]);
    let rows = columns.get_mut(start..)?;
    let used_wanted = figures.contains(&ProcessFigure::NvmlUsed);
    let less_reserved = if used_wanted {
        used_present.clear();
        let (used_count, less_reserved) = read_used_presence(input, count, used_present)?;
        decoded.clear();
        read_series(input, used_count, decoded)?;
        fill(rows, used_present, decoded, figures, is_used);
        less_reserved
    } else {
        let used_count = skip_used_presence(input, count)?;
        skip_series(input, used_count)?;
        false
    };
    stats_present.clear();
    let stats_count = read_presence_into(input, count, stats_present)?;
    // Active is stored less allocated, and the floor is allocated where no
    // interval minimum was sent: both need allocated decoded too; usage
    // stored less reserved needs reserved.
    let active_wanted = figures.contains(&ProcessFigure::Active);
    let floor_wanted = figures.contains(&ProcessFigure::AllocatedFloor);
    let allocated_needed = active_wanted || floor_wanted;
    allocated.clear();
    for column in 0..6 {
        let wanted = figures.iter().any(|figure| figure.allocator_column() == Some(column));
        let needed = (column == 0 && allocated_needed) || (column == 1 && less_reserved);
        if !(wanted || needed) {
            skip_series(input, stats_count)?;
            continue;
        }
        decoded.clear();
        read_series(input, stats_count, decoded)?;
        if column == 0 && allocated_needed {
            allocated.clone_from(decoded);
        }
        if column == 1 && less_reserved {
            // Stored less reserved, usage is present in every sample, as
            // are the allocator figures: row by row, the same sample.
            if decoded.len() != rows.len() {
                return None;
            }
            for (row, reserved) in rows.iter_mut().zip(decoded.iter()) {
                for (slot, &figure) in row.iter_mut().zip(&figures) {
                    if let (true, Some(used)) = (is_used(figure), slot.as_mut()) {
                        *used = used.wrapping_add(*reserved);
                    }
                }
            }
        }
        if column == 2 {
            for (active, allocated) in decoded.iter_mut().zip(allocated.iter()) {
                *active = active.wrapping_add(*allocated);
            }
        }
        fill(rows, stats_present, decoded, figures, |figure| {
            figure.allocator_column() == Some(column)
        });
    }
    // The interval's range (min and max of allocated, then of reserved),
    // present or not per sample with allocator figures (`chunk`'s layout).
    range_present.clear();
    let range_count = read_presence_into(input, stats_count, range_present)?;
    if floor_wanted {
        decoded.clear();
        read_series(input, range_count, decoded)?;
        // Each sample's interval minimum where one was sent, else its
        // allocated bytes, in place of allocated.
        let mut minima = decoded.iter();
        for (floor, &has_range) in allocated.iter_mut().zip(range_present.iter()) {
            if has_range {
                *floor = *minima.next()?;
            }
        }
        if allocated.len() != range_present.len() {
            return None;
        }
        fill(rows, stats_present, allocated, figures, |figure| {
            figure == ProcessFigure::AllocatedFloor
        });
        for _ in 1..4 {
            skip_series(input, range_count)?;
        }
    } else {
        for _ in 0..4 {
            skip_series(input, range_count)?;
        }
    }
    Some(())
}

fn is_used(figure: ProcessFigure) -> bool {
    figure == ProcessFigure::NvmlUsed
}

/// Puts `values` (one per present sample) into the rows' slots of the
/// figures `this` picks.
fn fill<const N: usize>(
    rows: &mut [[Option<u64>; N]],
    present: &[bool],
    values: &[u64],
    figures: [ProcessFigure; N],
    this: impl Fn(ProcessFigure) -> bool,
) {
    let mut values = values.iter();
    for (row, _) in rows.iter_mut().zip(present).filter(|(_, present)| **present) {
        let Some(&value) = values.next() else { return };
        for (slot, &figure) in row.iter_mut().zip(&figures) {
            if this(figure) {
                *slot = Some(value);
            }
        }
    }
}
