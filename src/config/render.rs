//! Rendering a validated [`Config`] back to TOML.
//!
//! Owns: [`render_effective`] (what `vramd check-config` prints): the
//! configuration written through serde in file syntax, every key in
//! catalogue order with its summary and range; [`key_values`], the values
//! it prints. The text loads back to the
//! same `Config`. Depends only on the config schema and keys.

use std::fmt::Write as _;

use serde_json::Value;

use super::keys::{KEYS, KeySpec};
use super::sections::{Config, Document};

/// The effective configuration as TOML, every key present: optional keys
/// that are not set appear commented out. Loading the text as a
/// configuration file gives back `config`.
pub fn render_effective(config: &Config) -> String {
    let mut out = String::from(
        "# Effective vramd configuration: built-in defaults, then the configuration\n\
         # file, then VRAMD_<SECTION>__<KEY> environment variables, then command-line\n\
         # options. See docs/configuration.md.\n",
    );
    let mut table = "";
    for (spec, value) in key_values(config) {
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
/// catalogue order: what `check-config` prints and a reload compares.
pub fn key_values(config: &Config) -> Vec<(&'static KeySpec, Value)> {
    // Serializing plain structs of strings, numbers and booleans cannot
    // fail; were it to, every key would show as not set.
    let tree = serde_json::to_value(Document::from(config)).unwrap_or(Value::Null);
    let value = |key: &str| key.split('.').fold(&tree, |node, name| &node[name]).clone();
    KEYS.iter().map(|spec| (spec, value(spec.key))).collect()
}

/// One value in TOML syntax; `None` when it is not set.
fn to_toml(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(toml_string(text)),
        // Debug keeps the decimal point ("1.0"), which TOML requires.
        Value::Number(number) if number.is_f64() => number.as_f64().map(|x| format!("{x:?}")),
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
    use crate::config::defaults;

    /// Only the keys whose default is "not set" read as absent: a key the
    /// rendered document forgot would read absent on both sides of a
    /// reload, and a change to it would never be named.
    #[test]
    fn only_optional_keys_read_not_set_at_the_defaults() {
        let not_set: Vec<&str> = key_values(&defaults())
            .into_iter()
            .filter(|(_, value)| value.is_null())
            .map(|(spec, _)| spec.key)
            .collect();
        assert_eq!(
            not_set,
            [
                "server.web_config",
                "source.simulate",
                "source.replay",
                "source.record",
                "nvml.library_path",
                "probe.cuda_library",
                "notify.alertmanager_url",
                "notify.webhook_url",
                "notify.external_url",
                "ingest.token_file",
                "ingest.snapshot_dir",
            ]
        );
    }

    #[test]
    fn rendered_defaults_show_every_key() {
        let text = render_effective(&defaults());
        for spec in KEYS.iter() {
            assert!(
                text.contains(&format!("\n{} = ", spec.name()))
                    || text.contains(&format!("\n# {} = (not set)", spec.name())),
                "{} missing from:\n{text}",
                spec.key
            );
        }
        assert!(text.contains("\nfast_interval = \"250ms\"\n"), "{text}");
        assert!(text.contains("\nspeed = 1.0\n"), "{text}");
        assert!(text.contains("\n# replay = (not set)\n"), "{text}");
        assert!(text.contains("\n[nvml]\n"), "{text}");
        assert!(text.contains("\n# library_path = (not set)\n"), "{text}");
        assert!(text.contains("\nxid_events = true\n"), "{text}");
        assert!(text.contains("\nmax_cmdline_bytes = \"256B\"\n"), "{text}");
        for line in [
            "\n[alerts]\n",
            "\nevaluation_interval = \"5s\"\n",
            "\n[alerts.memory_high]\n",
            "\nthreshold = 0.92\n",
            "\nfor = \"1m\"\n",
            "\nseverity = \"warning\"\n",
            "\n[alerts.allocator_fragmentation_high]\n",
            "\nmin_reserved = \"2GiB\"\n",
            "\n[notify]\n",
            "\n# alertmanager_url = (not set)\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }

    #[test]
    fn strings_are_escaped_for_toml() {
        assert_eq!(toml_string("plain"), "\"plain\"");
        assert_eq!(toml_string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }
}
