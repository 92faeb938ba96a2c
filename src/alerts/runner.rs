//! The daemon's evaluation loop: every `alerts.evaluation_interval` of
//! source time, evaluate, publish to the board, hand state changes to the
//! notifiers, and re-send firing alerts every `notify.resend_interval`.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::config::AlertsConfig;
use crate::history::HistoryStore;
use crate::model::Timestamp;
use crate::telemetry::Telemetry;

use super::board::AlertBoard;
use super::evaluator::Evaluator;
use super::notify::DispatchHandle;

pub struct RunnerSettings {
    pub alerts: AlertsConfig,
    pub resend_interval: Duration,
    /// Source seconds per real second (simulation and replay).
    pub speed: f64,
}

pub async fn run(
    store: Arc<HistoryStore>,
    telemetry: Arc<Telemetry>,
    board: Arc<AlertBoard>,
    dispatch: Option<DispatchHandle>,
    settings: RunnerSettings,
    cancel: CancellationToken,
) {
    let period = crate::clock::real_interval(settings.alerts.evaluation_interval, settings.speed)
        .max(Duration::from_millis(1));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut evaluator = Some(Evaluator::new(&settings.alerts));
    let mut last_resend: Option<Timestamp> = None;
    let mut dropped_counted = 0u64;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        // Before the first discovery attempt ends, the source is not known
        // to be down.
        let source_up = telemetry.source_up() || !store.cycle_completed();
        // Time is data: the newest sample. Only a source that never produced
        // one (no driver) falls back to the wall clock, to date its alert.
        let Some(now) =
            Evaluator::newest(&store).or_else(|| (!source_up).then(crate::clock::wall_now))
        else {
            continue;
        };
        let Some(mut working) = evaluator.take() else { return };
        let store_for_pass = store.clone();
        // Analysis is CPU work (windows of thousands of samples): off the
        // async workers, so requests are never queued behind it.
        let pass = tokio::task::spawn_blocking(move || {
            let evaluation = working.evaluate(&store_for_pass, source_up, now);
            (working, evaluation)
        })
        .await;
        let (working, evaluation) = match pass {
            Ok(done) => done,
            Err(error) => {
                warn!(error = %error, "alert evaluation failed; starting from no alerts");
                dropped_counted = 0;
                (Evaluator::new(&settings.alerts), empty(now))
            }
        };
        let dropped = working.dropped();
        if dropped > dropped_counted {
            telemetry.count_alerts_dropped(dropped - dropped_counted);
            dropped_counted = dropped;
        }
        board.publish(evaluation.alerts, evaluation.analyses, &evaluation.transitions);
        if let Some(dispatch) = &dispatch {
            dispatch.submit(&evaluation.transitions);
            let due = last_resend.is_none_or(|last| {
                now.duration_since(last).is_some_and(|age| age >= settings.resend_interval)
            });
            if due {
                dispatch.resend(&working.firing());
                last_resend = Some(now);
            }
        }
        evaluator = Some(working);
    }
}

fn empty(at: Timestamp) -> super::evaluator::Evaluation {
    super::evaluator::Evaluation {
        at,
        transitions: Vec::new(),
        alerts: Vec::new(),
        analyses: Default::default(),
    }
}
