//! Configuration reload on SIGHUP: the configuration the daemon started
//! with is read again (the same file, the environment as it was at start,
//! the same command-line options) and applied whole or not at all.
//!
//! Owns: the reload loop ([`Reloader`]), the [`ReloadStep`] seam through
//! which each live part of the daemon first checks and prepares its new
//! settings (everything that can fail, off the runtime, under a deadline)
//! and then commits them (cheap, cannot fail), which key is live and which
//! needs a restart (`keys`), the steps for the log filter and the alert
//! pipeline (`steps`), and the reload's log lines and counters. A reload
//! that fails anywhere changes nothing: no step commits before every step
//! has prepared.
//!
//! Depends on `config`, `signals`, `telemetry`, `clock`, `systemd_notify`
//! (a reload is bracketed by `RELOADING=1` and `READY=1`), and in `steps` on
//! `logging`, `alerts` (runner settings, notifiers) and the analysis
//! settings type. Never on the
//! sources, the sampler or history: a reload leaves sampling alone, so a
//! bad file or a hung read can never stop or blind it.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::super::Config;
use super::keys;
use crate::config::{self, ConfigError, LoadOptions};
use crate::signals::Hangups;
use crate::systemd_notify::Notifier;
use crate::telemetry::Telemetry;

/// How long reading and checking a configuration may take (a file on a hung
/// network mount, a notifier's CA store) before the reload is refused. Not a
/// key: the configuration that would set it is the one being read.
pub const RELOAD_DEADLINE: Duration = Duration::from_secs(10);

/// What a step does to apply its part; run after every step prepared.
pub type Commit = Box<dyn FnOnce() + Send>;

/// One reload, as every step sees it.
pub struct Change<'a> {
    /// What runs now.
    pub running: &'a Config,
    /// The configuration as read now, every key validated: check this (as
    /// `check-config` would).
    pub loaded: &'a Config,
    /// What will run: `loaded`'s live keys over `running`'s restart-only
    /// ones (see [`keys::take_live`]). Apply this.
    pub next: &'a Config,
}

/// One part of the daemon that checks, then takes, a reloaded configuration.
pub trait ReloadStep: Send + Sync {
    /// Names the step in a refusal.
    fn name(&self) -> &'static str;

    /// Checks the change and prepares applying it, without any effect yet;
    /// may block (it runs on a blocking thread, under [`RELOAD_DEADLINE`]).
    /// Returns what applies it, or `None` when this step has nothing to do.
    fn prepare(&self, change: &Change<'_>) -> Result<Option<Commit>, String>;
}

/// Why a reload was refused; the running configuration stays.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The text `check-config` prints after "invalid configuration: ".
    #[error("{0}")]
    Invalid(#[from] ConfigError),
    #[error("{reason}")]
    Step { step: &'static str, reason: String },
    #[error("reading and checking the configuration took longer than {0:?}")]
    Timeout(Duration),
    /// An earlier reload's read is still blocked (a hung mount, a device
    /// that never answers); another would only add a blocked thread.
    #[error(
        "an earlier reload is still blocked reading the configuration; refused without reading it again"
    )]
    StillBlocked,
    #[error("the reload task failed: {0}")]
    Task(String),
}

/// What a successful reload did.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    /// The live groups whose values changed (`alerts`, `notify`, …).
    pub applied: Vec<&'static str>,
    /// Restart-only keys whose value changed, with both values; their old
    /// values stay in effect.
    pub need_restart: Vec<keys::Changed>,
}

/// Reads, checks and applies the configuration on every SIGHUP.
pub struct Reloader {
    options: LoadOptions,
    running: Config,
    steps: Arc<[Box<dyn ReloadStep>]>,
    telemetry: Arc<Telemetry>,
    /// How long a reload's read and checks may take ([`RELOAD_DEADLINE`]).
    deadline: Duration,
    /// The read abandoned at its deadline, while it still runs: at most
    /// one blocked thread, however many SIGHUPs follow.
    abandoned: Option<tokio::task::JoinHandle<Prepared>>,
    /// The service manager, told when a reload begins and how it ended.
    systemd: Option<Arc<Notifier>>,
}

/// What a reload's blocking part hands back.
type Prepared = Result<(Config, Config, Vec<Commit>), ReloadError>;

impl Reloader {
    /// `options` are the layers the daemon started with, `running` what it
    /// runs, `steps` the live parts in the order they apply.
    pub fn new(
        options: LoadOptions,
        running: Config,
        steps: Vec<Box<dyn ReloadStep>>,
        telemetry: Arc<Telemetry>,
    ) -> Self {
        Self {
            options,
            running,
            steps: steps.into(),
            telemetry,
            deadline: RELOAD_DEADLINE,
            abandoned: None,
            systemd: None,
        }
    }

