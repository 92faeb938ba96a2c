//! Precedence: defaults < file < environment < command line.

use std::path::PathBuf;
use std::time::Duration;

use super::{
    DEFAULT_LISTEN, LoadOptions, LogFormat, Overrides, SimulatorConfig, SourceSelection, defaults,
    load, process_environment,
};
use super::{assert_error, env, file, isolated, load_env};
use crate::model::ScenarioKind;
use crate::model::Severity;

#[test]
fn config_precedence_one_key_through_all_four_layers() {
    let (_dir, path) = file("[server]\nlisten = \"127.0.0.1:1001\"\n");
    let with_file = LoadOptions { config_path: Some(path), ..isolated() };
    let with_env = LoadOptions {
        env: env(&[("VRAMD_SERVER__LISTEN", "127.0.0.1:1002")]),
        ..with_file.clone()
    };
    let with_override = LoadOptions {
        overrides: Overrides { listen: Some("127.0.0.1:1003".into()), ..Overrides::default() }
            .entries(),
        ..with_env.clone()
    };

    assert_eq!(load(&isolated()).unwrap().server.listen, DEFAULT_LISTEN);
    assert_eq!(load(&with_file).unwrap().server.listen.port(), 1001);
    assert_eq!(load(&with_env).unwrap().server.listen.port(), 1002);
    assert_eq!(load(&with_override).unwrap().server.listen.port(), 1003);
}

#[test]
fn config_precedence_nvml_require_gpu_through_all_four_layers() {
    let (_dir, path) = file("[nvml]\nrequire_gpu = true\n");
    let with_file = LoadOptions { config_path: Some(path), ..isolated() };
    let with_env =
        LoadOptions { env: env(&[("VRAMD_NVML__REQUIRE_GPU", "false")]), ..with_file.clone() };
    let with_override = LoadOptions {
        overrides: Overrides { require_gpu: true, ..Overrides::default() }.entries(),
        ..with_env.clone()
    };
    // The flag left off leaves the key to the lower layers.
    let without_flag = LoadOptions {
        overrides: Overrides { require_gpu: false, ..Overrides::default() }.entries(),
        ..with_file.clone()
    };

    assert!(!load(&isolated()).unwrap().nvml.require_gpu);
    assert!(load(&with_file).unwrap().nvml.require_gpu);
    assert!(!load(&with_env).unwrap().nvml.require_gpu);
    assert!(load(&with_override).unwrap().nvml.require_gpu);
    assert!(load(&without_flag).unwrap().nvml.require_gpu);
}

#[test]
fn config_nvml_keys_from_file_and_env_keep_the_other_defaults() {
    let (_dir, path) =
        file("[nvml]\ninit_timeout = \"5s\"\nmax_cmdline_bytes = \"4KiB\"\nxid_events = false\n");
    let options = LoadOptions {
        config_path: Some(path),
        env: env(&[
            ("VRAMD_NVML__INIT_TIMEOUT", "2m"),
            ("VRAMD_NVML__PCIE_THROUGHPUT", "true"),
            ("VRAMD_NVML__LIBRARY_PATH", "/opt/nvidia/libnvidia-ml.so.1"),
        ]),
        ..isolated()
    };
    let config = load(&options).unwrap();
    assert_eq!(config.nvml.init_timeout, Duration::from_secs(120));
    assert_eq!(config.nvml.max_cmdline_bytes.get(), 4096);
    assert!(!config.nvml.xid_events);
    assert!(config.nvml.pcie_throughput);
    assert_eq!(config.nvml.library_path, Some(PathBuf::from("/opt/nvidia/libnvidia-ml.so.1")));
    assert_eq!(config.nvml.require_gpu, defaults().nvml.require_gpu);
}

