//! Configuration: from defaults, a TOML file, `VRAMD_*` environment
//! variables and command-line options to one validated [`Config`].
//!
//! Owns: the configuration schema (serde section structs, one field and
//! one line per key), the layers with each value's origin, the key
//! catalogue, size and duration units, and rendering of the effective
//! configuration. Depends only on `model` (scenarios,
//! severities and the rule table); never on sources, the sampler, history,
//! analysis, alerts or HTTP.
//!
//! Layout: `sections` and `rules` (the validated `Config`: every key
//! written once, a field with its summary as doc comment and one line with
//! its key, type, default and bounds), `schema` (the macros that make serde
//! structs, defaults, catalogue and bounds checks of those entries), `keys`
//! (the catalogue and key naming), `load` (files, environment, overrides,
//! merging), `walk` (unknown keys; every value as written, with its
//! origin), `field` (how each field type is read and written), `validate`
//! (serde reading, bounds, checks across keys), `units`, `render`, `error`.
//! The reference is `docs/configuration.md`.
//!
//! Adding a key: one field in its section's `section!` (or `alerts!`)
//! entry: `/// summary` then `field "key": Type = default, bounds;`, where
//! the type is any [`field::Setting`] and the bounds `Time(min, max)`,
//! `Size(min, max)`, `Int(min, max)` or `Words("…")`; then its line in
//! `config/vramd.toml` and its row in `docs/configuration.md`, which the
//! tests hold to the schema.

mod error;
mod field;
mod keys;
mod load;
mod render;
mod rules;
mod schema;
mod sections;
mod units;
mod validate;
mod walk;

pub use error::{ConfigError, Origin};
pub use field::ByteSize;
pub use keys::{Accepts, ENV_PREFIX, KEYS, KeySpec, env_var_for};
pub use load::{
    DEFAULT_SEARCH_PATHS, LoadOptions, Overrides, config_file, load, process_environment,
    read_at_most,
};
pub use render::{key_values, render_effective};
pub use rules::{AlertsConfig, RulesConfig};
pub use sections::{
    ApiConfig, Config, DEFAULT_LISTEN, HistoryConfig, IngestConfig, LogConfig, LogFormat,
    MetricsConfig, NotifyConfig, NvmlConfig, ProbeConfig, SamplerConfig, ServerConfig,
    SimulatorConfig, SourceConfig, SourceSelection, default_alerts, defaults,
};
pub use units::{SizeError, format_duration, format_size, parse_duration, parse_size};

#[cfg(test)]
mod tests;
