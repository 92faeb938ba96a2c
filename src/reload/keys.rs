//! Which configuration keys a reload applies and which need a restart,
//! written once: [`LIVE`] names the live keys (whole sections or single
//! keys); every other key is in [`RESTART`], with how to read its value so
//! a change can be named. Tests keep both lists equal to the key catalogue
//! and to the table in `docs/configuration.md` ("Reloading").
//!
//! Depends only on `config`'s public `Config`.

use std::fmt;

use crate::config::{Config, RulesConfig, SourceSelection};

/// Live keys: a section (every key in it) or one key, and what applying it
/// means.
pub const LIVE: [(&str, &str); 3] = [
    ("alerts", "rules, thresholds, windows and evaluation; alert states are kept"),
    ("notify", "notifiers are rebuilt when their settings change"),
    ("log.level", "the log filter"),
];

/// A restart-only key and how to read its value (as text, to compare and
/// name it).
pub struct RestartKey {
    pub key: &'static str,
    pub value: fn(&Config) -> String,
}

macro_rules! restart_keys {
    ($($key:literal => |$config:ident| $value:expr;)*) => {
        /// Every key that only changes with a restart: what it sizes or
        /// binds is built once (the listener, the source, the sampler,
        /// history, the report store, the runtime, the log format).
        pub const RESTART: &[RestartKey] = &[$(RestartKey {
            key: $key,
            value: |$config: &Config| format!("{:?}", $value),
        },)*];
    };
}

fn simulator(config: &Config) -> Option<&crate::config::SimulatorConfig> {
    match &config.source.selection {
        SourceSelection::Simulate(simulator) => Some(simulator),
        _ => None,
    }
}

restart_keys! {
    "server.listen" => |c| c.server.listen;
    "server.request_timeout" => |c| c.server.request_timeout;
    "server.max_request_body" => |c| c.server.max_request_body_bytes;
    "server.max_concurrent_requests" => |c| c.server.max_concurrent_requests;
    "server.shutdown_timeout" => |c| c.server.shutdown_timeout;
    "server.max_concurrent_scrapes" => |c| c.server.max_concurrent_scrapes;
    "server.max_connections" => |c| c.server.max_connections;
    "server.header_read_timeout" => |c| c.server.header_read_timeout;
    "server.idle_timeout" => |c| c.server.idle_timeout;
    "server.web_config" => |c| c.server.web_config;
    "server.web_config_poll_interval" => |c| c.server.web_config_poll_interval;
    "server.auth_cache_size" => |c| c.server.auth_cache_size;
    "ingest.max_oom_events" => |c| c.ingest.max_oom_events;
    "ingest.snapshot_dir" => |c| c.ingest.snapshot_dir;
    "ingest.max_snapshot_bytes" => |c| c.ingest.max_snapshot_bytes;
    "ingest.max_snapshot_upload" => |c| c.ingest.max_snapshot_upload;
    "kubernetes.enabled" => |c| c.kubernetes.enabled;
    "kubernetes.pod_resources_socket" => |c| c.kubernetes.pod_resources_socket;
    "kubernetes.runtime_socket" => |c| c.kubernetes.runtime_socket;
    "kubernetes.refresh_interval" => |c| c.kubernetes.refresh_interval;
    "kubernetes.call_timeout" => |c| c.kubernetes.call_timeout;
    "kubernetes.max_containers" => |c| c.kubernetes.max_containers;
    "sampler.fast_interval" => |c| c.sampler.fast_interval;
    "sampler.slow_interval" => |c| c.sampler.slow_interval;
    "sampler.call_timeout" => |c| c.sampler.call_timeout;
    "sampler.max_processes_per_device" => |c| c.sampler.max_processes_per_device;
    "sampler.discovery_retry_max" => |c| c.sampler.discovery_retry_max;
    "sampler.max_devices" => |c| c.sampler.max_devices;
    "sampler.max_blocking_threads" => |c| c.sampler.max_blocking_threads;
    "history.retention" => |c| c.history.retention;
    "metrics.peak_window" => |c| c.metrics.peak_window;
    "api.max_history_points" => |c| c.api.max_history_points;
    "api.max_event_streams" => |c| c.api.max_event_streams;
    "api.max_stream_backlog" => |c| c.api.max_stream_backlog;
    "source.simulate" => |c| simulator(c).map(|s| s.scenario);
    "source.replay" => |c| match &c.source.selection {
        SourceSelection::Replay { path } => Some(path),
        _ => None,
    };
    "source.record" => |c| c.source.record;
    "source.record_mode" => |c| c.source.record_mode;
    "source.record_keep" => |c| c.source.record_keep;
    "source.speed" => |c| c.source.speed;
    "source.max_trace_line" => |c| c.source.max_trace_line_bytes;
    "source.max_trace_size" => |c| c.source.max_trace_bytes;
    "simulator.gpus" => |c| simulator(c).map(|s| s.gpus);
    "simulator.seed" => |c| simulator(c).map(|s| s.seed);
    "simulator.container_ids" => |c| simulator(c).map(|s| s.container_ids);
    "nvml.library_path" => |c| c.nvml.library_path;
    "nvml.require_gpu" => |c| c.nvml.require_gpu;
    "nvml.init_timeout" => |c| c.nvml.init_timeout;
    "nvml.pcie_throughput" => |c| c.nvml.pcie_throughput;
    "nvml.max_cmdline_bytes" => |c| c.nvml.max_cmdline_bytes;
    "nvml.xid_events" => |c| c.nvml.xid_events;
    "probe.enabled" => |c| c.probe.enabled;
    "probe.interval" => |c| c.probe.interval;
    "probe.timeout" => |c| c.probe.timeout;
    "probe.min_free" => |c| c.probe.min_free_bytes;
    "probe.margin" => |c| c.probe.margin_bytes;
    "probe.block_size" => |c| c.probe.block_bytes;
    "probe.samples" => |c| c.probe.samples;
    "probe.headroom" => |c| c.probe.headroom;
    "probe.headroom_time_budget" => |c| c.probe.headroom_time_budget;
    "probe.max_backoff" => |c| c.probe.max_backoff;
    "probe.cuda_library" => |c| c.probe.cuda_library;
    "log.format" => |c| c.log.format;
    "log.queue_lines" => |c| c.log.queue_lines;
    "ingest.token_file" => |c| c.ingest.token_file;
    "ingest.ttl" => |c| c.ingest.ttl;
    "ingest.rate_limit" => |c| c.ingest.rate_limit_per_second;
    "ingest.max_reporters" => |c| c.ingest.max_reporters;
    "ingest.max_devices" => |c| c.ingest.max_devices;
    "ingest.max_stats" => |c| c.ingest.max_stats;
}