#[test]
fn config_precedence_three_level_rule_key_through_file_and_env() {
    let (_dir, path) = file("[alerts.memory_high]\nthreshold = 0.95\nfor = \"30s\"\n");
    let with_file = LoadOptions { config_path: Some(path), ..isolated() };
    let with_env = LoadOptions {
        env: env(&[("VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD", "0.9")]),
        ..with_file.clone()
    };

    let rules = load(&isolated()).unwrap().alerts.rules;
    assert_eq!(rules.memory_high.threshold, 0.92);
    assert_eq!(rules.memory_high.for_duration, Duration::from_secs(60));

    let rules = load(&with_file).unwrap().alerts.rules;
    assert_eq!(rules.memory_high.threshold, 0.95);
    assert_eq!(rules.memory_high.for_duration, Duration::from_secs(30));

    let config = load(&with_env).unwrap();
    let rules = &config.alerts.rules;
    assert_eq!(rules.memory_high.threshold, 0.9);
    // The rest of the rule's table comes from the file and the defaults,
    // the other rules and the rest of `[alerts]` from the defaults.
    assert_eq!(rules.memory_high.for_duration, Duration::from_secs(30));
    assert_eq!(rules.memory_high.clear, 0.88);
    assert_eq!(rules.memory_high.severity, Severity::Warning);
    assert_eq!(rules.exhaustion_forecast, defaults().alerts.rules.exhaustion_forecast);
    assert_eq!(config.analysis.evaluation_interval, defaults().analysis.evaluation_interval);

    // An invalid value names the variable that set it.
    let with_bad_env = LoadOptions {
        env: env(&[("VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD", "1.5")]),
        ..with_file.clone()
    };
    assert_error(
        load(&with_bad_env),
        &[
            "invalid value \"1.5\" for alerts.memory_high.threshold",
            "environment variable VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD",
        ],
    );
}

#[test]
fn config_alerts_and_notify_keys_from_env_are_parsed_from_strings() {
    let config = load_env(&[
        ("VRAMD_ANALYSIS__EVALUATION_INTERVAL", "1s"),
        ("VRAMD_ALERTS__MAX_ALERTS", "10"),
        ("VRAMD_ALERTS__MEMORY_HIGH__ENABLED", "false"),
        ("VRAMD_ALERTS__MEMORY_HIGH__FOR", "0s"),
        ("VRAMD_ALERTS__EXHAUSTION_FORECAST__MIN_FIT", "0.5"),
        ("VRAMD_ALERTS__LEAK_SUSPECTED__WINDOW", "1h"),
        ("VRAMD_ALERTS__ALLOCATOR_FRAGMENTATION_HIGH__MIN_RESERVED", "512MiB"),
        ("VRAMD_ALERTS__ALLOCATOR_OOM__SEVERITY", "warning"),
        ("VRAMD_ALERTS__XID_ERROR__THRESHOLD", "3"),
        ("VRAMD_NOTIFY__ALERTMANAGER_URL", "http://alertmanager:9093"),
        ("VRAMD_NOTIFY__MAX_RETRIES", "0"),
        ("VRAMD_NOTIFY__QUEUE_CAPACITY", "100000"),
    ])
    .unwrap();
    let alerts = &config.alerts;
    assert_eq!(config.analysis.evaluation_interval, Duration::from_secs(1));
    assert_eq!(alerts.max_alerts.get(), 10);
    assert!(!alerts.rules.memory_high.enabled);
    assert_eq!(alerts.rules.memory_high.for_duration, Duration::ZERO);
    assert_eq!(alerts.rules.exhaustion_forecast.min_fit, 0.5);
    assert_eq!(alerts.rules.leak_suspected.window, Duration::from_secs(3600));
    assert_eq!(alerts.rules.allocator_fragmentation_high.min_reserved.get(), 512 << 20);
    assert_eq!(alerts.rules.allocator_oom.rule.severity, Severity::Warning);
    assert_eq!(alerts.rules.xid_error.rule.threshold, 3.0);
    assert_eq!(config.notify.alertmanager_url.as_deref(), Some("http://alertmanager:9093"));
    assert_eq!(config.notify.max_retries, 0);
    assert_eq!(config.notify.queue_capacity.get(), 100_000);
}

