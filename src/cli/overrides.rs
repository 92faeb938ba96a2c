//! The options that set configuration keys: each wins over every other
//! layer, and its help names the key. `config` reads them as a list of
//! [`Override`]s, so it knows no flag.

use std::path::PathBuf;

use crate::config::Override;
use crate::model::ScenarioKind;

/// Values from the command line; each set one wins over every other layer.
/// The doc comments are the options' help; each names the key it sets.
#[derive(Clone, Debug, Default, PartialEq, clap::Args)]
pub struct Overrides {
    /// Serve /metrics, the REST API and health checks on this address
    /// [server.listen].
    #[arg(long, global = true, value_name = "ADDR")]
    pub listen: Option<String>,

    /// Read a simulated scenario instead of the GPU driver
    /// [source.simulate]; `vramd scenarios` lists them.
    #[arg(long, global = true, value_name = "SCENARIO", value_parser = scenario_names())]
    pub simulate: Option<String>,

    /// Number of simulated GPUs, 1 to 8 [simulator.gpus].
    #[arg(long, global = true, value_name = "N")]
    pub gpus: Option<u32>,

    /// Seed of the simulator; the same seed gives the same readings
    /// [simulator.seed].
    #[arg(long, global = true, value_name = "N")]
    pub seed: Option<u64>,

    /// Simulated or replayed seconds per real second, above 0 and at most
    /// 10000 [source.speed].
    #[arg(long, global = true, value_name = "X")]
    pub speed: Option<f64>,

    /// Replay this recorded NDJSON trace instead of reading the GPU driver
    /// [source.replay].
    #[arg(long, global = true, value_name = "FILE")]
    pub replay: Option<PathBuf>,

    /// Also record every reading to this NDJSON trace [source.record].
    #[arg(long, global = true, value_name = "FILE")]
    pub record: Option<PathBuf>,

    /// Serve TLS, client certificates, basic auth and extra headers from
    /// this exporter-toolkit web configuration [server.web_config].
    #[arg(long = "web.config.file", global = true, value_name = "FILE")]
    pub web_config: Option<PathBuf>,

    /// Log line format [log.format].
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,

    /// Log filter, such as `info` or `info,vramd=debug` [log.level].
    #[arg(long, global = true, value_name = "FILTER")]
    pub log_level: Option<String>,

    // Sets the key to `true`; absent (`false`) leaves it to the other layers.
    /// Exit with status 1 at start-up, naming the library, when NVML cannot
    /// be initialised, instead of serving `vramd_nvml_up 0` and retrying
    /// [nvml.require_gpu].
    #[arg(long, global = true)]
    pub require_gpu: bool,
}

/// Only scenario names are accepted, and `--help` lists them.
fn scenario_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(ScenarioKind::ALL.iter().map(|kind| kind.name()))
}

impl Overrides {
    /// Every option that is set, as the layer the loader reads.
    pub fn entries(&self) -> Vec<Override> {
        let path = |key, flag, path: &Option<PathBuf>| {
            path.as_ref().map(|path| Override { key, flag, value: path.clone().into_os_string() })
        };
        let text = |key, flag, value: Option<String>| {
            value.map(|value| Override { key, flag, value: value.into() })
        };
        let entries = [
            text("server.listen", "--listen", self.listen.clone()),
            text("source.simulate", "--simulate", self.simulate.clone()),
            text("simulator.gpus", "--gpus", self.gpus.map(|n| n.to_string())),
            text("simulator.seed", "--seed", self.seed.map(|n| n.to_string())),
            // Display of f64 is the shortest text that parses back exactly.
            text("source.speed", "--speed", self.speed.map(|x| x.to_string())),
            path("source.replay", "--replay", &self.replay),
            path("source.record", "--record", &self.record),
            path("server.web_config", "--web.config.file", &self.web_config),
            text("log.format", "--log-format", self.log_format.clone()),
            text("log.level", "--log-level", self.log_level.clone()),
            text("nvml.require_gpu", "--require-gpu", self.require_gpu.then(|| "true".to_owned())),
        ];
        entries.into_iter().flatten().collect()
    }
}
