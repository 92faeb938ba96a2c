//! The daemon's alert loop: each analysis pass the analysis loop hands on
//! (`analysis::runner`) is judged by the rules (off the async workers),
//! the alerts are published, state changes go to the notifiers, and firing
//! alerts are re-sent every `notify.resend_interval`. It schedules nothing
//! of its own: a pass arriving is its tick.
//!
//! Its settings arrive on a watch channel, so a configuration reload takes
//! effect between two passes without losing the alert states (see
//! [`Evaluator::reconfigure`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::AlertsConfig;
use super::board::AlertBoard;
use super::evaluator::{Evaluation, Evaluator, SourceState};
use super::notify::DispatchHandle;
use super::{AlertState, Transition};
use crate::analysis::runner::Pass;
use crate::model::Timestamp;
use crate::telemetry::Telemetry;

/// What the loop runs with; a reload sends a new one.
#[derive(Clone)]
pub struct RunnerSettings {
    pub alerts: AlertsConfig,
    pub resend_interval: Duration,
    /// The notifiers' queues; `None` without notifiers.
    pub dispatch: Option<DispatchHandle>,
    /// Changes whenever `dispatch` is replaced by other notifiers: the
    /// firing alerts are then sent to them at the next pass.
    pub notifiers_generation: u64,
}

/// One log line per alert state change, so the log alone tells what
/// fired and when (notifiers may be unset or failing).
fn log_transition(transition: &Transition) {
    let alert = &transition.alert;
    let from = transition.from.map_or("new", AlertState::as_str);
    info!(
        rule = %alert.key.rule,
        uuid = %alert.key.uuid,
        gpu = alert.gpu,
        pid = alert.key.pid,
        from,
        state = alert.state.as_str(),
        value = alert.value,
        threshold = alert.threshold,
        unit = %alert.unit,
        "alert {}",
        alert.state.as_str()
    );
}

/// Judges passes until `cancel` or until the analysis loop stops.
pub async fn run(
    telemetry: Arc<Telemetry>,
    board: Arc<AlertBoard>,
    mut passes: watch::Receiver<Option<Arc<Pass>>>,
    mut settings: watch::Receiver<Arc<RunnerSettings>>,
    cancel: CancellationToken,
) {
    let mut current = settings.borrow_and_update().clone();
    let mut evaluator = Some(Evaluator::new(&current.alerts));
    let mut last_resend: Option<Timestamp> = None;
    let mut dropped_counted = 0u64;
    // False once the sender is gone (the daemon is stopping).
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
                if let Some(evaluator) = evaluator.as_mut() {
                    evaluator.reconfigure(&next.alerts);
                }
                if next.notifiers_generation != current.notifiers_generation {
                    last_resend = None;
                }
                current = next;
                continue;
            }
            changed = passes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        let Some(pass) = passes.borrow_and_update().clone() else { continue };
        let source = if pass.source_down { SourceState::Down } else { SourceState::Up };
        let Some(mut working) = evaluator.take() else { return };
        let judged = pass.clone();
        let evaluated = tokio::task::spawn_blocking(move || {
            let evaluation = working.evaluate(&judged.snapshot, source, judged.now);
            (working, evaluation)
        })
        .await;
        let evaluation = match evaluated {
            Ok((working, evaluation)) => {
                evaluator = Some(working);
                evaluation
            }
            Err(error) => {
                warn!(error = %error, "alert evaluation failed; starting from no alerts");
                dropped_counted = 0;
                evaluator = Some(Evaluator::new(&current.alerts));
                Evaluation { transitions: Vec::new(), alerts: Vec::new() }
            }
        };
        let Some(judge) = evaluator.as_ref() else { return };
        let dropped = judge.dropped();
        if dropped > dropped_counted {
            telemetry.count_alerts_dropped(dropped - dropped_counted);
            dropped_counted = dropped;
        }
        for transition in &evaluation.transitions {
            log_transition(transition);
        }
        board.publish(evaluation.alerts, &evaluation.transitions);
        if let Some(dispatch) = &current.dispatch {
            dispatch.submit(&evaluation.transitions);
            let now = pass.now;
            let due = last_resend.is_none_or(|last| {
                now.duration_since(last).is_some_and(|age| age >= current.resend_interval)
            });
            if due {
                dispatch.resend(&judge.firing());
                last_resend = Some(now);
            }
        }
    }
}
