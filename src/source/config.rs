//! `[source]` and `[simulator]`: where readings come from (the driver, a
//! simulated scenario or a replayed trace) and whether they are recorded.
//! [`SourceConfig::selection`] makes the choice one value. Depends on
//! `setting` and `model` (scenarios, record modes).

use std::num::NonZeroUsize;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::{RecordMode, ScenarioKind};
use crate::setting::{ByteSize, Form, GIB, KIB, Keys, MIB, non_zero};

/// Largest `source.speed`.
pub const MAX_SPEED: f64 = 10_000.0;

/// `[source]`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// simulate this scenario instead of reading the driver (see `vramd scenarios`)
    #[schemars(with = "Option<String>")]
    pub simulate: Option<ScenarioKind>,
    /// replay this recorded NDJSON trace instead of reading the driver
    pub replay: Option<PathBuf>,
    /// also write every reading to this NDJSON trace
    pub record: Option<PathBuf>,
    // Rotate: a restart never truncates the last run's trace.
    /// what source.record does to an existing file: keep it as <file>.1, refuse to start, or truncate it
    #[schemars(with = "String")]
    pub record_mode: RecordMode,
    /// earlier recordings kept by record_mode = "rotate" (<file>.1 … <file>.N)
    pub record_keep: NonZeroUsize,
    /// simulated or replayed seconds per real second
    pub speed: f64,
    /// longest accepted line of a replayed trace
    #[serde(rename = "max_trace_line")]
    pub max_trace_line_bytes: ByteSize,
    /// largest trace file vramd --replay accepts; it is read through once at start-up to check it
    #[serde(rename = "max_trace_size")]
    pub max_trace_bytes: ByteSize,
    /// records vramd analyze --replay holds to put a trace in time order across devices; later ones are counted
    pub replay_reorder_records: NonZeroUsize,
    /// records of each device's fast tier, slow tier and probe outcomes (and of the OOM events) vramd --replay reads ahead
    pub replay_queue_records: NonZeroUsize,
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            simulate: None,
            replay: None,
            record: None,
            record_mode: RecordMode::Rotate,
            record_keep: non_zero(5),
            speed: 1.0,
            max_trace_line_bytes: ByteSize(MIB),
            max_trace_bytes: ByteSize(GIB),
            replay_reorder_records: non_zero(4096),
            replay_queue_records: non_zero(256),
        }
    }
}

impl SourceConfig {
    pub fn check(&self, keys: &mut Keys) {
        let scenarios = ScenarioKind::ALL.iter().map(|kind| kind.name()).collect();
        keys.words("simulate", Form::Choice(scenarios), "scenario name; not set by default");
        keys.words("replay", Form::Path, "path; not set by default");
        keys.words("record", Form::Path, "path; not set by default");
        let modes = RecordMode::ALL.iter().map(|mode| mode.as_str()).collect();
        keys.words("record_mode", Form::Choice(modes), "\"rotate\", \"refuse\" or \"overwrite\"");
        keys.count("record_keep", self.record_keep.get() as u64, 1, 100);
        let speed = self.speed;
        let valid = if speed.is_finite() && speed > 0.0 && speed <= MAX_SPEED {
            Ok(())
        } else {
            Err(format!("must be a number above 0 and at most {MAX_SPEED}"))
        };
        keys.number("speed", false, speed, "number, above 0, at most 10000", valid);
        keys.size("max_trace_line", self.max_trace_line_bytes, KIB, 64 * MIB);
        keys.size("max_trace_size", self.max_trace_bytes, MIB, 64 * GIB);
        keys.count("replay_reorder_records", self.replay_reorder_records.get() as u64, 1, 1 << 20);
        keys.count("replay_queue_records", self.replay_queue_records.get() as u64, 1, 1 << 16);
    }

    /// The source the keys select; `source.simulate` wins over
    /// `source.replay` here, `app::Config` refuses both.
    pub fn selection(&self, simulator: &SimulatorConfig) -> SourceSelection {
        match (self.simulate, &self.replay) {
            (Some(scenario), _) => {
                SourceSelection::Simulate(Simulation { scenario, simulator: simulator.clone() })
            }
            (None, Some(path)) => SourceSelection::Replay { path: path.clone() },
            (None, None) => SourceSelection::Driver,
        }
    }
}

/// `[simulator]`: used only with `source.simulate`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimulatorConfig {
    /// number of simulated GPUs
    pub gpus: u32,
    /// seed of the simulator; the same seed gives the same readings
    pub seed: u64,
    /// give each simulated process a container ID (for testing Kubernetes attribution)
    pub container_ids: bool,
}

impl Default for SimulatorConfig {
    fn default() -> Self {
        Self { gpus: 2, seed: 1, container_ids: false }
    }
}

impl SimulatorConfig {
    pub fn check(&self, keys: &mut Keys) {
        keys.count("gpus", self.gpus, 1, 8);
        keys.count("seed", self.seed, 0, u64::MAX);
        keys.flag("container_ids");
    }
}

/// Which device source the daemon reads.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceSelection {
    /// The real driver (NVML); without one the daemon serves with no
    /// devices, unless `nvml.require_gpu` is set.
    Driver,
    /// `source.simulate` with `[simulator]`.
    Simulate(Simulation),
    /// `source.replay`: a recorded NDJSON trace.
    Replay { path: PathBuf },
}

/// A simulated host: the scenario and `[simulator]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulation {
    pub scenario: ScenarioKind,
    pub simulator: SimulatorConfig,
}
