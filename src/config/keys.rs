//! The catalogue of configuration keys: every dotted key vramd accepts,
//! with a one-line meaning and its range, in the order they are rendered.
//!
//! Owns: [`KEYS`], the sections, the environment-variable naming, and
//! the "did you mean" suggestion for unknown keys. The unknown-key walk,
//! `render_effective` and the documentation tests all read this one list.
//! Depends on nothing else in the crate.

/// One configuration key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpec {
    /// Full dotted key, `section.name`.
    pub key: &'static str,
    /// What it does, one line.
    pub summary: &'static str,
    /// Unit and accepted range, one short phrase.
    pub range: &'static str,
}

impl KeySpec {
    /// The `[section]` the key lives in.
    pub fn section(&self) -> &'static str {
        self.key.split_once('.').map_or(self.key, |(section, _)| section)
    }

    /// The key's name within its section.
    pub fn name(&self) -> &'static str {
        self.key.split_once('.').map_or(self.key, |(_, name)| name)
    }

    /// The environment variable that sets it: `VRAMD_SECTION__NAME`.
    pub fn env_var(&self) -> String {
        env_var_for(self.key)
    }
}

/// `server.listen` → `VRAMD_SERVER__LISTEN`.
pub fn env_var_for(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_uppercase().replace('.', ENV_SEPARATOR))
}

/// Prefix of the environment variables that configure vramd.
pub const ENV_PREFIX: &str = "VRAMD_";
/// Separator between section and key in an environment variable name.
pub const ENV_SEPARATOR: &str = "__";

const fn key(key: &'static str, summary: &'static str, range: &'static str) -> KeySpec {
    KeySpec { key, summary, range }
}

/// Every key, grouped by section, in rendering order.
pub const KEYS: &[KeySpec] = &[
    key("server.listen", "address for /metrics, the REST API and health checks", "IP:port"),
    key("server.request_timeout", "a request still running after this gets 408", "1ms to 10m"),
    key("server.max_request_body", "larger request bodies get 413", "size, 1KiB to 64MiB"),
    key(
        "server.max_concurrent_requests",
        "requests beyond this many in flight get 503",
        "1 to 10000",
    ),
    key(
        "server.shutdown_timeout",
        "how long in-flight requests may finish after SIGTERM/SIGINT",
        "0s to 10s",
    ),
    key("sampler.fast_interval", "how often memory and utilization are read", "10ms to 1h"),
    key(
        "sampler.slow_interval",
        "how often processes, clocks, power and health are read",
        "100ms to 1h, at least sampler.fast_interval",
    ),
    key(
        "sampler.call_timeout",
        "deadline of one driver call; a later answer is discarded",
        "1ms to 60s",
    ),
    key(
        "sampler.max_processes_per_device",
        "processes kept per device and sample, largest first",
        "1 to 1024",
    ),
    key(
        "sampler.discovery_retry_max",
        "longest wait between attempts to list devices when the source is unavailable",
        "1s to 1h",
    ),
    key(
        "history.retention",
        "how far back history reaches",
        "1s to 7d, at most 10000000 fast samples",
    ),
    key(
        "metrics.peak_window",
        "window of vramd_memory_used_peak_bytes",
        "1ms to history.retention",
    ),
    key("api.max_history_points", "most points one history response returns", "1 to 1000000"),
    key(
        "source.simulate",
        "simulate this scenario instead of reading the driver (see `vramd scenarios`)",
        "scenario name; not set by default",
    ),
    key(
        "source.replay",
        "replay this recorded NDJSON trace instead of reading the driver",
        "path; not set by default",
    ),
    key(
        "source.record",
        "also write every reading to this NDJSON trace",
        "path; not set by default",
    ),
    key(
        "source.speed",
        "simulated or replayed seconds per real second",
        "number, above 0, at most 10000",
    ),
    key(
        "source.max_trace_line",
        "longest accepted line of a replayed trace",
        "size, 1KiB to 64MiB",
    ),
    key("simulator.gpus", "number of simulated GPUs", "1 to 8"),
    key(
        "simulator.seed",
        "seed of the simulator; the same seed gives the same readings",
        "0 to 2^64-1",
    ),
    key(
        "nvml.library_path",
        "load NVML from this file instead of the system's libnvidia-ml.so.1",
        "path; not set by default",
    ),
    key(
        "nvml.require_gpu",
        "exit with status 1 when NVML cannot be initialised, instead of retrying",
        "true or false",
    ),
    key("nvml.init_timeout", "deadline for initialising NVML and listing devices", "100ms to 10m"),
    key(
        "nvml.pcie_throughput",
        "read PCIe TX/RX throughput on the slow tier (blocks ~20ms per direction)",
        "true or false",
    ),
    key(
        "nvml.max_cmdline_bytes",
        "longest process command line kept, truncated beyond; 0 turns them off",
        "size, 0B to 64KiB",
    ),
    key("nvml.xid_events", "watch NVML Xid error events on a dedicated thread", "true or false"),
    key("log.format", "log line format", "\"text\" or \"json\""),
    key(
        "log.level",
        "tracing filter directive, such as \"info\" or \"info,vramd=debug\"",
        "non-empty filter",
    ),
];

/// The sections, in rendering order.
pub fn sections() -> Vec<&'static str> {
    let mut sections: Vec<&'static str> = Vec::new();
    for spec in KEYS {
        if !sections.contains(&spec.section()) {
            sections.push(spec.section());
        }
    }
    sections
}

/// Is `key` (a dotted key) one of [`KEYS`]?
pub fn is_known(key: &str) -> bool {
    KEYS.iter().any(|spec| spec.key == key)
}

/// The known key or section closest to an unknown one, when close enough
/// to be a likely typo.
pub fn suggest(unknown: &str) -> Option<String> {
    let candidates = KEYS.iter().map(|spec| spec.key).chain(sections());
    candidates
        .map(|known| (edit_distance(unknown, known), known))
        .filter(|(distance, known)| *distance <= 3.max(known.len() / 5))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known.to_owned())
}

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
    fn keys_are_unique_and_two_level() {
        for (index, spec) in KEYS.iter().enumerate() {
            assert_eq!(spec.key.matches('.').count(), 1, "{}", spec.key);
            assert!(!KEYS[..index].iter().any(|other| other.key == spec.key), "{}", spec.key);
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
                "log"
            ]
        );
    }

    #[test]
    fn env_var_names_use_the_double_underscore_separator() {
        assert_eq!(env_var_for("sampler.fast_interval"), "VRAMD_SAMPLER__FAST_INTERVAL");
        assert_eq!(env_var_for("server.listen"), "VRAMD_SERVER__LISTEN");
    }

    #[test]
    fn typos_suggest_the_known_key() {
        assert_eq!(suggest("sampler.fast_intervall").as_deref(), Some("sampler.fast_interval"));
        assert_eq!(suggest("sampler_fast_interval").as_deref(), Some("sampler.fast_interval"));
        assert_eq!(suggest("samplr").as_deref(), Some("sampler"));
        assert_eq!(suggest("completely.different"), None);
    }
}
