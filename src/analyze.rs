//! `vramd analyze`: the live pipeline (history → analysis → alert engine)
//! over a simulated scenario or a recorded trace, as fast as the CPU
//! allows, printing the alert timeline.
//!
//! Depends on: `source` (simulator, replay), `history`, `analysis`,
//! `alerts`; its settings come from the wiring (`app::analyze_settings`).
//! Time comes only from the readings, so the timeline is the one the
//! daemon would have produced.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::alerts::evaluator::{Evaluator, SourceState};
use crate::alerts::{AlertState, Transition};
use crate::analysis::analyzer::{AnalysisSettings, Analyzer};
use crate::clock::ScaledClock;
use crate::config::{AlertsConfig, SimulatorConfig};
use crate::history::{DeviceHistory, HistoryStore, Sizing};
use crate::model::Timestamp;
use crate::source::DeviceSource;
use crate::source::simulator::{GOLDEN_ORIGIN, Simulator, SimulatorError, SimulatorSpec};
use crate::source::trace::{Replay, TraceError, TraceRecord};

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("simulator: {0}")]
    Simulator(#[from] SimulatorError),
    #[error("{0}")]
    Trace(#[from] TraceError),
    #[error("listing devices failed: {0}")]
    Devices(String),
    #[error("nothing to analyse: give --simulate SCENARIO or --replay FILE")]
    NoInput,
}

/// What `vramd analyze` runs with: the daemon's sizing, intervals,
/// analysis and rules.
#[derive(Clone, Debug)]
pub struct AnalyzeSettings {
    pub sizing: Sizing,
    pub fast_interval: Duration,
    pub slow_interval: Duration,
    pub analysis: AnalysisSettings,
    pub alerts: AlertsConfig,
}

/// One state change on the timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelineEntry {
    /// Seconds since the first reading.
    pub offset_seconds: f64,
    #[serde(flatten)]
    pub transition: Transition,
}

/// The result of a `vramd analyze` run: its alert timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AnalyzeReport {
    pub start: String,
    pub duration_seconds: f64,
    pub samples: u64,
    pub evaluations: u64,
    pub timeline: Vec<TimelineEntry>,
}

impl AnalyzeReport {
    /// Whether any alert reached `state` (pending counts firing too).
    pub fn reached(&self, state: AlertState) -> bool {
        self.timeline.iter().any(|entry| match state {
            AlertState::Pending => entry.transition.alert.state != AlertState::Resolved,
            other => entry.transition.alert.state == other,
        })
    }
}

struct Pipeline {
    store: HistoryStore,
    analyzer: Analyzer,
    evaluator: Evaluator,
    evaluation_interval: Duration,
    next_evaluation: Option<Timestamp>,
    start: Option<Timestamp>,
    report: AnalyzeReport,
}

impl Pipeline {
    fn new(settings: &AnalyzeSettings) -> Self {
        Self {
            store: HistoryStore::new(settings.sizing),
            analyzer: Analyzer::new(settings.analysis.clone()),
            evaluator: Evaluator::new(&settings.alerts),
            evaluation_interval: settings.alerts.evaluation_interval,
            next_evaluation: None,
            start: None,
            report: AnalyzeReport {
                start: String::new(),
                duration_seconds: 0.0,
                samples: 0,
                evaluations: 0,
                timeline: Vec::new(),
            },
        }
    }

    /// Evaluates at every interval boundary up to `now`.
    fn advance(&mut self, now: Timestamp) {
        let start = *self.start.get_or_insert(now);
        let next =
            self.next_evaluation.get_or_insert(start.saturating_add(self.evaluation_interval));
        while *next <= now {
            let at = *next;
            let snapshot = self.analyzer.analyse(&self.store, at);
            let evaluation = self.evaluator.evaluate(&snapshot, SourceState::Up, at);
            self.report.evaluations += 1;
            for transition in evaluation.transitions {
                let offset = at.duration_since(start).unwrap_or_default().as_secs_f64();
                self.report.timeline.push(TimelineEntry { offset_seconds: offset, transition });
            }
            *next = at.saturating_add(self.evaluation_interval);
        }
    }

    fn finish(mut self, end: Timestamp) -> AnalyzeReport {
        let start = self.start.unwrap_or(end);
        self.report.start = start.to_rfc3339();
        self.report.duration_seconds = end.duration_since(start).unwrap_or_default().as_secs_f64();
        self.report
    }
}

fn record_fast(
    device: &DeviceHistory,
    result: Result<crate::model::FastReading, crate::source::SourceError>,
) {
    match result {
        Ok(reading) => {
            // An out-of-order reading cannot occur here: time only advances.
            let _ = device.record_fast(reading);
        }
        Err(error) => device.record_fast_failure(error.kind(), error.to_string()),
    }
}

