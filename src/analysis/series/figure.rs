//! One figure of one process over a leak window, stored compactly.
//!
//! Owns: the storage of a series of `(sample number, value)` points, and
//! rebuilding its points against the window's sample times. Depends on:
//! `history::codec` (the slow tier's series encoding), `model::Timestamp`.
//!
//! The newest points are kept as runs of one value over consecutive
//! samples (16 bytes a run), so a figure that holds still costs one run
//! however long it holds, as before. Once [`CHUNK_RUNS`] runs are open
//! they are sealed into a chunk: where each run starts (as the gap from
//! the previous run's end), how long it is, and its value, each a series
//! in the history's codec. A figure that moves on every sample is then a
//! run per sample whose gaps and lengths cost nothing, and its values a
//! few bits each (sizes move in pages or allocator blocks), instead of
//! 16 bytes a point. A sample that lacks the figure adds no point, so
//! absent stays absent.

use crate::history::codec::{BitReader, BitWriter, read_series, write_series};
use crate::model::Timestamp;

/// Runs kept as recorded before they are sealed: a chunk's few bytes of
/// headers and its allocation are paid once per this many runs, and the
/// open runs are a small part of a 30-minute window.
pub const CHUNK_RUNS: usize = 64;

/// `len` consecutive samples from sequence number `start` with one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub start: u32,
    pub len: u32,
    pub value: u64,
}

#[derive(Debug, Default)]
pub struct FigureSeries {
    /// Sealed chunks, oldest first.
    sealed: Vec<Sealed>,
    /// The newest runs, oldest first.
    open: Vec<Run>,
}

/// Runs sealed into one encoded chunk.
#[derive(Debug)]
struct Sealed {
    /// The sequence number of its first point.
    first: u32,
    /// One past the sequence number of its last point.
    end: u32,
    runs: u32,
    /// Whether its runs are one point each without gaps (a figure that
    /// moves on every sample): then its points are read without them.
    dense: bool,
    bytes: Box<[u8]>,
}

/// What rebuilding a chunk's runs needs, kept by the caller between
/// series so that decoding allocates nothing.
#[derive(Debug, Default)]
pub struct DecodeScratch {
    gaps: Vec<u64>,
    lens: Vec<u64>,
    values: Vec<u64>,
}

impl FigureSeries {
    pub fn is_empty(&self) -> bool {
        self.sealed.is_empty() && self.open.is_empty()
    }

    /// Forgets every point and what held them.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Appends sample `seq`'s `value` (`seq` newer than every point's),
    /// extending the newest run when it is the same value on the sample
    /// just before.
    pub fn push(&mut self, seq: u32, value: u64) {
        if let Some(last) = self.open.last_mut()
            && last.value == value
            && last.start.checked_add(last.len) == Some(seq)
        {
            last.len += 1;
            return;
        }
        if self.open.len() >= CHUNK_RUNS {
            self.seal();
        }
        self.open.push(Run { start: seq, len: 1, value });
    }

    fn seal(&mut self) {
        let (Some(first), Some(last)) = (self.open.first(), self.open.last()) else { return };
        let (first, end) = (first.start, last.start.saturating_add(last.len));
        let mut gaps = Vec::with_capacity(self.open.len());
        let mut previous_end = first;
        for run in &self.open {
            gaps.push(u64::from(run.start.wrapping_sub(previous_end)));
            previous_end = run.start.wrapping_add(run.len);
        }
        let lens: Vec<u64> = self.open.iter().map(|run| u64::from(run.len)).collect();
        let values: Vec<u64> = self.open.iter().map(|run| run.value).collect();
        let mut out = BitWriter::default();
        let runs = u32::try_from(self.open.len()).unwrap_or(u32::MAX);
        let dense = end.wrapping_sub(first) == runs;
        if !dense {
            write_series(&mut out, &gaps);
            write_series(&mut out, &lens);
        }
        write_series(&mut out, &values);
        self.sealed.push(Sealed { first, end, runs, dense, bytes: out.finish() });
        // Released rather than kept: a figure that then holds still needs
        // one run, not a chunk's worth of room.
        self.open = Vec::new();
    }

    /// Drops the points numbered below `first`. A sealed chunk that
    /// straddles it is kept whole and its older points skipped on reading.
    pub fn trim(&mut self, first: u32) {
        let gone = self.sealed.partition_point(|chunk| chunk.end <= first);
        self.sealed.drain(..gone);
        let gone = self
            .open
            .partition_point(|run| u64::from(run.start) + u64::from(run.len) <= u64::from(first));
        self.open.drain(..gone);
        if let Some(run) = self.open.first_mut()
            && run.start < first
        {
            run.len -= first - run.start;
            run.start = first;
        }
    }

