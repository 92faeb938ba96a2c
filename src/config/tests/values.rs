//! Invalid values and conflicts: each error names the key, the value, the
//! origin and the reason.

use std::time::Duration;

use super::{ByteSize, ConfigError, Origin, default_alerts, defaults, load};
use super::{assert_error, isolated, load_env, load_file};
use crate::alerts::notify::NotifyConfig;
use crate::alerts::{AlertsConfig, ForecastRule, FragmentationRule, RulesConfig, WindowRule};
use crate::analysis::AnalysisConfig;
use crate::model::{RuleSettings, Severity};
use crate::sampler::probe_config::ProbeConfig;
use crate::source::nvml::NvmlConfig;

#[test]
fn config_nvml_defaults() {
    let expected = NvmlConfig {
        library_path: None,
        require_gpu: false,
        init_timeout: Duration::from_secs(30),
        pcie_throughput: false,
        max_cmdline_bytes: ByteSize(256),
        xid_events: true,
    };
    assert_eq!(defaults().nvml, expected);
    assert_eq!(load(&isolated()).unwrap().nvml, expected);
}

fn rule(threshold: f64, clear: f64, for_secs: u64, severity: Severity) -> RuleSettings {
    RuleSettings {
        enabled: true,
        threshold,
        clear,
        for_duration: Duration::from_secs(for_secs),
        keep_firing_for: Duration::ZERO,
        severity,
    }
}

#[test]
fn config_alerts_defaults() {
    let minutes = |n: u64| Duration::from_secs(60 * n);
    let window = |rule, window| WindowRule { rule, window };
    let kept_10_min = |rule| RuleSettings { keep_firing_for: minutes(10), ..rule };
    let expected = AlertsConfig {
        resolved_retention: minutes(15),
        max_alerts: 1000.try_into().unwrap(),
        rules: RulesConfig {
            memory_high: rule(0.92, 0.88, 60, Severity::Warning),
            exhaustion_forecast: ForecastRule {
                rule: rule(1800.0, 2700.0, 120, Severity::Warning),
                min_fit: 0.8,
            },
            leak_suspected: window(
                kept_10_min(rule(131_072.0, 65_536.0, 60, Severity::Warning)),
                minutes(30),
            ),
            reserved_growth: kept_10_min(rule(131_072.0, 65_536.0, 60, Severity::Info)),
            allocator_fragmentation_high: FragmentationRule {
                rule: rule(0.25, 0.15, 300, Severity::Warning),
                min_reserved: ByteSize(2 << 30),
            },
            allocator_retries: window(rule(1.0, 0.0, 0, Severity::Warning), minutes(5)),
            allocator_oom: window(rule(1.0, 0.0, 0, Severity::Critical), minutes(15)),
            device_lost: rule(1.0, 0.0, 0, Severity::Critical),
            xid_error: window(rule(1.0, 0.0, 0, Severity::Critical), minutes(15)),
            probe_free_mismatch: rule(1_073_741_824.0, 536_870_912.0, 0, Severity::Warning),
            probe_headroom_low: rule(4_294_967_296.0, 5_368_709_120.0, 0, Severity::Warning),
        },
    };
    let analysis = AnalysisConfig {
        evaluation_interval: Duration::from_secs(5),
        trend_window: minutes(10),
        forecast_min_span: Duration::from_secs(90),
        leak_check_interval: Duration::from_secs(30),
        trend_check_interval: Duration::from_secs(15),
        max_xid_history: std::num::NonZeroUsize::new(1024).unwrap(),
        leak_shortest_window: minutes(2),
        leak_warmup: minutes(3),
    };
    assert_eq!(load(&isolated()).unwrap().analysis, analysis);
    assert_eq!(default_alerts(), expected);
    assert_eq!(defaults().alerts, expected);
    assert_eq!(load(&isolated()).unwrap().alerts, expected);
}

#[test]
fn config_probe_defaults_are_cautious() {
    let expected = ProbeConfig {
        enabled: true,
        interval: Duration::from_secs(15 * 60),
        timeout: Duration::from_secs(60),
        min_free_bytes: ByteSize(2 << 30),
        margin_bytes: ByteSize(1 << 30),
        block_bytes: ByteSize(64 << 20),
        samples: 5,
        headroom: false,
        headroom_time_budget: Duration::from_secs(10),
        max_backoff: Duration::from_secs(6 * 3600),
        cuda_library: None,
    };
    assert_eq!(defaults().probe, expected);
    assert_eq!(load(&isolated()).unwrap().probe, expected);
}

