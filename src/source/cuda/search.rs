//! The bounded search for the largest block the driver will allocate, and
//! the median of timed samples. Pure logic over a [`TrialAllocator`], so it
//! is tested without a driver.
//!
//! The search never asks for more than the driver's current free memory
//! minus the margin (re-read before every attempt, since workloads keep
//! allocating), releases every block at once, and stops at a time budget
//! or an attempt limit with its best answer so far.

use std::time::Duration;

use crate::model::{HeadroomSearch, HeadroomStop};

/// Allocation granularity: large `cuMemAlloc` blocks come in 2 MiB pages,
/// so the search stops once its bounds are this close.
pub const GRANULARITY: u64 = 2 << 20;
/// Backstop on attempts; bisection over 1 TiB at 2 MiB needs 20.
pub const MAX_ATTEMPTS: u32 = 64;

/// What the search needs from the driver.
pub trait TrialAllocator {
    type Error;
    /// Free memory per the driver now.
    fn free_bytes(&mut self) -> Result<u64, Self::Error>;
    /// Allocates `bytes` and releases it at once: `Ok(true)` when it fit,
    /// `Ok(false)` when the driver was out of memory.
    fn try_block(&mut self, bytes: u64) -> Result<bool, Self::Error>;
}

/// The search's bounds.
#[derive(Clone, Copy, Debug)]
pub struct SearchLimits {
    pub margin_bytes: u64,
    pub time_budget: Duration,
    pub max_attempts: u32,
}

fn round_down(bytes: u64) -> u64 {
    bytes / GRANULARITY * GRANULARITY
}

/// Bisects between the largest block known to fit and the smallest known
/// not to, starting with the largest block the margin allows.
pub fn search_headroom<A: TrialAllocator>(
    allocator: &mut A,
    limits: &SearchLimits,
    elapsed: &dyn Fn() -> Duration,
) -> Result<HeadroomSearch, A::Error> {
    let mut best = 0u64;
    let mut failed_at: Option<u64> = None;
    let mut attempts = 0u32;
    let stopped = loop {
        if failed_at.is_some_and(|failed| failed.saturating_sub(best) <= GRANULARITY) {
            break HeadroomStop::Converged;
        }
        if attempts >= limits.max_attempts {
            break HeadroomStop::MaxAttempts;
        }
        if elapsed() >= limits.time_budget {
            break HeadroomStop::TimeBudget;
        }
        let ceiling = round_down(allocator.free_bytes()?.saturating_sub(limits.margin_bytes));
        let wanted = match failed_at {
            None => ceiling,
            Some(failed) => round_down(best + (failed - best) / 2),
        };
        let candidate = wanted.min(ceiling);
        if candidate <= best {
            // The margin, not the driver, bounds the answer now.
            break HeadroomStop::Margin;
        }
        attempts += 1;
        if allocator.try_block(candidate)? {
            best = candidate;
            if candidate == ceiling {
                break HeadroomStop::Margin;
            }
        } else {
            failed_at = Some(candidate);
        }
    };
    Ok(HeadroomSearch {
        largest_block_bytes: best,
        margin_bytes: limits.margin_bytes,
        attempts,
        stopped,
        seconds: elapsed().as_secs_f64(),
    })
}

