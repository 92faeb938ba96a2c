//! Rendering a validated [`Config`] back to configuration values and TOML.
//!
//! Owns: [`TomlValue`] (a value in file syntax; the schema gives every
//! key's, which is also the built-in default layer of `load`) and
//! [`render_effective`] (what `vramd check-config` prints). The text loads
//! back to the same `Config`. Depends only on the config schema and keys.

use std::fmt::Write as _;

use super::keys::spec;
use super::sections::{Config, entries};

/// A value in TOML syntax.
#[derive(Clone, Debug, PartialEq)]
pub enum TomlValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl TomlValue {
    /// The value as the configuration library stores it.
    pub fn to_value_kind(&self) -> config::ValueKind {
        match self {
            TomlValue::Str(text) => config::ValueKind::String(text.clone()),
            TomlValue::Int(value) => config::ValueKind::I64(*value),
            TomlValue::Float(value) => config::ValueKind::Float(*value),
            TomlValue::Bool(value) => config::ValueKind::Boolean(*value),
        }
    }

    fn to_toml(&self) -> String {
        match self {
            TomlValue::Str(text) => toml_string(text),
            TomlValue::Int(value) => value.to_string(),
            // Debug keeps the decimal point ("1.0"), which TOML requires.
            TomlValue::Float(value) => format!("{value:?}"),
            TomlValue::Bool(value) => value.to_string(),
        }
    }
}

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
    for (key, value) in entries(config) {
        // `entries_cover_every_key_in_order` keeps both lists in step.
        let Some(spec) = spec(key) else { continue };
        // A rule's keys go in its own table, `[alerts.memory_high]`.
        if spec.table() != table {
            table = spec.table();
            let _ = write!(out, "\n[{table}]\n");
        }
        let _ = writeln!(out, "# {} ({})", spec.summary, spec.range());
        match value {
            Some(value) => {
                let _ = writeln!(out, "{} = {}", spec.name(), value.to_toml());
            }
            None => {
                let _ = writeln!(out, "# {} = (not set)", spec.name());
            }
        }
    }
    out
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
    use crate::config::{KEYS, defaults};

    #[test]
    fn entries_cover_every_key_in_order() {
        let keys: Vec<&str> = entries(&defaults()).into_iter().map(|(key, _)| key).collect();
        let known: Vec<&str> = KEYS.iter().map(|spec| spec.key).collect();
        assert_eq!(keys, known);
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
