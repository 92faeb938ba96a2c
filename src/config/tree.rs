//! The merged tree of values: layers set into it key by key, the walk that
//! refuses unknown keys with their full path and origin (serde's
//! `deny_unknown_fields` names only the last segment and no layer), and the
//! reading of each value as its key's form writes it, so that serde then
//! reads plain numbers, booleans and `{secs, nanos}` durations.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::catalogue::{KeySpec, suggest, tables};
use super::error::{ConfigError, Origin};
use crate::setting::{Accepts, Form, parse_duration, parse_size};

/// Dotted key → the layer that set it; keys no layer set are defaults.
pub(super) type Origins = BTreeMap<String, Origin>;

/// Sets `value` at the dotted `key`, making the tables on the way.
pub(super) fn set(tree: &mut Map<String, Value>, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            tree.insert(key.to_owned(), value);
        }
        Some((table, rest)) => {
            let entry = tree.entry(table).or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            if let Some(inner) = entry.as_object_mut() {
                set(inner, rest, value);
            }
        }
    }
}

/// Removes and returns the value at the dotted `key`.
pub(super) fn take(tree: &mut Map<String, Value>, key: &str) -> Option<Value> {
    match key.split_once('.') {
        None => tree.remove(key),
        Some((table, rest)) => match tree.get_mut(table) {
            Some(Value::Object(inner)) => take(inner, rest),
            _ => None,
        },
    }
}

/// Every leaf of `tree` by dotted key; an empty table (`[sampler]` alone)
/// sets nothing.
pub(super) fn leaves(prefix: &str, tree: &Map<String, Value>, out: &mut Vec<(String, Value)>) {
    for (name, value) in tree {
        let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
        match value {
            Value::Object(inner) if !inner.is_empty() => leaves(&key, inner, out),
            Value::Object(_) => {}
            other => out.push((key, other.clone())),
        }
    }
}

/// Refuses keys the catalogue does not know, tables written as values and
/// values written as tables or lists.
pub(super) fn check_shape(
    keys: &[KeySpec],
    tree: &Map<String, Value>,
    path: &str,
    origins: &Origins,
) -> Result<(), ConfigError> {
    let tables = tables(keys);
    let origin = |key: &str| origins.get(key).cloned().unwrap_or(Origin::Default);
    let mut entries: Vec<(&String, &Value)> = tree.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    for (name, value) in entries {
        let key = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        if tables.contains(&key.as_str()) {
            let Value::Object(inner) = value else {
                return Err(ConfigError::NotASection { origin: origin(&key), key });
            };
            check_shape(keys, inner, &key, origins)?;
            continue;
        }
        let leaf = first_leaf(key.clone(), value);
        if !keys.iter().any(|spec| spec.key == key) {
            // An unknown table inside a known one (`[alerts.memory_hgh]`)
            // is named by its first key when that is a likely typo.
            if !path.is_empty()
                && leaf != key
                && let Some(suggestion) = suggest(keys, &leaf)
            {
                let origin = origin(&leaf);
                return Err(ConfigError::UnknownKey {
                    key: leaf,
                    origin,
                    suggestion: Some(suggestion),
                });
            }
            let (suggestion, origin) = (suggest(keys, &key), origin(&leaf));
            return Err(ConfigError::UnknownKey { key, origin, suggestion });
        }
        let shape = match value {
            Value::Object(_) => "(a table)",
            Value::Array(_) => "(a list)",
            Value::Null => "(nothing)",
            _ => continue,
        };
        let reason = "expected a single value".to_owned();
        return Err(ConfigError::InvalidValue {
            origin: origin(&leaf),
            key,
            value: shape.into(),
            reason,
        });
    }
    Ok(())
}

/// The full dotted path of the first value under `value` (its own if it
/// is not a table): the key its variable or flag is recorded under.
fn first_leaf(path: String, value: &Value) -> String {
    match value.as_object().and_then(|table| table.iter().min_by(|a, b| a.0.cmp(b.0))) {
        Some((name, child)) => first_leaf(format!("{path}.{name}"), child),
        None => path,
    }
}

