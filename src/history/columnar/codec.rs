//! Bit-level encoding of integer series: what a sealed chunk of the slow
//! tier is made of, and the analyzer's leak windows once sealed.
//!
//! A series (one figure of one process over a chunk, or the chunk's sample
//! times) is stored as its first value and then, for every further value,
//! a residue: the difference from the previous value (delta), the
//! difference of that difference from the previous one (delta of delta,
//! for steady growth and regular timestamps), or the value less the
//! series' smallest (frame, for a figure that wanders inside a band, such
//! as live bytes over a training step, whose differences span twice the
//! band). The residues share their trailing zero bits (sizes move in whole
//! pages or allocator blocks), so those are stored once as a shift; what
//! remains (zigzag-mapped to unsigned where it has a sign) is bit-packed at
//! the width that costs least, and the few residues wider than that (a
//! reserved pool's jump among small moves) keep their high bits apart with
//! their positions. A series that moves now and then is then its moves
//! alone (packed width 0), and one that never changes its value alone. The
//! encoder tries every mode and keeps the smallest. Why this over
//! Gorilla's XOR or byte varints: `docs/performance.md`, "History memory
//! when processes move".
//!
//! Arithmetic wraps, so every `u64` (and every `i64` cast to one) round-trips.
//!
//! Depends on nothing outside this module.

mod plan;
pub use plan::{Plan, planned_bits, write_planned, write_series};

/// Appends bit fields, least significant bit first.
#[derive(Default)]
pub struct BitWriter {
    bytes: Vec<u8>,
    /// Bits not yet written out, in the low `pending_bits` bits.
    pending: u64,
    pending_bits: u32,
}

impl BitWriter {
    /// A writer whose buffer holds `bytes` before it grows: sized from
    /// what it will write, a chunk's buffer is allocated once, not doubled
    /// through every size below it (each freed step stays in the heap).
    pub fn with_capacity(bytes: usize) -> Self {
        Self { bytes: Vec::with_capacity(bytes), ..Self::default() }
    }

    /// Writes the low `width` bits of `value` (`width <= 64`).
    pub fn write(&mut self, value: u64, width: u32) {
        let width = width.min(64);
        if width == 0 {
            return;
        }
        let value = if width == 64 { value } else { value & ((1u64 << width) - 1) };
        let mut remaining = width;
        let mut value = value;
        while remaining > 0 {
            let room = 64 - self.pending_bits;
            let take = room.min(remaining);
            let part = if take == 64 { value } else { value & ((1u64 << take) - 1) };
            self.pending |= part << self.pending_bits;
            self.pending_bits += take;
            remaining -= take;
            value = if take == 64 { 0 } else { value >> take };
            while self.pending_bits >= 8 {
                self.bytes.push(self.pending as u8);
                self.pending >>= 8;
                self.pending_bits -= 8;
            }
        }
    }

    /// Bits written so far.
    #[cfg(test)]
    pub fn bits_written(&self) -> u64 {
        self.bytes.len() as u64 * 8 + u64::from(self.pending_bits)
    }

    pub fn write_bit(&mut self, bit: bool) {
        self.write(u64::from(bit), 1);
    }

    /// A number of any size: its bit length in 7 bits, then its bits.
    pub fn write_number(&mut self, value: u64) {
        let bits = bit_length(value);
        self.write(u64::from(bits), 7);
        self.write(value, bits);
    }

    pub fn finish(mut self) -> Box<[u8]> {
        if self.pending_bits > 0 {
            self.bytes.push(self.pending as u8);
        }
        // Copied into an allocation of its exact size rather than shrunk in
        // place: shrinking splits the buffer's unused tail off as a small
        // free block that shorter-lived allocations take, and the chunks
        // kept then sit among holes the heap cannot give back. The whole
        // buffer, freed, is a hole the next chunk's buffer fills
        // (`benches/history_memory.rs`: 8 × 64 moving, 4.67 → 4.34-4.54 B).
        Box::from(self.bytes.as_slice())
    }
}

