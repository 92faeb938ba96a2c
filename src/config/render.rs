//! Rendering a validated [`Config`] back to configuration values and TOML.
//!
//! Owns: [`entries`] (every key with its value in file syntax; also the
//! built-in default layer of `load`) and [`render_effective`] (what
//! `vramd check-config` prints). The text loads back to the same `Config`.
//! Depends only on the config types, keys and units.

use std::fmt::Write as _;
use std::path::Path;

use super::defaults::{DEFAULT_SIMULATOR_GPUS, DEFAULT_SIMULATOR_SEED};
use super::keys::spec;
use super::types::{Config, LogFormat, RuleConfig, SourceSelection};
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

fn number(value: f64) -> Option<TomlValue> {
    Some(TomlValue::Float(value))
}

/// The keys every rule has, in catalogue order, for `[alerts.<rule>]`.
macro_rules! rule_entries {
    ($rule:literal, $config:expr) => {{
        let rule: &RuleConfig = $config;
        [
            (concat!("alerts.", $rule, ".enabled"), boolean(rule.enabled)),
            (concat!("alerts.", $rule, ".threshold"), number(rule.threshold)),
            (concat!("alerts.", $rule, ".clear"), number(rule.clear)),
            (concat!("alerts.", $rule, ".for"), text(format_duration(rule.for_duration))),
            (concat!("alerts.", $rule, ".severity"), text(rule.severity.as_str())),
        ]
    }};
}

/// Every key of [`KEYS`](super::KEYS), in its order, with the value `config` has for it;
/// `None` for an optional key that is not set. The simulator keys show
/// their defaults when the simulator is not selected, since they are unused.
pub fn entries(config: &Config) -> Vec<(&'static str, Option<TomlValue>)> {
    let server = &config.server;
    let sampler = &config.sampler;
    let source = &config.source;
    let nvml = &config.nvml;
    let probe = &config.probe;
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
    let alerts = &config.alerts;
    let rules = &alerts.rules;
    let notify = &config.notify;
    let mut entries = vec![
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
        ("api.max_event_streams", count(config.api.max_event_streams.get())),
        ("api.max_stream_backlog", count(config.api.max_stream_backlog.get())),
        ("source.simulate", simulate),
        ("source.replay", replay),
        ("source.record", source.record.as_deref().and_then(path)),
        ("source.speed", Some(TomlValue::Float(source.speed))),
        ("source.max_trace_line", text(format_size(source.max_trace_line_bytes as u64))),
        ("source.max_trace_size", text(format_size(source.max_trace_bytes))),
        ("simulator.gpus", Some(TomlValue::Int(i64::from(gpus)))),
        ("simulator.seed", Some(seed)),
        ("nvml.library_path", nvml.library_path.as_deref().and_then(path)),
        ("nvml.require_gpu", boolean(nvml.require_gpu)),
        ("nvml.init_timeout", text(format_duration(nvml.init_timeout))),
        ("nvml.pcie_throughput", boolean(nvml.pcie_throughput)),
        ("nvml.max_cmdline_bytes", text(format_size(nvml.max_cmdline_bytes as u64))),
        ("nvml.xid_events", boolean(nvml.xid_events)),
        ("probe.enabled", boolean(probe.enabled)),
        ("probe.interval", text(format_duration(probe.interval))),
        ("probe.timeout", text(format_duration(probe.timeout))),
        ("probe.min_free", text(format_size(probe.min_free_bytes))),
        ("probe.margin", text(format_size(probe.margin_bytes))),
        ("probe.block_size", text(format_size(probe.block_bytes))),
        ("probe.samples", Some(TomlValue::Int(i64::from(probe.samples)))),
        ("probe.headroom", boolean(probe.headroom)),
        ("probe.headroom_time_budget", text(format_duration(probe.headroom_time_budget))),
        ("probe.max_backoff", text(format_duration(probe.max_backoff))),
        ("probe.cuda_library", probe.cuda_library.as_deref().and_then(path)),
        ("log.format", text(format)),
        ("log.level", text(config.log.level.clone())),
        ("alerts.evaluation_interval", text(format_duration(alerts.evaluation_interval))),
        ("alerts.resolved_retention", text(format_duration(alerts.resolved_retention))),
        ("alerts.max_alerts", count(alerts.max_alerts.get())),
        ("alerts.trend_window", text(format_duration(alerts.trend_window))),
    ];
    entries.extend(rule_entries!("memory_high", &rules.memory_high));
    entries.extend(rule_entries!("exhaustion_forecast", &rules.exhaustion_forecast));
    entries.push(("alerts.exhaustion_forecast.min_fit", number(rules.exhaustion_min_fit)));
    entries.extend(rule_entries!("leak_suspected", &rules.leak_suspected));
    entries.push(("alerts.leak_suspected.window", text(format_duration(rules.leak_window))));
    entries
        .extend(rule_entries!("allocator_fragmentation_high", &rules.allocator_fragmentation_high));
    entries.push((
        "alerts.allocator_fragmentation_high.min_reserved",
        text(format_size(rules.fragmentation_min_reserved_bytes)),
    ));
    entries.extend(rule_entries!("allocator_retries", &rules.allocator_retries));
    entries.push(("alerts.allocator_retries.window", text(format_duration(rules.retries_window))));
    entries.extend(rule_entries!("allocator_oom", &rules.allocator_oom));
    entries.push(("alerts.allocator_oom.window", text(format_duration(rules.oom_window))));
    entries.extend(rule_entries!("device_lost", &rules.device_lost));
    entries.extend(rule_entries!("xid_error", &rules.xid_error));
    entries.push(("alerts.xid_error.window", text(format_duration(rules.xid_window))));
    entries.extend(rule_entries!("probe_free_mismatch", &rules.probe_free_mismatch));
    entries.extend(rule_entries!("probe_headroom_low", &rules.probe_headroom_low));
    entries.extend([
        ("notify.alertmanager_url", notify.alertmanager_url.clone().and_then(text)),
        ("notify.webhook_url", notify.webhook_url.clone().and_then(text)),
        ("notify.queue_capacity", count(notify.queue_capacity.get())),
        ("notify.timeout", text(format_duration(notify.timeout))),
        ("notify.resend_interval", text(format_duration(notify.resend_interval))),
        ("notify.max_retries", Some(TomlValue::Int(i64::from(notify.max_retries)))),
        ("notify.retry_backoff_max", text(format_duration(notify.retry_backoff_max))),
        ("notify.external_url", notify.external_url.clone().and_then(text)),
        ("ingest.token_file", config.ingest.token_file.as_deref().and_then(path)),
        ("ingest.ttl", text(format_duration(config.ingest.ttl))),
        ("ingest.rate_limit", count(config.ingest.rate_limit_per_second.get())),
        ("ingest.max_reporters", count(config.ingest.max_reporters.get())),
        ("ingest.max_devices", count(config.ingest.max_devices.get())),
        ("ingest.max_stats", count(config.ingest.max_stats.get())),
    ]);
    entries
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
    use crate::config::KEYS;
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
