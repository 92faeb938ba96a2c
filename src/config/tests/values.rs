//! Invalid values and conflicts: each error names the key, the value, the
//! origin and the reason.

use std::time::Duration;

use super::{assert_error, isolated, load_env, load_file};
use crate::config::{ConfigError, NvmlConfig, Origin, defaults, load};

#[test]
fn config_nvml_defaults() {
    let expected = NvmlConfig {
        library_path: None,
        require_gpu: false,
        init_timeout: Duration::from_secs(30),
        pcie_throughput: false,
        max_cmdline_bytes: 256,
        xid_events: true,
    };
    assert_eq!(defaults().nvml, expected);
    assert_eq!(load(&isolated()).unwrap().nvml, expected);
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
    assert_eq!(config.server.max_request_body_bytes, 2048);
    assert_eq!(config.source.max_trace_line_bytes, 1_572_864);
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
    assert_eq!(config.nvml.max_cmdline_bytes, 0);
    let config =
        load_file("[nvml]\ninit_timeout = \"10m\"\nmax_cmdline_bytes = \"64KiB\"\n").unwrap();
    assert_eq!(config.nvml.init_timeout, Duration::from_secs(600));
    assert_eq!(config.nvml.max_cmdline_bytes, 65_536);
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
        &["invalid value \"lek\" for source.simulate", "unknown scenario `lek`", "leak", "idle"],
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
fn config_peak_window_longer_than_retention_conflicts() {
    assert_error(
        load_env(&[("VRAMD_METRICS__PEAK_WINDOW", "2h")]),
        &["metrics.peak_window", "history.retention", "must not exceed"],
    );
}
