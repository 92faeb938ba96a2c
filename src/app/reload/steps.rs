//! The reload steps of the parts that change live: the log filter
//! (`log.level`) and the analysis → alerts pipeline (`[analysis]`,
//! `[alerts]`, `[notify]`). The wiring
//! (`app::reload_steps`) lists them with its own.
//!
//! Depends on `logging`, `alerts` (runner settings, notifiers), `config`
//! and `telemetry`; the analysis settings come from the wiring as a
//! function, so this module knows no analysis defaults.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::alerts::notify::{self, NotifyConfig};
use crate::alerts::runner::RunnerSettings;
use crate::analysis::analyzer::AnalysisSettings;
use crate::logging::{self, LevelControl};
use crate::telemetry::Telemetry;

use super::{Change, Commit, ReloadStep};
use crate::app::Config;

/// `log.level`: the filter is parsed when prepared, swapped when committed.
pub struct LogLevelStep(pub LevelControl);

impl ReloadStep for LogLevelStep {
    fn name(&self) -> &'static str {
        "log"
    }

    fn prepare(&self, change: &Change<'_>) -> Result<Option<Commit>, String> {
        if change.next.log.level == change.running.log.level {
            return Ok(None);
        }
        let filter = logging::filter(&change.next.log.level).map_err(|error| error.to_string())?;
        let control = self.0.clone();
        Ok(Some(Box::new(move || {
            if let Err(error) = control.apply(filter) {
                warn!(error = %error, "the new log filter could not be applied");
            }
        })))
    }
}

/// `[alerts]` and `[notify]`: new settings for the analysis → alerts loop
/// (which keeps its alert states), and new notifiers when their settings
/// changed (the old ones stop; firing alerts go to the new ones at once).
pub struct PipelineStep(pub Arc<Pipeline>);

/// What the pipeline step works with, from the wiring.
pub struct Pipeline {
    /// Feeds the alert runner.
    pub settings: watch::Sender<Arc<RunnerSettings>>,
    /// Feeds the analysis loop.
    pub analysis_settings: watch::Sender<AnalysisSettings>,
    /// Derives the analysis settings from `[analysis]` and `[alerts]`.
    pub analysis: fn(&Config) -> AnalysisSettings,
    /// Stops the running notifiers' workers (a child of `shutdown`).
    pub notifiers: Mutex<CancellationToken>,
    /// The daemon's: new notifiers stop with it.
    pub shutdown: CancellationToken,
    pub telemetry: Arc<Telemetry>,
    /// `http://<bound address>`, the base of links when
    /// `notify.external_url` is not set.
    pub default_external_url: String,
}

/// Whether the notifiers themselves change (not only how often firing
/// alerts are re-sent, which the runner reads).
fn notifiers_changed(running: &NotifyConfig, next: &NotifyConfig) -> bool {
    let next = NotifyConfig { resend_interval: running.resend_interval, ..next.clone() };
    *running != next
}