/// Reads what a [`BitWriter`] wrote; `None` past the end.
#[derive(Clone)]
pub struct BitReader<'a> {
    bytes: &'a [u8],
    /// Next bit to read, counted from the start.
    position: usize,
}

impl<'a> BitReader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, position: 0 }
    }

    pub fn read(&mut self, width: u32) -> Option<u64> {
        let width = width.min(64);
        // Most fields fit one unaligned 8-byte load.
        let byte = self.position / 8;
        let offset = (self.position % 8) as u32;
        if width + offset <= 64
            && let Some(window) = self.bytes.get(byte..byte + 8)
        {
            let mut word = [0u8; 8];
            word.copy_from_slice(window);
            let word = u64::from_le_bytes(word) >> offset;
            self.position += width as usize;
            return Some(if width == 64 { word } else { word & ((1u64 << width) - 1) });
        }
        let mut value = 0u64;
        let mut done = 0u32;
        while done < width {
            let byte = *self.bytes.get(self.position / 8)?;
            let offset = (self.position % 8) as u32;
            let take = (8 - offset).min(width - done);
            let part = (u64::from(byte) >> offset) & ((1u64 << take) - 1);
            value |= part << done;
            done += take;
            self.position += take as usize;
        }
        Some(value)
    }

    /// Appends `count` fields of `width` bits (`width <= 56`): a packed
    /// series' residues, read in one loop that loads each field's bytes
    /// once and checks the length once (this is most of a decode).
    pub fn read_packed(&mut self, width: u32, count: usize, out: &mut Vec<u64>) -> Option<()> {
        let bits = count.checked_mul(width as usize)?;
        if self.position.checked_add(bits)? > self.bytes.len() * 8 {
            return None;
        }
        if width == 0 {
            out.extend(std::iter::repeat_n(0, count));
            return Some(());
        }
        if width > 56 {
            for _ in 0..count {
                out.push(self.read(width)?);
            }
            return Some(());
        }
        let mask = (1u64 << width) - 1;
        out.reserve(count);
        let mut position = self.position;
        // The fields whose 8-byte window lies inside the bytes; the last
        // few are read bit by bit.
        let whole = self.bytes.len().saturating_sub(7) * 8;
        let mut done = 0;
        while done < count && position + width as usize <= whole {
            let byte = position / 8;
            let mut word = [0u8; 8];
            word.copy_from_slice(self.bytes.get(byte..byte + 8)?);
            out.push((u64::from_le_bytes(word) >> (position % 8)) & mask);
            position += width as usize;
            done += 1;
        }
        self.position = position;
        for _ in done..count {
            out.push(self.read(width)?);
        }
        Some(())
    }

    /// Moves past `bits` bits; `None` when fewer are left.
    pub fn skip(&mut self, bits: usize) -> Option<()> {
        let position = self.position.checked_add(bits)?;
        (position <= self.bytes.len() * 8).then(|| self.position = position)
    }

    pub fn read_bit(&mut self) -> Option<bool> {
        self.read(1).map(|bit| bit == 1)
    }

    pub fn read_number(&mut self) -> Option<u64> {
        let bits = u32::try_from(self.read(7)?).ok()?;
        if bits > 64 {
            return None;
        }
        self.read(bits)
    }
}

/// Bits needed to hold `value` (0 for 0).
pub fn bit_length(value: u64) -> u32 {
    64 - value.leading_zeros()
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// How a varying series' residues are taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Each value less the series' smallest (after the first): for a
    /// figure that wanders inside a band (live bytes over a training
    /// step), whose differences span twice the band.
    Frame = 0,
    /// Differences from the value before.
    Delta = 1,
    /// Differences of differences: regular timestamps, steady growth.
    DeltaOfDelta = 2,
}

/// A varying series' header, read.
struct Header {
    mode: Mode,
    base: u64,
    shift: u32,
    width: u32,
    packed: u32,
    exceptions: usize,
}

