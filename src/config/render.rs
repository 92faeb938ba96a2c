//! Rendering a validated [`Config`] back to configuration values and TOML.
//!
//! Owns: [`entries`] (every key with its value in file syntax; also the
//! built-in default layer of `load`) and [`render_effective`] (what
//! `vramd check-config` prints). The text loads back to the same `Config`.
//! Depends only on the config types, keys and units.

use std::fmt::Write as _;
use std::path::Path;

use super::defaults::{DEFAULT_SIMULATOR_GPUS, DEFAULT_SIMULATOR_SEED};
use super::keys::KEYS;
use super::types::{Config, LogFormat, SourceSelection};
use super::units::{format_duration, format_size};

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

fn text(value: impl Into<String>) -> Option<TomlValue> {
    Some(TomlValue::Str(value.into()))
}

fn count(value: usize) -> Option<TomlValue> {
    // Every count is validated far below i64::MAX; a string keeps any
    // other value exact anyway.
    Some(i64::try_from(value).map_or_else(|_| TomlValue::Str(value.to_string()), TomlValue::Int))
}

fn boolean(value: bool) -> Option<TomlValue> {
    Some(TomlValue::Bool(value))
}

fn path(value: &Path) -> Option<TomlValue> {
    text(value.to_string_lossy())
}

/// Every key of [`KEYS`], in its order, with the value `config` has for it;
/// `None` for an optional key that is not set. The simulator keys show
/// their defaults when the simulator is not selected, since they are unused.
pub fn entries(config: &Config) -> Vec<(&'static str, Option<TomlValue>)> {
    let server = &config.server;
    let sampler = &config.sampler;
    let source = &config.source;
    let nvml = &config.nvml;
    let (simulate, replay, gpus, seed) = match &source.selection {
        SourceSelection::Driver => (None, None, DEFAULT_SIMULATOR_GPUS, DEFAULT_SIMULATOR_SEED),
        SourceSelection::Simulate(simulator) => {
            (text(simulator.scenario.name()), None, simulator.gpus, simulator.seed)
        }
        SourceSelection::Replay { path: replay } => {
            (None, path(replay), DEFAULT_SIMULATOR_GPUS, DEFAULT_SIMULATOR_SEED)
        }
    };
    let seed =
        i64::try_from(seed).map_or_else(|_| TomlValue::Str(seed.to_string()), TomlValue::Int);
    let format = match config.log.format {
        LogFormat::Text => "text",
        LogFormat::Json => "json",
    };
    vec![
        ("server.listen", text(server.listen.to_string())),
        ("server.request_timeout", text(format_duration(server.request_timeout))),
        ("server.max_request_body", text(format_size(server.max_request_body_bytes as u64))),
        ("server.max_concurrent_requests", count(server.max_concurrent_requests.get())),
        ("server.shutdown_timeout", text(format_duration(server.shutdown_timeout))),
        ("sampler.fast_interval", text(format_duration(sampler.fast_interval))),
        ("sampler.slow_interval", text(format_duration(sampler.slow_interval))),
        ("sampler.call_timeout", text(format_duration(sampler.call_timeout))),
        ("sampler.max_processes_per_device", count(sampler.max_processes_per_device.get())),
        ("sampler.discovery_retry_max", text(format_duration(sampler.discovery_retry_max))),
        ("history.retention", text(format_duration(config.history.retention))),
        ("metrics.peak_window", text(format_duration(config.metrics.peak_window))),
        ("api.max_history_points", count(config.api.max_history_points.get())),
        ("source.simulate", simulate),
        ("source.replay", replay),
        ("source.record", source.record.as_deref().and_then(path)),
        ("source.speed", Some(TomlValue::Float(source.speed))),
        ("source.max_trace_line", text(format_size(source.max_trace_line_bytes as u64))),
        ("simulator.gpus", Some(TomlValue::Int(i64::from(gpus)))),
        ("simulator.seed", Some(seed)),
        ("nvml.library_path", nvml.library_path.as_deref().and_then(path)),
        ("nvml.require_gpu", boolean(nvml.require_gpu)),
        ("nvml.init_timeout", text(format_duration(nvml.init_timeout))),
        ("nvml.pcie_throughput", boolean(nvml.pcie_throughput)),
        ("nvml.max_cmdline_bytes", text(format_size(nvml.max_cmdline_bytes as u64))),
        ("nvml.xid_events", boolean(nvml.xid_events)),
        ("log.format", text(format)),
        ("log.level", text(config.log.level.clone())),
    ]
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
    let mut section = "";
    for (key, value) in entries(config) {
        // `entries_cover_every_key_in_order` keeps both lists in step.
        let Some(spec) = KEYS.iter().find(|spec| spec.key == key) else { continue };
        if spec.section() != section {
            section = spec.section();
            let _ = write!(out, "\n[{section}]\n");
        }
        let _ = writeln!(out, "# {} ({})", spec.summary, spec.range);
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
    use crate::config::defaults::defaults;

    #[test]
    fn entries_cover_every_key_in_order() {
        let keys: Vec<&str> = entries(&defaults()).into_iter().map(|(key, _)| key).collect();
        let known: Vec<&str> = KEYS.iter().map(|spec| spec.key).collect();
        assert_eq!(keys, known);
    }

    #[test]
    fn rendered_defaults_show_every_key() {
        let text = render_effective(&defaults());
        for spec in KEYS {
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
    }

    #[test]
    fn strings_are_escaped_for_toml() {
        assert_eq!(toml_string("plain"), "\"plain\"");
        assert_eq!(toml_string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }
}
