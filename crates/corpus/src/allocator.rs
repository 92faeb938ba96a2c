//! How PyTorch's caching allocator turns live tensors into reserved
//! segments, as far as the corpus needs it.
//!
//! Owns: the segment rounding rules and the warm-up of the high-water mark.
//! Depends on nothing outside the simulator's `devices`.
//!
//! The rules (PyTorch's `CUDACachingAllocator`): requests under 1 MiB are
//! served from 2 MiB blocks, requests of 1–10 MiB from 20 MiB segments,
//! larger ones get a segment of their own rounded up to 2 MiB. Without
//! `empty_cache()` nothing is returned, so reserved is the high-water mark
//! of what the steps needed: a staircase that climbs while new batch shapes
//! set new peaks and levels off once they stop.

use vramd::source::simulator::devices::MIB;

const SMALL_BLOCK: u64 = 2 * MIB;
const MEDIUM_SEGMENT: u64 = 20 * MIB;
const LARGE_ROUND: u64 = 2 * MIB;

/// How a job's transient memory splits by request size (shares of bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct SizeMix {
    /// Share in requests under 1 MiB.
    pub small: f64,
    /// Share in 1–10 MiB requests.
    pub medium: f64,
}

fn round_up(bytes: u64, unit: u64) -> u64 {
    bytes.div_ceil(unit).saturating_mul(unit)
}

/// Segments reserved to hold `bytes` of requests of this mix.
pub(super) fn segments_for(bytes: u64, mix: SizeMix) -> u64 {
    let share = |fraction: f64| (bytes as f64 * fraction.clamp(0.0, 1.0)) as u64;
    let small = share(mix.small);
    let medium = share(mix.medium);
    let large = bytes.saturating_sub(small).saturating_sub(medium);
    round_up(small, SMALL_BLOCK)
        .saturating_add(round_up(medium, MEDIUM_SEGMENT))
        .saturating_add(round_up(large, LARGE_ROUND))
}

/// The share of its eventual peak the high-water mark has reached `age_s`
/// into the job, in stairs of `1 / stairs`: new batch shapes set new peaks
/// ever more rarely, so it climbs fast and then levels off.
pub(super) fn warm_share(age_s: f64, tau_s: f64, stairs: u32) -> f64 {
    let smooth = 1.0 - (-age_s.max(0.0) / tau_s.max(1.0)).exp();
    let stairs = f64::from(stairs.max(1));
    (smooth * stairs).ceil() / stairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_follow_the_size_rules() {
        let mix = SizeMix { small: 0.0, medium: 1.0 };
        // 1–10 MiB requests take whole 20 MiB segments.
        assert_eq!(segments_for(21 * MIB, mix), 40 * MIB);
        let mix = SizeMix { small: 1.0, medium: 0.0 };
        assert_eq!(segments_for(3 * MIB, mix), 4 * MIB);
        let mix = SizeMix { small: 0.0, medium: 0.0 };
        assert_eq!(segments_for(101 * MIB, mix), 102 * MIB);
        assert!(segments_for(5_000 * MIB, SizeMix { small: 0.1, medium: 0.3 }) >= 5_000 * MIB);
    }

    #[test]
    fn the_high_water_mark_climbs_in_stairs_and_levels_off() {
        let shares: Vec<f64> = (0..40).map(|m| warm_share(f64::from(m) * 30.0, 90.0, 8)).collect();
        assert!(shares.windows(2).all(|pair| pair[1] >= pair[0]));
        assert_eq!(shares[39], 1.0);
        assert!(shares[1] < 1.0);
    }
}
