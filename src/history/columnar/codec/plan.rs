//! How a series is written: the mode, shift and packed width that take
//! the fewest bits, weighed in one walk over the values, then the bits.
//!
//! Depends on its parent (`codec`'s bit writer and layout) alone.

use super::{BitWriter, Mode, bit_length, zigzag};

/// How a varying series would be written in one mode, found without
/// storing its residues: one walk over the values weighs every mode at
/// once, so an encode allocates nothing and sealing small chunks often
/// stays cheap.
#[derive(Clone, Copy)]
pub struct Plan {
    mode: Mode,
    /// The first difference (order 2) or the smallest value (frame).
    base: u64,
    shift: u32,
    /// Bits of the widest residue.
    width: u32,
    /// Bits packed per residue; wider ones are exceptions whose high
    /// bits are stored apart with their positions.
    packed: u32,
    /// Residues written.
    count: usize,
    /// Residues wider than `packed`.
    exceptions: usize,
    /// Bits the whole series takes written, first value included.
    bits: u64,
}

const MODES: [Mode; 3] = [Mode::Delta, Mode::DeltaOfDelta, Mode::Frame];

/// What one walk over a series gathers for one mode: its residues OR-ed
/// (their common trailing zeros), and how many residues have each bit
/// length before the shift. Shifting a residue by `s` of its trailing
/// zeros shortens it, and its zigzag mapping, by exactly `s` bits (for a
/// negative residue, `2|r| - 1` ends in `s` one bits), so lengths taken
/// unshifted and moved down by the shift afterwards are the shifted ones.
struct Tally {
    any: u64,
    /// The residues as mapped (zigzag where signed), unshifted, OR-ed:
    /// its bit length is the longest's.
    mapped_any: u64,
    at_length: [u32; 65],
}

impl Tally {
    fn new() -> Self {
        Self { any: 0, mapped_any: 0, at_length: [0; 65] }
    }

    fn add(&mut self, residue: u64, mapped: u64) {
        self.any |= residue;
        self.mapped_any |= mapped;
        self.at_length[bit_length(mapped) as usize] += 1;
    }
}

impl Plan {
    /// The mode that writes `values` in the fewest bits (the first of
    /// equals, in the order delta, order 2, frame); `None` when every
    /// value is the first (written as that value alone).
    pub fn cheapest(values: &[u64]) -> Option<Self> {
        let (&first, rest) = values.split_first()?;
        if rest.iter().all(|&value| value == first) {
            return None;
        }
        let smallest = rest.iter().copied().min().unwrap_or(first);
        let mut tallies = [Tally::new(), Tally::new(), Tally::new()];
        let [delta_tally, order2_tally, frame_tally] = &mut tallies;
        let mut before = first;
        let mut delta_before = None;
        let mut order2_base = 0;
        for &value in rest {
            let delta = value.wrapping_sub(before);
            before = value;
            delta_tally.add(delta, zigzag(delta as i64));
            match delta_before {
                Some(delta_before) => {
                    let residue = delta.wrapping_sub(delta_before);
                    order2_tally.add(residue, zigzag(residue as i64));
                }
                None => order2_base = delta,
            }
            delta_before = Some(delta);
            let framed = value - smallest;
            frame_tally.add(framed, framed);
        }
        let head = 1 + 7 + u64::from(bit_length(first));
        let bases = [0, order2_base, smallest];
        let counts = [rest.len(), rest.len().saturating_sub(1), rest.len()];
        MODES
            .into_iter()
            .zip(tallies)
            .zip(bases.into_iter().zip(counts))
            .map(|((mode, tally), (base, count))| Self::weigh(mode, base, count, &tally, head))
            .reduce(|best, plan| if plan.bits < best.bits { plan } else { best })
    }