#[test]
fn config_probe_keys_are_validated_with_their_conflicts() {
    let ok = load_env(&[
        ("VRAMD_PROBE__INTERVAL", "5m"),
        ("VRAMD_PROBE__MIN_FREE", "8GiB"),
        ("VRAMD_PROBE__HEADROOM", "true"),
        ("VRAMD_PROBE__CUDA_LIBRARY", "/opt/fake/libcuda.so.1"),
        ("VRAMD_ALERTS__PROBE_HEADROOM_LOW__THRESHOLD", "16GiB"),
        ("VRAMD_ALERTS__PROBE_HEADROOM_LOW__CLEAR", "20GiB"),
    ])
    .unwrap();
    assert_eq!(ok.probe.interval, Duration::from_secs(300));
    // Probe rules judge readings up to two intervals old.
    assert_eq!(crate::app::analysis_settings(&ok).probe_stale_after, Duration::from_secs(600));
    assert_eq!(ok.probe.min_free_bytes.get(), 8 << 30);
    assert!(ok.probe.headroom);
    assert_eq!(
        ok.probe.cuda_library.as_deref(),
        Some(std::path::Path::new("/opt/fake/libcuda.so.1"))
    );
    assert_eq!(ok.alerts.rules.probe_headroom_low.threshold, (16u64 << 30) as f64);
    for (env, needle) in [
        (&[("VRAMD_PROBE__INTERVAL", "10s")][..], "probe.interval"),
        (&[("VRAMD_PROBE__SAMPLES", "0")], "probe.samples"),
        (&[("VRAMD_PROBE__MIN_FREE", "1MiB")], "probe.min_free"),
        (
            &[("VRAMD_PROBE__TIMEOUT", "5s"), ("VRAMD_PROBE__HEADROOM_TIME_BUDGET", "5s")],
            "probe.headroom_time_budget",
        ),
        (
            &[("VRAMD_PROBE__MAX_BACKOFF", "1m"), ("VRAMD_PROBE__INTERVAL", "2m")],
            "probe.max_backoff",
        ),
        (&[("VRAMD_ALERTS__PROBE_HEADROOM_LOW__CLEAR", "1GiB")], "alerts.probe_headroom_low.clear"),
        (
            &[("VRAMD_ALERTS__PROBE_FREE_MISMATCH__THRESHOLD", "-1")],
            "alerts.probe_free_mismatch.threshold",
        ),
    ] {
        assert_error(load_env(env), &[needle]);
    }
}

#[test]
fn config_notify_defaults() {
    let expected = NotifyConfig {
        alertmanager_url: None,
        webhook_url: None,
        queue_capacity: 1024.try_into().unwrap(),
        timeout: Duration::from_secs(5),
        resend_interval: Duration::from_secs(60),
        max_retries: 5,
        retry_backoff_max: Duration::from_secs(30),
        external_url: None,
    };
    assert_eq!(defaults().notify, expected);
    assert_eq!(load(&isolated()).unwrap().notify, expected);
}

#[test]
fn config_rule_clear_on_the_wrong_side_of_threshold_names_the_clear_key() {
    // Fires above: clear above threshold.
    let error = assert_error(
        load_file("[alerts.memory_high]\nclear = 0.95\n"),
        &[
            "invalid value 0.95 for alerts.memory_high.clear",
            "vramd.toml",
            "must not exceed threshold 0.92 for a rule that fires above it",
        ],
    );
    assert_eq!(error.key(), Some("alerts.memory_high.clear"));
    // Fires below: clear below threshold.
    let error = assert_error(
        load_env(&[("VRAMD_ALERTS__EXHAUSTION_FORECAST__CLEAR", "1000")]),
        &[
            "invalid value \"1000\" for alerts.exhaustion_forecast.clear",
            "environment variable VRAMD_ALERTS__EXHAUSTION_FORECAST__CLEAR",
            "must not be below threshold 1800 for a rule that fires below it",
        ],
    );
    assert_eq!(error.key(), Some("alerts.exhaustion_forecast.clear"));
    // A threshold moved past the default clear names the clear key and its
    // origin, the built-in default.
    let error = assert_error(
        load_env(&[("VRAMD_ALERTS__LEAK_SUSPECTED__THRESHOLD", "1000")]),
        &[
            "invalid value 65536.0 for alerts.leak_suspected.clear",
            "built-in default",
            "must not exceed threshold 1000",
        ],
    );
    assert_eq!(error.key(), Some("alerts.leak_suspected.clear"));
    // Equal is fine either way.
    let config = load_file(
        "[alerts.memory_high]\nthreshold = 0.9\nclear = 0.9\n\
         [alerts.exhaustion_forecast]\nthreshold = 600\nclear = 600\n",
    )
    .unwrap();
    assert_eq!(config.alerts.rules.memory_high.clear, 0.9);
    assert_eq!(config.alerts.rules.exhaustion_forecast.rule.clear, 600.0);
}

