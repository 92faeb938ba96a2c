//! How one configuration value becomes a typed field, and back.
//!
//! Owns: [`Setting`], implemented by every type a section field can have
//! (durations, [`ByteSize`], counts, addresses, paths, enums, …): how it
//! is read from the value as written (a TOML value, or the text of an
//! environment variable or flag), how it is written back in file syntax,
//! and how it is held to the bounds its key's entry gives. serde calls
//! [`de`] and [`ser`] for every field, so the type alone picks the
//! reading. Depends only on the config keys, the written values
//! ([`Scalar`]), units and `model` (severity, scenario, record mode).

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::keys::Accepts;
use super::sections::LogFormat;
use super::units::{format_duration, format_size, parse_duration, parse_size};
use super::walk::Scalar;
use crate::model::{RecordMode, ScenarioKind, Severity};

/// A number of bytes, written in the file as an integer or a size with a
/// unit (`"64KiB"`, `"1.5GiB"`) and rendered with the largest exact unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn get(self) -> u64 {
        self.0
    }

    /// As a `usize`; every size key's bound is far below `usize::MAX`.
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

/// The reason a whole number outside its type is reported with: `validate`
/// replaces it with the key's bounds from the catalogue, so `0` for a
/// count reads "must be between 1 and 64", as an in-type value would.
pub(super) const OUT_OF_RANGE: &str = "out of range";

/// A type a configuration field can have.
pub(super) trait Setting: Sized {
    /// The value as written; the error is the reason it is refused.
    fn parse(raw: &Scalar) -> Result<Self, String>;
    /// The value in file syntax; `None` for an optional key not set.
    fn show(&self) -> Option<Scalar>;
    /// Holds the value to its key's bounds; most types have none.
    fn within(&self, _accepts: Accepts) -> Result<(), String> {
        Ok(())
    }
}

/// serde's reading of every field: the value as written, then [`Setting::parse`].
pub(super) fn de<'de, D: Deserializer<'de>, T: Setting>(deserializer: D) -> Result<T, D::Error> {
    let raw = Scalar::deserialize(deserializer)?;
    T::parse(&raw).map_err(serde::de::Error::custom)
}

/// serde's writing of every field, in file syntax.
pub(super) fn ser<S: Serializer, T: Setting>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    value.show().serialize(serializer)
}

fn string(raw: &Scalar) -> Result<&str, String> {
    match raw {
        Scalar::Str(text) => Ok(text),
        _ => Err("expected a string".to_owned()),
    }
}

/// A TOML float or integer, or a string of one; not checked further.
pub(super) fn number(raw: &Scalar) -> Result<f64, String> {
    match raw {
        Scalar::Float(value) => Ok(*value),
        Scalar::Int(value) => Ok(*value as f64),
        Scalar::UInt(value) => Ok(*value as f64),
        Scalar::Str(text) => text.trim().parse().map_err(|_| "expected a number".to_owned()),
        Scalar::Bool(_) => Err("expected a number".to_owned()),
    }
}

fn whole(raw: &Scalar) -> Result<i128, String> {
    let refuse = || "expected a whole number".to_owned();
    match raw {
        Scalar::Int(value) => Ok(i128::from(*value)),
        Scalar::UInt(value) => Ok(i128::from(*value)),
        Scalar::Str(text) => text.trim().parse().map_err(|_| refuse()),
        Scalar::Float(_) | Scalar::Bool(_) => Err(refuse()),
    }
}

fn between<T: PartialOrd + Copy>(
    value: T,
    (min, max): (T, T),
    show: impl Fn(T) -> String,
) -> Result<(), String> {
    if value < min || value > max {
        return Err(format!("must be between {} and {}", show(min), show(max)));
    }
    Ok(())
}

fn text(value: impl Into<String>) -> Option<Scalar> {
    Some(Scalar::Str(value.into()))
}

impl<T: Setting> Setting for Option<T> {
    fn parse(raw: &Scalar) -> Result<Self, String> {
        T::parse(raw).map(Some)
    }
    fn show(&self) -> Option<Scalar> {
        self.as_ref().and_then(T::show)
    }
    fn within(&self, accepts: Accepts) -> Result<(), String> {
        self.as_ref().map_or(Ok(()), |value| value.within(accepts))
    }
}

impl Setting for Duration {
    fn parse(raw: &Scalar) -> Result<Self, String> {
        let Scalar::Str(text) = raw else {
            return Err(
                "expected a duration string with a unit, such as \"250ms\" or \"1h\"".into()
            );
        };
        parse_duration(text)
    }
    fn show(&self) -> Option<Scalar> {
        text(format_duration(*self))
    }
    fn within(&self, accepts: Accepts) -> Result<(), String> {
        let Accepts::Time(min, max) = accepts else { return Ok(()) };
        between(*self, (min, max), format_duration)
    }
}

impl Setting for ByteSize {
    fn parse(raw: &Scalar) -> Result<Self, String> {
        match raw {
            Scalar::Str(text) => parse_size(text).map(ByteSize).map_err(|error| error.to_string()),
            Scalar::Int(value) => {
                u64::try_from(*value).map(ByteSize).map_err(|_| "sizes cannot be negative".into())
            }
            Scalar::UInt(value) => Ok(ByteSize(*value)),
            Scalar::Float(_) | Scalar::Bool(_) => Err("expected a whole number of bytes or a \
                                                       size such as \"64KiB\" or \"1.5GiB\""
                .to_owned()),
        }
    }
    fn show(&self) -> Option<Scalar> {
        text(format_size(self.0))
    }
    fn within(&self, accepts: Accepts) -> Result<(), String> {
        let Accepts::Size(min, max) = accepts else { return Ok(()) };
        between(self.0, (min, max), format_size)
    }
}