    /// Tells `systemd` when each reload begins and ends, so that
    /// `systemctl reload` returns once the reload is done (under
    /// `Type=notify-reload`) and `systemctl status` shows a refusal.
    pub fn with_systemd(mut self, systemd: Option<Arc<Notifier>>) -> Self {
        self.systemd = systemd;
        self
    }

    /// Reloads on each hangup until `cancel` or until the hangups end.
    pub async fn run(mut self, mut hangups: Hangups, cancel: CancellationToken) {
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                next = hangups.next() => match next {
                    Some(()) => {
                        // Logged and counted inside; the daemon goes on either way.
                        let _ = self.reload().await;
                    }
                    None => return,
                },
            }
        }
    }

    /// One reload: read, check, apply; logs and counts the result.
    pub async fn reload(&mut self) -> Result<Outcome, ReloadError> {
        let told = self.systemd.clone().filter(|systemd| systemd.reloading());
        let result = self.try_reload().await;
        if let Some(systemd) = told {
            systemd.reloaded(result.as_ref().err().map(ToString::to_string).as_deref());
        }
        let now = crate::clock::wall_now();
        self.telemetry.record_config_load(result.is_ok(), true, now);
        match &result {
            Ok(outcome) => {
                if !outcome.need_restart.is_empty() {
                    let keys: Vec<String> =
                        outcome.need_restart.iter().map(ToString::to_string).collect();
                    warn!(
                        keys = %keys.join(", "),
                        "configuration reloaded, but these keys only change with a restart; they keep their running values"
                    );
                }
                info!(applied = %outcome.applied.join(", "), "configuration reloaded");
            }
            Err(ReloadError::Step { step, reason }) => {
                warn!(step, error = %reason, "invalid configuration: reload refused, the running configuration stays");
            }
            Err(error) => {
                warn!(error = %error, "invalid configuration: reload refused, the running configuration stays");
            }
        }
        result
    }

    async fn try_reload(&mut self) -> Result<Outcome, ReloadError> {
        if self.abandoned.as_ref().is_some_and(|read| !read.is_finished()) {
            return Err(ReloadError::StillBlocked);
        }
        self.abandoned = None;
        let options = self.options.clone();
        let running = self.running.clone();
        let steps = self.steps.clone();
        // Reading the file and the steps' checks (a token file, a CA store)
        // block: off the runtime, and abandoned at the deadline.
        let mut prepared = tokio::task::spawn_blocking(move || {
            let (loaded, deprecated): (Config, _) = config::load_noting(&options)?;
            for note in deprecated {
                warn!(key = %note.new, "{note}");
            }
            let next = keys::take_live(&running, &loaded);
            let change = Change { running: &running, loaded: &loaded, next: &next };
            let mut commits = Vec::with_capacity(steps.len());
            for step in steps.iter() {
                match step.prepare(&change) {
                    Ok(commit) => commits.extend(commit),
                    Err(reason) => return Err(ReloadError::Step { step: step.name(), reason }),
                }
            }
            Ok((loaded, next, commits))
        });
        let (loaded, next, commits) = match tokio::time::timeout(self.deadline, &mut prepared).await
        {
            Ok(Ok(prepared)) => prepared?,
            Ok(Err(error)) => return Err(ReloadError::Task(error.to_string())),
            Err(_) => {
                self.abandoned = Some(prepared);
                return Err(ReloadError::Timeout(self.deadline));
            }
        };
        for commit in commits {
            commit();
        }
        let outcome = Outcome {
            applied: keys::live_changes(&self.running, &next),
            need_restart: keys::restart_changes(&self.running, &loaded),
        };
        self.running = next;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts commits; refuses when `refuse` is set.
    struct Probe {
        commits: Arc<AtomicUsize>,
        refuse: bool,
    }

    impl ReloadStep for Probe {
        fn name(&self) -> &'static str {
            "probe"
        }

        fn prepare(&self, _: &Change<'_>) -> Result<Option<Commit>, String> {
            if self.refuse {
                return Err("refused by the test".into());
            }
            let commits = self.commits.clone();
            Ok(Some(Box::new(move || {
                commits.fetch_add(1, Ordering::SeqCst);
            })))
        }
    }

    fn reloader(
        file: &std::path::Path,
        steps: Vec<Box<dyn ReloadStep>>,
    ) -> (Reloader, Arc<Telemetry>) {
        let options = LoadOptions { config_path: Some(file.into()), ..LoadOptions::default() };
        let running = config::load(&options).unwrap();
        let telemetry = Arc::new(Telemetry::new("simulator").unwrap());
        (Reloader::new(options, running, steps, telemetry.clone()), telemetry)
    }

    #[tokio::test]
    async fn a_good_file_applies_live_keys_and_names_restart_only_ones() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "[alerts.memory_high]\nthreshold = 0.9\nclear = 0.8\n")
            .unwrap();
        let commits = Arc::new(AtomicUsize::new(0));
        let probe = Probe { commits: commits.clone(), refuse: false };
        let (mut reloader, telemetry) = reloader(file.path(), vec![Box::new(probe)]);
        std::fs::write(
            file.path(),
            "[alerts.memory_high]\nthreshold = 0.5\nclear = 0.4\n[sampler]\nfast_interval = \"1s\"\n",
        )
        .unwrap();
        let outcome = reloader.reload().await.unwrap();
        assert_eq!(outcome.applied, ["alerts"]);
        let named: Vec<&str> = outcome.need_restart.iter().map(|changed| changed.key).collect();
        assert_eq!(named, ["sampler.fast_interval"]);
        assert_eq!(commits.load(Ordering::SeqCst), 1);
        assert_eq!(reloader.running.alerts.rules.memory_high.threshold, 0.5);
        assert_eq!(reloader.running.sampler.fast_interval, Duration::from_millis(250));
        assert_eq!(telemetry.config_reloads(true), 1);
    }

    #[tokio::test]
    async fn a_bad_file_is_refused_whole_and_nothing_commits() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "").unwrap();
        let commits = Arc::new(AtomicUsize::new(0));
        let probe = Probe { commits: commits.clone(), refuse: false };
        let (mut reloader, telemetry) = reloader(file.path(), vec![Box::new(probe)]);
        let before = reloader.running.clone();
        std::fs::write(
            file.path(),
            "[alerts.memory_high]\nthreshold = 0.5\nclear = 0.4\n[sampler]\nfast_interval = \"0s\"\n",
        )
        .unwrap();
        let error = reloader.reload().await.unwrap_err();
        assert!(error.to_string().contains("sampler.fast_interval"), "{error}");
        assert_eq!(commits.load(Ordering::SeqCst), 0);
        assert_eq!(reloader.running, before, "not even the valid alerts part applies");
        assert_eq!((telemetry.config_reloads(false), telemetry.config_reloads(true)), (1, 0));
    }

    #[tokio::test]
    async fn one_step_refusing_stops_every_step_from_committing() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "").unwrap();
        let commits = Arc::new(AtomicUsize::new(0));
        let steps: Vec<Box<dyn ReloadStep>> = vec![
            Box::new(Probe { commits: commits.clone(), refuse: false }),
            Box::new(Probe { commits: commits.clone(), refuse: true }),
        ];
        let (mut reloader, _) = reloader(file.path(), steps);
        std::fs::write(file.path(), "[log]\nlevel = \"debug\"\n").unwrap();
        let error = reloader.reload().await.unwrap_err();
        assert!(matches!(error, ReloadError::Step { step: "probe", .. }), "{error}");
        assert_eq!(commits.load(Ordering::SeqCst), 0);
        assert_eq!(reloader.running.log.level, "info");
    }

    /// Blocks in `prepare` until the test lets it go, counting entries.
    struct Stuck {
        entered: Arc<AtomicUsize>,
        release: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    }

    impl ReloadStep for Stuck {
        fn name(&self) -> &'static str {
            "stuck"
        }

        fn prepare(&self, _: &Change<'_>) -> Result<Option<Commit>, String> {
            self.entered.fetch_add(1, Ordering::SeqCst);
            let (released, wake) = &*self.release;
            let mut released = released.lock().unwrap();
            while !*released {
                released = wake.wait(released).unwrap();
            }
            Ok(None)
        }
    }

    #[tokio::test]
    async fn hangups_after_a_blocked_read_add_no_blocked_thread() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "").unwrap();
        let entered = Arc::new(AtomicUsize::new(0));
        let release = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let stuck = Stuck { entered: entered.clone(), release: release.clone() };
        let (mut reloader, telemetry) = reloader(file.path(), vec![Box::new(stuck)]);
        reloader.deadline = Duration::from_millis(50);
        let error = reloader.reload().await.unwrap_err();
        assert!(matches!(error, ReloadError::Timeout(_)), "{error}");
        for _ in 0..5 {
            let error = reloader.reload().await.unwrap_err();
            assert!(matches!(error, ReloadError::StillBlocked), "{error}");
        }
        assert_eq!(entered.load(Ordering::SeqCst), 1, "one blocked read, not one per hangup");
        assert_eq!(telemetry.config_reloads(false), 6);
        // Once the read returns, the next hangup reads again.
        *release.0.lock().unwrap() = true;
        release.1.notify_all();
        for _ in 0..200 {
            if reloader.abandoned.as_ref().is_some_and(|read| read.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        reloader.reload().await.unwrap();
        assert_eq!(entered.load(Ordering::SeqCst), 2);
    }
}