#[test]
fn config_bad_severity_names_the_key() {
    let error = assert_error(
        load_file("[alerts.xid_error]\nseverity = \"fatal\"\n"),
        &[
            "invalid value \"fatal\" for alerts.xid_error.severity",
            "vramd.toml",
            "expected \"info\", \"warning\" or \"critical\"",
        ],
    );
    assert_eq!(error.key(), Some("alerts.xid_error.severity"));
    assert_error(
        load_env(&[("VRAMD_ALERTS__MEMORY_HIGH__SEVERITY", "Critical")]),
        &[
            "alerts.memory_high.severity",
            "VRAMD_ALERTS__MEMORY_HIGH__SEVERITY",
            "expected \"info\"",
        ],
    );
    assert_error(
        load_file("[alerts.device_lost]\nseverity = 3\n"),
        &["alerts.device_lost.severity", "expected a string"],
    );
    let config = load_env(&[("VRAMD_ALERTS__MEMORY_HIGH__SEVERITY", "info")]).unwrap();
    assert_eq!(config.alerts.rules.memory_high.severity, Severity::Info);
}

#[test]
fn config_bad_url_names_the_key() {
    let cases: &[(&str, &str)] = &[
        ("VRAMD_NOTIFY__ALERTMANAGER_URL", "alertmanager:9093"),
        ("VRAMD_NOTIFY__ALERTMANAGER_URL", "http://"),
        ("VRAMD_NOTIFY__WEBHOOK_URL", "ftp://hooks.example.com/x"),
        ("VRAMD_NOTIFY__WEBHOOK_URL", "https://hooks.example.com/a b"),
        ("VRAMD_NOTIFY__EXTERNAL_URL", " "),
        ("VRAMD_NOTIFY__EXTERNAL_URL", "HTTP://vramd:9477"),
    ];
    for (var, value) in cases {
        let key = var.trim_start_matches("VRAMD_").to_lowercase().replace("__", ".");
        let error = assert_error(
            load_env(&[(var, value)]),
            &[
                &format!("invalid value {value:?} for {key}"),
                var,
                "expected an http:// or https:// URL",
            ],
        );
        assert_eq!(error.key(), Some(key.as_str()));
    }
    assert_error(
        load_file("[notify]\nwebhook_url = 8080\n"),
        &["notify.webhook_url", "vramd.toml", "expected a string"],
    );
    let config = load_file(
        "[notify]\nalertmanager_url = \"http://alertmanager:9093\"\n\
         webhook_url = \" https://hooks.example.com/vramd?token=x \"\n\
         external_url = \"https://gpu-node-7.example.com:9477/\"\n",
    )
    .unwrap();
    assert_eq!(config.notify.alertmanager_url.as_deref(), Some("http://alertmanager:9093"));
    assert_eq!(
        config.notify.webhook_url.as_deref(),
        Some("https://hooks.example.com/vramd?token=x")
    );
    assert_eq!(config.notify.external_url.as_deref(), Some("https://gpu-node-7.example.com:9477/"));
}

