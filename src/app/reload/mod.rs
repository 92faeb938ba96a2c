//! Wiring, configuration reload: what a SIGHUP checks and applies, and the
//! web configuration read at start and on reload.
//!
//! Part of `app`, the one module that knows the concrete types: the
//! reload loop (`reloader`), which keys are live (`keys`) and the steps
//! that apply them (`steps`).

pub mod keys;
mod reloader;
pub mod steps;

pub use self::reloader::{Change, Commit, ReloadError, ReloadStep, Reloader};
use self::steps::{LogLevelStep, PipelineStep};
use super::AppError;
use super::Config;
use super::settings::read_token_file;
use crate::config::LoadOptions;
use crate::logging::LevelControl;
use crate::server::WebConfigHandle;
use crate::signals::Hangups;

/// What a configuration reload needs from `main`.
pub struct Reload {
    /// The SIGHUPs to reload on.
    pub hangups: Hangups,
    /// The layers the daemon started with, read again on each reload.
    pub options: LoadOptions,
    /// The live log filter; `None` leaves `log.level` as it started.
    pub log_level: Option<LevelControl>,
}

/// `ingest.token_file` is read at start only, but a file whose token file
/// is unusable is refused as `check-config` refuses it.
struct TokenFileCheck;

impl ReloadStep for TokenFileCheck {
    fn name(&self) -> &'static str {
        "ingest"
    }

    fn prepare(&self, change: &Change<'_>) -> Result<Option<Commit>, String> {
        read_token_file(change.loaded).map(|_| None).map_err(|error| error.to_string())
    }
}

/// The web configuration file (and the certificates, keys and users it
/// names) read again on SIGHUP, as the poll would on a change; a file that
/// does not load refuses the whole reload. Which file it is
/// (`server.web_config`) needs a restart.
struct WebConfigStep(WebConfigHandle);

impl ReloadStep for WebConfigStep {
    fn name(&self) -> &'static str {
        "server.web_config"
    }

    fn prepare(&self, change: &Change<'_>) -> Result<Option<Commit>, String> {
        if change.loaded.server.web_config.as_deref() != Some(self.0.path()) {
            return Ok(None);
        }
        let prepared = self.0.prepare_reload().map_err(|error| error.to_string())?;
        let handle = self.0.clone();
        Ok(Some(Box::new(move || handle.install(prepared))))
    }
}

/// Everything a configuration reload (SIGHUP) checks and applies, in order.
/// Each step prepares (and may refuse the reload) before any commits; a
/// part that becomes live, such as the web configuration, adds its step
/// here and its keys to `reload::keys`.
pub(super) fn reload_steps(
    log_level: Option<LevelControl>,
    pipeline: PipelineStep,
    web: Option<WebConfigHandle>,
) -> Vec<Box<dyn ReloadStep>> {
    let mut steps: Vec<Box<dyn ReloadStep>> = vec![Box::new(TokenFileCheck)];
    if let Some(handle) = web {
        steps.push(Box::new(WebConfigStep(handle)));
    }
    if let Some(control) = log_level {
        steps.push(Box::new(LogLevelStep(control)));
    }
    steps.push(Box::new(pipeline));
    steps
}

/// Reads and checks `server.web_config` and every file it names
/// (blocking; `vramd check-config` and the start of [`run`]).
pub fn load_web_config(config: &Config) -> Result<Option<WebConfigHandle>, AppError> {
    config
        .server
        .web_config
        .as_deref()
        .map(|path| WebConfigHandle::load(path, &config.server))
        .transpose()
        .map_err(AppError::WebConfig)
}