/// `written` as its key's form writes it, ready for serde, or the reason
/// it is refused. Variables and flags are always strings.
pub(super) fn read(spec: &KeySpec, written: &Value) -> Result<Value, String> {
    let text = written.as_str().map(str::trim);
    match &spec.form {
        Form::Duration => {
            let text =
                text.ok_or("expected a duration string with a unit, such as \"250ms\" or \"1h\"")?;
            let duration = parse_duration(text)?;
            Ok(serde_json::json!({ "secs": duration.as_secs(), "nanos": duration.subsec_nanos() }))
        }
        Form::Size => match written {
            Value::String(text) => {
                parse_size(text).map(Value::from).map_err(|error| error.to_string())
            }
            Value::Number(number) if number.is_u64() => Ok(written.clone()),
            Value::Number(number) if number.is_i64() => Err("sizes cannot be negative".into()),
            _ => {
                Err("expected a whole number of bytes or a size such as \"64KiB\" or \"1.5GiB\""
                    .into())
            }
        },
        Form::Integer => {
            let whole: i128 = match (written, text) {
                (Value::Number(number), _) => {
                    number.as_i64().map(i128::from).or(number.as_u64().map(i128::from))
                }
                (_, Some(text)) => text.parse().ok(),
                _ => None,
            }
            .ok_or("expected a whole number")?;
            if let Accepts::Int(min, max) = spec.accepts
                && (whole < i128::from(min) || whole > i128::from(max))
            {
                return Err(format!("must be between {min} and {max}"));
            }
            Ok(u64::try_from(whole).map_or_else(|_| Value::from(whole as i64), Value::from))
        }
        Form::Flag => match (written, text) {
            (Value::Bool(_), _) => Ok(written.clone()),
            (_, Some("true")) => Ok(Value::Bool(true)),
            (_, Some("false")) => Ok(Value::Bool(false)),
            _ => Err("expected a boolean: true or false".into()),
        },
        Form::Number { sizes } => {
            let number = match (written, text) {
                (Value::Number(number), _) => number.as_f64(),
                (_, Some(text)) => text.parse().ok().or_else(|| {
                    sizes.then(|| parse_size(text).ok()).flatten().map(|bytes| bytes as f64)
                }),
                _ => None,
            };
            let words = match spec.accepts {
                Accepts::Words(words) => words,
                _ => "",
            };
            match (number, text) {
                // JSON has no infinities: refused here, with the key's range.
                (Some(number), _) if !number.is_finite() => {
                    Err(format!("must be a finite number ({words})"))
                }
                (Some(number), _) => Ok(Value::from(number)),
                (None, Some(text)) if *sizes => Err(parse_size(text)
                    .err()
                    .map_or_else(|| "expected a number".to_owned(), |error| error.to_string())),
                _ => Err("expected a number".into()),
            }
        }
        Form::Text => text.map(Value::from).ok_or_else(|| "expected a string".into()),
        Form::Path => match text {
            Some("") => Err("expected a file path".into()),
            Some(_) => Ok(written.clone()),
            None => Err("expected a string".into()),
        },
        Form::Address => {
            let Some(text) = text else { return Err("expected a string".into()) };
            let address = text.parse::<std::net::SocketAddr>().ok();
            address.map(|address| Value::from(address.to_string())).ok_or_else(|| {
                "expected IP:port, such as 127.0.0.1:9477, 0.0.0.0:9477 or [::]:9477 \
                 (host names are not resolved)"
                    .into()
            })
        }
        Form::Choice(names) => match text {
            Some(name) if names.contains(&name) => Ok(Value::from(name)),
            Some(_) => Err(format!("expected {}", choices(names))),
            None => Err("expected a string".into()),
        },
    }
}

/// `"a", "b" or "c"`.
fn choices(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("{name:?}")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.concat(),
    }
}
