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

/// One value in TOML syntax, escaped as TOML needs; `None` when not set.
fn to_toml(value: &Value) -> Option<String> {
    let value = match value {
        Value::String(text) => toml::Value::String(text.clone()),
        // Beyond TOML's integers (only a seed can be): a string, which
        // reads back as the same number.
        Value::Number(number) => match (number.as_i64(), number.as_u64()) {
            (Some(whole), _) => toml::Value::Integer(whole),
            (None, Some(whole)) => toml::Value::String(whole.to_string()),
            (None, None) => toml::Value::Float(number.as_f64()?),
        },
        Value::Bool(value) => toml::Value::Boolean(*value),
        Value::Null | Value::Array(_) | Value::Object(_) => return None,
    };
    Some(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_as_toml_reads_them() {
        let read = |value: Value| {
            let text = format!("key = {}", to_toml(&value).unwrap());
            text.parse::<toml::Table>().unwrap()["key"].clone()
        };
        let tricky = "a\"b\\c\nd\u{1}'''";
        assert_eq!(read(Value::from(tricky)), toml::Value::String(tricky.into()));
        assert_eq!(to_toml(&Value::from(1.0)).as_deref(), Some("1.0"));
        assert_eq!(read(Value::from(u64::MAX)), toml::Value::String(u64::MAX.to_string()));
        assert_eq!(to_toml(&Value::Null), None);
    }
}
