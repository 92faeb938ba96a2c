//! `render_effective` loads back to the configuration it rendered.

use std::path::PathBuf;
use std::time::Duration;

use super::{isolated, load_file};
use crate::config::{
    Config, LoadOptions, LogFormat, Overrides, SimulatorConfig, SourceSelection, defaults, load,
    render_effective,
};
use crate::source::simulator::ScenarioKind;

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
    config.server.max_request_body_bytes = 2000;
    config.sampler.fast_interval = Duration::from_millis(10);
    config.sampler.slow_interval = Duration::from_secs(90);
    config.history.retention = Duration::from_secs(7 * 86_400);
    config.sampler.fast_interval = Duration::from_secs(1);
    config.source.selection = SourceSelection::Simulate(SimulatorConfig {
        scenario: ScenarioKind::MultiTenant,
        gpus: 8,
        seed: u64::MAX,
    });
    config.source.record = Some(PathBuf::from("/tmp/a \"quoted\" \\ path.ndjson"));
    config.source.speed = 0.1;
    config.log.format = LogFormat::Json;
    config.log.level = "info,vramd=debug".into();
    config.nvml.library_path = Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"));
    config.nvml.require_gpu = true;
    config.nvml.init_timeout = Duration::from_millis(1500);
    config.nvml.pcie_throughput = true;
    config.nvml.max_cmdline_bytes = 0;
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

    config.source.selection = SourceSelection::Replay { path: PathBuf::from("trace.ndjson") };
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
    let config = load(&LoadOptions { overrides, ..isolated() }).unwrap();
    assert_round_trips(&config);
}
