//! `[source]` and `[simulator]`: where readings come from (the driver, a
//! simulated scenario or a replayed trace) and whether they are recorded.
//!
//! Owns the two tables as written (`SourceKeys`, `SimulatorKeys`) and the
//! [`SourceConfig`] the daemon reads, which makes the choice of source one
//! value. Depends on the config schema machinery and `model` (scenarios,
//! record modes).

use std::num::NonZeroUsize;
use std::path::PathBuf;

use crate::config::error::ConfigError;
use crate::config::field::{ByteSize, de, ser};
use crate::config::keys::Accepts::{Int, Size, Words};
use crate::config::keys::KeySpec;
use crate::config::schema::{GIB, KIB, MIB, non_zero, section, within};
use crate::config::walk::Values;
use crate::model::{RecordMode, ScenarioKind};

use super::PATH;

section! {
    /// `[source]` as written; [`SourceConfig`] is what the daemon reads.
    pub(super) struct SourceKeys "source" {
        /// simulate this scenario instead of reading the driver (see `vramd scenarios`)
        simulate "simulate": Option<ScenarioKind> = None,
            Words("scenario name; not set by default");
        /// replay this recorded NDJSON trace instead of reading the driver
        replay "replay": Option<PathBuf> = None, Words(PATH);
        /// also write every reading to this NDJSON trace
        record "record": Option<PathBuf> = None, Words(PATH);
        // Rotate: a restart never truncates the last run's trace.
        /// what source.record does to an existing file: keep it as <file>.1, refuse to start, or
        /// truncate it
        record_mode "record_mode": RecordMode = RecordMode::Rotate,
            Words("\"rotate\", \"refuse\" or \"overwrite\"");
        /// earlier recordings kept by record_mode = "rotate" (<file>.1 … <file>.N)
        record_keep "record_keep": NonZeroUsize = non_zero(5), Int(1, 100);
        /// simulated or replayed seconds per real second
        speed "speed": f64 = 1.0, Words("number, above 0, at most 10000");
        /// longest accepted line of a replayed trace
        max_trace_line_bytes "max_trace_line": ByteSize = ByteSize(MIB), Size(KIB, 64 * MIB);
        /// largest replayed trace file; its records are all held in memory
        max_trace_bytes "max_trace_size": ByteSize = ByteSize(GIB), Size(MIB, 64 * GIB);
    }
}

section! {
    /// `[simulator]` as written; used only with `source.simulate`.
    pub(super) struct SimulatorKeys "simulator" {
        /// number of simulated GPUs
        gpus "gpus": u32 = 2, Int(1, 8);
        /// seed of the simulator; the same seed gives the same readings
        seed "seed": u64 = 1, Int(0, u64::MAX);
        /// give each simulated process a container ID (for testing Kubernetes attribution)
        container_ids "container_ids": bool = false, Words("true or false");
    }
}

/// `[source]` and `[simulator]`: where readings come from.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceConfig {
    pub selection: SourceSelection,
    /// `source.record`: also write every reading to this trace file.
    pub record: Option<PathBuf>,
    /// `source.speed`: simulated or replayed seconds per real second.
    pub speed: f64,
    /// `source.max_trace_line`: longest accepted line of a replayed trace.
    pub max_trace_line_bytes: ByteSize,
    /// `source.max_trace_size`: largest replayed trace file.
    pub max_trace_bytes: ByteSize,
    /// `source.record_mode`: what recording does to an existing file.
    pub record_mode: RecordMode,
    /// `source.record_keep`: earlier recordings kept when rotating.
    pub record_keep: NonZeroUsize,
}

/// Which device source the daemon reads.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceSelection {
    /// The real driver (NVML, see [`NvmlConfig`]); without one the daemon
    /// serves with no devices, unless `nvml.require_gpu` is set.
    Driver,
    /// `source.simulate` with `[simulator]`.
    Simulate(SimulatorConfig),
    /// `source.replay`: a recorded NDJSON trace.
    Replay { path: PathBuf },
}

/// `source.simulate` with `simulator.gpus` and `simulator.seed`.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulatorConfig {
    pub scenario: ScenarioKind,
    pub gpus: u32,
    pub seed: u64,
    /// `simulator.container_ids`.
    pub container_ids: bool,
}

impl SourceConfig {
    /// The source the keys select; `source.simulate` wins over
    /// `source.replay` here, `validate` refuses both.
    pub(super) fn from_keys(keys: SourceKeys, simulator: SimulatorKeys) -> Self {
        let selection = match (keys.simulate, keys.replay) {
            (Some(scenario), _) => SourceSelection::Simulate(SimulatorConfig {
                scenario,
                gpus: simulator.gpus,
                seed: simulator.seed,
                container_ids: simulator.container_ids,
            }),
            (None, Some(path)) => SourceSelection::Replay { path },
            (None, None) => SourceSelection::Driver,
        };
        Self {
            selection,
            record: keys.record,
            speed: keys.speed,
            max_trace_line_bytes: keys.max_trace_line_bytes,
            max_trace_bytes: keys.max_trace_bytes,
            record_mode: keys.record_mode,
            record_keep: keys.record_keep,
        }
    }

    /// The keys as written; the simulator keys keep their defaults unless
    /// the simulator is selected, since they are unused otherwise.
    pub(super) fn keys(&self) -> (SourceKeys, SimulatorKeys) {
        let (simulate, replay, simulator) = match &self.selection {
            SourceSelection::Driver => (None, None, SimulatorKeys::default()),
            SourceSelection::Simulate(chosen) => {
                let SimulatorConfig { scenario, gpus, seed, container_ids } = chosen.clone();
                (Some(scenario), None, SimulatorKeys { gpus, seed, container_ids })
            }
            SourceSelection::Replay { path } => {
                (None, Some(path.clone()), SimulatorKeys::default())
            }
        };
        let keys = SourceKeys {
            simulate,
            replay,
            record: self.record.clone(),
            speed: self.speed,
            max_trace_line_bytes: self.max_trace_line_bytes,
            max_trace_bytes: self.max_trace_bytes,
            record_mode: self.record_mode,
            record_keep: self.record_keep,
        };
        (keys, simulator)
    }
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self::from_keys(SourceKeys::default(), SimulatorKeys::default())
    }
}