impl ReloadStep for PipelineStep {
    fn name(&self) -> &'static str {
        "alerts"
    }

    fn prepare(&self, change: &Change<'_>) -> Result<Option<Commit>, String> {
        let (running, next) = (change.running, change.next);
        if running.analysis == next.analysis
            && running.alerts == next.alerts
            && running.notify == next.notify
        {
            return Ok(None);
        }
        let notify_settings = next.notify.clone();
        let notifiers = if notifiers_changed(&running.notify, &next.notify) {
            // May read the system's CA store: this runs off the runtime.
            let built = notify::build_notifiers(&notify_settings, &self.0.default_external_url)
                .map_err(|error| error.to_string())?;
            Some(built)
        } else {
            None
        };
        let analysis = (self.0.analysis)(next);
        let alerts = next.alerts.clone();
        let pipeline = self.0.clone();
        Ok(Some(Box::new(move || {
            pipeline.analysis_settings.send_if_modified(|current| {
                let changed = *current != analysis;
                *current = analysis;
                changed
            });
            let mut settings = RunnerSettings::clone(&pipeline.settings.borrow());
            settings.alerts = alerts;
            settings.resend_interval = notify_settings.resend_interval;
            if let Some(notifiers) = notifiers {
                let stop = pipeline.shutdown.child_token();
                settings.dispatch = (!notifiers.is_empty()).then(|| {
                    notify::spawn(
                        notifiers,
                        &notify_settings,
                        pipeline.telemetry.clone(),
                        stop.clone(),
                    )
                });
                settings.notifiers_generation = settings.notifiers_generation.wrapping_add(1);
                // What the old notifiers still held is abandoned, as at
                // shutdown; the firing alerts are re-sent to the new ones.
                std::mem::replace(&mut *pipeline.notifiers.lock(), stop).cancel();
            }
            pipeline.settings.send_replace(Arc::new(settings));
        })))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::app::Config;
    fn defaults() -> Config {
        Config::default()
    }

    fn runner_settings(config: &Config) -> RunnerSettings {
        RunnerSettings {
            alerts: config.alerts.clone(),
            resend_interval: config.notify.resend_interval,
            dispatch: None,
            notifiers_generation: 0,
        }
    }

    /// Prepares and commits `next` over `running`, as a reload would.
    fn apply(step: &PipelineStep, running: &Config, next: &Config) -> bool {
        let change = Change { running, loaded: next, next };
        match step.prepare(&change).unwrap() {
            Some(commit) => {
                commit();
                true
            }
            None => false,
        }
    }

    #[test]
    fn only_a_change_to_the_notifiers_themselves_rebuilds_them() {
        let running = defaults().notify;
        let mut next = running.clone();
        next.resend_interval = Duration::from_secs(300);
        assert!(!notifiers_changed(&running, &next), "the runner reads resend_interval");
        next.webhook_url = Some("http://127.0.0.1:9/hook".into());
        assert!(notifiers_changed(&running, &next));
    }

    #[tokio::test]
    async fn the_pipeline_gets_new_rules_and_new_notifiers_only_when_they_change() {
        let running = defaults();
        let (sender, receiver) = watch::channel(Arc::new(runner_settings(&running)));
        let shutdown = CancellationToken::new();
        let first_notifiers = shutdown.child_token();
        let (analysis_sender, analysis) = watch::channel(crate::app::analysis_settings(&running));
        let step = PipelineStep(Arc::new(Pipeline {
            settings: sender,
            analysis_settings: analysis_sender,
            analysis: crate::app::analysis_settings,
            notifiers: first_notifiers.clone().into(),
            shutdown: shutdown.clone(),
            telemetry: Arc::new(Telemetry::new("simulator").unwrap()),
            default_external_url: "http://127.0.0.1:9477".into(),
        }));
        assert!(!apply(&step, &running, &running.clone()), "nothing changed, nothing to do");

        let mut rules = running.clone();
        rules.alerts.rules.memory_high.threshold = 0.5;
        assert!(apply(&step, &running, &rules));
        let settings = receiver.borrow().clone();
        assert_eq!(settings.alerts.rules.memory_high.threshold, 0.5);
        assert_eq!(settings.notifiers_generation, 0, "the notifiers are left alone");
        assert!(!first_notifiers.is_cancelled());

        let mut webhook = rules.clone();
        webhook.notify.webhook_url = Some("http://127.0.0.1:9/hook".into());
        assert!(apply(&step, &rules, &webhook));
        let settings = receiver.borrow().clone();
        assert_eq!(settings.notifiers_generation, 1);
        assert!(settings.dispatch.is_some(), "the webhook is now delivered to");
        assert!(first_notifiers.is_cancelled(), "the old notifiers stop");
        assert_eq!(settings.alerts.rules.memory_high.threshold, 0.5, "the rules stay");

        let mut windows = webhook.clone();
        windows.analysis.trend_window = Duration::from_secs(1200);
        assert!(apply(&step, &webhook, &windows));
        assert_eq!(analysis.borrow().trend_window, Duration::from_secs(1200), "analysis is told");
        assert_eq!(receiver.borrow().notifiers_generation, 1, "the notifiers stay");
        shutdown.cancel();
    }
}