    /// The points into `points` (cleared first), `times` holding the time
    /// of every sample from sequence number `first_seq` on; points older
    /// than `first_seq` are left out.
    pub fn points_into(
        &self,
        times: &[Timestamp],
        first_seq: u32,
        scratch: &mut DecodeScratch,
        points: &mut Vec<(Timestamp, u64)>,
    ) {
        points.clear();
        for chunk in &self.sealed {
            // Encoded by `seal` in this process: a chunk that does not
            // decode is a bug, and its points are left out rather than
            // made up.
            if chunk.decode(scratch).is_none() {
                continue;
            }
            if chunk.dense {
                // A point a sample: the values beside the samples' times.
                let skip = first_seq.saturating_sub(chunk.first);
                let start = chunk.first.saturating_add(skip).wrapping_sub(first_seq) as usize;
                let values = scratch.values.get(skip as usize..).unwrap_or(&[]);
                let times = times.get(start.min(times.len())..).unwrap_or(&[]);
                points.extend(times.iter().zip(values).map(|(&at, &value)| (at, value)));
                continue;
            }
            let mut start = chunk.first;
            let DecodeScratch { gaps, lens, values } = &*scratch;
            for ((&gap, &len), &value) in gaps.iter().zip(lens).zip(values) {
                start = start.wrapping_add(gap as u32);
                let len = len as u32;
                push_run(times, first_seq, Run { start, len, value }, points);
                start = start.wrapping_add(len);
            }
        }
        for &run in &self.open {
            push_run(times, first_seq, run, points);
        }
    }

    /// The runs held, sealed or open.
    #[cfg(test)]
    pub fn runs(&self) -> usize {
        self.sealed.iter().map(|chunk| chunk.runs as usize).sum::<usize>() + self.open.len()
    }

    /// Encoded bytes held by the sealed chunks, and the runs open.
    #[cfg(test)]
    pub fn footprint(&self) -> (usize, usize) {
        (self.sealed.iter().map(|chunk| chunk.bytes.len()).sum(), self.open.len())
    }
}

/// `run`'s points from sample `first_seq` on, `times` holding the time
/// of every sample from `first_seq` on.
fn push_run(times: &[Timestamp], first_seq: u32, run: Run, points: &mut Vec<(Timestamp, u64)>) {
    // Clipped to the window: a sealed chunk may straddle its start.
    let skip = first_seq.saturating_sub(run.start);
    let len = run.len.saturating_sub(skip) as usize;
    let start = run.start.saturating_add(skip).wrapping_sub(first_seq) as usize;
    let end = start.saturating_add(len).min(times.len());
    if let Some(run_times) = times.get(start.min(end)..end) {
        points.extend(run_times.iter().map(|&at| (at, run.value)));
    }
}

impl Sealed {
    fn decode(&self, scratch: &mut DecodeScratch) -> Option<()> {
        let runs = self.runs as usize;
        let mut input = BitReader::new(&self.bytes);
        let columns = [&mut scratch.gaps, &mut scratch.lens, &mut scratch.values];
        let skip = if self.dense { 2 } else { 0 };
        for column in columns.into_iter().skip(skip) {
            column.clear();
            read_series(&mut input, runs, column)?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(count: u32) -> Vec<Timestamp> {
        (0..count).map(|i| Timestamp::from_unix_millis(1_000 * i64::from(i))).collect()
    }

    fn points(series: &FigureSeries, times: &[Timestamp], first: u32) -> Vec<(Timestamp, u64)> {
        let mut points = Vec::new();
        let window = times.get(first as usize..).unwrap_or(&[]);
        series.points_into(window, first, &mut DecodeScratch::default(), &mut points);
        points
    }

    #[test]
    fn a_moving_figure_reads_back_every_point_in_a_few_bytes_each() {
        let times = times(1_000);
        let mut series = FigureSeries::default();
        let value = |i: u64| (4 << 30) + ((i * 2_654_435_761) >> 3) % 16_384 * 512;
        for i in 0..1_000u32 {
            series.push(i, value(u64::from(i)));
        }
        let expected: Vec<_> =
            (0..1_000u32).map(|i| (times[i as usize], value(i.into()))).collect();
        assert_eq!(points(&series, &times, 0), expected);
        let (bytes, open) = series.footprint();
        assert!(open < CHUNK_RUNS);
        assert!(bytes <= 1_000 * 2, "{bytes} bytes for {} sealed points", 1_000 - open);
        // Trimmed inside a sealed chunk: exactly the points from there on.
        series.trim(100);
        assert_eq!(points(&series, &times, 100), expected[100..]);
    }

    #[test]
    fn gaps_and_trims_keep_absent_points_absent() {
        let times = times(400);
        let mut series = FigureSeries::default();
        let mut expected = Vec::new();
        for i in (0..400u32).filter(|i| i % 7 != 3 && !(100..150).contains(i)) {
            let value = u64::from(i / 5) * 4_096;
            series.push(i, value);
            expected.push((i, (times[i as usize], value)));
        }
        assert!(series.runs() > CHUNK_RUNS, "some runs are sealed");
        for first in [0, 1, 64, 99, 120, 151, 257, 399, 400] {
            series.trim(first);
            let kept: Vec<_> =
                expected.iter().filter(|&&(i, _)| i >= first).map(|&(_, point)| point).collect();
            assert_eq!(points(&series, &times, first), kept, "from sample {first}");
        }
        assert!(series.is_empty());
    }

    #[test]
    fn a_figure_that_holds_still_stays_one_run() {
        let mut series = FigureSeries::default();
        for i in 0..10_000 {
            series.push(i, 7 << 30);
        }
        assert_eq!(series.footprint(), (0, 1));
    }
}