#[test]
fn config_rule_numbers_are_finite_and_in_the_rule_unit() {
    let cases: &[(&str, &str, &str)] = &[
        ("VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD", "0", "a ratio above 0 and at most 1"),
        ("VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD", "1.01", "a ratio above 0 and at most 1"),
        ("VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD", "NaN", "must be a finite number"),
        ("VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD", "high", "expected a number"),
        ("VRAMD_ALERTS__MEMORY_HIGH__CLEAR", "-0.1", "a ratio above 0 and at most 1"),
        ("VRAMD_ALERTS__EXHAUSTION_FORECAST__THRESHOLD", "0", "seconds above 0"),
        ("VRAMD_ALERTS__EXHAUSTION_FORECAST__CLEAR", "inf", "must be a finite number"),
        ("VRAMD_ALERTS__LEAK_SUSPECTED__CLEAR", "-1", "bytes per second, at least 0"),
        ("VRAMD_ALERTS__ALLOCATOR_FRAGMENTATION_HIGH__THRESHOLD", "2", "a ratio above 0"),
        ("VRAMD_ALERTS__ALLOCATOR_RETRIES__THRESHOLD", "-1", "a count, at least 0"),
        ("VRAMD_ALERTS__DEVICE_LOST__CLEAR", "-inf", "must be a finite number"),
        ("VRAMD_ALERTS__XID_ERROR__THRESHOLD", "infinity", "must be a finite number"),
        ("VRAMD_ALERTS__EXHAUSTION_FORECAST__MIN_FIT", "1.5", "from 0 to 1"),
        ("VRAMD_ALERTS__EXHAUSTION_FORECAST__MIN_FIT", "NaN", "from 0 to 1"),
    ];
    for (var, value, reason) in cases {
        let key = var.trim_start_matches("VRAMD_").to_lowercase().replace("__", ".");
        let error = assert_error(
            load_env(&[(var, value)]),
            &[&format!("invalid value {value:?} for {key}"), var, reason],
        );
        assert_eq!(error.key(), Some(key.as_str()));
    }
    assert_error(
        load_file("[alerts.allocator_oom]\nthreshold = true\n"),
        &["alerts.allocator_oom.threshold", "expected a number"],
    );
    // Integers, floats and strings of either.
    let config = load_file(
        "[alerts.exhaustion_forecast]\nthreshold = 600\nclear = \"900.5\"\nmin_fit = 0\n\
         [alerts.device_lost]\nthreshold = 0.5\n",
    )
    .unwrap();
    let rules = &config.alerts.rules;
    assert_eq!(rules.exhaustion_forecast.rule.threshold, 600.0);
    assert_eq!(rules.exhaustion_forecast.rule.clear, 900.5);
    assert_eq!(rules.exhaustion_forecast.min_fit, 0.0);
    assert_eq!(rules.device_lost.threshold, 0.5);
}

#[test]
fn config_bad_duration_names_key_value_and_origin() {
    let error = assert_error(
        load_env(&[("VRAMD_SAMPLER__FAST_INTERVAL", "25x")]),
        &[
            "invalid value \"25x\" for sampler.fast_interval",
            "environment variable VRAMD_SAMPLER__FAST_INTERVAL",
            "unknown time unit",
        ],
    );
    assert!(matches!(error, ConfigError::InvalidValue { .. }));
    assert_error(
        load_file("[history]\nretention = 3600\n"),
        &["invalid value 3600 for history.retention", "vramd.toml", "with a unit"],
    );
}

#[test]
fn config_bad_size_names_the_key() {
    assert_error(
        load_file("[server]\nmax_request_body = \"64kib\"\n"),
        &["invalid value \"64kib\" for server.max_request_body", "unknown size unit `kib`"],
    );
    assert_error(
        load_file("[server]\nmax_request_body = -1\n"),
        &["invalid value -1 for server.max_request_body", "negative"],
    );
    assert_error(
        load_env(&[("VRAMD_SOURCE__MAX_TRACE_LINE", "1.5")]),
        &["source.max_trace_line", "whole number of bytes"],
    );
}

#[test]
fn config_sizes_accept_integers_and_units() {
    let config =
        load_file("[server]\nmax_request_body = 2048\n[source]\nmax_trace_line = \"1.5MiB\"\n")
            .unwrap();
    assert_eq!(config.server.max_request_body_bytes.get(), 2048);
    assert_eq!(config.source.max_trace_line_bytes.get(), 1_572_864);
}

#[test]
fn config_bad_address_names_the_key() {
    for bad in ["localhost:9477", "127.0.0.1", "127.0.0.1:99999", ""] {
        assert_error(
            load_env(&[("VRAMD_SERVER__LISTEN", bad)]),
            &[&format!("invalid value {bad:?} for server.listen"), "expected IP:port"],
        );
    }
    assert_error(load_file("[server]\nlisten = 9477\n"), &["server.listen", "expected a string"]);
}