#[test]
fn config_precedence_file_key_survives_other_layers_and_defaults_fill_its_section() {
    let (_dir, path) = file("[sampler]\nfast_interval = \"100ms\"\n[log]\nlevel = \"debug\"\n");
    let options = LoadOptions {
        config_path: Some(path),
        env: env(&[("VRAMD_SAMPLER__CALL_TIMEOUT", "5s"), ("VRAMD_LOG__LEVEL", "warn")]),
        overrides: Overrides {
            speed: Some(3.0),
            log_level: Some("error".into()),
            ..Overrides::default()
        }
        .entries(),
        ..isolated()
    };
    let config = load(&options).unwrap();
    assert_eq!(config.sampler.fast_interval, Duration::from_millis(100));
    assert_eq!(config.sampler.call_timeout, Duration::from_secs(5));
    assert_eq!(config.sampler.slow_interval, defaults().sampler.slow_interval);
    assert_eq!(config.source.speed, 3.0);
    assert_eq!(config.log.level, "error");
}

#[test]
fn config_env_values_are_parsed_from_strings() {
    let config = load_env(&[
        ("VRAMD_SOURCE__SIMULATE", "leak"),
        ("VRAMD_SIMULATOR__GPUS", "4"),
        ("VRAMD_SIMULATOR__SEED", "18446744073709551615"),
        ("VRAMD_SOURCE__SPEED", "2.5"),
        ("VRAMD_SERVER__MAX_REQUEST_BODY", "64KiB"),
        ("VRAMD_SERVER__MAX_CONCURRENT_REQUESTS", "8"),
        ("VRAMD_LOG__FORMAT", "json"),
        ("VRAMD_LOG__LEVEL", "true"),
    ])
    .unwrap();
    assert_eq!(
        config.selection(),
        SourceSelection::Simulate(crate::source::Simulation {
            scenario: ScenarioKind::Leak,
            simulator: SimulatorConfig { gpus: 4, seed: u64::MAX, container_ids: false },
        })
    );
    assert_eq!(config.source.speed, 2.5);
    assert_eq!(config.server.max_request_body_bytes.get(), 65_536);
    assert_eq!(config.server.max_concurrent_requests.get(), 8);
    assert_eq!(config.log.format, LogFormat::Json);
    // A string that looks like a boolean stays a string (a target name).
    assert_eq!(config.log.level, "true");
}

#[test]
fn config_env_ignores_variables_without_the_prefix() {
    let config =
        load_env(&[("PATH", "/bin"), ("vramd_server__listen", "x"), ("VRAMDX", "y")]).unwrap();
    assert_eq!(config, defaults());
}

#[test]
fn config_env_two_spellings_of_one_key_are_ambiguous() {
    assert_error(
        load_env(&[("VRAMD_LOG__LEVEL", "info"), ("VRAMD_log__LEVEL", "debug")]),
        &["VRAMD_LOG__LEVEL", "VRAMD_log__LEVEL", "log.level"],
    );
}

#[test]
fn config_overrides_set_their_keys() {
    let overrides = Overrides {
        listen: Some("[::1]:9000".into()),
        simulate: None,
        gpus: Some(3),
        seed: Some(7),
        speed: Some(0.5),
        replay: Some(PathBuf::from("in.ndjson")),
        record: Some(PathBuf::from("out.ndjson")),
        log_format: Some("json".into()),
        log_level: Some("vramd=trace".into()),
        require_gpu: true,
        web_config: Some(PathBuf::from("web.yml")),
    };
    let config = load(&LoadOptions { overrides: overrides.entries(), ..isolated() }).unwrap();
    assert_eq!(config.server.web_config, Some(PathBuf::from("web.yml")));
    assert_eq!(config.server.listen, "[::1]:9000".parse().unwrap());
    assert_eq!(config.selection(), SourceSelection::Replay { path: "in.ndjson".into() });
    assert_eq!(config.source.record, Some(PathBuf::from("out.ndjson")));
    assert_eq!(config.source.speed, 0.5);
    assert_eq!(config.log.format, LogFormat::Json);
    assert_eq!(config.log.level, "vramd=trace");
    assert!(config.nvml.require_gpu);

    let overrides = Overrides {
        simulate: Some("idle".into()),
        gpus: Some(3),
        seed: Some(7),
        ..Overrides::default()
    };
    let config = load(&LoadOptions { overrides: overrides.entries(), ..isolated() }).unwrap();
    assert_eq!(
        config.selection(),
        SourceSelection::Simulate(crate::source::Simulation {
            scenario: ScenarioKind::Idle,
            simulator: SimulatorConfig { gpus: 3, seed: 7, container_ids: false },
        })
    );
}