fn read_header(input: &mut BitReader<'_>) -> Option<Header> {
    let mode = match input.read(2)? {
        0 => Mode::Frame,
        1 => Mode::Delta,
        2 => Mode::DeltaOfDelta,
        _ => return None,
    };
    let base = if mode == Mode::Delta { 0 } else { input.read_number()? };
    let shift = u32::try_from(input.read(6)?).ok()?;
    let width = u32::try_from(input.read(7)?).ok()?;
    let packed = u32::try_from(input.read(7)?).ok()?;
    if width > 64 || packed > width {
        return None;
    }
    let exceptions = if packed < width { usize::try_from(input.read_number()?).ok()? } else { 0 };
    Some(Header { mode, base, shift, width, packed, exceptions })
}

/// Residues of a series of `count` values (after the first, and the
/// second in order 2).
fn residue_count(count: usize, mode: Mode) -> Option<usize> {
    count.checked_sub(if mode == Mode::DeltaOfDelta { 2 } else { 1 })
}

/// Reads `count` values written by [`write_series`] into `out` (appended).
pub fn read_series(input: &mut BitReader<'_>, count: usize, out: &mut Vec<u64>) -> Option<()> {
    if count == 0 {
        return Some(());
    }
    let varies = input.read_bit()?;
    let first = input.read_number()?;
    if !varies {
        out.extend(std::iter::repeat_n(first, count));
        return Some(());
    }
    let header = read_header(input)?;
    let residues = residue_count(count, header.mode)?;
    if header.exceptions > residues {
        return None;
    }
    out.reserve(count);
    out.push(first);
    if header.mode == Mode::DeltaOfDelta {
        out.push(first.wrapping_add(header.base));
    }
    // Residues first, in place; patched; then turned into values.
    let start = out.len();
    input.read_packed(header.packed, residues, out)?;
    let position_width = bit_length(residues as u64);
    let high_width = header.width - header.packed;
    for _ in 0..header.exceptions {
        let position = usize::try_from(input.read(position_width)?).ok()?;
        let high = input.read(high_width)?;
        let slot = out.get_mut(start.checked_add(position)?)?;
        *slot |= high.checked_shl(header.packed).unwrap_or(0);
    }
    let shift = header.shift;
    let residues = out.get_mut(start..)?;
    match header.mode {
        Mode::Frame => {
            for value in residues {
                *value = header.base.wrapping_add(*value << shift);
            }
        }
        Mode::Delta => {
            let mut value = first;
            for residue in residues {
                value = value.wrapping_add((unzigzag(*residue) << shift) as u64);
                *residue = value;
            }
        }
        Mode::DeltaOfDelta => {
            let mut delta = header.base;
            let mut value = first.wrapping_add(delta);
            for residue in residues {
                delta = delta.wrapping_add((unzigzag(*residue) << shift) as u64);
                value = value.wrapping_add(delta);
                *residue = value;
            }
        }
    }
    Some(())
}

