//! A sequential test on the floor: Page's CUSUM of the floor's levels
//! against where the window's floor began, the leak detector's second way
//! to say that a rise stands out of the floor's scatter (rule 2).
//!
//! Owns: the CUSUM statistic. Depends on: nothing (plain numbers in, a
//! number out). Pure; no I/O, no clocks, no allocation, O(points).
//!
//! Why a second test: rule 2 asks the rise fitted over a whole window to
//! stand `min_significance` spreads above the scatter, which only the two
//! ends of the line carry. A leak that began inside the window puts part
//! of it on the ramp: the line is diluted and its spread inflated by the
//! kink, while the next shorter window, fully on the ramp, has narrower
//! buckets whose minima scatter more. The CUSUM adds up, bucket by bucket,
//! how far each floor point stands above the window's starting floor, less
//! an allowance, restarting from zero whenever the sum goes negative: a
//! floor that keeps taking new ground accumulates evidence with every
//! bucket (quadratically in time for a steady leak), scatter around a level
//! does not.
//!
//! Why levels and not the increments between buckets: increments telescope
//! (their sum is the last point less the first), and bucket minima scatter
//! one-sidedly (a bucket that caught no sample near the bottom of the
//! sawtooth stands high), so a CUSUM of increments is carried by single high
//! buckets: measured on the corpus it read 28–41 on flat floors before a
//! leak's onset. Here each point's contribution is clipped at `CLIP`
//! spreads, so no single bucket carries the sum.
//!
//! The existing vetoes still apply on top of it (the caller's rules 1, 3,
//! 4, 5 and the history of returns): a step, a warm-up, memory that came
//! back or a staircase is no leak however large its CUSUM.

/// Largest contribution of one floor point, in spreads: a bucket that
/// caught no sample near the bottom of the sawtooth is one outlier, not
/// evidence.
const CLIP: f64 = 3.0;
/// Fewer points than this say nothing.
const MIN_POINTS: usize = 6;

/// The CUSUM's verdict on a floor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Climb {
    /// The largest CUSUM, in spreads.
    pub cusum: f64,
    /// Index of the first floor point of the run that reached it: where
    /// the climb began.
    pub from: usize,
}

/// The largest CUSUM of `points` (floor points oldest first: seconds,
/// bytes) above `start` (the floor where the window began), in units of
/// `spread` (the floor's scatter), each point's contribution clipped and
/// less `allowance` spreads. `None` with too few points or a spread that
/// is not positive.
pub fn level_cusum(
    points: &[(f64, f64)],
    start: f64,
    spread: f64,
    allowance: f64,
) -> Option<Climb> {
    if points.len() < MIN_POINTS || spread.is_nan() || spread <= 0.0 {
        return None;
    }
    let (mut sum, mut run_from) = (0.0_f64, 0);
    let mut best = Climb { cusum: 0.0, from: 0 };
    for (index, &(_, level)) in points.iter().enumerate() {
        if sum <= 0.0 {
            run_from = index;
        }
        let standing = ((level - start) / spread).clamp(-CLIP, CLIP);
        sum = (sum + standing - allowance).max(0.0);
        if sum > best.cusum {
            best = Climb { cusum: sum, from: run_from };
        }
    }
    best.cusum.is_finite().then_some(best)
}

/// Whether the climb of `points` from index `from` fell back, in its
/// second half, to within `share` of its rise above `start` (`top` being
/// where it stands now): memory that came back is not leaked (rule 4 on
/// the climb itself: the window's own rule 4 reads a leak that began after
/// the window's middle as a return, its second half starting at the old
/// level).
pub fn climb_returns(points: &[(f64, f64)], from: usize, start: f64, top: f64, share: f64) -> bool {
    let climb = points.get(from..).unwrap_or(&[]);
    let second_half = climb.get(climb.len() / 2..).unwrap_or(&[]);
    let low = second_half.iter().map(|&(_, y)| y).fold(f64::INFINITY, f64::min);
    // An empty climb has no low (infinite): nothing came back, but the
    // caller asks for a climb of several points before it gets here.
    low <= start + share * (top - start).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1_048_576.0;

    /// Bucket minima of `level` with up to 100 MiB of one-sided
    /// deterministic scatter above it (xorshift), one per `width` seconds,
    /// and every seventh bucket an outlier 2 GiB high.
    fn floor(count: usize, width: f64, level: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        let mut state = 0x2545_F491_4F6C_DD1D_u64;
        (0..count)
            .map(|index| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let scatter = (state >> 11) as f64 / (1u64 << 53) as f64;
                let outlier = if index % 7 == 3 { 2048.0 * MIB } else { 0.0 };
                let x = (index as f64 + 0.5) * width;
                (x, level(x) + 100.0 * MIB * scatter + outlier)
            })
            .collect()
    }

    #[test]
    fn a_flat_scattered_floor_with_outliers_accumulates_little() {
        let points = floor(24, 75.0, |_| 20_000.0 * MIB);
        let cusum = level_cusum(&points, 20_050.0 * MIB, 30.0 * MIB, 0.5).unwrap().cusum;
        assert!(cusum < 8.0, "{cusum}");
    }

    #[test]
    fn a_climb_from_mid_window_accumulates_past_the_scatter() {
        // 0.25 MiB/s from minute 10 of 30, under 100 MiB of bucket scatter.
        let points = floor(24, 75.0, |x| 20_000.0 * MIB + 0.25 * MIB * (x - 600.0).max(0.0));
        let cusum = level_cusum(&points, 20_050.0 * MIB, 30.0 * MIB, 0.5).unwrap().cusum;
        assert!(cusum > 20.0, "{cusum}");
        let climb = level_cusum(&points, 20_050.0 * MIB, 30.0 * MIB, 0.5).unwrap();
        assert!((6..=12).contains(&climb.from), "began near minute 10: {climb:?}");
        let top = 20_000.0 * MIB + 0.25 * MIB * 1_200.0;
        assert!(!climb_returns(&points, climb.from, 20_050.0 * MIB, top, 0.25));
    }

    #[test]
    fn a_climb_that_came_back_returns() {
        // The same climb, freed back to its start for the last 3 buckets.
        let mut points = floor(24, 75.0, |x| 20_000.0 * MIB + 0.25 * MIB * (x - 600.0).max(0.0));
        for point in points.iter_mut().skip(21) {
            point.1 = 20_000.0 * MIB;
        }
        let climb = level_cusum(&points, 20_050.0 * MIB, 30.0 * MIB, 0.5).unwrap();
        let top = 20_000.0 * MIB + 0.25 * MIB * 1_200.0;
        assert!(climb_returns(&points, climb.from, 20_050.0 * MIB, top, 0.25));
    }

    #[test]
    fn too_few_points_or_no_spread_say_nothing() {
        let points = floor(5, 75.0, |x| MIB * x);
        assert_eq!(level_cusum(&points, 0.0, MIB, 0.5), None);
        let points = floor(24, 75.0, |x| MIB * x);
        assert_eq!(level_cusum(&points, 0.0, 0.0, 0.5), None);
        assert_eq!(level_cusum(&points, 0.0, f64::NAN, 0.5), None);
    }
}