/// A restart-only key whose value differs: `key: old -> new`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    pub key: &'static str,
    pub running: String,
    pub loaded: String,
}

impl fmt::Display for Changed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} -> {}", self.key, self.running, self.loaded)
    }
}

/// The restart-only keys whose value differs between `running` and
/// `loaded`, in catalogue order.
pub fn restart_changes(running: &Config, loaded: &Config) -> Vec<Changed> {
    RESTART
        .iter()
        .filter_map(|spec| {
            let (old, new) = ((spec.value)(running), (spec.value)(loaded));
            (old != new).then_some(Changed { key: spec.key, running: old, loaded: new })
        })
        .collect()
}

/// What runs after a reload: `loaded`'s live keys over `running`.
pub fn take_live(running: &Config, loaded: &Config) -> Config {
    let mut next = running.clone();
    next.alerts = loaded.alerts.clone();
    // Not a key: derived from probe.interval, which needs a restart.
    next.alerts.rules = RulesConfig {
        probe_stale_after: running.alerts.rules.probe_stale_after,
        ..loaded.alerts.rules.clone()
    };
    next.notify = loaded.notify.clone();
    next.log.level = loaded.log.level.clone();
    next
}

/// The [`LIVE`] groups whose values differ between `running` and `next`.
pub fn live_changes(running: &Config, next: &Config) -> Vec<&'static str> {
    let changed = [
        running.alerts != next.alerts,
        running.notify != next.notify,
        running.log.level != next.log.level,
    ];
    LIVE.iter().zip(changed).filter_map(|((group, _), changed)| changed.then_some(*group)).collect()
}