fn record_slow(
    device: &DeviceHistory,
    result: Result<crate::model::SlowReading, crate::source::SourceError>,
) {
    match result {
        Ok(reading) => {
            let _ = device.record_slow(reading, 0);
        }
        Err(error) => device.record_slow_failure(error.kind(), error.to_string()),
    }
}

/// Plays `simulator` for `duration` at the configured sampling intervals.
pub fn simulate(
    settings: &AnalyzeSettings,
    simulator: &SimulatorConfig,
    duration: Duration,
) -> Result<AnalyzeReport, AnalyzeError> {
    let spec =
        SimulatorSpec { scenario: simulator.scenario, gpus: simulator.gpus, seed: simulator.seed };
    let source =
        Simulator::with_origin(spec, ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0), GOLDEN_ORIGIN)?;
    let mut pipeline = Pipeline::new(settings);
    let infos = source.devices().map_err(|error| AnalyzeError::Devices(error.to_string()))?;
    let devices = pipeline.store.set_devices(infos);
    let fast = settings.fast_interval;
    let slow_every = (settings.slow_interval.as_nanos() / fast.as_nanos().max(1)).max(1) as u64;
    let steps = (duration.as_nanos() / fast.as_nanos().max(1)) as u64;
    let mut at = GOLDEN_ORIGIN;
    for step in 0..=steps {
        at = GOLDEN_ORIGIN
            .saturating_add(fast.saturating_mul(u32::try_from(step).unwrap_or(u32::MAX)));
        for device in &devices {
            let index = device.info().index;
            record_fast(device, source.fast_at(index, at));
            pipeline.report.samples += 1;
            if step % slow_every == 0 {
                record_slow(device, source.slow_at(index, at));
                pipeline.report.samples += 1;
            }
        }
        pipeline.advance(at);
    }
    Ok(pipeline.finish(at))
}

/// Plays a recorded trace in file order.
pub fn replay(settings: &AnalyzeSettings, trace: &Replay) -> Result<AnalyzeReport, AnalyzeError> {
    let mut pipeline = Pipeline::new(settings);
    let devices = pipeline.store.set_devices(trace.header().devices.clone());
    let by_index: BTreeMap<u32, &std::sync::Arc<DeviceHistory>> =
        devices.iter().map(|device| (device.info().index, device)).collect();
    let mut end = None;
    for record in trace.records() {
        let Some(device) = by_index.get(&record.device()) else { continue };
        match record {
            TraceRecord::Fast { reading, .. } => record_fast(device, Ok(reading.clone())),
            TraceRecord::Slow { reading, .. } => record_slow(device, Ok(reading.as_ref().clone())),
            TraceRecord::Error { tier, error, .. } => match tier {
                crate::source::Tier::Fast => {
                    device.record_fast_failure(error.kind(), error.to_string())
                }
                crate::source::Tier::Slow => {
                    device.record_slow_failure(error.kind(), error.to_string())
                }
            },
            // As the daemon's probe scheduler records them, so the probe
            // rules judge a replay as they judged the recording.
            TraceRecord::Probe { outcome, .. } => {
                let at = device.newest_at().unwrap_or(GOLDEN_ORIGIN);
                device.update_probe(|state| {
                    state.scheduled = true;
                    match outcome {
                        Ok(reading) => state.record_success(reading.as_ref().clone()),
                        Err(failure) => state.record_failure(at, failure.clone()),
                    }
                });
            }
        }
        pipeline.report.samples += 1;
        if let Some(at) = record.at() {
            end = Some(end.map_or(at, |end: Timestamp| end.max(at)));
            pipeline.advance(at);
        }
    }
    Ok(pipeline.finish(end.unwrap_or(GOLDEN_ORIGIN)))
}

/// A readable table of the timeline.
pub fn render_table(report: &AnalyzeReport) -> String {
    let mut out = format!(
        "analysed {} samples over {} ({} evaluations) from {}\n",
        report.samples,
        humantime::format_duration(Duration::from_secs(report.duration_seconds as u64)),
        report.evaluations,
        report.start
    );
    if report.timeline.is_empty() {
        out.push_str("no alerts\n");
        return out;
    }
    out.push_str(&format!(
        "{:>9}  {:<9} {:<9} {:<30} {:>4}  {}\n",
        "time", "state", "severity", "rule", "gpu", "summary"
    ));
    for entry in &report.timeline {
        let alert = &entry.transition.alert;
        let seconds = entry.offset_seconds as u64;
        out.push_str(&format!(
            "{:>3}:{:02}:{:02}  {:<9} {:<9} {:<30} {:>4}  {}\n",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60,
            alert.state.as_str(),
            alert.severity.as_str(),
            alert.key.rule,
            alert.gpu,
            alert.summary
        ));
    }
    out
}
