//! Tests of loading, layering, validation and rendering, through the public
//! `load` with a controlled file, environment and overrides.

mod files;
mod layers;
mod render;
mod unknown;
mod values;

use std::path::PathBuf;

pub use super::{
    ConfigError, KeySpec, LoadOptions, Origin, config_file, env_var_for, load_noting,
    process_environment, render_effective,
};
pub use crate::alerts::AlertsConfig;
pub use crate::app::Config;
pub use crate::cli::Overrides;
pub use crate::logging::LogFormat;
pub use crate::server::DEFAULT_LISTEN;
pub use crate::setting::{Accepts, ByteSize};
pub use crate::source::{SimulatorConfig, SourceSelection};

/// The daemon's configuration, loaded as `vramd` loads it.
pub fn load(options: &LoadOptions) -> Result<Config, ConfigError> {
    crate::app::load(options)
}

/// The configuration with nothing set.
pub fn defaults() -> Config {
    Config::default()
}

/// `[alerts]` with nothing set.
pub fn default_alerts() -> AlertsConfig {
    AlertsConfig::default()
}

/// The daemon's key catalogue.
pub static KEYS: std::sync::LazyLock<&'static [KeySpec]> =
    std::sync::LazyLock::new(<Config as crate::config::Document>::keys);

impl ConfigError {
    /// The key the error is about, when it is about one key.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey { key, .. }
            | ConfigError::NotASection { key, .. }
            | ConfigError::InvalidValue { key, .. }
            | ConfigError::AmbiguousEnvironment { key, .. } => Some(key),
            ConfigError::Conflict { first, .. } => Some(first),
            ConfigError::FileNotFound { .. }
            | ConfigError::FileRead { .. }
            | ConfigError::FileParse { .. }
            | ConfigError::Other { .. } => None,
        }
    }
}

/// Options that read no file and no environment unless a test adds them.
fn isolated() -> LoadOptions {
    LoadOptions { search_paths: Vec::new(), ..LoadOptions::default() }
}

/// A temporary directory holding `vramd.toml` with `text`.
fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vramd.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect()
}

/// Loads `text` as the `--config` file.
fn load_file(text: &str) -> Result<Config, ConfigError> {
    let (_dir, path) = file(text);
    load(&LoadOptions { config_path: Some(path), ..isolated() })
}

/// Loads with only these environment variables.
fn load_env(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    load(&LoadOptions { env: env(pairs), ..isolated() })
}

/// The message of an error that must occur, with every part `needles` lists.
#[track_caller]
fn assert_error(result: Result<Config, ConfigError>, needles: &[&str]) -> ConfigError {
    let error = match result {
        Ok(config) => panic!("expected an error containing {needles:?}, got {config:#?}"),
        Err(error) => error,
    };
    let message = error.to_string();
    for needle in needles {
        assert!(message.contains(needle), "`{needle}` missing from: {message}");
    }
    error
}