/// Whether `key` (a dotted key) is live.
pub fn is_live(key: &str) -> bool {
    LIVE.iter().any(|(live, _)| {
        key == *live || key.strip_prefix(live).is_some_and(|rest| rest.starts_with('.'))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::*;
    use crate::config::{KEYS, SimulatorConfig, defaults};
    use crate::model::ScenarioKind;

    #[test]
    fn every_key_is_either_live_or_restart_only_never_both() {
        for spec in KEYS.iter() {
            let restart = RESTART.iter().filter(|restart| restart.key == spec.key).count();
            assert_eq!(
                usize::from(is_live(spec.key)) + restart,
                1,
                "{} must be live or in RESTART, exactly once",
                spec.key
            );
        }
        for restart in RESTART {
            assert!(KEYS.iter().any(|spec| spec.key == restart.key), "{} is no key", restart.key);
        }
    }

    #[test]
    fn restart_only_changes_are_named_and_keep_their_running_values() {
        let running = defaults();
        let mut loaded = defaults();
        loaded.server.listen = "127.0.0.1:9000".parse().unwrap();
        loaded.sampler.fast_interval = Duration::from_millis(500);
        loaded.source.selection = SourceSelection::Simulate(SimulatorConfig {
            scenario: ScenarioKind::Idle,
            gpus: 3,
            seed: 1,
            container_ids: false,
        });
        loaded.alerts.rules.memory_high.threshold = 0.5;
        loaded.log.level = "debug".into();
        let named: Vec<&str> =
            restart_changes(&running, &loaded).iter().map(|changed| changed.key).collect();
        assert_eq!(
            named,
            [
                "server.listen",
                "sampler.fast_interval",
                "source.simulate",
                "simulator.gpus",
                "simulator.seed",
                "simulator.container_ids"
            ]
        );
        assert_eq!(
            restart_changes(&running, &loaded)[0].to_string(),
            "server.listen: 127.0.0.1:9477 -> 127.0.0.1:9000"
        );
        let next = take_live(&running, &loaded);
        assert!(
            restart_changes(&running, &next).is_empty(),
            "restart-only keys keep running values"
        );
        assert_eq!(next.alerts.rules.memory_high.threshold, 0.5);
        assert_eq!(next.log.level, "debug");
        assert_eq!(live_changes(&running, &next), ["alerts", "log.level"]);
    }

    #[test]
    fn an_unchanged_file_changes_nothing() {
        let running = defaults();
        let next = take_live(&running, &defaults());
        assert_eq!(next, running);
        assert!(live_changes(&running, &next).is_empty());
        assert!(restart_changes(&running, &defaults()).is_empty());
    }

    #[test]
    fn the_derived_probe_staleness_follows_the_running_probe_interval() {
        let running = defaults();
        let mut loaded = defaults();
        loaded.probe.interval = Duration::from_secs(3600);
        loaded.alerts.rules.probe_stale_after = Duration::from_secs(7200);
        let next = take_live(&running, &loaded);
        assert_eq!(next.alerts.rules.probe_stale_after, running.alerts.rules.probe_stale_after);
        assert_eq!(next.probe.interval, running.probe.interval);
    }

    /// The "Reloading" table of docs/configuration.md: rows of backticked
    /// keys (`section.*` for a whole section) and `applied` or `restart`.
    fn documented() -> (BTreeSet<String>, BTreeSet<String>) {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
        let text = std::fs::read_to_string(path).unwrap();
        let section = text.split("\n## Reloading").nth(1).expect("a Reloading section");
        let section = section.split("\n## ").next().unwrap_or(section);
        let (mut live, mut restart) = (BTreeSet::new(), BTreeSet::new());
        for row in section.lines().filter(|line| line.starts_with("| `")) {
            let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
            let keys: Vec<String> = cells[0]
                .split('`')
                .skip(1)
                .step_by(2)
                .flat_map(|token| match token.strip_suffix(".*") {
                    Some(section) => KEYS
                        .iter()
                        .filter(|spec| spec.section() == section)
                        .map(|spec| spec.key.to_owned())
                        .collect(),
                    None => vec![token.to_owned()],
                })
                .collect();
            match cells.last().copied() {
                Some("applied") => live.extend(keys),
                Some("restart") => restart.extend(keys),
                other => panic!("row must end in applied or restart, not {other:?}: {row}"),
            }
        }
        (live, restart)
    }

    #[test]
    fn the_reloading_table_in_the_docs_matches_the_code() {
        let (live, restart) = documented();
        let code_live: BTreeSet<String> =
            KEYS.iter().filter(|spec| is_live(spec.key)).map(|spec| spec.key.to_owned()).collect();
        let code_restart: BTreeSet<String> =
            RESTART.iter().map(|spec| spec.key.to_owned()).collect();
        assert_eq!(live, code_live, "keys docs/configuration.md says a reload applies");
        assert_eq!(restart, code_restart, "keys docs/configuration.md says need a restart");
    }
}
