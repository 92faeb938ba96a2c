//! One configuration value on its way from the merged tree to a typed one:
//! [`Field`] knows its key, its text and where it came from, so every
//! conversion error names all three.
//!
//! Owns: the typed readings of a value (durations, sizes, counts, ratios,
//! rule thresholds, addresses, paths, …) and their ranges' messages.
//! Depends only on the config keys and merged values, and `model` (severity, scenario,
//! rule units).

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::error::ConfigError;
use super::keys::{Accepts, spec};
use super::sections::LogFormat;
use super::units::{format_duration, format_size, parse_duration, parse_size};
use super::validate::MAX_SPEED;
use super::walk::{Scalar, Values};
use crate::model::{RuleUnit, ScenarioKind, Severity};

/// One present value, with what is needed to report it.
pub(super) struct Field<'a> {
    key: &'a str,
    value: &'a Scalar,
    values: &'a Values,
}

impl<'a> Field<'a> {
    pub(super) fn required(key: &'a str, values: &'a Values) -> Result<Self, ConfigError> {
        Self::optional(key, values).ok_or_else(|| ConfigError::Missing { key: key.into() })
    }

    pub(super) fn optional(key: &'a str, values: &'a Values) -> Option<Self> {
        values.get(key).map(|value| Field { key, value, values })
    }

    pub(super) fn invalid(&self, reason: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue {
            key: self.key.to_owned(),
            value: self.value.to_string(),
            origin: self.values.origin(self.key),
            reason: reason.into(),
        }
    }