/// The median of `samples` (the mean of the middle two for an even count);
/// `None` for none.
pub fn median(samples: &mut [f64]) -> Option<f64> {
    samples.sort_by(f64::total_cmp);
    let middle = samples.len() / 2;
    let upper = *samples.get(middle)?;
    Some(if samples.len().is_multiple_of(2) { (samples[middle - 1] + upper) / 2.0 } else { upper })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// A device with `free` bytes on which no block above `largest` fits
    /// (fragmented address space, or another limit), and whose free memory
    /// drops by `drain` per attempt (a workload allocating meanwhile).
    struct FakeDevice {
        free: u64,
        largest: u64,
        drain: u64,
        tried: Vec<u64>,
        lowest_free_seen: u64,
    }

    impl TrialAllocator for FakeDevice {
        type Error = String;
        fn free_bytes(&mut self) -> Result<u64, String> {
            Ok(self.free)
        }
        fn try_block(&mut self, bytes: u64) -> Result<bool, String> {
            self.tried.push(bytes);
            let fits = bytes <= self.largest && bytes <= self.free;
            if fits {
                self.lowest_free_seen = self.lowest_free_seen.min(self.free - bytes);
            }
            self.free = self.free.saturating_sub(self.drain);
            Ok(fits)
        }
    }

    fn device(free: u64, largest: u64) -> FakeDevice {
        FakeDevice { free, largest, drain: 0, tried: Vec::new(), lowest_free_seen: u64::MAX }
    }

    fn limits() -> SearchLimits {
        SearchLimits {
            margin_bytes: GIB,
            time_budget: Duration::from_secs(10),
            max_attempts: MAX_ATTEMPTS,
        }
    }

    fn no_time() -> Duration {
        Duration::ZERO
    }

    #[test]
    fn headroom_is_the_margin_bound_when_everything_fits() {
        let mut gpu = device(40 * GIB, u64::MAX);
        let search = search_headroom(&mut gpu, &limits(), &no_time).unwrap();
        assert_eq!(search.largest_block_bytes, 39 * GIB);
        assert_eq!(search.stopped, HeadroomStop::Margin);
        assert_eq!(search.attempts, 1);
        assert_eq!(gpu.lowest_free_seen, GIB);
    }

    #[test]
    fn headroom_bisects_to_the_driver_limit_within_the_granularity() {
        let limit = 13 * GIB + 345 * MIB;
        let mut gpu = device(40 * GIB, limit);
        let search = search_headroom(&mut gpu, &limits(), &no_time).unwrap();
        assert_eq!(search.stopped, HeadroomStop::Converged);
        assert!(search.largest_block_bytes <= limit);
        assert!(limit - search.largest_block_bytes < GRANULARITY, "{search:?}");
        assert!(search.attempts <= 16, "{search:?}");
        // Never closer than the margin to zero free memory.
        assert!(gpu.lowest_free_seen >= GIB);
        assert!(gpu.tried.iter().all(|bytes| bytes % GRANULARITY == 0));
    }

    #[test]
    fn headroom_is_zero_without_trying_when_free_memory_is_within_the_margin() {
        let mut gpu = device(GIB + MIB, u64::MAX);
        let search = search_headroom(&mut gpu, &limits(), &no_time).unwrap();
        assert_eq!((search.largest_block_bytes, search.attempts), (0, 0));
        assert_eq!(search.stopped, HeadroomStop::Margin);
        assert!(gpu.tried.is_empty());
    }

    #[test]
    fn headroom_follows_free_memory_down_while_a_workload_allocates() {
        let mut gpu = device(40 * GIB, 20 * GIB);
        gpu.drain = 3 * GIB;
        let search = search_headroom(&mut gpu, &limits(), &no_time).unwrap();
        assert!(gpu.lowest_free_seen >= GIB, "went below the margin");
        assert!(search.largest_block_bytes <= 20 * GIB);
        // Every attempt fit under the margin at the time it was made.
        let mut free = 40 * GIB;
        for bytes in &gpu.tried {
            assert!(*bytes + GIB <= free, "{bytes} tried with {free} free");
            free -= 3 * GIB;
        }
    }

    #[test]
    fn headroom_stops_at_the_time_budget_and_the_attempt_limit_with_a_lower_bound() {
        let clock = Cell::new(Duration::ZERO);
        let ticking = || {
            clock.set(clock.get() + Duration::from_secs(1));
            clock.get()
        };
        let limit = 7 * GIB + 3 * MIB;
        let mut gpu = device(80 * GIB, limit);
        let budget = SearchLimits { time_budget: Duration::from_secs(4), ..limits() };
        let search = search_headroom(&mut gpu, &budget, &ticking).unwrap();
        assert_eq!(search.stopped, HeadroomStop::TimeBudget);
        assert!(search.attempts <= 4 && search.largest_block_bytes <= limit);

        let mut gpu = device(80 * GIB, limit);
        let few = SearchLimits { max_attempts: 3, ..limits() };
        let search = search_headroom(&mut gpu, &few, &no_time).unwrap();
        assert_eq!((search.stopped, search.attempts), (HeadroomStop::MaxAttempts, 3));
        assert!(search.largest_block_bytes <= limit);
    }

    #[test]
    fn headroom_passes_driver_errors_through() {
        struct Broken;
        impl TrialAllocator for Broken {
            type Error = &'static str;
            fn free_bytes(&mut self) -> Result<u64, &'static str> {
                Ok(10 * GIB)
            }
            fn try_block(&mut self, _: u64) -> Result<bool, &'static str> {
                Err("CUDA_ERROR_ILLEGAL_ADDRESS")
            }
        }
        assert_eq!(
            search_headroom(&mut Broken, &limits(), &no_time),
            Err("CUDA_ERROR_ILLEGAL_ADDRESS")
        );
    }

    #[test]
    fn median_of_odd_even_and_empty_samples() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }
}
