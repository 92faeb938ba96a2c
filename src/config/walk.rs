//! The key walk over the merged configuration tree.
//!
//! Owns: rejecting unknown keys with their full dotted path and where they
//! came from (serde's `deny_unknown_fields` names only the last segment and
//! no source), rejecting tables and lists where a value belongs, and
//! collecting every value as written ([`Scalar`]) with its [`Origin`], by
//! dotted key, for `validate`. Keys
//! are two levels deep, or three for the alert rules' tables
//! (`alerts.memory_high.threshold`); the walk follows `keys::tables`.
//! Depends only on the config keys and errors, and the `config` crate.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use config::{Value, ValueKind};
use serde::{Deserialize, Serialize};

use super::error::{ConfigError, Origin};
use super::keys::{is_table, spec, suggest};

/// Which layer set each key. Built-in defaults are serde's and never in
/// the merged tree, so a value there that no flag or variable set came
/// from the file: the origin follows from the key alone.
pub(super) struct OriginContext<'a> {
    /// The configuration file, when one was read.
    pub file: Option<&'a Path>,
    /// Dotted key → the environment variable that set it.
    pub env_vars: &'a BTreeMap<String, String>,
    /// Dotted key → the command-line flag that set it.
    pub overrides: &'a BTreeMap<&'static str, &'static str>,
}

impl OriginContext<'_> {
    fn resolve(&self, key: &str) -> Origin {
        if let Some(flag) = self.overrides.get(key) {
            return Origin::CommandLine(flag);
        }
        match (self.env_vars.get(key), self.file) {
            (Some(name), _) => Origin::Environment(name.clone()),
            (None, Some(file)) => Origin::File(file.to_path_buf()),
            (None, None) => Origin::Default,
        }
    }
}

/// A single configuration value as written. Environment variables and
/// command-line overrides are always [`Scalar::Str`]; a TOML file may give
/// any of them. serde reads any single value into one (the first variant
/// that takes it) for a field's reading, and writes one in file syntax.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
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

impl Scalar {
    /// The scalar of a single value; `None` for a table, list or nothing.
    fn of(kind: &ValueKind) -> Option<Scalar> {
        Some(match kind {
            ValueKind::Boolean(value) => Scalar::Bool(*value),
            ValueKind::I64(value) => Scalar::Int(*value),
            ValueKind::U64(value) => Scalar::UInt(*value),
            ValueKind::I128(value) => match i64::try_from(*value) {
                Ok(value) => Scalar::Int(value),
                Err(_) => Scalar::Str(value.to_string()),
            },
            ValueKind::U128(value) => match u64::try_from(*value) {
                Ok(value) => Scalar::UInt(value),
                Err(_) => Scalar::Str(value.to_string()),
            },
            ValueKind::Float(value) => Scalar::Float(*value),
            ValueKind::String(value) => Scalar::Str(value.clone()),
            ValueKind::Nil | ValueKind::Table(_) | ValueKind::Array(_) => return None,
        })
    }
}

/// Every known key's value as written, and where it came from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Values(BTreeMap<String, (Scalar, Origin)>);

impl Values {
    /// `key`'s value, when any layer set it.
    pub fn get(&self, key: &str) -> Option<&Scalar> {
        self.0.get(key).map(|(value, _)| value)
    }

    /// The origin of `key`'s value; [`Origin::Default`] when unset.
    pub fn origin(&self, key: &str) -> Origin {
        self.0.get(key).map_or(Origin::Default, |(_, origin)| origin.clone())
    }

    /// The error for `key`'s value: as written when a layer set it, else
    /// `shown` (its built-in default, in file syntax).
    pub(super) fn invalid(&self, key: &str, shown: Option<Scalar>, reason: String) -> ConfigError {
        let value = self.get(key).or(shown.as_ref());
        ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.map_or_else(|| "(not set)".to_owned(), ToString::to_string),
            origin: self.origin(key),
            reason,
        }
    }

    /// The error for two keys whose values cannot go together, each named
    /// with its origin.
    pub(super) fn conflict(
        &self,
        first: &'static str,
        second: &'static str,
        reason: String,
    ) -> ConfigError {
        ConfigError::Conflict {
            first,
            first_origin: self.origin(first),
            second,
            second_origin: self.origin(second),
            reason,
        }
    }
}

/// Checks the shape of the merged tree (tables of known keys holding
/// single values) and collects each value with its origin.
pub(super) fn check(root: &Value, context: &OriginContext<'_>) -> Result<Values, ConfigError> {
    let mut values = Values::default();
    check_table(None, root, context, &mut values)?;
    Ok(values)
}

/// Checks the entries of the table at `path` (`None` for the root),
/// descending into the known tables under it.
fn check_table(
    path: Option<&str>,
    table: &Value,
    context: &OriginContext<'_>,
    values: &mut Values,
) -> Result<(), ConfigError> {
    for (name, value) in sorted(table) {
        let key = match path {
            Some(path) => format!("{path}.{name}"),
            None => name.clone(),
        };
        if is_table(&key) {
            let ValueKind::Table(_) = value.kind else {
                return Err(ConfigError::NotASection { origin: context.resolve(&key), key });
            };
            check_table(Some(&key), value, context, values)?;
            continue;
        }
        if spec(&key).is_none() {
            return Err(unknown(key, path.is_some(), value, context));
        }
        let Some(scalar) = Scalar::of(&value.kind) else {
            let shape = match value.kind {
                ValueKind::Table(_) => "(a table)",
                ValueKind::Array(_) => "(a list)",
                _ => "(nothing)",
            };
            return Err(ConfigError::InvalidValue {
                origin: context.resolve(&first_leaf(key.clone(), value)),
                key,
                value: shape.to_owned(),
                reason: "expected a single value".to_owned(),
            });
        };
        let origin = context.resolve(&key);
        values.0.insert(key, (scalar, origin));
    }
    Ok(())
}

/// The entries of a table, sorted by key so errors are deterministic.
fn sorted(value: &Value) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = match &value.kind {
        ValueKind::Table(table) => table.iter().collect(),
        _ => Vec::new(),
    };
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

/// The error for the unknown `key`. An unknown table inside a known one
/// (`[alerts.memory_hgh]`) is named by the full path of its first key
/// (`alerts.memory_hgh.threshold`) when that is a likely typo of a known
/// key, so the suggestion can name the key to write.
fn unknown(key: String, nested: bool, value: &Value, context: &OriginContext<'_>) -> ConfigError {
    let leaf = first_leaf(key.clone(), value);
    let origin = context.resolve(&leaf);
    if nested
        && leaf != key
        && let Some(suggestion) = suggest(&leaf)
    {
        return ConfigError::UnknownKey { key: leaf, origin, suggestion: Some(suggestion) };
    }
    ConfigError::UnknownKey { suggestion: suggest(&key), origin, key }
}

/// The full dotted path of the first value under `value` (its own if it
/// is not a table): the key under which the variable or flag that created
/// it is recorded.
fn first_leaf(path: String, value: &Value) -> String {
    match sorted(value).into_iter().next() {
        Some((name, child)) => first_leaf(format!("{path}.{name}"), child),
        None => path,
    }
}
