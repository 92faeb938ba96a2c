//! `vramd analyze`: the live pipeline (history → analysis → alert engine)
//! over a simulated scenario or a recorded trace, as fast as the CPU
//! allows, printing the alert timeline.
//!
//! Depends on: `source` (simulator, replay), `play`, `history`,
//! `analysis`, `alerts`; its settings come from the wiring
//! (`app::analyze_settings`).
//! Time comes only from the readings, so the timeline is the one the
//! daemon would have produced.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::alerts::AlertsConfig;
use crate::alerts::evaluator::{Evaluator, SourceState};
use crate::alerts::{AlertState, Transition};
use crate::analysis::analyzer::{AnalysisSettings, Analyzer};
use crate::clock::ScaledClock;
use crate::history::{HistoryStore, Sizing};
use crate::model::Timestamp;
use crate::play::{self, ProcessCap, Schedule};
use crate::source::Simulation;
use crate::source::simulator::{GOLDEN_ORIGIN, Simulator, SimulatorError, SimulatorSpec};
use crate::source::trace::{Replay, TraceError, TraceStream};

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
    /// `sampler.max_processes_per_device`, applied as the sampler does.
    pub max_processes_per_device: usize,
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
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AnalyzeReport {
    pub start: String,
    pub duration_seconds: f64,
    pub samples: u64,
    pub evaluations: u64,
    /// Records of a streamed replay that were further out of time order
    /// than `source.replay_reorder_records` holds, played when they came;
    /// absent for a simulation or a trace played in file order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_records: Option<u64>,
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
    store: Arc<HistoryStore>,
    analyzer: Analyzer,
    evaluator: Evaluator,
    evaluation_interval: Duration,
    next_evaluation: Option<Timestamp>,
    start: Option<Timestamp>,
    report: AnalyzeReport,
}

/// Passes judged one by one within one gap in the readings before the
/// rest of it is judged at its last boundary: an hour at the default 5 s.
const MAX_PASSES_PER_GAP: u32 = 720;

impl Pipeline {
    fn new(settings: &AnalyzeSettings) -> Self {
        Self {
            store: Arc::new(HistoryStore::new(settings.sizing)),
            analyzer: Analyzer::new(settings.analysis.clone()),
            evaluator: Evaluator::new(&settings.alerts),
            evaluation_interval: settings.analysis.evaluation_interval,
            next_evaluation: None,
            start: None,
            report: AnalyzeReport::default(),
        }
    }

    /// Evaluates at every interval boundary up to `now`.
    fn advance(&mut self, now: Timestamp) {
        let start = *self.start.get_or_insert(now);
        self.next_evaluation.get_or_insert(start.saturating_add(self.evaluation_interval));
        let mut passes = 0_u32;
        while let Some(at) = self.next_evaluation.filter(|&next| next <= now) {
            self.evaluate(at, start);
            passes += 1;
            let mut next = at.saturating_add(self.evaluation_interval);
            // A gap in the readings: every boundary is judged as the daemon
            // would (pending alerts serve their `for`), up to an hour of
            // them; beyond, nothing new is read until `now`, so the rest are
            // judged once, at the last (a year-long gap is 721 passes, not
            // six million).
            if passes >= MAX_PASSES_PER_GAP {
                let interval = self.evaluation_interval.as_nanos().max(1);
                let passed = now.duration_since(at).map_or(0, |gap| gap.as_nanos() / interval);
                let skip = u32::try_from(passed).unwrap_or(u32::MAX).max(1);
                next = at.saturating_add(self.evaluation_interval.saturating_mul(skip));
            }
            self.next_evaluation = Some(next);
        }
    }

    /// One pass at `at`, its transitions added to the timeline.
    fn evaluate(&mut self, at: Timestamp, start: Timestamp) {
        let snapshot = self.analyzer.analyse(&self.store, at);
        let evaluation = self.evaluator.evaluate(&snapshot, SourceState::Up, at);
        self.report.evaluations += 1;
        for transition in evaluation.transitions {
            let offset = at.duration_since(start).unwrap_or_default().as_secs_f64();
            self.report.timeline.push(TimelineEntry { offset_seconds: offset, transition });
        }
    }

    fn finish(mut self, end: Timestamp) -> AnalyzeReport {
        // Readings after the last boundary were seen by nobody yet: a trace
        // that stops 4 s past an evaluation (the daemon killed just after
        // an OOM) must still show what those 4 s did.
        if let (Some(start), Some(next)) = (self.start, self.next_evaluation) {
            let last_evaluated = next.saturating_sub(self.evaluation_interval);
            if end > last_evaluated && end >= start {
                self.evaluate(end, start);
            }
        }
        let start = self.start.unwrap_or(end);
        self.report.start = start.to_rfc3339();
        self.report.duration_seconds = end.duration_since(start).unwrap_or_default().as_secs_f64();
        self.report
    }
}

