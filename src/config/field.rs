//! One configuration value on its way from the merged layers to a typed
//! one. [`Field`] knows its key, its text and where it came from, so every
//! conversion error names all three; a [`Kind`] reads one kind of value
//! within the bounds the catalogue gives its key, and writes it back.
//!
//! Owns: the typed readings of a value (durations, sizes, counts, ratios,
//! rule thresholds, addresses, paths, …), their messages, and their file
//! syntax. Depends only on the config keys, merged values, units and
//! rendering, and `model` (severity, scenario, rule units).

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::error::ConfigError;
use super::keys::{Accepts, spec};
use super::render::TomlValue;
use super::sections::LogFormat;
use super::units::{format_duration, format_size, parse_duration, parse_size};
use super::validate::MAX_SPEED;
use super::walk::{Scalar, Values};
use crate::model::{RecordMode, RuleUnit, ScenarioKind, Severity};

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

    fn string(&self) -> Result<&'a str, ConfigError> {
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
    /// mismatch between `sections` and a kind that the tests catch, kept as
    /// an error so no path panics.
    fn unbounded(&self) -> ConfigError {
        ConfigError::Other { reason: format!("{} has no bounds of that kind", self.key) }
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
            let (min, max) = (format_size(min), format_size(max));
            return Err(self.invalid(format!("must be between {min} and {max}")));
        }
        Ok(bytes)
    }

    /// A whole number within the key's bounds.
    fn integer(&self) -> Result<u64, ConfigError> {
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

    /// A TOML float or integer, or a string of one; not checked further.
    fn number(&self) -> Result<f64, ConfigError> {
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
}

/// One kind of value: how it is read (within the bounds the catalogue gives
/// its key) and how it is written back in file syntax.
pub(super) trait Kind {
    type Value;
    fn parse(field: &Field<'_>) -> Result<Self::Value, ConfigError>;
    /// The value in file syntax; `None` for an optional key not set.
    fn show(value: &Self::Value) -> Option<TomlValue>;
    /// Every required key has a built-in default, so it always has a value.
    fn read(key: &str, values: &Values) -> Result<Self::Value, ConfigError> {
        Self::parse(&Field::required(key, values)?)
    }
}

/// An optional key of kind `K`: unset unless some layer sets it.
pub(super) struct Opt<K>(K);

impl<K: Kind> Kind for Opt<K> {
    type Value = Option<K::Value>;
    fn parse(field: &Field<'_>) -> Result<Self::Value, ConfigError> {
        K::parse(field).map(Some)
    }
    fn show(value: &Self::Value) -> Option<TomlValue> {
        value.as_ref().and_then(K::show)
    }
    fn read(key: &str, values: &Values) -> Result<Self::Value, ConfigError> {
        Field::optional(key, values).map(|field| K::parse(&field)).transpose()
    }
}

macro_rules! kind {
    ($($name:ident: $value:ty, |$f:ident| $parse:expr, |$v:ident| $show:expr;)*) => {$(
        pub(super) struct $name;
        impl Kind for $name {
            type Value = $value;
            fn parse($f: &Field<'_>) -> Result<$value, ConfigError> {
                $parse
            }
            fn show($v: &$value) -> Option<TomlValue> {
                Some($show)
            }
        }
    )*};
}

fn text(value: impl Into<String>) -> TomlValue {
    TomlValue::Str(value.into())
}

/// Integers beyond `i64` (only a seed can be) stay exact as a string.
fn int(value: impl TryInto<i64> + ToString + Copy) -> TomlValue {
    value.try_into().map_or_else(|_| TomlValue::Str(value.to_string()), TomlValue::Int)
}

/// A size within the key's bounds.
fn bytes(f: &Field<'_>) -> Result<u64, ConfigError> {
    let Accepts::Size(min, max) = f.accepts() else { return Err(f.unbounded()) };
    f.bytes_within(min, max)
}

const BOOLEAN: &str = "expected a boolean: true or false";
const ADDRESS: &str = "expected IP:port, such as 127.0.0.1:9477, 0.0.0.0:9477 or [::]:9477 \
                       (host names are not resolved)";
const URL: &str = "expected an http:// or https:// URL, such as \"http://alertmanager:9093\"";
const FILTER: &str = "expected a filter such as \"info\" or \"info,vramd=debug\"";

kind! {
    Addr: SocketAddr, |f| f.string()?.trim().parse().map_err(|_| f.invalid(ADDRESS)),
        |v| text(v.to_string());
    Dur: Duration, |f| {
        let Accepts::Time(min, max) = f.accepts() else { return Err(f.unbounded()) };
        let Scalar::Str(text) = f.value else {
            return Err(
                f.invalid("expected a duration string with a unit, such as \"250ms\" or \"1h\"")
            );
        };
        let duration = parse_duration(text).map_err(|reason| f.invalid(reason))?;
        if duration < min || duration > max {
            let (min, max) = (format_duration(min), format_duration(max));
            return Err(f.invalid(format!("must be between {min} and {max}")));
        }
        Ok(duration)
    }, |v| text(format_duration(*v));
    Bytes: u64, |f| bytes(f), |v| text(format_size(*v));
    USize: usize, |f| usize::try_from(bytes(f)?).map_err(|_| f.invalid("too large for this platform")),
        |v| text(format_size(*v as u64));
    Count: NonZeroUsize, |f| usize::try_from(f.integer()?)
            .ok()
            .and_then(NonZeroUsize::new)
            .ok_or_else(|| f.invalid("too large for this platform")),
        |v| int(v.get());
    // The bounds of every u32 key are far below u32::MAX.
    U32: u32, |f| Ok(u32::try_from(f.integer()?).unwrap_or(u32::MAX)), |v| int(*v);
    U64: u64, |f| f.integer(), |v| int(*v);
    // A TOML boolean, or the string `true` or `false` (environment
    // variables and command-line options are always strings). Nothing else,
    // not even `1`/`0` or `yes`/`no`: one spelling, the one `check-config`
    // prints.
    Bool: bool, |f| match f.value {
        Scalar::Bool(value) => Ok(*value),
        Scalar::Str(text) if text.trim() == "true" => Ok(true),
        Scalar::Str(text) if text.trim() == "false" => Ok(false),
        _ => Err(f.invalid(BOOLEAN)),
    }, |v| TomlValue::Bool(*v);
    Speed: f64, |f| match f.number()? {
        speed if speed.is_finite() && speed > 0.0 && speed <= MAX_SPEED => Ok(speed),
        _ => Err(f.invalid(format!("must be a number above 0 and at most {MAX_SPEED}"))),
    }, |v| TomlValue::Float(*v);
    Fraction: f64, |f| match f.number()? {
        value if (0.0..=1.0).contains(&value) => Ok(value),
        _ => Err(f.invalid("must be a number from 0 to 1")),
    }, |v| TomlValue::Float(*v);
    Path: PathBuf, |f| match f.string()? {
        text if text.trim().is_empty() => Err(f.invalid("expected a file path")),
        text => Ok(PathBuf::from(text)),
    }, |v| text(v.to_string_lossy());
    // Something after the scheme, and no whitespace.
    Url: String, |f| {
        let text = f.string()?.trim();
        let rest = text.strip_prefix("http://").or_else(|| text.strip_prefix("https://"));
        match rest {
            Some(rest) if !rest.is_empty()
                && !rest.starts_with('/')
                && !rest.contains(char::is_whitespace) => Ok(text.to_owned()),
            _ => Err(f.invalid(URL)),
        }
    }, |v| text(v.as_str());
    Scenario: ScenarioKind, |f| ScenarioKind::from_str(f.string()?.trim())
        .map_err(|error| f.invalid(error.to_string())), |v| text(v.name());
    Mode: RecordMode, |f| RecordMode::from_name(f.string()?.trim())
        .ok_or_else(|| f.invalid("expected \"rotate\", \"refuse\" or \"overwrite\"")),
        |v| text(v.as_str());
    Format: LogFormat, |f| match f.string()?.trim() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(f.invalid("expected \"text\" or \"json\"")),
    }, |v| text(v.as_str());
    Level: String, |f| {
        let level = f.string()?.trim();
        if level.is_empty() {
            return Err(f.invalid(FILTER));
        }
        tracing_subscriber::EnvFilter::try_new(level)
            .map_err(|error| f.invalid(format!("not a tracing filter directive: {error}")))?;
        Ok(level.to_owned())
    }, |v| text(v.as_str());
    Sev: Severity, |f| Severity::from_str(f.string()?.trim()).map_err(|reason| f.invalid(reason)),
        |v| text(v.as_str());
}
