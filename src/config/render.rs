//! Rendering a configuration back to TOML.
//!
//! Owns: [`render_effective`] (what `vramd check-config` prints): every key
//! in catalogue order with its summary and range, each value written
//! through serde in file syntax; [`key_values`], those values, which a
//! reload also compares. The text loads back to the same configuration.

use std::fmt::Write as _;

use serde_json::Value;

use super::Document;
use super::catalogue::KeySpec;
use crate::setting::{Form, format_duration};

/// The effective configuration as TOML, every key present: optional keys
/// that are not set appear commented out.
pub fn render_effective<D: Document>(document: &D) -> String {
    let mut out = String::from(
        "# Effective vramd configuration: built-in defaults, then the configuration\n\
         # file, then VRAMD_<SECTION>__<KEY> environment variables, then command-line\n\
         # options. See docs/configuration.md.\n",
    );
    let mut table = "";
    for (spec, value) in key_values(document) {
        // A rule's keys go in its own table, `[alerts.memory_high]`.
        if spec.table() != table {
            table = spec.table();
            let _ = write!(out, "\n[{table}]\n");
        }
        let _ = writeln!(out, "# {} ({})", spec.summary.trim(), spec.range());
        let _ = match to_toml(&value) {
            Some(value) => writeln!(out, "{} = {value}", spec.name()),
            None => writeln!(out, "# {} = (not set)", spec.name()),
        };
    }
    out
}

/// Every key with its value as the file writes it (`Null`: not set), in
/// catalogue order.
pub fn key_values<D: Document>(document: &D) -> Vec<(&'static KeySpec, Value)> {
    // Serializing plain structs of strings, numbers and booleans cannot
    // fail; were it to, every key would show as not set.
    let tree = serde_json::to_value(document).unwrap_or(Value::Null);
    let value = |spec: &KeySpec| {
        let value = spec.key.split('.').fold(&tree, |node, name| &node[name]);
        match (&spec.form, value) {
            (Form::Duration, Value::Object(parts)) => {
                let part = |name: &str| parts.get(name).and_then(Value::as_u64).unwrap_or(0);
                let nanos = u32::try_from(part("nanos")).unwrap_or(0);
                Value::from(format_duration(std::time::Duration::new(part("secs"), nanos)))
            }
            _ => value.clone(),
        }
    };
    D::keys().iter().map(|spec| (spec, value(spec))).collect()
}

/// One value in TOML syntax; `None` when it is not set.
fn to_toml(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(toml_string(text)),
        // Debug keeps the decimal point ("1.0"), which TOML requires.
        Value::Number(number) if number.is_f64() => number.as_f64().map(|x| format!("{x:?}")),
        // Beyond TOML's integers (only a seed can be): a string, which
        // reads back as the same number.
        Value::Number(number) if number.as_i64().is_none() && number.is_u64() => {
            Some(toml_string(&number.to_string()))
        }
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(value) => Some(value.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// A TOML basic string with every character that needs it escaped.
fn toml_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_for_toml() {
        assert_eq!(toml_string("plain"), "\"plain\"");
        assert_eq!(toml_string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }
}