    pub(super) fn string(&self) -> Result<&'a str, ConfigError> {
        match self.value {
            Scalar::Str(text) => Ok(text),
            _ => Err(self.invalid("expected a string")),
        }
    }

    /// What the key accepts, from the catalogue.
    fn accepts(&self) -> Accepts {
        spec(self.key).map_or(Accepts::Words(""), |spec| spec.accepts)
    }

    /// The error for a reading the catalogue gives no bounds for: a
    /// mismatch between `validate` and `keys` that the tests catch, kept as
    /// an error so no path panics.
    fn unbounded(&self) -> ConfigError {
        ConfigError::Other { reason: format!("{} has no bounds of that kind", self.key) }
    }

    /// A duration within the key's bounds.
    pub(super) fn duration(&self) -> Result<Duration, ConfigError> {
        let Accepts::Time(min, max) = self.accepts() else { return Err(self.unbounded()) };
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

    /// A size within the key's bounds, as a `usize`.
    pub(super) fn size(&self) -> Result<usize, ConfigError> {
        let bytes = self.bytes()?;
        usize::try_from(bytes).map_err(|_| self.invalid("too large for this platform"))
    }

    /// A size within the key's bounds.
    pub(super) fn bytes(&self) -> Result<u64, ConfigError> {
        let Accepts::Size(min, max) = self.accepts() else { return Err(self.unbounded()) };
        self.bytes_within(min, max)
    }

    fn bytes_within(&self, min: u64, max: u64) -> Result<u64, ConfigError> {
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
        Ok(bytes)
    }

    /// A whole number within the key's bounds.
    pub(super) fn integer(&self) -> Result<u64, ConfigError> {
        let Accepts::Int(min, max) = self.accepts() else { return Err(self.unbounded()) };
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

    /// A whole number within the key's bounds, which start at 1.
    pub(super) fn count(&self) -> Result<NonZeroUsize, ConfigError> {
        let value = self.integer()?;
        usize::try_from(value)
            .ok()
            .and_then(NonZeroUsize::new)
            .ok_or_else(|| self.invalid("too large for this platform"))
    }

    /// A TOML boolean, or the string `true` or `false` (environment
    /// variables and command-line options are always strings). Nothing
    /// else, not even `1`/`0` or `yes`/`no`: one spelling, the one
    /// `check-config` prints.
    pub(super) fn boolean(&self) -> Result<bool, ConfigError> {
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

    /// A TOML float or integer, or a string of one; not checked further.
    pub(super) fn number(&self) -> Result<f64, ConfigError> {
        match self.value {
            Scalar::Float(value) => Ok(*value),
            Scalar::Int(value) => Ok(*value as f64),
            Scalar::UInt(value) => Ok(*value as f64),
            Scalar::Str(text) => {
                text.trim().parse::<f64>().map_err(|_| self.invalid("expected a number"))
            }
            Scalar::Bool(_) => Err(self.invalid("expected a number")),
        }
    }

    /// A finite number from 0 to 1.
    pub(super) fn fraction(&self) -> Result<f64, ConfigError> {
        let value = self.number()?;
        if !(0.0..=1.0).contains(&value) {
            return Err(self.invalid("must be a number from 0 to 1"));
        }
        Ok(value)
    }

    /// A rule's `threshold` or `clear`, in the rule's unit.
    pub(super) fn threshold(&self, unit: RuleUnit) -> Result<f64, ConfigError> {
        if let (RuleUnit::Bytes, Scalar::Str(_)) = (unit, self.value) {
            return self.bytes_within(0, u64::MAX).map(|bytes| bytes as f64);
        }
        let value = self.number()?;
        if !value.is_finite() {
            return Err(self.invalid("must be a finite number"));
        }
        let (valid, range) = match unit {
            RuleUnit::Ratio => (value > 0.0 && value <= 1.0, "a ratio above 0 and at most 1"),
            RuleUnit::Seconds => (value > 0.0, "a number of seconds above 0"),
            RuleUnit::BytesPerSecond => (value >= 0.0, "a number of bytes per second, at least 0"),
            RuleUnit::Count => (value >= 0.0, "a count, at least 0"),
            RuleUnit::Bytes => {
                (value >= 0.0, "a number of bytes (or a size such as \"4GiB\"), at least 0")
            }
        };
        if !valid {
            return Err(self.invalid(format!("must be {range}")));
        }
        Ok(value)
    }

    pub(super) fn speed(&self) -> Result<f64, ConfigError> {
        let speed = self.number()?;
        if !speed.is_finite() || speed <= 0.0 || speed > MAX_SPEED {
            return Err(self.invalid(format!("must be a number above 0 and at most {MAX_SPEED}")));
        }
        Ok(speed)
    }

    pub(super) fn socket_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.string()?.trim().parse().map_err(|_| {
            self.invalid(
                "expected IP:port, such as 127.0.0.1:9477, 0.0.0.0:9477 or [::]:9477 \
                 (host names are not resolved)",
            )
        })
    }

    pub(super) fn path(&self) -> Result<PathBuf, ConfigError> {
        let text = self.string()?;
        if text.trim().is_empty() {
            return Err(self.invalid("expected a file path"));
        }
        Ok(PathBuf::from(text))
    }

    /// An `http://` or `https://` URL with something after the scheme.
    pub(super) fn url(&self) -> Result<String, ConfigError> {
        let text = self.string()?.trim();
        let rest = text.strip_prefix("http://").or_else(|| text.strip_prefix("https://"));
        match rest {
            Some(rest)
                if !rest.is_empty()
                    && !rest.starts_with('/')
                    && !rest.contains(char::is_whitespace) =>
            {
                Ok(text.to_owned())
            }
            _ => Err(self.invalid(
                "expected an http:// or https:// URL, such as \"http://alertmanager:9093\"",
            )),
        }
    }

    pub(super) fn severity(&self) -> Result<Severity, ConfigError> {
        Severity::from_str(self.string()?.trim()).map_err(|reason| self.invalid(reason))
    }

    pub(super) fn scenario(&self) -> Result<ScenarioKind, ConfigError> {
        ScenarioKind::from_str(self.string()?.trim())
            .map_err(|error| self.invalid(error.to_string()))
    }

    pub(super) fn log_format(&self) -> Result<LogFormat, ConfigError> {
        match self.string()?.trim() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(self.invalid("expected \"text\" or \"json\"")),
        }
    }

    pub(super) fn log_level(&self) -> Result<String, ConfigError> {
        let level = self.string()?.trim();
        if level.is_empty() {
            return Err(self.invalid("expected a filter such as \"info\" or \"info,vramd=debug\""));
        }
        tracing_subscriber::EnvFilter::try_new(level)
            .map_err(|error| self.invalid(format!("not a tracing filter directive: {error}")))?;
        Ok(level.to_owned())
    }
}
