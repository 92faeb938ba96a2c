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

use std::time::Duration;

use super::units::{format_duration, format_size};
use Accepts::{Int, Size, Time, Words};

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

    /// The environment variable that sets it: `VRAMD_SECTION__NAME`, or
    /// `VRAMD_ALERTS__RULE__NAME` for a rule key.
    pub fn env_var(&self) -> String {
        env_var_for(self.key)
    }
}

/// `server.listen` → `VRAMD_SERVER__LISTEN`;
/// `alerts.memory_high.threshold` → `VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD`.
pub fn env_var_for(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_uppercase().replace('.', ENV_SEPARATOR))
}

/// Prefix of the environment variables that configure vramd.
pub const ENV_PREFIX: &str = "VRAMD_";
/// Separator between the levels of a key (section, rule table, key) in an
/// environment variable name.
pub const ENV_SEPARATOR: &str = "__";

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
const fn mins(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}
const fn hours(n: u64) -> Duration {
    Duration::from_secs(n * 3600)
}
const fn days(n: u64) -> Duration {
    Duration::from_secs(n * 86_400)
}
const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

const fn key(key: &'static str, summary: &'static str, accepts: Accepts) -> KeySpec {
    KeySpec { key, summary, accepts, note: "" }
}

impl KeySpec {
    const fn note(self, note: &'static str) -> KeySpec {
        KeySpec { note, ..self }
    }
}

/// The key called `key`, if it is one of [`KEYS`].
pub fn spec(key: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|spec| spec.key == key)
}

