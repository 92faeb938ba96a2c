//! The daemon's analysis loop: every `analysis.evaluation_interval` of
//! source time, and at once when history asks for a judgement (an OOM
//! event arrived), one [`Analyzer`] pass over history (off the async
//! workers), published on the [`AnalysisBoard`] and handed on as a
//! [`Pass`] to whoever judges it (the alert runner).
//!
//! Its settings arrive on a watch channel, so a configuration reload takes
//! effect between two passes without losing the analysis memo
//! ([`Analyzer::reconfigure`]). Depends on `history`, `model`, `clock`;
//! whether the source is up comes from the wiring as a function, so this
//! knows nothing of telemetry or alerts.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::analyzer::{AnalysisSettings, Analyzer};
use super::snapshot::{AnalysisBoard, AnalysisSnapshot};
use crate::history::HistoryStore;
use crate::model::Timestamp;

/// One analysis pass, as the rules judge it.
#[derive(Debug)]
pub struct Pass {
    pub snapshot: Arc<AnalysisSnapshot>,
    /// The time the pass was made for: the newest sample's.
    pub now: Timestamp,
    /// The source was down (a device source that cannot be listed).
    pub source_down: bool,
}

/// Whether the device source is up; from the wiring.
pub type SourceUp = Box<dyn Fn() -> bool + Send + Sync>;

/// Runs passes until `cancel`, sending each on `passes`. `speed` is source
/// seconds per real second (simulation and replay).
pub async fn run(
    store: Arc<HistoryStore>,
    board: Arc<AnalysisBoard>,
    mut settings: watch::Receiver<AnalysisSettings>,
    source_up: SourceUp,
    passes: watch::Sender<Option<Arc<Pass>>>,
    speed: f64,
    cancel: CancellationToken,
) {
    let mut current = settings.borrow_and_update().clone();
    let ticker_for = |current: &AnalysisSettings| {
        let period = crate::clock::real_interval(current.evaluation_interval, speed)
            .max(Duration::from_millis(1));
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        ticker
    };
    let mut ticker = ticker_for(&current);
    let mut analyzer = Some(Analyzer::new(current.clone()));
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
                if next == current {
                    continue;
                }
                if let Some(analyzer) = analyzer.as_mut() {
                    analyzer.reconfigure(next.clone());
                }
                if next.evaluation_interval != current.evaluation_interval {
                    ticker = ticker_for(&next);
                }
                current = next;
                continue;
            }
            _ = ticker.tick() => {}
            // An OOM event is judged now, not at the next tick; the trend
            // and leak checks keep their own cadence, so an extra pass
            // changes nothing else.
            () = store.judgement_requested() => {}
        }
        // Before the first discovery attempt ends, the source is not known
        // to be down.
        let source_down = !source_up() && store.cycle_completed();
        // Time is data: the newest sample. Only a source that never produced
        // one (no driver) falls back to the wall clock, to date its alert.
        let Some(now) =
            Analyzer::newest(&store).or_else(|| source_down.then(crate::clock::wall_now))
        else {
            continue;
        };
        let Some(mut working) = analyzer.take() else { return };
        let store_for_pass = store.clone();
        // Windows of thousands of samples: off the async workers, so
        // requests are never queued behind a pass.
        let pass = tokio::task::spawn_blocking(move || {
            let snapshot = Arc::new(working.analyse(&store_for_pass, now));
            (working, snapshot)
        })
        .await;
        let snapshot = match pass {
            Ok((working, snapshot)) => {
                analyzer = Some(working);
                snapshot
            }
            Err(error) => {
                warn!(error = %error, "analysis pass failed; starting the analysis afresh");
                analyzer = Some(Analyzer::new(current.clone()));
                Arc::new(AnalysisSnapshot::default())
            }
        };
        board.publish(snapshot.clone());
        passes.send_replace(Some(Arc::new(Pass { snapshot, now, source_down })));
    }
}
