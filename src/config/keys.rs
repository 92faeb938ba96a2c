//! The catalogue of configuration keys: every dotted key vramd accepts,
//! with a one-line meaning and its range, in the order they are rendered.
//! Keys have two levels (`section.name`), except the alert rules, which
//! have a table each under `[alerts]`: `alerts.memory_high.threshold`.
//!
//! Owns: [`KEYS`], each key's numeric bounds (written once: validation
//! reads them for its checks and messages, and the range text shown by
//! `check-config` and tested against `docs/configuration.md` is made from
//! them), the sections and tables, the environment-variable naming, and
//! the "did you mean" suggestion for unknown keys. The unknown-key walk,
//! `render_effective` and the documentation tests all read this one list.
//! Depends only on `units` (to write the bounds).

use std::sync::LazyLock;
use std::time::Duration;

use super::units::{format_duration, format_size};

/// What values a key accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepts {
    /// A duration from `.0` to `.1`, inclusive.
    Time(Duration, Duration),
    /// A byte size from `.0` to `.1`, inclusive.
    Size(u64, u64),
    /// A whole number from `.0` to `.1`, inclusive.
    Int(u64, u64),
    /// Something without numeric bounds, described in words.
    Words(&'static str),
}

/// One configuration key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpec {
    /// Full dotted key, `section.name` or, for an alert rule,
    /// `alerts.rule.name`.
    pub key: &'static str,
    /// What it does, one line.
    pub summary: &'static str,
    /// The values it accepts.
    pub accepts: Accepts,
    /// A constraint involving other keys, appended to the range text
    /// (`", at least sampler.fast_interval"`); checked by `validate`.
    pub note: &'static str,
}

impl KeySpec {
    /// Unit and accepted range, one short phrase: the bounds as the
    /// error messages write them, then the note.
    pub fn range(&self) -> String {
        format!("{}{}", self.bounds(), self.note)
    }

    /// The bounds alone: `1ms to 10m`, `size, 1KiB to 64MiB`, `1 to 64`.
    pub fn bounds(&self) -> String {
        match self.accepts {
            Accepts::Time(min, max) => {
                format!("{} to {}", format_duration(min), format_duration(max))
            }
            Accepts::Size(min, max) => {
                format!("size, {} to {}", format_size(min), format_size(max))
            }
            Accepts::Int(min, max) => format!("{min} to {max}"),
            Accepts::Words(words) => words.to_owned(),
        }
    }

    /// The `[section]` the key lives in.
    #[cfg(test)]
    pub fn section(&self) -> &'static str {
        self.key.split_once('.').map_or(self.key, |(section, _)| section)
    }

    /// The TOML table the key is written in: its section (`server`), or
    /// the rule's table for a rule key (`alerts.memory_high`).
    pub fn table(&self) -> &'static str {
        self.key.rsplit_once('.').map_or(self.key, |(table, _)| table)
    }

    /// The key's name within its [table](Self::table): `listen`,
    /// `threshold`.
    pub fn name(&self) -> &'static str {
        self.key.rsplit_once('.').map_or(self.key, |(_, name)| name)
    }
}

/// The environment variable that sets `key`: `server.listen` →
/// `VRAMD_SERVER__LISTEN`; `alerts.memory_high.threshold` →
/// `VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD`.
pub fn env_var_for(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_uppercase().replace('.', ENV_SEPARATOR))
}

/// Prefix of the environment variables that configure vramd.
pub const ENV_PREFIX: &str = "VRAMD_";
/// Separator between the levels of a key (section, rule table, key) in an
/// environment variable name.
pub const ENV_SEPARATOR: &str = "__";

/// The key called `key`, if it is one of [`KEYS`].
pub fn spec(key: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|spec| spec.key == key)
}

/// Every key, grouped by section, in rendering order; each is written once,
/// in `sections`.
pub static KEYS: LazyLock<Vec<KeySpec>> = LazyLock::new(super::sections::catalogue);

/// The sections, in rendering order.
#[cfg(test)]
pub fn sections() -> Vec<&'static str> {
    let mut sections: Vec<&'static str> = Vec::new();
    for spec in KEYS.iter() {
        if !sections.contains(&spec.section()) {
            sections.push(spec.section());
        }
    }
    sections
}

/// Every table a key can be written in, in rendering order: the sections
/// and the alert rules' tables under `alerts` (`alerts.memory_high`).
pub fn tables() -> Vec<&'static str> {
    let mut tables: Vec<&'static str> = Vec::new();
    for spec in KEYS.iter() {
        for (end, _) in spec.key.match_indices('.') {
            let table = &spec.key[..end];
            if !tables.contains(&table) {
                tables.push(table);
            }
        }
    }
    tables
}

/// Is `key` (a dotted key) a table that holds keys: a section or a rule?
pub fn is_table(key: &str) -> bool {
    tables().contains(&key)
}