    fn weigh(mode: Mode, base: u64, count: usize, tally: &Tally, head: u64) -> Self {
        let shift = if tally.any == 0 { 0 } else { tally.any.trailing_zeros() };
        // Every nonzero residue is at least `shift` + 1 bits long unshifted.
        let width = bit_length(tally.mapped_any).saturating_sub(shift);
        let shifted_at = |length: u32| -> usize {
            let unshifted = if length == 0 { 0 } else { length + shift };
            tally.at_length.get(unshifted as usize).map_or(0, |&at| at as usize)
        };
        // Packed at the width that costs least once the wider residues are
        // stored apart: a reserved pool's rare jump then no longer widens
        // every residue of the chunk to its size.
        let position_width = bit_length(count as u64);
        let mut wider = 0usize;
        let mut best = (u64::MAX, width, 0);
        for packed in (0..=width).rev() {
            let cost = count as u64 * u64::from(packed)
                + wider as u64 * u64::from(position_width + width - packed)
                + if packed < width { 7 + u64::from(bit_length(wider as u64)) } else { 0 };
            if cost < best.0 {
                best = (cost, packed, wider);
            }
            wider += shifted_at(packed);
        }
        let (body, packed, exceptions) = best;
        let base_bits = if mode == Mode::Delta { 0 } else { 7 + u64::from(bit_length(base)) };
        // Mode, base, shift, width, packed width, then the residues.
        let bits = head + 2 + base_bits + 6 + 7 + 7 + body;
        Self { mode, base, shift, width, packed, count, exceptions, bits }
    }

    /// The residues as written: shifted, and zigzag-mapped where signed.
    fn residues<'v>(&self, values: &'v [u64]) -> impl Iterator<Item = u64> + 'v {
        let (mode, shift, base) = (self.mode, self.shift, self.base);
        // Order 2 starts at the third value, the others at the second.
        let skip = usize::from(mode == Mode::DeltaOfDelta);
        let mut before = values.get(skip).copied().unwrap_or(0);
        let mut delta_before = base;
        values.iter().skip(1 + skip).map(move |&value| {
            let delta = value.wrapping_sub(before);
            before = value;
            match mode {
                Mode::Frame => value.wrapping_sub(base) >> shift,
                Mode::Delta => zigzag((delta as i64) >> shift),
                Mode::DeltaOfDelta => {
                    let residue = delta.wrapping_sub(delta_before);
                    delta_before = delta;
                    zigzag((residue as i64) >> shift)
                }
            }
        })
    }
}

/// Writes a series; its length is not written (the reader knows it).
/// Allocates nothing.
pub fn write_series(out: &mut BitWriter, values: &[u64]) {
    write_planned(out, values, Plan::cheapest(values));
}

/// Writes a series as `plan` (from [`Plan::cheapest`] of these values)
/// says.
pub fn write_planned(out: &mut BitWriter, values: &[u64], plan: Option<Plan>) {
    let Some(&first) = values.first() else { return };
    let Some(plan) = plan else {
        out.write_bit(false);
        out.write_number(first);
        return;
    };
    out.write_bit(true);
    out.write_number(first);
    out.write(plan.mode as u64, 2);
    if plan.mode != Mode::Delta {
        out.write_number(plan.base);
    }
    out.write(u64::from(plan.shift), 6);
    out.write(u64::from(plan.width), 7);
    out.write(u64::from(plan.packed), 7);
    // Packed at full width there can be none.
    if plan.packed < plan.width {
        out.write_number(plan.exceptions as u64);
    }
    for residue in plan.residues(values) {
        out.write(residue, plan.packed);
    }
    if plan.exceptions == 0 {
        return;
    }
    let position_width = bit_length(plan.count as u64);
    let high_width = plan.width - plan.packed;
    for (position, residue) in plan.residues(values).enumerate() {
        if bit_length(residue) > plan.packed {
            out.write(position as u64, position_width);
            out.write(residue >> plan.packed, high_width);
        }
    }
}

/// The bits [`write_planned`] takes for `values` with `plan`.
pub fn planned_bits(values: &[u64], plan: Option<&Plan>) -> u64 {
    match (values.first(), plan) {
        (None, _) => 0,
        (Some(_), Some(plan)) => plan.bits,
        (Some(&first), None) => 1 + 7 + u64::from(bit_length(first)),
    }
}