/// Every key, grouped by section, in rendering order.
pub const KEYS: &[KeySpec] = &[
    key("server.listen", "address for /metrics, the REST API and health checks", Words("IP:port")),
    key(
        "server.request_timeout",
        "a request still running after this gets 408",
        Time(ms(1), mins(10)),
    ),
    key("server.max_request_body", "larger request bodies get 413", Size(KIB, 64 * MIB)),
    key(
        "server.max_concurrent_requests",
        "requests beyond this many in flight get 503",
        Int(1, 10_000),
    ),
    key(
        "server.shutdown_timeout",
        "how long in-flight requests may finish after SIGTERM/SIGINT",
        Time(Duration::ZERO, secs(10)),
    ),
    key(
        "sampler.fast_interval",
        "how often memory and utilization are read",
        Time(ms(10), hours(1)),
    ),
    key(
        "sampler.slow_interval",
        "how often processes, clocks, power and health are read",
        Time(ms(100), hours(1)),
    )
    .note(", at least sampler.fast_interval"),
    key(
        "sampler.call_timeout",
        "deadline of one driver call; a later answer is discarded",
        Time(ms(1), mins(1)),
    ),
    key(
        "sampler.max_processes_per_device",
        "processes kept per device and sample, largest first",
        Int(1, 1_024),
    ),
    key(
        "sampler.discovery_retry_max",
        "longest wait between attempts to list devices when the source is unavailable",
        Time(secs(1), hours(1)),
    ),
    key("history.retention", "how far back history reaches", Time(secs(1), days(7)))
        .note(", at most 10000000 fast samples"),
    key("metrics.peak_window", "window of vramd_memory_used_peak_bytes", Time(ms(1), days(7)))
        .note(", at most history.retention"),
    key("api.max_history_points", "most points one history response returns", Int(1, 1_000_000)),
    key("api.max_event_streams", "open alert event streams at most", Int(1, 1_024)),
    key("api.max_stream_backlog", "state changes buffered per slow stream reader", Int(1, 65_536)),
    key(
        "source.simulate",
        "simulate this scenario instead of reading the driver (see `vramd scenarios`)",
        Words("scenario name; not set by default"),
    ),
    key(
        "source.replay",
        "replay this recorded NDJSON trace instead of reading the driver",
        Words("path; not set by default"),
    ),
    key(
        "source.record",
        "also write every reading to this NDJSON trace",
        Words("path; not set by default"),
    ),
    key(
        "source.speed",
        "simulated or replayed seconds per real second",
        Words("number, above 0, at most 10000"),
    ),
    key("source.max_trace_line", "longest accepted line of a replayed trace", Size(KIB, 64 * MIB)),
    key(
        "source.max_trace_size",
        "largest replayed trace file; its records are all held in memory",
        Size(MIB, 64 * GIB),
    ),
    key("simulator.gpus", "number of simulated GPUs", Int(1, 8)),
    key(
        "simulator.seed",
        "seed of the simulator; the same seed gives the same readings",
        Int(0, u64::MAX),
    ),
    key(
        "nvml.library_path",
        "load NVML from this file instead of the system's libnvidia-ml.so.1",
        Words("path; not set by default"),
    ),
    key(
        "nvml.require_gpu",
        "exit with status 1 when NVML cannot be initialised, instead of retrying",
        Words("true or false"),
    ),
    key(
        "nvml.init_timeout",
        "deadline for initialising NVML and listing devices",
        Time(ms(100), mins(10)),
    ),
    key(
        "nvml.pcie_throughput",
        "read PCIe TX/RX throughput on the slow tier (blocks ~20ms per direction)",
        Words("true or false"),
    ),
    key(
        "nvml.max_cmdline_bytes",
        "longest process command line kept, truncated beyond; 0 turns them off",
        Size(0, 64 * KIB),
    ),
    key(
        "nvml.xid_events",
        "watch NVML Xid error events on a dedicated thread",
        Words("true or false"),
    ),
    key(
        "probe.enabled",
        "run the CUDA driver probe (a short-lived child process per device)",
        Words("true or false"),
    ),
    key(
        "probe.interval",
        "how often each device is probed, in source time",
        Time(mins(1), hours(24)),
    ),
    key(
        "probe.timeout",
        "a probe child still running after this is killed and counted as a timeout",
        Time(secs(1), mins(10)),
    ),
    key(
        "probe.min_free",
        "never probe a device with less NVML free memory than this",
        Size(256 * MIB, TIB),
    ),
    key("probe.margin", "free memory no probe allocation may go below", Size(64 * MIB, TIB)),
    key("probe.block_size", "block whose allocation and release are timed", Size(MIB, 16 * GIB)),
    key("probe.samples", "allocation and release pairs timed per probe", Int(1, 100)),
    key(
        "probe.headroom",
        "search for the largest allocatable block (briefly takes free memory down to probe.margin)",
        Words("true or false"),
    ),
    key(
        "probe.headroom_time_budget",
        "the largest-block search stops after this, keeping its best answer",
        Time(ms(100), mins(5)),
    )
    .note(", less than probe.timeout"),
    key(
        "probe.max_backoff",
        "longest wait between probes of a device whose probes keep failing",
        Time(mins(1), days(7)),
    )
    .note(", at least probe.interval"),
    key(
        "probe.cuda_library",
        "load the CUDA driver from this file instead of the system's libcuda.so.1",
        Words("path; not set by default"),
    ),
    key("log.format", "log line format", Words("\"text\" or \"json\"")),
    key(
        "log.level",
        "tracing filter directive, such as \"info\" or \"info,vramd=debug\"",
        Words("non-empty filter"),
    ),
    key(
        "alerts.evaluation_interval",
        "how often the alert rules are evaluated, in source time",
        Time(ms(100), mins(10)),
    ),
    key(
        "alerts.resolved_retention",
        "how long a resolved alert stays visible",
        Time(Duration::ZERO, days(7)),
    ),
    key(
        "alerts.max_alerts",
        "most alerts kept (pending, firing, resolved); the oldest resolved go first",
        Int(1, 100_000),
    ),
    key(
        "alerts.trend_window",
        "window of the per-device memory growth estimate",
        Time(secs(10), hours(24)),
    ),
    key("alerts.memory_high.enabled", "evaluate the memory_high rule", Words("true or false")),
    key(
        "alerts.memory_high.threshold",
        "fires when used / total memory is above this for `for`",
        Words("ratio, above 0, at most 1"),
    ),
    key(
        "alerts.memory_high.clear",
        "resolves only when used / total memory is back at or below this",
        Words("ratio, above 0, at most threshold"),
    ),
    key(
        "alerts.memory_high.for",
        "how long memory must stay above threshold",
        Time(Duration::ZERO, hours(24)),
    ),
    key("alerts.memory_high.severity", "severity of the alert", Words(SEVERITIES)),
    key(
        "alerts.exhaustion_forecast.enabled",
        "evaluate the exhaustion_forecast rule",
        Words("true or false"),
    ),
    key(
        "alerts.exhaustion_forecast.threshold",
        "fires when memory is forecast to run out in less than this many seconds",
        Words("seconds, above 0"),
    ),
    key(
        "alerts.exhaustion_forecast.clear",
        "resolves only when the forecast is back at or above this many seconds",
        Words("seconds, at least threshold"),
    ),
    key(
        "alerts.exhaustion_forecast.for",
        "how long the forecast must stay below threshold",
        Time(Duration::ZERO, hours(24)),
    ),
    key("alerts.exhaustion_forecast.severity", "severity of the alert", Words(SEVERITIES)),
    key(
        "alerts.exhaustion_forecast.min_fit",
        "least goodness of fit of the growth trend for a forecast to count",
        Words("0 to 1"),
    ),
    key(
        "alerts.leak_suspected.enabled",
        "evaluate the leak_suspected rule",
        Words("true or false"),
    ),
    key(
        "alerts.leak_suspected.threshold",
        "fires when a process grows steadily faster than this",
        Words("bytes per second, at least 0"),
    ),
    key(
        "alerts.leak_suspected.clear",
        "resolves only when its growth is back at or below this",
        Words("bytes per second, at least 0, at most threshold"),
    ),
    key(
        "alerts.leak_suspected.for",
        "how long the growth must stay above threshold",
        Time(Duration::ZERO, hours(24)),
    ),
    key("alerts.leak_suspected.severity", "severity of the alert", Words(SEVERITIES)),
    key(
        "alerts.leak_suspected.window",
        "window the growth of a process is measured over",
        Time(mins(1), hours(24)),
    ),
    key(
        "alerts.allocator_fragmentation_high.enabled",
        "evaluate the allocator_fragmentation_high rule",
        Words("true or false"),
    ),
    key(
        "alerts.allocator_fragmentation_high.threshold",
        "fires when a process's inactive split / reserved memory is above this",
        Words("ratio, above 0, at most 1"),
    ),
    key(
        "alerts.allocator_fragmentation_high.clear",
        "resolves only when the ratio is back at or below this",
        Words("ratio, above 0, at most threshold"),
    ),
    key(
        "alerts.allocator_fragmentation_high.for",
        "how long the ratio must stay above threshold",
        Time(Duration::ZERO, hours(24)),
    ),
    key("alerts.allocator_fragmentation_high.severity", "severity of the alert", Words(SEVERITIES)),
    key(
        "alerts.allocator_fragmentation_high.min_reserved",
        "only processes whose allocator reserves at least this much are checked",
        Size(0, TIB),
    ),
    key(
        "alerts.allocator_retries.enabled",
        "evaluate the allocator_retries rule",
        Words("true or false"),
    ),
    key(
        "alerts.allocator_retries.threshold",
        "fires when a process's allocator retries within `window` reach this",
        Words("count, at least 0"),
    ),
    key(
        "alerts.allocator_retries.clear",
        "resolves only when the retries within `window` are back at or below this",
        Words("count, at least 0, at most threshold"),
    ),
    key(
        "alerts.allocator_retries.for",
        "how long the retries must stay at threshold",
        Time(Duration::ZERO, hours(24)),
    ),
    key("alerts.allocator_retries.severity", "severity of the alert", Words(SEVERITIES)),
    key(
        "alerts.allocator_retries.window",
        "window the retries are counted in",
        Time(secs(1), hours(24)),
    ),
    key("alerts.allocator_oom.enabled", "evaluate the allocator_oom rule", Words("true or false")),
    key(
        "alerts.allocator_oom.threshold",
        "fires when a process's allocator out-of-memory errors within `window` reach this",
        Words("count, at least 0"),
    ),
    key(
        "alerts.allocator_oom.clear",
        "resolves only when the errors within `window` are back at or below this",
        Words("count, at least 0, at most threshold"),
    ),
    key(
        "alerts.allocator_oom.for",
        "how long the errors must stay at threshold",
        Time(Duration::ZERO, hours(24)),
    ),
    key("alerts.allocator_oom.severity", "severity of the alert", Words(SEVERITIES)),
    key(
        "alerts.allocator_oom.window",
        "window the out-of-memory errors are counted in",
        Time(secs(1), hours(24)),
    ),
    key("alerts.device_lost.enabled", "evaluate the device_lost rule", Words("true or false")),
    key(
        "alerts.device_lost.threshold",
        "fires when a device stops answering or NVML is down (value 1, else 0)",
        Words("count, at least 0"),
    ),
    key(
        "alerts.device_lost.clear",
        "resolves only when the value is back at or below this",
        Words("count, at least 0, at most threshold"),
    ),
    key(
        "alerts.device_lost.for",
        "how long the device must stay lost",
        Time(Duration::ZERO, hours(24)),
    ),
    key("alerts.device_lost.severity", "severity of the alert", Words(SEVERITIES)),
    key("alerts.xid_error.enabled", "evaluate the xid_error rule", Words("true or false")),
    key(
        "alerts.xid_error.threshold",
        "fires when a device's Xid errors within `window` reach this",
        Words("count, at least 0"),
    ),
    key(
        "alerts.xid_error.clear",
        "resolves only when the errors within `window` are back at or below this",
        Words("count, at least 0, at most threshold"),
    ),
    key(
        "alerts.xid_error.for",
        "how long the errors must stay at threshold",
        Time(Duration::ZERO, hours(24)),
    ),
    key("alerts.xid_error.severity", "severity of the alert", Words(SEVERITIES)),
    key(
        "alerts.xid_error.window",
        "window the Xid errors are counted in",
        Time(secs(1), hours(24)),
    ),
    key(
        "alerts.probe_free_mismatch.enabled",
        "evaluate the probe_free_mismatch rule",
        Words("true or false"),
    ),
    key(
        "alerts.probe_free_mismatch.threshold",
        "fires when NVML and CUDA free memory differ by at least this many bytes",
        Words("bytes or a size, at least 0"),
    ),
    key(
        "alerts.probe_free_mismatch.clear",
        "resolves only when the difference is back at or below this",
        Words("bytes or a size, at least 0, at most threshold"),
    ),
    key(
        "alerts.probe_free_mismatch.for",
        "how long the difference must stay at threshold (in source time)",
        Time(Duration::ZERO, hours(24)),
    ),
    key("alerts.probe_free_mismatch.severity", "severity of the alert", Words(SEVERITIES)),
    key(
        "alerts.probe_headroom_low.enabled",
        "evaluate the probe_headroom_low rule (needs probe.headroom)",
        Words("true or false"),
    ),
    key(
        "alerts.probe_headroom_low.threshold",
        "the job size: fires when the largest allocatable block is at or below this",
        Words("bytes or a size, at least 0"),
    ),
    key(
        "alerts.probe_headroom_low.clear",
        "resolves only when the largest allocatable block is back at or above this",
        Words("bytes or a size, at least threshold"),
    ),
    key(
        "alerts.probe_headroom_low.for",
        "how long headroom must stay at threshold",
        Time(Duration::ZERO, hours(24)),
    ),
    key("alerts.probe_headroom_low.severity", "severity of the alert", Words(SEVERITIES)),
    key(
        "notify.alertmanager_url",
        "send alert state changes to this Alertmanager (API v2)",
        Words("http:// or https:// URL; not set by default"),
    ),
    key(
        "notify.webhook_url",
        "POST alert state changes as JSON to this URL",
        Words("http:// or https:// URL; not set by default"),
    ),
    key(
        "notify.queue_capacity",
        "state changes waiting per notifier; beyond it the oldest are dropped",
        Int(1, 100_000),
    ),
    key("notify.timeout", "deadline of one delivery request", Time(ms(100), mins(1))),
    key(
        "notify.resend_interval",
        "how often firing alerts are sent again",
        Time(secs(1), hours(1)),
    ),
    key("notify.max_retries", "attempts after a failed delivery", Int(0, 100)),
    key(
        "notify.retry_backoff_max",
        "longest wait between delivery attempts",
        Time(ms(100), mins(10)),
    ),
    key(
        "notify.external_url",
        "base of the generatorURL links in notifications (default http://<server.listen>)",
        Words("http:// or https:// URL; not set by default"),
    ),
    key(
        "ingest.token_file",
        "file holding the bearer token writers from other hosts must send",
        Words("path; not set by default (loopback only)"),
    ),
    key(
        "ingest.ttl",
        "age after which an allocator report no longer counts",
        Time(secs(1), hours(1)),
    ),
    key("ingest.rate_limit", "allocator reports per second from one reporter", Int(1, 1_000)),
    key("ingest.max_reporters", "reporters tracked at once", Int(1, 100_000)),
    key("ingest.max_devices", "devices in one allocator report", Int(1, 64)),
    key("ingest.max_stats", "memory_stats keys per device in a report", Int(1, 65_536)),
];

/// Range of every rule's `severity`.
const SEVERITIES: &str = "\"info\", \"warning\" or \"critical\"";

/// The sections, in rendering order.
#[cfg(test)]
pub fn sections() -> Vec<&'static str> {
    let mut sections: Vec<&'static str> = Vec::new();
    for spec in KEYS {
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
    for spec in KEYS {
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

/// Is `key` (a dotted key) one of [`KEYS`]?
pub fn is_known(key: &str) -> bool {
    spec(key).is_some()
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
                "ingest"
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
