//! One alert pass: the rules over an analysis snapshot's facts, then the
//! state machine. The same code serves the daemon and `vramd analyze`.
//!
//! Time is the snapshot's (the newest sample), never the wall clock.

use crate::analysis::snapshot::AnalysisSnapshot;
use crate::config::AlertsConfig;
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
    pub at: Timestamp,
    pub transitions: Vec<Transition>,
    pub alerts: Vec<Alert>,
}

pub struct Evaluator {
    config: AlertsConfig,
    engine: Engine,
}

impl Evaluator {
    pub fn new(config: &AlertsConfig) -> Self {
        Self {
            engine: Engine::new(EngineLimits {
                resolved_retention: config.resolved_retention,
                max_alerts: config.max_alerts.get(),
            }),
            config: config.clone(),
        }
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
        let mut observations = Vec::new();
        if source == SourceState::Down {
            observations.push(rules::source_down(&self.config.rules));
        }
        for device in &snapshot.devices {
            rules::observe(&self.config.rules, device, &mut observations);
        }
        let transitions = self.engine.evaluate(now, observations);
        Evaluation { at: now, transitions, alerts: self.engine.alerts().cloned().collect() }
    }
}