/// Plays `simulator` for `duration` at the configured sampling intervals.
pub fn simulate(
    settings: &AnalyzeSettings,
    simulation: &Simulation,
    duration: Duration,
) -> Result<AnalyzeReport, AnalyzeError> {
    let spec = SimulatorSpec {
        scenario: simulation.scenario,
        gpus: simulation.simulator.gpus,
        seed: simulation.simulator.seed,
    };
    let source =
        Simulator::with_origin(spec, ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0), GOLDEN_ORIGIN)?;
    let mut pipeline = Pipeline::new(settings);
    let schedule = Schedule {
        from: GOLDEN_ORIGIN,
        duration,
        fast: settings.fast_interval,
        slow: settings.slow_interval,
    };
    let store = pipeline.store.clone();
    let cap = ProcessCap(settings.max_processes_per_device);
    let played = play::play_simulator(&source, &store, schedule, cap, |at| pipeline.advance(at))
        .map_err(|error| AnalyzeError::Devices(error.to_string()))?;
    pipeline.report.samples = played.samples;
    Ok(pipeline.finish(played.end.unwrap_or(GOLDEN_ORIGIN)))
}

/// Plays a recorded trace in file order. A trace read is a trace played:
/// its lines were checked when it was opened.
pub fn replay(settings: &AnalyzeSettings, trace: &Replay) -> AnalyzeReport {
    let mut pipeline = Pipeline::new(settings);
    let store = pipeline.store.clone();
    let cap = ProcessCap(settings.max_processes_per_device);
    let played = play::play_trace(trace, &store, cap, |at| pipeline.advance(at));
    pipeline.report.samples = played.samples;
    pipeline.finish(played.end.unwrap_or(GOLDEN_ORIGIN))
}

/// Plays a trace as it is read ([`TraceStream`]): the same pipeline as
/// [`replay`], in bounded memory; a problem found part-way through the file
/// is the error, as it would have been on opening it whole.
pub fn replay_stream(
    settings: &AnalyzeSettings,
    mut trace: TraceStream,
) -> Result<AnalyzeReport, AnalyzeError> {
    let mut pipeline = Pipeline::new(settings);
    let store = pipeline.store.clone();
    let cap = ProcessCap(settings.max_processes_per_device);
    let played = play::play_stream(&mut trace, &store, cap, |at| pipeline.advance(at))?;
    pipeline.report.samples = played.samples;
    pipeline.report.late_records = trace.late_records();
    Ok(pipeline.finish(played.end.unwrap_or(GOLDEN_ORIGIN)))
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
    if let Some(late) = report.late_records.filter(|&late| late > 0) {
        out.push_str(&format!(
            "{late} records were further out of time order than source.replay_reorder_records \
             holds and were played late\n"
        ));
    }
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
            row_text(alert)
        ));
    }
    out
}

/// What a row says: the alert's summary while it holds; once it ended,
/// how long it held, not the words it last said (a resolved forecast must
/// not read "runs out of memory in about 26 s").
fn row_text(alert: &crate::alerts::Alert) -> String {
    let span = |from: Timestamp| {
        let held = alert.resolved_at.and_then(|to| to.duration_since(from)).unwrap_or_default();
        humantime::format_duration(Duration::from_secs(held.as_secs())).to_string()
    };
    match (alert.state, alert.firing_since) {
        (AlertState::Resolved, Some(firing_since)) => {
            format!("cleared after firing for {}", span(firing_since))
        }
        (AlertState::Resolved, None) => {
            format!("ended while pending, after {}", span(alert.since))
        }
        _ => alert.summary.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::{Alert, AlertKey};
    use crate::model::RuleId;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_unix_millis(seconds * 1000)
    }

    fn row(
        offset: i64,
        from: Option<AlertState>,
        state: AlertState,
        firing: Option<i64>,
    ) -> TimelineEntry {
        let key = AlertKey { rule: RuleId::ExhaustionForecast, uuid: "GPU-0".into(), pid: None };
        let alert = Alert {
            firing_since: firing.map(at),
            resolved_at: (state == AlertState::Resolved).then(|| at(offset)),
            updated_at: at(offset),
            summary: "GPU 0 runs out of memory in about 26 s".into(),
            ..Alert::for_test(key, state)
        };
        TimelineEntry { offset_seconds: offset as f64, transition: Transition { from, alert } }
    }

    #[test]
    fn an_ended_alert_says_how_long_it_held_not_its_last_forecast() {
        let report = AnalyzeReport {
            timeline: vec![
                row(0, None, AlertState::Pending, None),
                row(40, Some(AlertState::Pending), AlertState::Resolved, None),
                row(60, None, AlertState::Pending, None),
                row(120, Some(AlertState::Pending), AlertState::Firing, Some(120)),
                row(870, Some(AlertState::Firing), AlertState::Resolved, Some(120)),
            ],
            ..AnalyzeReport::default()
        };
        let table = render_table(&report);
        let lines: Vec<&str> = table.lines().skip(2).collect();
        assert!(lines[0].ends_with("runs out of memory in about 26 s"), "{table}");
        assert!(
            lines[1].contains("resolved") && lines[1].ends_with("ended while pending, after 40s"),
            "{table}"
        );
        assert!(
            lines[2].contains("pending"),
            "the return is a new pending row after an end: {table}"
        );
        assert!(lines[4].ends_with("cleared after firing for 12m 30s"), "{table}");
        assert!(!lines[4].contains("runs out"), "{table}");
    }
}
