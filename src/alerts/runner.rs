//! The daemon's pipeline loop: every `analysis.evaluation_interval` of source
//! time, analyse (publishing the snapshot), evaluate the rules over it
//! (publishing the alerts), hand state changes to the notifiers, and re-send
//! firing alerts every `notify.resend_interval`.
//!
//! Its settings arrive on a watch channel, so a configuration reload takes
//! effect between two passes without losing the alert states or the
//! analysis memo (see [`Evaluator::reconfigure`], [`Analyzer::reconfigure`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::AlertsConfig;
use crate::analysis::analyzer::{AnalysisSettings, Analyzer};
use crate::analysis::snapshot::{AnalysisBoard, AnalysisSnapshot};
use crate::history::HistoryStore;
use crate::model::Timestamp;
use crate::telemetry::Telemetry;

use super::board::AlertBoard;
use super::evaluator::{Evaluation, Evaluator, SourceState};
use super::notify::DispatchHandle;

/// What the loop runs with; a reload sends a new one.
#[derive(Clone)]
pub struct RunnerSettings {
    pub analysis: AnalysisSettings,
    pub alerts: AlertsConfig,
    pub resend_interval: Duration,
    /// The notifiers' queues; `None` without notifiers.
    pub dispatch: Option<DispatchHandle>,
    /// Changes whenever `dispatch` is replaced by other notifiers: the
    /// firing alerts are then sent to them at the next pass.
    pub notifiers_generation: u64,
}

/// Where each stage publishes.
pub struct Boards {
    pub analyses: Arc<AnalysisBoard>,
    pub alerts: Arc<AlertBoard>,
}

/// Runs passes until `cancel`. `speed` is source seconds per real second
/// (simulation and replay); `settings` may change while it runs.
pub async fn run(
    store: Arc<HistoryStore>,
    telemetry: Arc<Telemetry>,
    boards: Boards,
    mut settings: watch::Receiver<Arc<RunnerSettings>>,
    speed: f64,
    cancel: CancellationToken,
) {
    let mut current = settings.borrow_and_update().clone();
    let ticker_for = |current: &RunnerSettings| {
        let period = crate::clock::real_interval(current.analysis.evaluation_interval, speed)
            .max(Duration::from_millis(1));
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        ticker
    };
    let mut ticker = ticker_for(&current);
    let fresh = |current: &RunnerSettings| {
        (Analyzer::new(current.analysis.clone()), Evaluator::new(&current.alerts))
    };
    let mut stages = Some(fresh(&current));
    let mut last_resend: Option<Timestamp> = None;
    let mut dropped_counted = 0u64;
    // False once the sender is gone (the daemon is stopping): the settings
    // then stay as they are.
    let mut watching = true;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            changed = settings.changed(), if watching => {
                if changed.is_err() {
                    watching = false;
                    continue;
                }
                let next = settings.borrow_and_update().clone();
                if let Some((analyzer, evaluator)) = stages.as_mut() {
                    if next.analysis != current.analysis {
                        analyzer.reconfigure(next.analysis.clone());
                    }
                    evaluator.reconfigure(&next.alerts);
                }
                if next.analysis.evaluation_interval != current.analysis.evaluation_interval {
                    ticker = ticker_for(&next);
                }
                if next.notifiers_generation != current.notifiers_generation {
                    last_resend = None;
                }
                current = next;
                continue;
            }
            _ = ticker.tick() => {}
        }
        // Before the first discovery attempt ends, the source is not known
        // to be down.
        let source = if telemetry.source_up() || !store.cycle_completed() {
            SourceState::Up
        } else {
            SourceState::Down
        };
        // Time is data: the newest sample. Only a source that never produced
        // one (no driver) falls back to the wall clock, to date its alert.
        let Some(now) = Analyzer::newest(&store)
            .or_else(|| (source == SourceState::Down).then(crate::clock::wall_now))
        else {
            continue;
        };
        let Some((mut analyzer, mut evaluator)) = stages.take() else { return };
        let store_for_pass = store.clone();
        // Analysis is CPU work (windows of thousands of samples): off the
        // async workers, so requests are never queued behind it.
        let pass = tokio::task::spawn_blocking(move || {
            let snapshot = Arc::new(analyzer.analyse(&store_for_pass, now));
            let evaluation = evaluator.evaluate(&snapshot, source, now);
            (analyzer, evaluator, snapshot, evaluation)
        })
        .await;
        let (analyzer, evaluator, snapshot, evaluation) = match pass {
            Ok(done) => done,
            Err(error) => {
                warn!(error = %error, "analysis or alert evaluation failed; starting from no alerts");
                dropped_counted = 0;
                let (analyzer, evaluator) = fresh(&current);
                let empty = Evaluation { transitions: Vec::new(), alerts: Vec::new() };
                (analyzer, evaluator, Arc::new(AnalysisSnapshot::default()), empty)
            }
        };
        let dropped = evaluator.dropped();
        if dropped > dropped_counted {
            telemetry.count_alerts_dropped(dropped - dropped_counted);
            dropped_counted = dropped;
        }
        boards.analyses.publish(snapshot);
        boards.alerts.publish(evaluation.alerts, &evaluation.transitions);
        if let Some(dispatch) = &current.dispatch {
            dispatch.submit(&evaluation.transitions);
            let due = last_resend.is_none_or(|last| {
                now.duration_since(last).is_some_and(|age| age >= current.resend_interval)
            });
            if due {
                dispatch.resend(&evaluator.firing());
                last_resend = Some(now);
            }
        }
        stages = Some((analyzer, evaluator));
    }
}