#[test]
fn config_out_of_range_values_name_the_key_and_range() {
    let cases: &[(&str, &str, &str)] = &[
        ("VRAMD_SERVER__REQUEST_TIMEOUT", "0s", "between 1ms and 10m"),
        ("VRAMD_SERVER__REQUEST_TIMEOUT", "11m", "between 1ms and 10m"),
        ("VRAMD_SERVER__MAX_REQUEST_BODY", "1000B", "between 1KiB and 64MiB"),
        ("VRAMD_SERVER__MAX_REQUEST_BODY", "65MiB", "between 1KiB and 64MiB"),
        ("VRAMD_SERVER__MAX_CONCURRENT_REQUESTS", "0", "between 1 and 10000"),
        ("VRAMD_SERVER__MAX_CONCURRENT_REQUESTS", "10001", "between 1 and 10000"),
        ("VRAMD_SERVER__SHUTDOWN_TIMEOUT", "11s", "between 0s and 10s"),
        ("VRAMD_SAMPLER__FAST_INTERVAL", "9ms", "between 10ms and 1h"),
        ("VRAMD_SAMPLER__SLOW_INTERVAL", "2h", "between 100ms and 1h"),
        ("VRAMD_SAMPLER__CALL_TIMEOUT", "61s", "between 1ms and 1m"),
        ("VRAMD_SAMPLER__MAX_PROCESSES_PER_DEVICE", "1025", "between 1 and 1024"),
        ("VRAMD_SAMPLER__MAX_PROCESSES_PER_DEVICE", "-1", "between 1 and 1024"),
        ("VRAMD_SAMPLER__DISCOVERY_RETRY_MAX", "500ms", "between 1s and 1h"),
        ("VRAMD_HISTORY__RETENTION", "8d", "between 1s and 7d"),
        ("VRAMD_METRICS__PEAK_WINDOW", "0s", "between 1ms and 7d"),
        ("VRAMD_API__MAX_HISTORY_POINTS", "1000001", "between 1 and 1000000"),
        ("VRAMD_SIMULATOR__GPUS", "9", "between 1 and 8"),
        ("VRAMD_SIMULATOR__GPUS", "0", "between 1 and 8"),
        ("VRAMD_SIMULATOR__GPUS", "two", "whole number"),
        ("VRAMD_SIMULATOR__SEED", "-1", "between 0 and"),
        ("VRAMD_SOURCE__SPEED", "0", "above 0"),
        ("VRAMD_SOURCE__SPEED", "10001", "at most 10000"),
        ("VRAMD_SOURCE__SPEED", "inf", "above 0"),
        ("VRAMD_SOURCE__SPEED", "fast", "expected a number"),
        ("VRAMD_SOURCE__MAX_TRACE_LINE", "65MiB", "between 1KiB and 64MiB"),
        ("VRAMD_LOG__FORMAT", "xml", "\"text\" or \"json\""),
        ("VRAMD_LOG__LEVEL", " ", "expected a filter"),
        ("VRAMD_LOG__LEVEL", "vramd=loud", "not a tracing filter directive"),
        ("VRAMD_SOURCE__REPLAY", "", "expected a file path"),
        ("VRAMD_NVML__LIBRARY_PATH", " ", "expected a file path"),
        ("VRAMD_NVML__INIT_TIMEOUT", "99ms", "between 100ms and 10m"),
        ("VRAMD_NVML__INIT_TIMEOUT", "11m", "between 100ms and 10m"),
        ("VRAMD_NVML__MAX_CMDLINE_BYTES", "65537", "between 0B and 64KiB"),
        ("VRAMD_NVML__MAX_CMDLINE_BYTES", "-1", "negative"),
        ("VRAMD_NVML__REQUIRE_GPU", "yes", "true or false"),
        ("VRAMD_ANALYSIS__EVALUATION_INTERVAL", "99ms", "between 100ms and 10m"),
        ("VRAMD_ANALYSIS__EVALUATION_INTERVAL", "11m", "between 100ms and 10m"),
        ("VRAMD_ALERTS__RESOLVED_RETENTION", "8d", "between 0s and 7d"),
        ("VRAMD_ALERTS__MAX_ALERTS", "0", "between 1 and 100000"),
        ("VRAMD_ALERTS__MAX_ALERTS", "100001", "between 1 and 100000"),
        ("VRAMD_ANALYSIS__TREND_WINDOW", "9s", "between 10s and 1d"),
        ("VRAMD_ANALYSIS__TREND_WINDOW", "25h", "between 10s and 1d"),
        ("VRAMD_ALERTS__MEMORY_HIGH__ENABLED", "yes", "true or false"),
        ("VRAMD_ALERTS__MEMORY_HIGH__FOR", "25h", "between 0s and 1d"),
        ("VRAMD_ALERTS__MEMORY_HIGH__FOR", "60", "unit"),
        ("VRAMD_ALERTS__LEAK_SUSPECTED__WINDOW", "59s", "between 1m and 1d"),
        ("VRAMD_ALERTS__ALLOCATOR_FRAGMENTATION_HIGH__MIN_RESERVED", "2TiB", "between 0B and 1TiB"),
        ("VRAMD_ALERTS__ALLOCATOR_RETRIES__WINDOW", "0s", "between 1s and 1d"),
        ("VRAMD_ALERTS__ALLOCATOR_OOM__WINDOW", "2d", "between 1s and 1d"),
        ("VRAMD_ALERTS__XID_ERROR__WINDOW", "500ms", "between 1s and 1d"),
        ("VRAMD_NOTIFY__QUEUE_CAPACITY", "0", "between 1 and 100000"),
        ("VRAMD_NOTIFY__TIMEOUT", "99ms", "between 100ms and 1m"),
        ("VRAMD_NOTIFY__TIMEOUT", "61s", "between 100ms and 1m"),
        ("VRAMD_NOTIFY__RESEND_INTERVAL", "999ms", "between 1s and 1h"),
        ("VRAMD_NOTIFY__MAX_RETRIES", "101", "between 0 and 100"),
        ("VRAMD_NOTIFY__MAX_RETRIES", "-1", "between 0 and 100"),
        ("VRAMD_NOTIFY__RETRY_BACKOFF_MAX", "11m", "between 100ms and 10m"),
    ];
    for (var, value, reason) in cases {
        let key = var.trim_start_matches("VRAMD_").to_lowercase().replace("__", ".");
        let error = assert_error(
            load_env(&[(var, value)]),
            &[&format!("invalid value {value:?} for {key}"), var, reason],
        );
        assert_eq!(error.key(), Some(key.as_str()));
    }
}

