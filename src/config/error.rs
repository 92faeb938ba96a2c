//! Configuration errors and where a value came from.
//!
//! Owns: [`ConfigError`] (every way loading can fail, with the key, value and
//! origin needed to fix it) and [`Origin`]. Every variant maps to exit
//! status 2; `main` does that mapping. Depends on nothing else in the crate.

use std::fmt;
use std::path::PathBuf;

/// Where a configuration value came from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default.
    Default,
    /// A configuration file.
    File(PathBuf),
    /// An environment variable, by name (`VRAMD_SAMPLER__FAST_INTERVAL`).
    Environment(String),
    /// A command-line option, by flag (`--listen`).
    CommandLine(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("built-in default"),
            Origin::File(path) => write!(f, "file {}", path.display()),
            Origin::Environment(name) => write!(f, "environment variable {name}"),
            Origin::CommandLine(flag) => write!(f, "command-line option {flag}"),
        }
    }
}

/// Why the configuration could not be loaded. Each one is fatal before the
/// daemon binds anything and maps to exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--config PATH` names a file that does not exist.
    #[error("configuration file {} does not exist", path.display())]
    FileNotFound { path: PathBuf },

    /// The configuration file exists but cannot be read.
    #[error("cannot read configuration file {}: {source}", path.display())]
    FileRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The configuration file is not valid TOML.
    #[error("cannot parse configuration file {} as TOML: {reason}", path.display())]
    FileParse { path: PathBuf, reason: String },

    /// A key that vramd does not know, with its full dotted path.
    #[error("unknown configuration key `{key}` (from {origin}){}", suggestion_text(suggestion.as_deref()))]
    UnknownKey { key: String, origin: Origin, suggestion: Option<String> },

    /// A section name used as a plain value (`sampler = 5`).
    #[error("configuration key `{key}` (from {origin}) must be a section with keys, not a value")]
    NotASection { key: String, origin: Origin },

    /// A value that cannot be parsed or is out of range.
    #[error("invalid value {value} for {key} (from {origin}): {reason}")]
    InvalidValue { key: String, value: String, origin: Origin, reason: String },

    /// Two keys that cannot be set together.
    #[error("{first} (from {first_origin}) and {second} (from {second_origin}) conflict: {reason}")]
    Conflict {
        first: &'static str,
        first_origin: Origin,
        second: &'static str,
        second_origin: Origin,
        reason: String,
    },

    /// Two environment variables that name the same key.
    #[error("environment variables {first} and {second} both set {key}")]
    AmbiguousEnvironment { key: String, first: String, second: String },

    /// The configuration library failed in a way the checks above did not
    /// anticipate.
    #[error("invalid configuration: {reason}")]
    Other { reason: String },
}

fn suggestion_text(suggestion: Option<&str>) -> String {
    match suggestion {
        Some(known) => format!("; did you mean `{known}`?"),
        None => String::new(),
    }
}
