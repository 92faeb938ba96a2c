//! What is known about one device's CUDA probes: the latest reading, the
//! latest attempt's outcome, and counts of runs, failures and skips.
//!
//! Only the newest reading is kept, not a series: probes run minutes apart,
//! and Prometheus keeps their history from the scrapes.

use serde::Serialize;

use crate::model::{ProbeFailure, ProbeFailureKind, ProbeReading, ProbeSkipReason, Timestamp};

/// How the latest attempt to probe a device ended.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ProbeAttempt {
    Succeeded,
    Failed { kind: ProbeFailureKind, message: String },
    Skipped { reason: ProbeSkipReason },
}

/// The probe state of one device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbeState {
    /// The probe scheduler covers this device (the probe is enabled and
    /// the source can be probed); nothing else here is meaningful without.
    pub scheduled: bool,
    /// The newest successful reading.
    pub latest: Option<ProbeReading>,
    /// How the latest attempt ended, and when (source time).
    pub last_attempt: Option<(Timestamp, ProbeAttempt)>,
    /// Probes started (succeeded or failed; skips are not runs).
    pub runs: u64,
    /// Failures by kind, indexed by [`ProbeFailureKind::position`].
    pub failures: [u64; ProbeFailureKind::ALL.len()],
    /// Skips by reason, indexed by [`ProbeSkipReason::position`].
    pub skipped: [u64; ProbeSkipReason::ALL.len()],
    /// Failures since the last success; drives the backoff.
    pub consecutive_failures: u32,
}

impl ProbeState {
    pub fn record_success(&mut self, reading: ProbeReading) {
        self.runs = self.runs.saturating_add(1);
        self.consecutive_failures = 0;
        self.last_attempt = Some((reading.at, ProbeAttempt::Succeeded));
        self.latest = Some(reading);
    }

    pub fn record_failure(&mut self, at: Timestamp, failure: ProbeFailure) {
        self.runs = self.runs.saturating_add(1);
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let count = &mut self.failures[failure.kind.position()];
        *count = count.saturating_add(1);
        self.last_attempt =
            Some((at, ProbeAttempt::Failed { kind: failure.kind, message: failure.message }));
    }

    pub fn record_skip(&mut self, at: Timestamp, reason: ProbeSkipReason) {
        let count = &mut self.skipped[reason.position()];
        *count = count.saturating_add(1);
        self.last_attempt = Some((at, ProbeAttempt::Skipped { reason }));
    }

    /// Failures of one kind so far.
    pub fn failures_of(&self, kind: ProbeFailureKind) -> u64 {
        self.failures[kind.position()]
    }

    /// Skips for one reason so far.
    pub fn skipped_for(&self, reason: ProbeSkipReason) -> u64 {
        self.skipped[reason.position()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at: i64) -> ProbeReading {
        ProbeReading {
            at: Timestamp::from_unix_millis(at),
            cuda_free_bytes: 1 << 30,
            cuda_total_bytes: 2 << 30,
            nvml_free_bytes: None,
            context_create_seconds: 0.1,
            context_bytes: None,
            alloc_block_bytes: 1 << 20,
            alloc_latency_seconds: None,
            free_latency_seconds: None,
            alloc_samples: 0,
            headroom: None,
            duration_seconds: 0.2,
        }
    }

    #[test]
    fn probe_state_counts_runs_failures_and_skips_and_keeps_the_last_success() {
        let mut state = ProbeState::default();
        state.record_skip(Timestamp::from_unix_millis(1), ProbeSkipReason::LowFree);
        assert_eq!(state.runs, 0);
        assert_eq!(state.skipped_for(ProbeSkipReason::LowFree), 1);
        state.record_success(reading(2));
        let failure = ProbeFailure::new(ProbeFailureKind::Timeout, "killed");
        state.record_failure(Timestamp::from_unix_millis(3), failure.clone());
        state.record_failure(Timestamp::from_unix_millis(4), failure);
        assert_eq!(state.runs, 3);
        assert_eq!(state.failures_of(ProbeFailureKind::Timeout), 2);
        assert_eq!(state.failures_of(ProbeFailureKind::Crashed), 0);
        assert_eq!(state.consecutive_failures, 2);
        // A failure never hides the last good reading; its age tells.
        assert_eq!(state.latest.as_ref().map(|reading| reading.at.unix_millis()), Some(2));
        assert!(matches!(
            state.last_attempt,
            Some((_, ProbeAttempt::Failed { kind: ProbeFailureKind::Timeout, .. }))
        ));
        state.record_success(reading(5));
        assert_eq!(state.consecutive_failures, 0);
        assert_eq!(
            state.last_attempt,
            Some((Timestamp::from_unix_millis(5), ProbeAttempt::Succeeded))
        );
    }
}