#[test]
fn config_nvml_out_of_range_values_name_the_key() {
    let error = assert_error(
        load_file("[nvml]\ninit_timeout = \"20m\"\n"),
        &["invalid value \"20m\" for nvml.init_timeout", "vramd.toml", "between 100ms and 10m"],
    );
    assert_eq!(error.key(), Some("nvml.init_timeout"));
    let error = assert_error(
        load_file("[nvml]\nmax_cmdline_bytes = 65537\n"),
        &["invalid value 65537 for nvml.max_cmdline_bytes", "vramd.toml", "between 0B and 64KiB"],
    );
    assert_eq!(error.key(), Some("nvml.max_cmdline_bytes"));
    assert_error(
        load_env(&[("VRAMD_NVML__MAX_CMDLINE_BYTES", "65KiB")]),
        &[
            "invalid value \"65KiB\" for nvml.max_cmdline_bytes",
            "environment variable VRAMD_NVML__MAX_CMDLINE_BYTES",
            "between 0B and 64KiB",
        ],
    );
}

#[test]
fn config_nvml_range_bounds_are_inclusive() {
    let config =
        load_env(&[("VRAMD_NVML__INIT_TIMEOUT", "100ms"), ("VRAMD_NVML__MAX_CMDLINE_BYTES", "0")])
            .unwrap();
    assert_eq!(config.nvml.init_timeout, Duration::from_millis(100));
    assert_eq!(config.nvml.max_cmdline_bytes.get(), 0);
    let config =
        load_file("[nvml]\ninit_timeout = \"10m\"\nmax_cmdline_bytes = \"64KiB\"\n").unwrap();
    assert_eq!(config.nvml.init_timeout, Duration::from_secs(600));
    assert_eq!(config.nvml.max_cmdline_bytes.get(), 65_536);
}

#[test]
fn config_env_booleans_are_true_or_false() {
    let config = load_env(&[
        ("VRAMD_NVML__REQUIRE_GPU", "true"),
        ("VRAMD_NVML__PCIE_THROUGHPUT", " true "),
        ("VRAMD_NVML__XID_EVENTS", "false"),
    ])
    .unwrap();
    assert!(config.nvml.require_gpu);
    assert!(config.nvml.pcie_throughput);
    assert!(!config.nvml.xid_events);
}

