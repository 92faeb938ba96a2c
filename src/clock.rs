//! Turning elapsed time into sample timestamps.
//!
//! Owns: the only uses of `std::time::Instant` and `SystemTime` outside
//! tests (clippy.toml bans them elsewhere, so time stays injectable).
//! Depends on: `model` only.

#![allow(clippy::disallowed_types)]

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::model::Timestamp;

/// A clock that starts at a chosen origin and advances `speed` times faster
/// than real time, measured on the monotonic clock.
///
/// Anchoring to a monotonic clock means timestamps never go backwards when
/// the system clock is stepped (NTP), which history relies on.
#[derive(Clone, Debug)]
pub struct ScaledClock {
    origin: Timestamp,
    started: Instant,
    speed: f64,
}

impl ScaledClock {
    /// A clock that reads the current wall time and advances in real time.
    pub fn wall() -> Self {
        Self::starting_at(wall_now(), 1.0)
    }

    /// A clock reading `origin` now and advancing `speed` clock seconds per
    /// real second. A non-finite or non-positive speed is treated as 1.0.
    pub fn starting_at(origin: Timestamp, speed: f64) -> Self {
        let speed = if speed.is_finite() && speed > 0.0 { speed } else { 1.0 };
        Self { origin, started: Instant::now(), speed }
    }

    pub fn now(&self) -> Timestamp {
        let elapsed_ms = self.started.elapsed().as_secs_f64() * 1000.0 * self.speed;
        let elapsed_ms =
            if elapsed_ms.is_finite() { elapsed_ms.min(i64::MAX as f64) as i64 } else { 0 };
        Timestamp::from_unix_millis(self.origin.unix_millis().saturating_add(elapsed_ms))
    }

    /// What the clock read when it was made.
    pub fn origin(&self) -> Timestamp {
        self.origin
    }
}

#[cfg(test)]
impl ScaledClock {
    pub fn speed(&self) -> f64 {
        self.speed
    }
}

/// Longest real interval [`real_interval`] returns: far beyond any run, yet
/// small enough that adding it to an `Instant` cannot overflow.
const MAX_REAL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);

/// The real time that `interval` of source time takes at `speed` source
/// seconds per real second (simulation and replay run faster than real
/// time). A non-finite or non-positive speed counts as 1. A tiny speed
/// (`--speed 1e-30`) saturates at a century rather than overflowing.
pub fn real_interval(interval: std::time::Duration, speed: f64) -> std::time::Duration {
    if !(speed.is_finite() && speed > 0.0) {
        return interval;
    }
    std::time::Duration::try_from_secs_f64(interval.as_secs_f64() / speed)
        .map_or(MAX_REAL_INTERVAL, |real| real.min(MAX_REAL_INTERVAL))
}

/// Measures elapsed real time on the monotonic clock (for the probe's
/// latencies and deadlines, which are real durations, not source time).
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    pub fn start() -> Self {
        Self(Instant::now())
    }

    pub fn elapsed(&self) -> std::time::Duration {
        self.0.elapsed()
    }
}

/// The current wall-clock time.
pub fn wall_now() -> Timestamp {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    Timestamp::from_unix_millis(millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_clock_starts_at_origin_and_never_goes_backwards() {
        let origin = Timestamp::from_unix_millis(5_000);
        let clock = ScaledClock::starting_at(origin, 100.0);
        let first = clock.now();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let second = clock.now();
        assert!(first >= origin);
        assert!(second > first, "a 100x clock advances at least 500 ms in 5 ms");
    }

    #[test]
    fn real_interval_divides_by_the_speed_and_never_overflows() {
        let second = std::time::Duration::from_secs(1);
        assert_eq!(real_interval(second, 4.0), std::time::Duration::from_millis(250));
        assert_eq!(real_interval(second, 0.0), second);
        assert_eq!(real_interval(second, 1e-300), MAX_REAL_INTERVAL);
    }

    #[test]
    fn invalid_speed_falls_back_to_real_time() {
        let clock = ScaledClock::starting_at(Timestamp::from_unix_millis(0), f64::NAN);
        assert_eq!(clock.speed(), 1.0);
    }
}