/// Moves past a series of `count` values written by [`write_series`]
/// without decoding it: its packed residues are skipped whole, its
/// exceptions by their count. What a reader that wants one figure of a
/// chunk pays for the others.
pub fn skip_series(input: &mut BitReader<'_>, count: usize) -> Option<()> {
    if count == 0 {
        return Some(());
    }
    let varies = input.read_bit()?;
    input.read_number()?;
    if !varies {
        return Some(());
    }
    let header = read_header(input)?;
    let residues = residue_count(count, header.mode)?;
    let position_width = bit_length(residues as u64);
    let packed = residues.checked_mul(header.packed as usize)?;
    let apart =
        header.exceptions.checked_mul((position_width + header.width - header.packed) as usize)?;
    input.skip(packed.checked_add(apart)?)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn round_trip(values: &[u64]) -> (Vec<u64>, usize) {
        let mut writer = BitWriter::default();
        write_series(&mut writer, values);
        writer.write_number(0xDEAD);
        let bytes = writer.finish();
        let mut reader = BitReader::new(&bytes);
        let mut out = Vec::new();
        let mut skipping = reader.clone();
        read_series(&mut reader, values.len(), &mut out).unwrap();
        assert_eq!(reader.read_number(), Some(0xDEAD), "the series ends where it should");
        skip_series(&mut skipping, values.len()).unwrap();
        assert_eq!(skipping.read_number(), Some(0xDEAD), "a skip ends where a read does");
        (out, bytes.len())
    }

    #[test]
    fn extremes_round_trip() {
        let values = [0, u64::MAX, 0, u64::MAX, 1, u64::MAX - 1, i64::MIN as u64, 0];
        assert_eq!(round_trip(&values).0, values);
        assert_eq!(round_trip(&[u64::MAX; 5]).0, [u64::MAX; 5]);
        assert_eq!(round_trip(&[7]).0, [7]);
    }

    #[test]
    fn a_series_that_holds_still_costs_its_value_alone() {
        let (out, bytes) = round_trip(&[40 << 30; 64]);
        assert_eq!(out, [40 << 30; 64]);
        assert!(bytes <= 9, "{bytes} bytes (3 of them the end marker)");
    }

    #[test]
    fn page_sized_moves_cost_a_few_bits_each() {
        // Whole 2 MiB pages, up and down by up to 31 pages.
        let values: Vec<u64> =
            (0..64u64).map(|i| (40 << 30) + (i * 7_919 % 32) * (2 << 20)).collect();
        let (out, bytes) = round_trip(&values);
        assert_eq!(out, values);
        assert!(bytes <= 64 * 6 / 8 + 10, "{bytes} bytes for 64 values");
    }

    #[test]
    fn a_figure_that_moves_now_and_then_costs_its_moves() {
        let values: Vec<u64> =
            (0..256u64).map(|i| (5 << 30) + (i / 30 % 4) * (128 << 20)).collect();
        let (out, bytes) = round_trip(&values);
        assert_eq!(out, values);
        assert!(bytes <= 24, "{bytes} bytes for 8 moves in 256 values");
    }

    #[test]
    fn regular_timestamps_cost_nearly_nothing() {
        let times: Vec<u64> = (0..64u64).map(|i| 1_767_225_600_000 + i * 1_000).collect();
        let (out, bytes) = round_trip(&times);
        assert_eq!(out, times);
        assert!(bytes <= 14, "{bytes} bytes (3 of them the end marker)");
    }

    proptest! {
        #[test]
        fn any_series_round_trips(values in proptest::collection::vec(any::<u64>(), 1..200)) {
            prop_assert_eq!(round_trip(&values).0, values);
        }

        #[test]
        fn a_plan_weighs_exactly_what_is_written(
            values in proptest::collection::vec(
                prop_oneof![any::<u64>(), 0u64..64, (0u64..8).prop_map(|page| page << 21)],
                1..120,
            ),
        ) {
            // The encoder picks a mode, and usage less reserved or not, by
            // these weights: they must be the bits the writer then takes.
            let mut writer = BitWriter::default();
            let plan = Plan::cheapest(&values);
            write_planned(&mut writer, &values, plan);
            prop_assert_eq!(writer.bits_written(), planned_bits(&values, plan.as_ref()));
            prop_assert_eq!(round_trip(&values).0, values);
        }

        #[test]
        fn jittered_timestamps_round_trip(
            start in any::<i64>(),
            steps in proptest::collection::vec(-50i64..1_100, 1..200),
        ) {
            let mut at = start;
            let times: Vec<u64> = std::iter::once(start)
                .chain(steps.iter().map(|step| { at = at.wrapping_add(*step); at }))
                .map(|at| at as u64)
                .collect();
            prop_assert_eq!(round_trip(&times).0, times);
        }

        #[test]
        fn fields_of_any_width_round_trip(
            fields in proptest::collection::vec((any::<u64>(), 0u32..=64), 0..100),
        ) {
            let mut writer = BitWriter::default();
            for &(value, width) in &fields {
                writer.write(value, width);
            }
            let bytes = writer.finish();
            let mut reader = BitReader::new(&bytes);
            for &(value, width) in &fields {
                let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
                prop_assert_eq!(reader.read(width), Some(value & mask));
            }
        }
    }
}
