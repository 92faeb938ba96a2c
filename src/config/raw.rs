//! The raw configuration layer: what the merged sources say, typed only as
//! the file or environment wrote it.
//!
//! Owns: [`RawConfig`] and its sections (serde, `deny_unknown_fields`) and
//! [`Scalar`], a single value kept as written (`"250ms"`, `64`, `1.0`).
//! Nothing here interprets a value; `validate` does. Depends on nothing else
//! in the crate.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A single configuration value as written. Environment variables and
/// command-line overrides are always [`Scalar::Str`]; a TOML file may give
/// any of them.
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    Str(String),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
}

impl fmt::Display for Scalar {
    /// As it would be written in TOML: strings quoted, numbers plain.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Str(text) => write!(f, "{text:?}"),
            Scalar::Int(value) => write!(f, "{value}"),
            Scalar::UInt(value) => write!(f, "{value}"),
            Scalar::Float(value) => write!(f, "{value:?}"),
            Scalar::Bool(value) => write!(f, "{value}"),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a single string, number or boolean")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Scalar, E> {
        Ok(Scalar::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Scalar, E> {
        Ok(Scalar::Int(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Scalar, E> {
        Ok(Scalar::UInt(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Scalar, E> {
        Ok(Scalar::Float(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Scalar, E> {
        Ok(Scalar::Str(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Scalar, E> {
        Ok(Scalar::Str(value))
    }
}

/// The whole merged configuration, unvalidated. A missing key is `None`;
/// with the built-in defaults merged in, only the optional keys
/// (`source.simulate`, `source.replay`, `source.record`,
/// `nvml.library_path`, `notify.alertmanager_url`, `notify.webhook_url`,
/// `notify.external_url`) can be missing.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub sampler: RawSampler,
    #[serde(default)]
    pub history: RawHistory,
    #[serde(default)]
    pub metrics: RawMetrics,
    #[serde(default)]
    pub api: RawApi,
    #[serde(default)]
    pub source: RawSource,
    #[serde(default)]
    pub simulator: RawSimulator,
    #[serde(default)]
    pub nvml: RawNvml,
    #[serde(default)]
    pub probe: RawProbe,
    #[serde(default)]
    pub log: RawLog,
    #[serde(default)]
    pub alerts: RawAlerts,
    #[serde(default)]
    pub notify: RawNotify,
    #[serde(default)]
    pub ingest: RawIngest,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProbe {
    pub enabled: Option<Scalar>,
    pub interval: Option<Scalar>,
    pub timeout: Option<Scalar>,
    pub min_free: Option<Scalar>,
    pub margin: Option<Scalar>,
    pub block_size: Option<Scalar>,
    pub samples: Option<Scalar>,
    pub headroom: Option<Scalar>,
    pub headroom_time_budget: Option<Scalar>,
    pub max_backoff: Option<Scalar>,
    pub cuda_library: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIngest {
    pub token_file: Option<Scalar>,
    pub ttl: Option<Scalar>,
    pub rate_limit: Option<Scalar>,
    pub max_reporters: Option<Scalar>,
    pub max_devices: Option<Scalar>,
    pub max_stats: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: Option<Scalar>,
    pub request_timeout: Option<Scalar>,
    pub max_request_body: Option<Scalar>,
    pub max_concurrent_requests: Option<Scalar>,
    pub shutdown_timeout: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSampler {
    pub fast_interval: Option<Scalar>,
    pub slow_interval: Option<Scalar>,
    pub call_timeout: Option<Scalar>,
    pub max_processes_per_device: Option<Scalar>,
    pub discovery_retry_max: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHistory {
    pub retention: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    pub peak_window: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApi {
    pub max_history_points: Option<Scalar>,
    pub max_event_streams: Option<Scalar>,
    pub max_stream_backlog: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    pub simulate: Option<Scalar>,
    pub replay: Option<Scalar>,
    pub record: Option<Scalar>,
    pub speed: Option<Scalar>,
    pub max_trace_line: Option<Scalar>,
    pub max_trace_size: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSimulator {
    pub gpus: Option<Scalar>,
    pub seed: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNvml {
    pub library_path: Option<Scalar>,
    pub require_gpu: Option<Scalar>,
    pub init_timeout: Option<Scalar>,
    pub pcie_throughput: Option<Scalar>,
    pub max_cmdline_bytes: Option<Scalar>,
    pub xid_events: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub format: Option<Scalar>,
    pub level: Option<Scalar>,
}

/// `[alerts]`: its own keys and one table per rule.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlerts {
    pub evaluation_interval: Option<Scalar>,
    pub resolved_retention: Option<Scalar>,
    pub max_alerts: Option<Scalar>,
    pub trend_window: Option<Scalar>,
    #[serde(default)]
    pub memory_high: RawRule,
    #[serde(default)]
    pub exhaustion_forecast: RawRule,
    #[serde(default)]
    pub leak_suspected: RawRule,
    #[serde(default)]
    pub allocator_fragmentation_high: RawRule,
    #[serde(default)]
    pub allocator_retries: RawRule,
    #[serde(default)]
    pub allocator_oom: RawRule,
    #[serde(default)]
    pub device_lost: RawRule,
    #[serde(default)]
    pub xid_error: RawRule,
    #[serde(default)]
    pub probe_free_mismatch: RawRule,
    #[serde(default)]
    pub probe_headroom_low: RawRule,
}

/// `[alerts.<rule>]`: the keys every rule has, and the extra keys some
/// have. Which rule takes which extra key is in the key catalogue; the
/// unknown-key walk rejects the others before this layer is deserialized,
/// and `validate` reads an extra key only for the rules that have it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub enabled: Option<Scalar>,
    pub threshold: Option<Scalar>,
    pub clear: Option<Scalar>,
    #[serde(rename = "for")]
    pub for_duration: Option<Scalar>,
    pub severity: Option<Scalar>,
    /// `exhaustion_forecast` only.
    pub min_fit: Option<Scalar>,
    /// `leak_suspected`, `allocator_retries`, `allocator_oom`, `xid_error`.
    pub window: Option<Scalar>,
    /// `allocator_fragmentation_high` only.
    pub min_reserved: Option<Scalar>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNotify {
    pub alertmanager_url: Option<Scalar>,
    pub webhook_url: Option<Scalar>,
    pub queue_capacity: Option<Scalar>,
    pub timeout: Option<Scalar>,
    pub resend_interval: Option<Scalar>,
    pub max_retries: Option<Scalar>,
    pub retry_backoff_max: Option<Scalar>,
    pub external_url: Option<Scalar>,
}