#[test]
fn config_override_errors_name_the_flag() {
    let overrides = Overrides { gpus: Some(9), ..Overrides::default() };
    assert_error(
        load(&LoadOptions { overrides: overrides.entries(), ..isolated() }),
        &["invalid value \"9\" for simulator.gpus", "command-line option --gpus", "1 and 8"],
    );
    let overrides = Overrides { speed: Some(f64::NAN), ..Overrides::default() };
    assert_error(
        load(&LoadOptions { overrides: overrides.entries(), ..isolated() }),
        &["source.speed", "--speed"],
    );
}

#[test]
fn config_process_environment_keeps_only_prefixed_variables() {
    assert!(process_environment().iter().all(|(name, _)| name.starts_with("VRAMD_")));
}

#[test]
fn config_moved_analysis_keys_are_read_under_their_old_spelling_with_one_note_each() {
    let (_dir, path) = file("[alerts]\ntrend_window = \"20m\"\nmax_alerts = 7\n");
    let options = LoadOptions {
        config_path: Some(path.clone()),
        env: env(&[("VRAMD_ALERTS__LEAK_WARMUP", "1m")]),
        ..isolated()
    };
    let (config, notes): (crate::app::Config, _) = super::load_noting(&options).unwrap();
    assert_eq!(config.analysis.trend_window, Duration::from_secs(1200));
    assert_eq!(config.analysis.leak_warmup, Duration::from_secs(60));
    assert_eq!(config.alerts.max_alerts.get(), 7, "the keys that stay are read as before");
    let said: Vec<String> = notes.iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        [
            format!(
                "alerts.trend_window (from file {}) is deprecated: write analysis.trend_window \
                 instead",
                path.display()
            ),
            "alerts.leak_warmup (from environment variable VRAMD_ALERTS__LEAK_WARMUP) is \
             deprecated: write analysis.leak_warmup instead"
                .to_owned(),
        ]
    );
    // An out-of-range value under the old spelling names the variable the
    // user wrote and the key it now sets.
    assert_error(
        load_env(&[("VRAMD_ALERTS__TREND_WINDOW", "1s")]),
        &["analysis.trend_window", "VRAMD_ALERTS__TREND_WINDOW", "between 10s and 1d"],
    );
    // The new spelling carries no note.
    let options =
        LoadOptions { env: env(&[("VRAMD_ANALYSIS__TREND_WINDOW", "20m")]), ..isolated() };
    let (_, notes): (crate::app::Config, _) = super::load_noting(&options).unwrap();
    assert!(notes.is_empty());
}

#[test]
fn config_catalogue_summaries_come_from_the_sections_doc_comments() {
    let summary = |key: &str| {
        super::KEYS.iter().find(|spec| spec.key == key).map(|spec| spec.summary.clone())
    };
    assert_eq!(
        summary("sampler.fast_interval").as_deref(),
        Some("how often memory and utilization are read")
    );
    assert_eq!(
        summary("alerts.memory_high.threshold").as_deref(),
        Some("fires when used / total memory is above this for `for`")
    );
    assert_eq!(summary("alerts.xid_error.severity").as_deref(), Some("severity of the alert"));
    for spec in super::KEYS.iter() {
        assert!(!spec.summary.trim().is_empty(), "{} has no summary", spec.key);
    }
}