/// Whole numbers: read wide, then into the type (or [`OUT_OF_RANGE`]).
macro_rules! whole_number {
    ($($ty:ty: |$w:ident| $from:expr, |$v:ident| $get:expr;)*) => {$(
        impl Setting for $ty {
            fn parse(raw: &Scalar) -> Result<Self, String> {
                let $w = whole(raw)?;
                $from.ok_or_else(|| OUT_OF_RANGE.to_owned())
            }
            fn show(&self) -> Option<Scalar> {
                let $v = *self;
                let value: u64 = $get;
                // Integers beyond `i64` (only a seed can be) stay exact as a string.
                Some(i64::try_from(value).map_or_else(|_| Scalar::Str(value.to_string()), Scalar::Int))
            }
            fn within(&self, accepts: Accepts) -> Result<(), String> {
                let Accepts::Int(min, max) = accepts else { return Ok(()) };
                let $v = *self;
                between($get, (min, max), |n| n.to_string())
            }
        }
    )*};
}

whole_number! {
    u32: |w| u32::try_from(w).ok(), |v| u64::from(v);
    u64: |w| u64::try_from(w).ok(), |v| v;
    NonZeroUsize: |w| usize::try_from(w).ok().and_then(NonZeroUsize::new), |v| v.get() as u64;
}

impl Setting for bool {
    /// A TOML boolean, or the string `true` or `false` (environment
    /// variables and flags are always strings). Nothing else, not even
    /// `1`/`0` or `yes`/`no`: one spelling, the one `check-config` prints.
    fn parse(raw: &Scalar) -> Result<Self, String> {
        match raw {
            Scalar::Bool(value) => Ok(*value),
            Scalar::Str(text) if text.trim() == "true" => Ok(true),
            Scalar::Str(text) if text.trim() == "false" => Ok(false),
            _ => Err("expected a boolean: true or false".to_owned()),
        }
    }
    fn show(&self) -> Option<Scalar> {
        Some(Scalar::Bool(*self))
    }
}

impl Setting for f64 {
    fn parse(raw: &Scalar) -> Result<Self, String> {
        number(raw)
    }
    fn show(&self) -> Option<Scalar> {
        Some(Scalar::Float(*self))
    }
}

impl Setting for SocketAddr {
    fn parse(raw: &Scalar) -> Result<Self, String> {
        string(raw)?.trim().parse().map_err(|_| {
            "expected IP:port, such as 127.0.0.1:9477, 0.0.0.0:9477 or [::]:9477 \
             (host names are not resolved)"
                .to_owned()
        })
    }
    fn show(&self) -> Option<Scalar> {
        text(self.to_string())
    }
}

impl Setting for PathBuf {
    fn parse(raw: &Scalar) -> Result<Self, String> {
        match string(raw)? {
            text if text.trim().is_empty() => Err("expected a file path".to_owned()),
            text => Ok(PathBuf::from(text)),
        }
    }
    fn show(&self) -> Option<Scalar> {
        text(self.to_string_lossy())
    }
}

/// Free text (URLs, the log filter), trimmed; `validate` checks its form.
impl Setting for String {
    fn parse(raw: &Scalar) -> Result<Self, String> {
        string(raw).map(|text| text.trim().to_owned())
    }
    fn show(&self) -> Option<Scalar> {
        text(self.as_str())
    }
}

/// The enums: their name, through `$parse`, and back through `$name`.
macro_rules! named {
    ($($ty:ty: |$t:ident| $parse:expr, |$v:ident| $name:expr;)*) => {$(
        impl Setting for $ty {
            fn parse(raw: &Scalar) -> Result<Self, String> {
                let $t = string(raw)?.trim();
                $parse
            }
            fn show(&self) -> Option<Scalar> {
                let $v = *self;
                text($name)
            }
        }
    )*};
}

named! {
    ScenarioKind: |t| ScenarioKind::from_str(t).map_err(|error| error.to_string()), |v| v.name();
    RecordMode: |t| t.parse()
        .map_err(|_| "expected \"rotate\", \"refuse\" or \"overwrite\"".to_owned()), |v| v.as_str();
    LogFormat: |t| t.parse().map_err(|_| "expected \"text\" or \"json\"".to_owned()),
        |v| <&str>::from(v);
    Severity: |t| Severity::from_str(t), |v| v.as_str();
}

/// A rule's `threshold` or `clear`: a number, or a string of one or of a
/// size (`"4GiB"`). A string that is neither reads as NaN, which
/// `validate` refuses with the reason the rule's unit gives.
pub(super) fn de_threshold<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    match Scalar::deserialize(deserializer)? {
        Scalar::Str(text) => Ok(text
            .trim()
            .parse()
            .or_else(|_| parse_size(&text).map(|bytes| bytes as f64))
            .unwrap_or(f64::NAN)),
        other => number(&other).map_err(serde::de::Error::custom),
    }
}
