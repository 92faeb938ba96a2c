//! Validation: the raw, as-written values into the typed [`Config`].
//!
//! Owns: parsing each value, its documented range, and the checks that
//! involve two keys. Every error names the key, the value, where it came
//! from and why. Depends on the config types, raw layer, units and
//! `source::simulator::ScenarioKind` only.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::error::ConfigError;
use super::raw::{RawConfig, Scalar};
use super::types::{
    ApiConfig, Config, HistoryConfig, LogConfig, LogFormat, MetricsConfig, NvmlConfig,
    SamplerConfig, ServerConfig, SimulatorConfig, SourceConfig, SourceSelection,
};
use super::units::{format_duration, format_size, parse_duration, parse_size};
use super::walk::Origins;
use crate::source::simulator::ScenarioKind;

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);
const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Most samples `history.retention / sampler.fast_interval` may ask for.
pub const MAX_SAMPLES_PER_DEVICE: u128 = 10_000_000;
/// Largest `source.speed`.
pub const MAX_SPEED: f64 = 10_000.0;

/// Turns the merged raw values into a [`Config`], or says which key is wrong.
pub(super) fn validate(raw: &RawConfig, origins: &Origins) -> Result<Config, ConfigError> {
    let field = |key, value| Field::required(key, value, origins);
    let server = ServerConfig {
        listen: field("server.listen", &raw.server.listen)?.socket_addr()?,
        request_timeout: field("server.request_timeout", &raw.server.request_timeout)?
            .duration(MS, 10 * MINUTE)?,
        max_request_body_bytes: field("server.max_request_body", &raw.server.max_request_body)?
            .size(KIB, 64 * MIB)?,
        max_concurrent_requests: field(
            "server.max_concurrent_requests",
            &raw.server.max_concurrent_requests,
        )?
        .count(10_000)?,
        shutdown_timeout: field("server.shutdown_timeout", &raw.server.shutdown_timeout)?
            .duration(Duration::ZERO, 10 * SECOND)?,
    };
    let sampler = SamplerConfig {
        fast_interval: field("sampler.fast_interval", &raw.sampler.fast_interval)?
            .duration(10 * MS, HOUR)?,
        slow_interval: field("sampler.slow_interval", &raw.sampler.slow_interval)?
            .duration(100 * MS, HOUR)?,
        call_timeout: field("sampler.call_timeout", &raw.sampler.call_timeout)?
            .duration(MS, MINUTE)?,
        max_processes_per_device: field(
            "sampler.max_processes_per_device",
            &raw.sampler.max_processes_per_device,
        )?
        .count(1024)?,
        discovery_retry_max: field(
            "sampler.discovery_retry_max",
            &raw.sampler.discovery_retry_max,
        )?
        .duration(SECOND, HOUR)?,
    };
    let history = HistoryConfig {
        retention: field("history.retention", &raw.history.retention)?.duration(SECOND, 7 * DAY)?,
    };
    let metrics = MetricsConfig {
        peak_window: field("metrics.peak_window", &raw.metrics.peak_window)?
            .duration(MS, 7 * DAY)?,
    };
    let api = ApiConfig {
        max_history_points: field("api.max_history_points", &raw.api.max_history_points)?
            .count(1_000_000)?,
    };

    let optional = |key, value| Field::optional(key, value, origins);
    let simulate = optional("source.simulate", &raw.source.simulate);
    let replay = optional("source.replay", &raw.source.replay);
    let record = optional("source.record", &raw.source.record);
    let scenario = simulate.as_ref().map(Field::scenario).transpose()?;
    let replay_path = replay.as_ref().map(Field::path).transpose()?;
    let record_path = record.as_ref().map(Field::path).transpose()?;
    let gpus = field("simulator.gpus", &raw.simulator.gpus)?.integer(1, 8)?;
    let seed = field("simulator.seed", &raw.simulator.seed)?.integer(0, u64::MAX)?;
    let speed = field("source.speed", &raw.source.speed)?.speed()?;
    let max_trace_line_bytes =
        field("source.max_trace_line", &raw.source.max_trace_line)?.size(KIB, 64 * MIB)?;
    let nvml = NvmlConfig {
        library_path: optional("nvml.library_path", &raw.nvml.library_path)
            .as_ref()
            .map(Field::path)
            .transpose()?,
        require_gpu: field("nvml.require_gpu", &raw.nvml.require_gpu)?.boolean()?,
        init_timeout: field("nvml.init_timeout", &raw.nvml.init_timeout)?
            .duration(100 * MS, 10 * MINUTE)?,
        pcie_throughput: field("nvml.pcie_throughput", &raw.nvml.pcie_throughput)?.boolean()?,
        max_cmdline_bytes: field("nvml.max_cmdline_bytes", &raw.nvml.max_cmdline_bytes)?
            .size(0, 64 * KIB)?,
        xid_events: field("nvml.xid_events", &raw.nvml.xid_events)?.boolean()?,
    };
    let log = LogConfig {
        format: field("log.format", &raw.log.format)?.log_format()?,
        level: field("log.level", &raw.log.level)?.log_level()?,
    };

    let conflict =
        |first: &'static str, second: &'static str, reason: String| ConfigError::Conflict {
            first,
            first_origin: origins.of(first),
            second,
            second_origin: origins.of(second),
            reason,
        };
    if sampler.slow_interval < sampler.fast_interval {
        return Err(conflict(
            "sampler.fast_interval",
            "sampler.slow_interval",
            format!(
                "sampler.slow_interval ({}) must be at least sampler.fast_interval ({})",
                format_duration(sampler.slow_interval),
                format_duration(sampler.fast_interval)
            ),
        ));
    }
    let samples = history.retention.as_nanos() / sampler.fast_interval.as_nanos().max(1);
    if samples > MAX_SAMPLES_PER_DEVICE {
        return Err(conflict(
            "history.retention",
            "sampler.fast_interval",
            format!(
                "keeping {} at one sample every {} needs {samples} samples per device; \
                 at most {MAX_SAMPLES_PER_DEVICE} are allowed",
                format_duration(history.retention),
                format_duration(sampler.fast_interval)
            ),
        ));
    }
    if metrics.peak_window > history.retention {
        return Err(conflict(
            "metrics.peak_window",
            "history.retention",
            format!(
                "metrics.peak_window ({}) must not exceed history.retention ({})",
                format_duration(metrics.peak_window),
                format_duration(history.retention)
            ),
        ));
    }
    let selection = match (scenario, replay_path) {
        (Some(_), Some(_)) => {
            return Err(conflict(
                "source.simulate",
                "source.replay",
                "choose one device source: simulate a scenario or replay a trace".to_owned(),
            ));
        }
        (Some(scenario), None) => SourceSelection::Simulate(SimulatorConfig {
            scenario,
            gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
            seed,
        }),
        (None, Some(path)) => {
            if record_path.as_ref() == Some(&path) {
                return Err(conflict(
                    "source.replay",
                    "source.record",
                    "recording into the trace being replayed would overwrite it".to_owned(),
                ));
            }
            SourceSelection::Replay { path }
        }
        (None, None) => SourceSelection::Driver,
    };

    Ok(Config {
        server,
        sampler,
        history,
        metrics,
        api,
        source: SourceConfig { selection, record: record_path, speed, max_trace_line_bytes },
        nvml,
        log,
    })
}