/// The known key or table closest to an unknown one, when close enough
/// to be a likely typo.
pub fn suggest(unknown: &str) -> Option<String> {
    // No key is near a name this long, and the edit distance is quadratic:
    // a megabyte-long variable name must not stall start-up.
    if unknown.len() > MAX_SUGGESTABLE {
        return None;
    }
    let candidates = KEYS.iter().map(|spec| spec.key).chain(tables());
    candidates
        .map(|known| (edit_distance(unknown, known), known))
        .filter(|(distance, known)| *distance <= 3.max(known.len() / 5))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known.to_owned())
}

/// Longest unknown name a suggestion is looked for (the longest key is
/// under 60 bytes).
const MAX_SUGGESTABLE: usize = 256;

/// Levenshtein distance, counting `.` and `_` as the same character so that
/// `VRAMD_SAMPLER_FAST_INTERVAL` (one underscore) suggests the right key.
fn edit_distance(a: &str, b: &str) -> usize {
    let normal = |c: char| if c == '.' { '_' } else { c };
    let a: Vec<char> = a.chars().map(normal).collect();
    let b: Vec<char> = b.chars().map(normal).collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            let insertion = current[j] + 1;
            let deletion = previous[j + 1] + 1;
            current.push(substitution.min(insertion).min(deletion));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_two_or_three_level() {
        for (index, spec) in KEYS.iter().enumerate() {
            let levels = spec.key.matches('.').count() + 1;
            assert!(levels == 2 || levels == 3, "{}", spec.key);
            // Only the alert rules have tables of their own.
            if levels == 3 {
                assert_eq!(spec.section(), "alerts", "{}", spec.key);
            }
            assert!(!KEYS[..index].iter().any(|other| other.key == spec.key), "{}", spec.key);
            assert_eq!(format!("{}.{}", spec.table(), spec.name()), spec.key);
        }
        assert_eq!(
            sections(),
            [
                "server",
                "sampler",
                "history",
                "metrics",
                "api",
                "source",
                "simulator",
                "nvml",
                "probe",
                "log",
                "alerts",
                "notify",
                "ingest",
                "kubernetes"
            ]
        );
    }

    #[test]
    fn rule_tables_follow_the_alerts_keys_and_share_the_common_keys() {
        let rules: Vec<&str> =
            tables().into_iter().filter(|table| table.starts_with("alerts.")).collect();
        assert_eq!(
            rules,
            [
                "alerts.memory_high",
                "alerts.exhaustion_forecast",
                "alerts.leak_suspected",
                "alerts.allocator_fragmentation_high",
                "alerts.allocator_retries",
                "alerts.allocator_oom",
                "alerts.device_lost",
                "alerts.xid_error",
                "alerts.probe_free_mismatch",
                "alerts.probe_headroom_low",
            ]
        );
        for rule in rules {
            let names: Vec<&str> =
                KEYS.iter().filter(|spec| spec.table() == rule).map(KeySpec::name).collect();
            assert_eq!(names[..5], ["enabled", "threshold", "clear", "for", "severity"], "{rule}");
            assert!(is_table(rule));
        }
        // Within `[alerts]`, the plain keys come before the first rule table,
        // so the rendered TOML never reopens `[alerts]`.
        let alerts: Vec<&KeySpec> = KEYS.iter().filter(|spec| spec.section() == "alerts").collect();
        let first_rule = alerts.iter().position(|spec| spec.table() != "alerts").unwrap();
        assert!(alerts[first_rule..].iter().all(|spec| spec.table() != "alerts"));
        assert!(is_table("alerts") && !is_table("alerts.memory_high.threshold"));
    }

    #[test]
    fn env_var_names_use_the_double_underscore_separator() {
        assert_eq!(env_var_for("sampler.fast_interval"), "VRAMD_SAMPLER__FAST_INTERVAL");
        assert_eq!(env_var_for("server.listen"), "VRAMD_SERVER__LISTEN");
        assert_eq!(
            env_var_for("alerts.memory_high.threshold"),
            "VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD"
        );
    }

    #[test]
    fn typos_suggest_the_known_key() {
        assert_eq!(suggest("sampler.fast_intervall").as_deref(), Some("sampler.fast_interval"));
        assert_eq!(suggest("sampler_fast_interval").as_deref(), Some("sampler.fast_interval"));
        assert_eq!(suggest("samplr").as_deref(), Some("sampler"));
        assert_eq!(suggest("completely.different"), None);
        assert_eq!(
            suggest("alerts.memory_hgh.threshold").as_deref(),
            Some("alerts.memory_high.threshold")
        );
        assert_eq!(
            suggest("alerts.memory_high.treshold").as_deref(),
            Some("alerts.memory_high.threshold")
        );
        assert_eq!(suggest("alerts.memory_hgh").as_deref(), Some("alerts.memory_high"));
    }
}
