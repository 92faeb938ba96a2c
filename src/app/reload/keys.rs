//! Which configuration keys a reload applies and which need a restart,
//! written once: [`LIVE`] names the live keys (whole sections or single
//! keys); every other key needs a restart, since what it sizes or binds is
//! built once (the listener, the source, the sampler, history, the report
//! store, the runtime, the log format). A test keeps this equal to the
//! table in `docs/configuration.md` ("Reloading").
//!
//! Depends only on `Config` and `config`'s key values.

use std::fmt;

use serde_json::Value;

use crate::app::Config;
use crate::config::key_values;

/// Live keys: a section (every key in it) or one key, and what applying it
/// means.
pub const LIVE: [(&str, &str); 4] = [
    ("analysis", "windows and intervals of the analysis; its memo is kept"),
    ("alerts", "rules, thresholds, windows and evaluation; alert states are kept"),
    ("notify", "notifiers are rebuilt when their settings change"),
    ("log.level", "the log filter"),
];

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
/// `loaded`, in catalogue order, each value as the file writes it.
pub fn restart_changes(running: &Config, loaded: &Config) -> Vec<Changed> {
    let shown = |value: Value| match value {
        Value::String(text) => text,
        Value::Null => "(not set)".to_owned(),
        other => other.to_string(),
    };
    key_values(running)
        .into_iter()
        .zip(key_values(loaded))
        .filter(|((spec, old), (_, new))| !is_live(&spec.key) && old != new)
        .map(|((spec, old), (_, new))| Changed {
            key: spec.key.as_str(),
            running: shown(old),
            loaded: shown(new),
        })
        .collect()
}

/// What runs after a reload: `loaded`'s live keys over `running`.
pub fn take_live(running: &Config, loaded: &Config) -> Config {
    let mut next = running.clone();
    next.analysis = loaded.analysis.clone();
    next.alerts = loaded.alerts.clone();
    next.notify = loaded.notify.clone();
    next.log.level = loaded.log.level.clone();
    next
}

/// The [`LIVE`] groups whose values differ between `running` and `next`.
pub fn live_changes(running: &Config, next: &Config) -> Vec<&'static str> {
    let changed = [
        running.analysis != next.analysis,
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
    use crate::config::Document as _;

    static KEYS: std::sync::LazyLock<&'static [crate::config::KeySpec]> =
        std::sync::LazyLock::new(Config::keys);

    fn defaults() -> Config {
        Config::default()
    }
    use crate::model::ScenarioKind;

    #[test]
    fn every_live_entry_names_keys() {
        for (live, _) in LIVE {
            assert!(
                KEYS.iter().any(|spec| is_live(&spec.key) && spec.key.starts_with(live)),
                "{live}"
            );
        }
    }

    #[test]
    fn restart_only_changes_are_named_and_keep_their_running_values() {
        let running = defaults();
        let mut loaded = defaults();
        loaded.server.listen = "127.0.0.1:9000".parse().unwrap();
        loaded.sampler.fast_interval = Duration::from_millis(500);
        loaded.source.simulate = Some(ScenarioKind::Idle);
        loaded.simulator.gpus = 3;
        loaded.alerts.rules.memory_high.threshold = 0.5;
        loaded.log.level = "debug".into();
        let named: Vec<&str> =
            restart_changes(&running, &loaded).iter().map(|changed| changed.key).collect();
        // The simulator's seed and container IDs keep their (default)
        // values: only the keys whose value changes are named.
        assert_eq!(
            named,
            ["server.listen", "sampler.fast_interval", "source.simulate", "simulator.gpus"]
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
    fn analysis_keys_are_live_and_keep_the_probe_interval() {
        let running = defaults();
        let mut loaded = defaults();
        loaded.probe.interval = Duration::from_secs(3600);
        loaded.analysis.trend_window = Duration::from_secs(1200);
        let next = take_live(&running, &loaded);
        assert_eq!(next.probe.interval, running.probe.interval);
        assert_eq!(next.analysis.trend_window, Duration::from_secs(1200));
        assert_eq!(live_changes(&running, &next), ["analysis"]);
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
                        .filter(|spec| spec.key.split('.').next() == Some(section))
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
            KEYS.iter().filter(|spec| is_live(&spec.key)).map(|spec| spec.key.to_owned()).collect();
        let code_restart: BTreeSet<String> = KEYS
            .iter()
            .filter(|spec| !is_live(&spec.key))
            .map(|spec| spec.key.to_owned())
            .collect();
        assert_eq!(live, code_live, "keys docs/configuration.md says a reload applies");
        assert_eq!(restart, code_restart, "keys docs/configuration.md says need a restart");
    }
}
