//! Whether a device is still being sampled, in real (wall-clock) time: what
//! `/readyz` and `vramd_sampler_last_success_timestamp_seconds` report.
//!
//! Owns: per tier, the wall time by which the sampler promised its next
//! step (a reading stored, an error the driver answered, or a deliberate
//! back-off), the wall time of the last stored reading, and whether the
//! tier has ended (a replay ran out). The sampler writes the promise, since
//! it alone knows the interval and the call deadline; readers only compare
//! it with now. A call stuck in the driver, or a sampler task that died,
//! keeps no promise, and so turns the device stale. Lock-free: atomics only.
//! Depends on `model`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use crate::model::{Tier, Timestamp};

/// `i64::MIN` stands for "never" inside the atomics; never seen outside.
const NEVER: i64 = i64::MIN;

#[derive(Debug)]
struct TierProgress {
    due_by_ms: AtomicI64,
    last_success_ms: AtomicI64,
    ended: AtomicBool,
}

impl Default for TierProgress {
    fn default() -> Self {
        Self {
            due_by_ms: AtomicI64::new(NEVER),
            last_success_ms: AtomicI64::new(NEVER),
            ended: AtomicBool::new(false),
        }
    }
}

/// One device's sampling progress, both tiers.
#[derive(Debug, Default)]
pub struct SamplingProgress {
    fast: TierProgress,
    slow: TierProgress,
}

/// A tier that has not kept its promise: how long it is overdue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stale {
    pub tier: Tier,
    /// Time since the last stored reading, when there was one.
    pub since_success: Option<Duration>,
    /// How far past its promised next step the tier is.
    pub overdue: Duration,
}

impl SamplingProgress {
    fn tier(&self, tier: Tier) -> &TierProgress {
        match tier {
            Tier::Fast => &self.fast,
            Tier::Slow => &self.slow,
        }
    }

    /// The tier completed a step at `now` and promises the next by `due_by`.
    pub fn stepped(&self, tier: Tier, due_by: Timestamp) {
        self.tier(tier).due_by_ms.store(due_by.unix_millis(), Ordering::Release);
    }

    /// The tier stored a reading at wall time `now`.
    pub fn succeeded(&self, tier: Tier, now: Timestamp) {
        self.tier(tier).last_success_ms.store(now.unix_millis(), Ordering::Release);
    }

    /// The tier has nothing more to read (a replayed trace ended): it is
    /// finished, not stale.
    pub fn ended(&self, tier: Tier) {
        self.tier(tier).ended.store(true, Ordering::Release);
    }

    /// Wall time of the tier's last stored reading.
    pub fn last_success(&self, tier: Tier) -> Option<Timestamp> {
        let millis = self.tier(tier).last_success_ms.load(Ordering::Acquire);
        (millis != NEVER).then(|| Timestamp::from_unix_millis(millis))
    }

    /// The tiers that have broken their promise by `now`.
    pub fn stale(&self, now: Timestamp) -> Vec<Stale> {
        Tier::ALL
            .into_iter()
            .filter_map(|tier| {
                let progress = self.tier(tier);
                if progress.ended.load(Ordering::Acquire) {
                    return None;
                }
                // No promise: no sampler runs this device (a store filled
                // offline); the daemon's sampler promises before its first
                // cycle completes, so this never hides a live device.
                let due_by = progress.due_by_ms.load(Ordering::Acquire);
                if due_by == NEVER || now.unix_millis() <= due_by {
                    return None;
                }
                let due_by = Timestamp::from_unix_millis(due_by);
                Some(Stale {
                    tier,
                    since_success: self.last_success(tier).and_then(|at| now.duration_since(at)),
                    overdue: now.duration_since(due_by).unwrap_or_default(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_unix_millis(seconds * 1000)
    }

    #[test]
    fn a_tier_is_stale_once_past_its_promise_and_never_when_ended() {
        let progress = SamplingProgress::default();
        assert!(progress.stale(at(0)).is_empty(), "no promise: no sampler, nothing overdue");
        progress.stepped(Tier::Fast, at(10));
        progress.succeeded(Tier::Fast, at(8));
        progress.stepped(Tier::Slow, at(12));
        assert!(progress.stale(at(10)).is_empty());
        let stale = progress.stale(at(11));
        assert_eq!(
            stale,
            vec![Stale {
                tier: Tier::Fast,
                since_success: Some(Duration::from_secs(3)),
                overdue: Duration::from_secs(1),
            }]
        );
        assert_eq!(progress.last_success(Tier::Fast), Some(at(8)));
        assert_eq!(progress.last_success(Tier::Slow), None);
        progress.ended(Tier::Fast);
        progress.ended(Tier::Slow);
        assert!(progress.stale(at(100)).is_empty());
    }
}
