//! Configuration: from defaults, a TOML file, `VRAMD_*` environment
//! variables and command-line options to one validated [`Config`].
//!
//! Owns: the two configuration stages (raw as-written values, then
//! validated types), key catalogue, size and duration units, and rendering
//! of the effective configuration. Depends only on `model` (scenarios,
//! severities and the rule table); never on sources, the sampler, history,
//! analysis, alerts or HTTP.
//!
//! Layout: `types` (the validated `Config`), `keys` (every key and its
//! bounds), `load` (files, environment, overrides, merging), `walk`
//! (unknown keys; every value as written, with its origin), `field` (one
//! value into a type), `validate`, `units`, `render`, `defaults`,
//! `error`. The reference is `docs/configuration.md`.

mod defaults;
mod error;
mod field;
mod keys;
mod load;
mod render;
mod types;
mod units;
mod validate;
mod walk;

pub use defaults::{DEFAULT_LISTEN, default_alerts, defaults};
pub use error::{ConfigError, Origin};
pub use keys::{Accepts, ENV_PREFIX, KEYS, KeySpec, env_var_for};
pub use load::{
    DEFAULT_SEARCH_PATHS, LoadOptions, Overrides, config_file, load, process_environment,
};
pub use render::render_effective;
pub use types::*;
pub use units::{SizeError, format_duration, format_size, parse_duration, parse_size};

#[cfg(test)]
mod tests;