/// One present value, with what is needed to report it.
struct Field<'a> {
    key: &'static str,
    value: &'a Scalar,
    origins: &'a Origins,
}

impl<'a> Field<'a> {
    fn required(
        key: &'static str,
        value: &'a Option<Scalar>,
        origins: &'a Origins,
    ) -> Result<Self, ConfigError> {
        Self::optional(key, value, origins).ok_or_else(|| ConfigError::Missing { key: key.into() })
    }

    fn optional(
        key: &'static str,
        value: &'a Option<Scalar>,
        origins: &'a Origins,
    ) -> Option<Self> {
        value.as_ref().map(|value| Field { key, value, origins })
    }

    fn invalid(&self, reason: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue {
            key: self.key.to_owned(),
            value: self.value.to_string(),
            origin: self.origins.of(self.key),
            reason: reason.into(),
        }
    }

    fn string(&self) -> Result<&'a str, ConfigError> {
        match self.value {
            Scalar::Str(text) => Ok(text),
            _ => Err(self.invalid("expected a string")),
        }
    }

    fn duration(&self, min: Duration, max: Duration) -> Result<Duration, ConfigError> {
        let Scalar::Str(text) = self.value else {
            return Err(
                self.invalid("expected a duration string with a unit, such as \"250ms\" or \"1h\"")
            );
        };
        let duration = parse_duration(text).map_err(|reason| self.invalid(reason))?;
        if duration < min || duration > max {
            return Err(self.invalid(format!(
                "must be between {} and {}",
                format_duration(min),
                format_duration(max)
            )));
        }
        Ok(duration)
    }

    fn size(&self, min: u64, max: u64) -> Result<usize, ConfigError> {
        let bytes = match self.value {
            Scalar::Str(text) => parse_size(text).map_err(|error| self.invalid(error.to_string())),
            Scalar::Int(value) => {
                u64::try_from(*value).map_err(|_| self.invalid("sizes cannot be negative"))
            }
            Scalar::UInt(value) => Ok(*value),
            Scalar::Float(_) | Scalar::Bool(_) => Err(self.invalid(
                "expected a whole number of bytes or a size such as \"64KiB\" or \"1.5GiB\"",
            )),
        }?;
        if bytes < min || bytes > max {
            return Err(self.invalid(format!(
                "must be between {} and {}",
                format_size(min),
                format_size(max)
            )));
        }
        usize::try_from(bytes).map_err(|_| self.invalid("too large for this platform"))
    }

    fn integer(&self, min: u64, max: u64) -> Result<u64, ConfigError> {
        let value = match self.value {
            Scalar::Int(value) => u64::try_from(*value).ok(),
            Scalar::UInt(value) => Some(*value),
            Scalar::Str(text) => {
                let value: i128 =
                    text.trim().parse().map_err(|_| self.invalid("expected a whole number"))?;
                u64::try_from(value).ok()
            }
            Scalar::Float(_) | Scalar::Bool(_) => {
                return Err(self.invalid("expected a whole number"));
            }
        };
        match value {
            Some(value) if (min..=max).contains(&value) => Ok(value),
            _ => Err(self.invalid(format!("must be between {min} and {max}"))),
        }
    }

    fn count(&self, max: u64) -> Result<NonZeroUsize, ConfigError> {
        let value = self.integer(1, max)?;
        usize::try_from(value)
            .ok()
            .and_then(NonZeroUsize::new)
            .ok_or_else(|| self.invalid(format!("must be between 1 and {max}")))
    }

    /// A TOML boolean, or the string `true` or `false` (environment
    /// variables and command-line options are always strings). Nothing
    /// else, not even `1`/`0` or `yes`/`no`: one spelling, the one
    /// `check-config` prints.
    fn boolean(&self) -> Result<bool, ConfigError> {
        match self.value {
            Scalar::Bool(value) => Ok(*value),
            Scalar::Str(text) => match text.trim() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(self.invalid("expected a boolean: true or false")),
            },
            Scalar::Int(_) | Scalar::UInt(_) | Scalar::Float(_) => {
                Err(self.invalid("expected a boolean: true or false"))
            }
        }
    }

    fn speed(&self) -> Result<f64, ConfigError> {
        let speed = match self.value {
            Scalar::Float(value) => *value,
            Scalar::Int(value) => *value as f64,
            Scalar::UInt(value) => *value as f64,
            Scalar::Str(text) => {
                text.trim().parse::<f64>().map_err(|_| self.invalid("expected a number"))?
            }
            Scalar::Bool(_) => return Err(self.invalid("expected a number")),
        };
        if !speed.is_finite() || speed <= 0.0 || speed > MAX_SPEED {
            return Err(self.invalid(format!("must be a number above 0 and at most {MAX_SPEED}")));
        }
        Ok(speed)
    }

    fn socket_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.string()?.trim().parse().map_err(|_| {
            self.invalid(
                "expected IP:port, such as 127.0.0.1:9477, 0.0.0.0:9477 or [::]:9477 \
                 (host names are not resolved)",
            )
        })
    }

    fn path(&self) -> Result<PathBuf, ConfigError> {
        let text = self.string()?;
        if text.trim().is_empty() {
            return Err(self.invalid("expected a file path"));
        }
        Ok(PathBuf::from(text))
    }

    fn scenario(&self) -> Result<ScenarioKind, ConfigError> {
        ScenarioKind::from_str(self.string()?.trim())
            .map_err(|error| self.invalid(error.to_string()))
    }

    fn log_format(&self) -> Result<LogFormat, ConfigError> {
        match self.string()?.trim() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(self.invalid("expected \"text\" or \"json\"")),
        }
    }

    fn log_level(&self) -> Result<String, ConfigError> {
        let level = self.string()?.trim();
        if level.is_empty() {
            return Err(self.invalid("expected a filter such as \"info\" or \"info,vramd=debug\""));
        }
        tracing_subscriber::EnvFilter::try_new(level)
            .map_err(|error| self.invalid(format!("not a tracing filter directive: {error}")))?;
        Ok(level.to_owned())
    }
}
