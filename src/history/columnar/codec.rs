//! Bit-level encoding of integer series: what a sealed chunk of the slow
//! tier is made of.
//!
//! A series (one figure of one process over a chunk, or the chunk's sample
//! times) is stored as its first value and then, for every further value,
//! a residue: the difference from the previous value (order 1), or the
//! difference of that difference from the previous one (order 2, for
//! steady growth and regular timestamps). The residues share their
//! trailing zero bits (sizes move in whole pages or allocator blocks), so
//! those are stored once as a shift; what remains is zigzag-mapped to
//! unsigned and bit-packed at the width of the largest one. A series that
//! never changes is its value alone. The encoder tries both orders and
//! keeps the smaller. Why this over Gorilla's XOR or byte varints:
//! `docs/performance.md`, "History memory when processes move".
//!
//! Arithmetic wraps, so every `u64` (and every `i64` cast to one) round-trips.
//!
//! Depends on nothing outside this module.

/// Appends bit fields, least significant bit first.
#[derive(Default)]
pub struct BitWriter {
    bytes: Vec<u8>,
    /// Bits not yet written out, in the low `pending_bits` bits.
    pending: u64,
    pending_bits: u32,
}

impl BitWriter {
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
        self.bytes.into_boxed_slice()
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

/// The residues of `values` at `order` (1: differences, 2: differences of
/// differences, after the first difference), one per value after the
/// first (order 1) or the second (order 2).
fn residues(values: &[u64], order: u8, out: &mut Vec<i64>) {
    out.clear();
    let mut previous_delta = None;
    for pair in values.windows(2) {
        let delta = pair[1].wrapping_sub(pair[0]) as i64;
        match (order, previous_delta) {
            (1, _) => out.push(delta),
            (_, Some(previous)) => out.push(delta.wrapping_sub(previous)),
            (_, None) => {}
        }
        previous_delta = Some(delta);
    }
}

/// The shared trailing zeros of `residues` and the width each takes once
/// shifted and zigzagged.
fn shift_and_width(residues: &[i64]) -> (u32, u32) {
    let shift = residues.iter().filter(|&&r| r != 0).map(|r| r.trailing_zeros()).min().unwrap_or(0);
    let widest = residues.iter().map(|&r| zigzag(r >> shift)).max().unwrap_or(0);
    (shift, bit_length(widest))
}

/// Writes a series; its length is not written (the reader knows it).
pub fn write_series(out: &mut BitWriter, values: &[u64], scratch: &mut Vec<i64>) {
    let Some(&first) = values.first() else { return };
    if values.iter().all(|&value| value == first) {
        out.write_bit(false);
        out.write_number(first);
        return;
    }
    out.write_bit(true);
    out.write_number(first);
    residues(values, 1, scratch);
    let (mut shift, mut width) = shift_and_width(scratch);
    let mut order_two = false;
    let mut second = Vec::new();
    residues(values, 2, &mut second);
    let (shift2, width2) = shift_and_width(&second);
    // Order 2 pays for its first difference in full.
    let first_delta = values.get(1).map_or(0, |&next| zigzag(next.wrapping_sub(first) as i64));
    let cost = |width: u32, count: usize| u64::from(width) * count as u64;
    if cost(width2, second.len()) + u64::from(bit_length(first_delta)) + 7
        < cost(width, scratch.len())
    {
        (order_two, shift, width) = (true, shift2, width2);
        std::mem::swap(scratch, &mut second);
    }
    out.write_bit(order_two);
    if order_two {
        out.write_number(first_delta);
    }
    out.write(u64::from(shift), 6);
    out.write(u64::from(width), 7);
    // A figure that moves now and then (reserved bytes, a counter) has
    // mostly zero residues: then only the others, with their positions.
    let position_width = bit_length(scratch.len() as u64);
    let moves = scratch.iter().filter(|&&residue| residue != 0).count();
    let sparse = 14 + moves as u64 * u64::from(position_width + width);
    let sparse_is_smaller = sparse < cost(width, scratch.len());
    out.write_bit(sparse_is_smaller);
    if sparse_is_smaller {
        out.write_number(moves as u64);
        for (position, &residue) in scratch.iter().enumerate().filter(|(_, r)| **r != 0) {
            out.write(position as u64, position_width);
            out.write(zigzag(residue >> shift), width);
        }
    } else {
        for &residue in scratch.iter() {
            out.write(zigzag(residue >> shift), width);
        }
    }
}

/// Reads `count` values written by [`write_series`] into `out` (appended).
pub fn read_series(input: &mut BitReader<'_>, count: usize, out: &mut Vec<u64>) -> Option<()> {
    if count == 0 {
        return Some(());
    }
    let start = out.len();
    let varies = input.read_bit()?;
    let first = input.read_number()?;
    out.push(first);
    if !varies {
        out.extend(std::iter::repeat_n(first, count - 1));
        return Some(());
    }
    let order_two = input.read_bit()?;
    let first_delta = if order_two { Some(unzigzag(input.read_number()?)) } else { None };
    let shift = u32::try_from(input.read(6)?).ok()?;
    let width = u32::try_from(input.read(7)?).ok()?;
    if width > 64 {
        return None;
    }
    let mut value = first;
    let mut delta = 0i64;
    if let Some(first_delta) = first_delta {
        delta = first_delta;
        value = value.wrapping_add(delta as u64);
        out.push(value);
    }
    let residues = count - (out.len() - start);
    let sparse = input.read_bit()?;
    let position_width = bit_length(residues as u64);
    let mut moves = if sparse { input.read_number()? } else { 0 };
    let mut next_move = None;
    for position in 0..residues {
        let zigzagged = if !sparse {
            input.read(width)?
        } else {
            if next_move.is_none() && moves > 0 {
                moves -= 1;
                next_move = Some((input.read(position_width)?, input.read(width)?));
            }
            match next_move {
                Some((at, value)) if at == position as u64 => {
                    next_move = None;
                    value
                }
                _ => 0,
            }
        };
        let residue = unzigzag(zigzagged) << shift;
        delta = if order_two { delta.wrapping_add(residue) } else { residue };
        value = value.wrapping_add(delta as u64);
        out.push(value);
    }
    Some(())
}

/// Moves past a series of `count` values written by [`write_series`]
/// without decoding it: a packed series is skipped whole, a sparse one
/// move by move. What a reader that wants one figure of a chunk pays for
/// the others.
pub fn skip_series(input: &mut BitReader<'_>, count: usize) -> Option<()> {
    if count == 0 {
        return Some(());
    }
    let varies = input.read_bit()?;
    input.read_number()?;
    if !varies {
        return Some(());
    }
    let order_two = input.read_bit()?;
    if order_two {
        input.read_number()?;
    }
    input.read(6)?;
    let width = u32::try_from(input.read(7)?).ok()?;
    if width > 64 {
        return None;
    }
    let residues = count.checked_sub(1 + usize::from(order_two))?;
    if input.read_bit()? {
        let moves = usize::try_from(input.read_number()?).ok()?;
        let position_width = bit_length(residues as u64);
        input.skip(moves.checked_mul((position_width + width) as usize)?)
    } else {
        input.skip(residues.checked_mul(width as usize)?)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn round_trip(values: &[u64]) -> (Vec<u64>, usize) {
        let mut writer = BitWriter::default();
        write_series(&mut writer, values, &mut Vec::new());
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
