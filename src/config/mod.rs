//! Configuration: from defaults, a TOML file, `VRAMD_*` environment
//! variables and command-line options to one validated [`Config`].
//!
//! Owns: the two configuration stages (raw as-written values, then
//! validated types), key catalogue, size and duration units, and rendering
//! of the effective configuration. Depends only on `model` (scenarios,
//! severities and the rule table); never on sources, the sampler, history,
//! analysis, alerts or HTTP.
//!
//! Layout: `sections` (the validated `Config`: every key written once,
//! with its type, default, bounds and summary), `schema` (the macros and
//! value kinds that turn those entries into structs, defaults, catalogue,
//! reading and rendering), `keys` (the catalogue and key naming), `load`
//! (files, environment, overrides, merging), `walk` (unknown keys; every
//! value as written, with its origin), `field` (one value into a type),
//! `validate` (checks across keys), `units`, `render`, `error`. The reference is `docs/configuration.md`.

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
pub use keys::{Accepts, ENV_PREFIX, KEYS, KeySpec, env_var_for};
pub use load::{
    DEFAULT_SEARCH_PATHS, LoadOptions, Overrides, config_file, load, process_environment,
};
pub use render::render_effective;
pub use rules::{RuleConfig, RulesConfig};
pub use sections::{
    AlertsConfig, ApiConfig, Config, DEFAULT_LISTEN, HistoryConfig, IngestConfig, LogConfig,
    LogFormat, MetricsConfig, NotifyConfig, NvmlConfig, ProbeConfig, SamplerConfig, ServerConfig,
    SimulatorConfig, SourceConfig, SourceSelection, default_alerts, defaults,
};
pub use units::{SizeError, format_duration, format_size, parse_duration, parse_size};

#[cfg(test)]
mod tests;
