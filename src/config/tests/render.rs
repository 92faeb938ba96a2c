//! `render_effective` loads back to the configuration it rendered.

use std::path::PathBuf;
use std::time::Duration;

use super::{
    ByteSize, Config, LoadOptions, LogFormat, Overrides, SimulatorConfig, defaults, load,
    render_effective,
};
use super::{env, isolated, load_file};
use crate::model::ScenarioKind;
use crate::model::Severity;

#[track_caller]
fn assert_round_trips(config: &Config) {
    let text = render_effective(config);
    let loaded = load_file(&text).unwrap_or_else(|error| panic!("{error}\n{text}"));
    assert_eq!(&loaded, config, "{text}");
}

#[test]
fn config_render_effective_defaults_round_trip() {
    assert_round_trips(&defaults());
    assert_eq!(load(&isolated()).unwrap(), defaults());
}

#[test]
fn config_render_effective_changed_values_round_trip() {
    let mut config = defaults();
    config.server.listen = "[::]:9000".parse().unwrap();
    config.server.request_timeout = Duration::from_millis(1500);
    config.server.max_request_body_bytes = ByteSize(2000);
    config.sampler.fast_interval = Duration::from_millis(10);
    config.sampler.slow_interval = Duration::from_secs(15);
    config.history.retention = Duration::from_secs(7 * 86_400);
    config.sampler.fast_interval = Duration::from_secs(1);
    config.source.simulate = Some(ScenarioKind::MultiTenant);
    config.simulator = SimulatorConfig { gpus: 8, seed: u64::MAX, container_ids: true };
    config.source.record = Some(PathBuf::from("/tmp/a \"quoted\" \\ path.ndjson"));
    config.source.speed = 0.1;
    config.log.format = LogFormat::Json;
    config.log.level = "info,vramd=debug".into();
    config.nvml.library_path = Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"));
    config.nvml.require_gpu = true;
    config.nvml.init_timeout = Duration::from_millis(1500);
    config.nvml.pcie_throughput = true;
    config.nvml.max_cmdline_bytes = ByteSize(0);
    config.nvml.xid_events = false;
    assert_round_trips(&config);
    let text = render_effective(&config);
    assert!(
        text.contains("\n[nvml]\n")
            && text.contains("\nlibrary_path = \"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\"\n")
            && text.contains("\nrequire_gpu = true\n")
            && text.contains("\nmax_cmdline_bytes = \"0B\"\n"),
        "{text}"
    );

    config.source.simulate = None;
    config.source.replay = Some(PathBuf::from("trace.ndjson"));
    assert_round_trips(&config);
}

#[test]
fn config_render_effective_of_a_loaded_config_round_trips() {
    let overrides = Overrides {
        simulate: Some("oom-spike".into()),
        gpus: Some(1),
        seed: Some(42),
        speed: Some(60.0),
        require_gpu: true,
        ..Overrides::default()
    };
    let config = load(&LoadOptions { overrides: overrides.entries(), ..isolated() }).unwrap();
    assert_round_trips(&config);
}

#[test]
fn config_render_effective_changed_alerts_and_notify_round_trip() {
    let mut config = defaults();
    config.analysis.evaluation_interval = Duration::from_millis(100);
    config.alerts.resolved_retention = Duration::ZERO;
    config.alerts.max_alerts = 1.try_into().unwrap();
    let rules = &mut config.alerts.rules;
    rules.memory_high.enabled = false;
    rules.memory_high.threshold = 0.95;
    rules.memory_high.clear = 0.9;
    rules.memory_high.for_duration = Duration::from_secs(90);
    rules.memory_high.severity = Severity::Critical;
    rules.exhaustion_forecast.rule.threshold = 600.5;
    rules.exhaustion_forecast.rule.clear = 1e9;
    rules.exhaustion_forecast.min_fit = 0.0;
    rules.leak_suspected.rule.threshold = 1.0 / 3.0;
    rules.leak_suspected.rule.clear = 0.0;
    rules.leak_suspected.window = Duration::from_secs(24 * 3600);
    rules.allocator_fragmentation_high.min_reserved = ByteSize(3 << 29);
    rules.xid_error.rule.severity = Severity::Info;
    rules.xid_error.window = Duration::from_millis(1500);
    config.notify.alertmanager_url = Some("http://alertmanager:9093".into());
    config.notify.webhook_url = Some("https://hooks.example.com/v?name=\"x\"\\y".into());
    config.notify.external_url = Some("https://gpu-node-7:9477".into());
    config.notify.queue_capacity = 100_000.try_into().unwrap();
    config.notify.max_retries = 0;
    config.notify.timeout = Duration::from_millis(250);
    assert_round_trips(&config);
    let text = render_effective(&config);
    for line in [
        "\n[alerts.memory_high]\n",
        "\nenabled = false\n",
        "\nthreshold = 0.95\n",
        "\nfor = \"90s\"\n",
        "\nseverity = \"critical\"\n",
        "\nmin_reserved = \"1536MiB\"\n",
        "\nalertmanager_url = \"http://alertmanager:9093\"\n",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    // `[alerts]` is opened once, before its rule tables.
    assert_eq!(text.matches("\n[alerts]\n").count(), 1, "{text}");
    assert!(text.find("\n[alerts]\n") < text.find("\n[alerts.memory_high]\n"));
}

#[test]
fn config_render_effective_of_env_rule_keys_round_trips() {
    let options = LoadOptions {
        env: env(&[
            ("VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD", "0.9"),
            ("VRAMD_ALERTS__MEMORY_HIGH__CLEAR", "0.85"),
            ("VRAMD_ALERTS__DEVICE_LOST__FOR", "1m 30s"),
            ("VRAMD_NOTIFY__WEBHOOK_URL", "https://hooks.example.com/vramd"),
        ]),
        ..isolated()
    };
    let config = load(&options).unwrap();
    assert_eq!(config.alerts.rules.device_lost.for_duration, Duration::from_secs(90));
    assert_round_trips(&config);
}
