//! Configuration loading: from defaults, a TOML file, `VRAMD_*`
//! environment variables and command-line options to one validated
//! configuration, with each value's origin.
//!
//! Owns: the layers and their precedence (`load`), the key catalogue read
//! off the sections' own declarations and doc comments (`catalogue`:
//! unknown keys, did-you-mean, environment naming), reading each value as
//! its key's form writes it (`tree`: durations, sizes, numbers, flags,
//! choices, from text or TOML), rendering (`render`) and errors. It knows
//! no section: each component owns its section as a plain serde struct
//! that declares its keys and bounds in a `check(&self, &mut Keys)`
//! (`setting`), and `app::Config` aggregates them and implements
//! [`Document`]. Depends on `setting` and `model` (scenario names for the
//! `--simulate` flag). The reference is `docs/configuration.md`.

mod catalogue;
mod error;
mod load;
mod render;
mod tree;

pub use catalogue::{ENV_PREFIX, KeySpec, catalogue, env_var_for};
pub use error::{ConfigError, Origin};
pub use load::{
    DEFAULT_SEARCH_PATHS, Deprecated, LoadOptions, Override, config_file, load, load_noting,
    process_environment,
};
pub use render::{key_values, render_effective};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::setting::Keys;

/// A whole configuration file: what `load` reads, checks and renders.
pub trait Document: DeserializeOwned + Serialize + schemars::JsonSchema + Default {
    /// Declares every key (its table, form and bounds) in rendering order,
    /// and holds each value to its bounds.
    fn check(&self, keys: &mut Keys);

    /// The checks that involve keys of two sections.
    fn check_across(&self) -> Result<(), Conflict>;

    /// The catalogue, made once: `catalogue::<Self>()`.
    fn keys() -> &'static [KeySpec];

    /// Keys that moved, `(old, new)`: the old spelling is read as the new
    /// key, with a [`Deprecated`] note.
    fn moved() -> Vec<(String, String)> {
        Vec::new()
    }
}

/// Two keys whose values cannot go together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub first: &'static str,
    pub second: &'static str,
    pub reason: String,
}

#[cfg(test)]
mod tests;
