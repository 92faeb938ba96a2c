//! Where a process's figures are present among the samples that list it
//! (all, none, or a bit per sample), and NVML usage stored less the
//! sample's reserved bytes: NVML counts the allocator's pool plus the CUDA
//! context and what the process holds outside the allocator, so while the
//! pool moves, the difference mostly holds still.
//!
//! Depends on: `codec`.

use super::super::codec::{BitReader, BitWriter, Plan, planned_bits, write_planned, write_series};

const PRESENT_NONE: u64 = 0;
const PRESENT_ALL: u64 = 1;
const PRESENT_SOME: u64 = 2;
/// NVML usage only: present in every sample, stored less the sample's
/// reserved bytes (allocator statistics are then present in every sample
/// too).
const PRESENT_ALL_LESS_RESERVED: u64 = 3;
/// The fewest bits usage stored less reserved must save over usage stored
/// for itself (and at least half a bit a sample) before it is.
const LESS_RESERVED_GAIN_BITS: u64 = 64;
/// Usage is weighed less reserved only over this many samples or more: a
/// young chunk is merged into longer ones soon, which weigh it again, so
/// weighing it there would only cost the write path time.
pub(in crate::history::columnar) const LESS_RESERVED_MIN_SAMPLES: usize = 64;

/// Where a figure is present among a process's samples.
pub(in crate::history::columnar) fn write_presence(out: &mut BitWriter, present: &[bool]) {
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

/// Where a figure is present among `count` entries, appended to `present`;
/// gives how many are present.
pub(in crate::history::columnar) fn read_presence_into(
    input: &mut BitReader<'_>,
    count: usize,
    present: &mut Vec<bool>,
) -> Option<usize> {
    let code = input.read(2)?;
    presence_of(code, input, count, present)
}

fn presence_of(
    code: u64,
    input: &mut BitReader<'_>,
    count: usize,
    present: &mut Vec<bool>,
) -> Option<usize> {
    match code {
        PRESENT_ALL => {
            present.extend(std::iter::repeat_n(true, count));
            Some(count)
        }
        PRESENT_NONE => {
            present.extend(std::iter::repeat_n(false, count));
            Some(0)
        }
        PRESENT_SOME => {
            let mut found = 0;
            for _ in 0..count {
                let bit = input.read_bit()?;
                found += usize::from(bit);
                present.push(bit);
            }
            Some(found)
        }
        _ => None,
    }
}

/// Moves past presence bits over `count` entries; gives how many are
/// present.
pub(in crate::history::columnar) fn skip_presence(
    input: &mut BitReader<'_>,
    count: usize,
) -> Option<usize> {
    let code = input.read(2)?;
    skip_presence_of(code, input, count)
}

/// [`skip_presence`] for NVML usage, which may be stored less reserved.
pub(in crate::history::columnar) fn skip_used_presence(
    input: &mut BitReader<'_>,
    count: usize,
) -> Option<usize> {
    match input.read(2)? {
        PRESENT_ALL_LESS_RESERVED => Some(count),
        code => skip_presence_of(code, input, count),
    }
}

fn skip_presence_of(code: u64, input: &mut BitReader<'_>, count: usize) -> Option<usize> {
    match code {
        PRESENT_ALL => Some(count),
        PRESENT_NONE => Some(0),
        PRESENT_SOME => {
            let mut found = 0;
            for _ in 0..count {
                found += usize::from(input.read_bit()?);
            }
            Some(found)
        }
        _ => None,
    }
}

/// Where a process's NVML usage is present (appended to `present`), how
/// many are, and whether the usage is stored less the same sample's
/// reserved bytes.
pub(in crate::history::columnar) fn read_used_presence(
    input: &mut BitReader<'_>,
    count: usize,
    present: &mut Vec<bool>,
) -> Option<(usize, bool)> {
    match input.read(2)? {
        PRESENT_ALL_LESS_RESERVED => {
            present.extend(std::iter::repeat_n(true, count));
            Some((count, true))
        }
        code => Some((presence_of(code, input, count, present)?, false)),
    }
}

/// Makes usage stored less reserved bytes whole again, sample by sample;
/// `None` when the two do not pair up.
pub(in crate::history::columnar) fn add_reserved(used: &mut [u64], reserved: &[u64]) -> Option<()> {
    if used.len() != reserved.len() {
        return None;
    }
    for (used, reserved) in used.iter_mut().zip(reserved) {
        *used = used.wrapping_add(*reserved);
    }
    Some(())
}

/// Writes a process's NVML usage: where it is present, then its series,
/// stored less the sample's reserved bytes where every sample has both and
/// that saves bits enough. NVML counts the allocator's pool plus the CUDA
/// context and what the process holds outside the allocator, so while the
/// pool moves, the difference mostly holds still. `less` is scratch.
pub(in crate::history::columnar) fn write_used(
    out: &mut BitWriter,
    present: &[bool],
    used: &[u64],
    reserved: Option<&[u64]>,
    less: &mut Vec<u64>,
) {
    let every = present.iter().all(|&present| present);
    let long = used.len() >= LESS_RESERVED_MIN_SAMPLES;
    if let Some(reserved) =
        reserved.filter(|reserved| long && every && reserved.len() == used.len())
    {
        less.clear();
        less.extend(used.iter().zip(reserved).map(|(used, reserved)| used.wrapping_sub(*reserved)));
        let (less_plan, used_plan) = (Plan::cheapest(less), Plan::cheapest(used));
        // Only for a real gain: a reader of usage alone then decodes
        // reserved bytes too.
        let gain = planned_bits(used, used_plan.as_ref())
            .saturating_sub(planned_bits(less, less_plan.as_ref()));
        if gain >= LESS_RESERVED_GAIN_BITS.max(used.len() as u64 / 2) {
            out.write(PRESENT_ALL_LESS_RESERVED, 2);
            write_planned(out, less, less_plan);
        } else {
            write_presence(out, present);
            write_planned(out, used, used_plan);
        }
        return;
    }
    write_presence(out, present);
    write_series(out, used);
}