#[test]
fn config_invalid_boolean_in_env_names_the_key() {
    for bad in ["1", "0", "yes", "no", "TRUE", "False", "on", ""] {
        let error = assert_error(
            load_env(&[("VRAMD_NVML__REQUIRE_GPU", bad)]),
            &[
                &format!("invalid value {bad:?} for nvml.require_gpu"),
                "environment variable VRAMD_NVML__REQUIRE_GPU",
                "expected a boolean: true or false",
            ],
        );
        assert_eq!(error.key(), Some("nvml.require_gpu"), "{bad:?}");
    }
    assert_error(
        load_env(&[("VRAMD_NVML__XID_EVENTS", "off")]),
        &["nvml.xid_events", "VRAMD_NVML__XID_EVENTS", "true or false"],
    );
}

#[test]
fn config_booleans_in_the_file_are_toml_booleans() {
    let config = load_file("[nvml]\nrequire_gpu = true\nxid_events = false\n").unwrap();
    assert!(config.nvml.require_gpu);
    assert!(!config.nvml.xid_events);
    assert_error(
        load_file("[nvml]\nrequire_gpu = 1\n"),
        &["invalid value 1 for nvml.require_gpu", "vramd.toml", "true or false"],
    );
    assert_error(
        load_file("[nvml]\npcie_throughput = \"yes\"\n"),
        &["nvml.pcie_throughput", "true or false"],
    );
    assert_error(
        load_file("[nvml]\nmax_cmdline_bytes = true\n"),
        &["nvml.max_cmdline_bytes", "whole number of bytes"],
    );
}

#[test]
fn config_values_of_the_wrong_type_in_the_file_are_rejected() {
    assert_error(load_file("[simulator]\ngpus = 2.0\n"), &["simulator.gpus", "whole number"]);
    assert_error(load_file("[log]\nlevel = true\n"), &["log.level", "expected a string"]);
    assert_error(load_file("[source]\nspeed = true\n"), &["source.speed", "expected a number"]);
    let config = load_file("[simulator]\ngpus = \"3\"\n[source]\nspeed = 2\n").unwrap();
    assert_eq!(config.source.speed, 2.0);
}

#[test]
fn config_unknown_scenario_names_the_key_and_lists_scenarios() {
    assert_error(
        load_file("[source]\nsimulate = \"lek\"\n"),
        &[
            "invalid value \"lek\" for source.simulate",
            "expected \"steady-inference\"",
            "\"leak\"",
            "\"idle\"",
        ],
    );
}

#[test]
fn config_simulate_and_replay_conflict_names_both_keys() {
    let error = assert_error(
        load_file("[source]\nsimulate = \"leak\"\nreplay = \"trace.ndjson\"\n"),
        &["source.simulate", "source.replay", "choose one device source"],
    );
    assert!(matches!(
        error,
        ConfigError::Conflict { first: "source.simulate", second: "source.replay", .. }
    ));
}

#[test]
fn config_record_into_the_replayed_trace_conflicts() {
    assert_error(
        load_env(&[("VRAMD_SOURCE__REPLAY", "t.ndjson"), ("VRAMD_SOURCE__RECORD", "t.ndjson")]),
        &["source.replay", "source.record", "overwrite"],
    );
    // Rotation would move or delete `t.ndjson.5` (issue 35, item 7).
    let rotated = [("VRAMD_SOURCE__REPLAY", "t.ndjson.5"), ("VRAMD_SOURCE__RECORD", "t.ndjson")];
    assert_error(load_env(&rotated), &["source.replay", "source.record", "rotate"]);
    let kept = [("VRAMD_SOURCE__RECORD_KEEP", "4"), rotated[0], rotated[1]];
    assert!(load_env(&kept).is_ok(), "rotation keeps .1 to .4 only");
    let refusing = [("VRAMD_SOURCE__RECORD_MODE", "refuse"), rotated[0], rotated[1]];
    assert!(load_env(&refusing).is_ok(), "no rotation, nothing moved");
}

#[test]
fn config_slow_tier_too_slow_for_the_leak_window_conflicts() {
    let error = assert_error(
        load_env(&[("VRAMD_SAMPLER__SLOW_INTERVAL", "16s")]),
        &["sampler.slow_interval", "alerts.leak_suspected.window (30m) holds 112 process lists"],
    );
    let ConfigError::Conflict { first_origin, .. } = error else { panic!() };
    assert_eq!(first_origin, Origin::Environment("VRAMD_SAMPLER__SLOW_INTERVAL".into()));
    // Allowed at 15 s, or with the rule off.
    load_env(&[("VRAMD_SAMPLER__SLOW_INTERVAL", "15s")]).unwrap();
    let off = [
        ("VRAMD_SAMPLER__SLOW_INTERVAL", "90s"),
        ("VRAMD_ALERTS__LEAK_SUSPECTED__ENABLED", "false"),
    ];
    load_env(&off).unwrap();
}

