//! One alert pass: the rules over an analysis snapshot's facts, then the
//! state machine. The same code serves the daemon and `vramd analyze`.
//!
//! Time is the snapshot's (the newest sample), never the wall clock.

use super::AlertsConfig;
use crate::analysis::snapshot::AnalysisSnapshot;
use crate::model::Timestamp;

use super::engine::{Engine, EngineLimits};
use super::model::{Alert, Transition};
use super::rules;

/// Whether the device source can list devices at all (NVML loaded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceState {
    Up,
    /// No device can be listed: the `device_lost` alert for the source.
    Down,
}

/// What one pass produced.
pub struct Evaluation {
    pub transitions: Vec<Transition>,
    pub alerts: Vec<Alert>,
}

pub struct Evaluator {
    config: AlertsConfig,
    engine: Engine,
}

impl Evaluator {
    pub fn new(config: &AlertsConfig) -> Self {
        Self { engine: Engine::new(limits(config)), config: config.clone() }
    }

    /// Judges with `config` from the next pass on (a configuration reload),
    /// keeping every alert's state and timeline: an alert whose rule still
    /// holds stays pending or firing without a new notification, one whose
    /// rule was disabled or whose value is now clear resolves as usual.
    pub fn reconfigure(&mut self, config: &AlertsConfig) {
        self.engine.set_limits(limits(config));
        self.config = config.clone();
    }

    pub fn firing(&self) -> Vec<Alert> {
        self.engine.firing().cloned().collect()
    }

    /// New alerts the engine could not keep, since this evaluator was made.
    pub fn dropped(&self) -> u64 {
        self.engine.dropped()
    }

    /// Runs every rule over `snapshot`, at `now` (the snapshot's time, or
    /// the wall clock when the source never produced a sample).
    pub fn evaluate(
        &mut self,
        snapshot: &AnalysisSnapshot,
        source: SourceState,
        now: Timestamp,
    ) -> Evaluation {
        let mut observations = rules::Observations::against(self.engine.alerts());
        if source == SourceState::Down {
            observations.push(rules::source_down(&self.config.rules));
        }
        for device in &snapshot.devices {
            rules::observe(&self.config.rules, device, &mut observations);
        }
        let observations = observations.into_vec();
        let transitions = self.engine.evaluate(now, observations);
        Evaluation { transitions, alerts: self.engine.alerts().cloned().collect() }
    }
}

fn limits(config: &AlertsConfig) -> EngineLimits {
    EngineLimits {
        resolved_retention: config.resolved_retention,
        max_alerts: config.max_alerts.get(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::alerts::AlertState;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_unix_millis(1_767_225_600_000 + seconds * 1000)
    }

    /// One pass with NVML down: the `device_lost` alert of the source.
    fn down(evaluator: &mut Evaluator, seconds: i64) -> Evaluation {
        evaluator.evaluate(&AnalysisSnapshot::default(), SourceState::Down, at(seconds))
    }

    #[test]
    fn a_reload_keeps_a_firing_alert_firing_without_a_new_notification() {
        let mut config = crate::alerts::AlertsConfig::default();
        config.rules.device_lost.for_duration = Duration::ZERO;
        let mut evaluator = Evaluator::new(&config);
        let fired = down(&mut evaluator, 0);
        assert_eq!(fired.transitions.len(), 1);
        // Another rule's threshold changes: this alert is untouched.
        config.rules.memory_high.threshold = 0.5;
        evaluator.reconfigure(&config);
        let after = down(&mut evaluator, 5);
        assert!(after.transitions.is_empty(), "{:?}", after.transitions);
        assert_eq!(after.alerts[0].state, AlertState::Firing);
        assert_eq!(after.alerts[0].firing_since, Some(at(0)), "its timeline is kept");
        // Its own threshold moves past the value: it resolves, once.
        config.rules.device_lost.threshold = 2.0;
        config.rules.device_lost.clear = 1.5;
        evaluator.reconfigure(&config);
        let resolved = down(&mut evaluator, 10);
        assert_eq!(resolved.transitions.len(), 1);
        assert_eq!(resolved.transitions[0].alert.state, AlertState::Resolved);
    }

    #[test]
    fn a_shorter_for_counts_from_when_the_condition_started() {
        let mut config = crate::alerts::AlertsConfig::default();
        config.rules.device_lost.for_duration = Duration::from_secs(60);
        let mut evaluator = Evaluator::new(&config);
        assert_eq!(down(&mut evaluator, 0).alerts[0].state, AlertState::Pending);
        config.rules.device_lost.for_duration = Duration::from_secs(10);
        evaluator.reconfigure(&config);
        let fired = down(&mut evaluator, 15);
        assert_eq!(fired.alerts[0].state, AlertState::Firing);
        assert_eq!(fired.alerts[0].since, at(0), "the pending time already served counts");
    }
}
