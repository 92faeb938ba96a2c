//! The configuration schema: every key, written once.
//!
//! Owns: the validated [`Config`], its sections and [`Document`], the
//! file's shape that serde reads and `check-config` writes. Each key is one
//! field of a section with its summary as a doc comment and one line with
//! its name, type, built-in default and bounds; `schema`'s macros make the
//! serde struct, its `Default` (what `config/vramd.toml` documents), the
//! catalogue entries and the bounds check from it. The checks that involve
//! two keys are `validate`'s. Depends only on the config schema machinery
//! and `model`.
//!
//! Layout: `serving` (`[server]`, `[metrics]`, `[api]`), `sampling`
//! (`[sampler]`, `[history]`, `[nvml]`, `[probe]`), `source` (`[source]`,
//! `[simulator]`), `outputs` (`[log]`, `[notify]`), `intake` (`[ingest]`,
//! `[kubernetes]`); `[alerts]` is `rules`'.

mod intake;
mod outputs;
mod sampling;
mod serving;
mod source;

pub use intake::{IngestConfig, KubernetesConfig};
pub use outputs::{LogConfig, LogFormat, NotifyConfig};
pub use sampling::{HistoryConfig, NvmlConfig, ProbeConfig, SamplerConfig};
pub use serving::{ApiConfig, DEFAULT_LISTEN, MetricsConfig, ServerConfig};
pub use source::{SimulatorConfig, SourceConfig, SourceSelection};

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::keys::KeySpec;
use super::rules::AlertsConfig;
use super::walk::Values;
use source::{SimulatorKeys, SourceKeys};

/// The range text of an optional path key.
const PATH: &str = "path; not set by default";
/// The range text of an optional URL key.
const URL: &str = "http:// or https:// URL; not set by default";

/// The sections, in file and rendering order, each named once; from the
/// list come the validated [`Config`], the file's [`Document`], the bounds
/// check of every section and the catalogue. `[source]` and `[simulator]`
/// are two tables of the file but one [`SourceConfig`], between the two
/// lists.
macro_rules! document {
    ($($before:ident: $b_ty:ty,)* [source] $($after:ident: $a_ty:ty,)*) => {
        /// Everything the daemon needs to run, validated. `Default` is the
        /// configuration with nothing set.
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct Config {
            $(pub $before: $b_ty,)*
            pub source: SourceConfig,
            $(pub $after: $a_ty,)*
        }

        /// The configuration file's shape, section by section: what serde
        /// reads and `check-config` writes.
        #[derive(Clone, Default, Deserialize, Serialize)]
        #[serde(deny_unknown_fields, default)]
        pub(super) struct Document {
            $($before: $b_ty,)*
            source: SourceKeys,
            simulator: SimulatorKeys,
            $($after: $a_ty,)*
        }

        impl Document {
            /// Every value within its key's bounds.
            pub(super) fn check(&self, values: &Values) -> Result<(), ConfigError> {
                $(self.$before.check(values)?;)*
                self.source.check(values)?;
                self.simulator.check(values)?;
                $(self.$after.check(values)?;)*
                Ok(())
            }
        }

        impl From<Document> for Config {
            fn from(file: Document) -> Self {
                Config {
                    $($before: file.$before,)*
                    source: SourceConfig::from_keys(file.source, file.simulator),
                    $($after: file.$after,)*
                }
            }
        }

        impl From<&Config> for Document {
            fn from(config: &Config) -> Self {
                let (source, simulator) = config.source.keys();
                let config = config.clone();
                Document {
                    $($before: config.$before,)*
                    source,
                    simulator,
                    $($after: config.$after,)*
                }
            }
        }

        /// Every section's keys, in rendering order.
        pub(super) fn catalogue() -> Vec<KeySpec> {
            [$(<$b_ty>::KEYS,)* SourceKeys::KEYS, SimulatorKeys::KEYS, $(<$a_ty>::KEYS,)*].concat()
        }
    };
}

document! {
    server: ServerConfig,
    sampler: SamplerConfig,
    history: HistoryConfig,
    metrics: MetricsConfig,
    api: ApiConfig,
    [source]
    nvml: NvmlConfig,
    probe: ProbeConfig,
    log: LogConfig,
    alerts: AlertsConfig,
    notify: NotifyConfig,
    ingest: IngestConfig,
    kubernetes: KubernetesConfig,
}

/// The configuration with nothing set.
pub fn defaults() -> Config {
    Config::default()
}

/// `[alerts]` with nothing set: every rule enabled.
pub fn default_alerts() -> AlertsConfig {
    AlertsConfig::default()
}