#[test]
fn config_slow_interval_below_fast_interval_conflicts() {
    let error = assert_error(
        load_env(&[("VRAMD_SAMPLER__FAST_INTERVAL", "2s")]),
        &["sampler.fast_interval", "sampler.slow_interval (1s) must be at least"],
    );
    let ConfigError::Conflict { first_origin, second_origin, .. } = error else { panic!() };
    assert_eq!(first_origin, Origin::Environment("VRAMD_SAMPLER__FAST_INTERVAL".into()));
    assert_eq!(second_origin, Origin::Default);
}

#[test]
fn config_kubernetes_call_timeout_beyond_the_refresh_conflicts() {
    assert_error(
        load_env(&[("VRAMD_KUBERNETES__CALL_TIMEOUT", "15s")]),
        &["kubernetes.call_timeout", "kubernetes.refresh_interval (10s)", "hung socket"],
    );
    let config = load_env(&[
        ("VRAMD_KUBERNETES__ENABLED", "true"),
        ("VRAMD_KUBERNETES__RUNTIME_SOCKET", "/var/run/crio/crio.sock"),
    ])
    .unwrap();
    assert!(config.kubernetes.enabled);
    assert_eq!(config.kubernetes.runtime_socket, std::path::Path::new("/var/run/crio/crio.sock"));
}

#[test]
fn config_retention_needing_too_many_samples_conflicts() {
    assert_error(
        load_env(&[("VRAMD_HISTORY__RETENTION", "7d"), ("VRAMD_SAMPLER__FAST_INTERVAL", "10ms")]),
        &["history.retention", "sampler.fast_interval", "60480000 samples", "10000000"],
    );
    let config = load_env(&[
        ("VRAMD_HISTORY__RETENTION", "100000s"),
        ("VRAMD_SAMPLER__FAST_INTERVAL", "10ms"),
        ("VRAMD_SAMPLER__SLOW_INTERVAL", "100ms"),
    ])
    .unwrap();
    assert_eq!(config.history.retention, Duration::from_secs(100_000));
}

#[test]
fn config_a_lookup_wait_beyond_the_slow_call_timeout_conflicts_only_with_kubernetes() {
    let short = ("VRAMD_SAMPLER__CALL_TIMEOUT", "300ms");
    // Off Kubernetes nothing waits for a lookup: a short sampler deadline
    // (the hung-driver tests use one) is no conflict.
    assert!(load_env(&[short]).is_ok());
    assert_error(
        load_env(&[short, ("VRAMD_KUBERNETES__ENABLED", "true")]),
        &["kubernetes.lookup_wait", "sampler.call_timeout", "must be less than"],
    );
}

#[test]
fn config_peak_window_longer_than_retention_conflicts() {
    assert_error(
        load_env(&[("VRAMD_METRICS__PEAK_WINDOW", "2h")]),
        &["metrics.peak_window", "history.retention", "must not exceed"],
    );
}

#[test]
fn config_a_snapshot_upload_limit_the_timeout_cannot_carry_conflicts() {
    // Issue 35: 1 GiB within the 10 s request timeout needed over 100 MB/s;
    // the defaults now agree at 10 MiB/s.
    let defaults = load_env(&[]).unwrap();
    let needed = defaults.ingest.max_snapshot_upload.get() as f64
        / defaults.ingest.snapshot_upload_timeout.as_secs_f64();
    assert!(needed <= crate::app::SLOWEST_SNAPSHOT_UPLOAD_RATE as f64, "{needed} B/s");
    assert_error(
        load_env(&[("VRAMD_INGEST__SNAPSHOT_UPLOAD_TIMEOUT", "10s")]),
        &[
            "ingest.max_snapshot_upload",
            "ingest.snapshot_upload_timeout (10s) needs more than 10MiB per second",
        ],
    );
    let smaller = [
        ("VRAMD_INGEST__SNAPSHOT_UPLOAD_TIMEOUT", "10s"),
        ("VRAMD_INGEST__MAX_SNAPSHOT_UPLOAD", "100MiB"),
    ];
    load_env(&smaller).unwrap();
}
