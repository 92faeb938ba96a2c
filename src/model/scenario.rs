//! The catalogue of simulated scenarios: names, one-line descriptions and
//! parsing. Here rather than in the simulator so configuration can name a
//! scenario without depending on a source; the behaviour of each lives in
//! `source::simulator`.

use std::str::FromStr;

/// A scripted situation the simulator can play.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScenarioKind {
    SteadyInference,
    TrainingFragmentation,
    Leak,
    OomSpike,
    MultiTenant,
    DeviceLost,
    Idle,
}

impl ScenarioKind {
    pub const ALL: [ScenarioKind; 7] = [
        ScenarioKind::SteadyInference,
        ScenarioKind::TrainingFragmentation,
        ScenarioKind::Leak,
        ScenarioKind::OomSpike,
        ScenarioKind::MultiTenant,
        ScenarioKind::DeviceLost,
        ScenarioKind::Idle,
    ];

    /// The name used on the command line and in configuration.
    pub fn name(self) -> &'static str {
        match self {
            ScenarioKind::SteadyInference => "steady-inference",
            ScenarioKind::TrainingFragmentation => "training-fragmentation",
            ScenarioKind::Leak => "leak",
            ScenarioKind::OomSpike => "oom-spike",
            ScenarioKind::MultiTenant => "multi-tenant",
            ScenarioKind::DeviceLost => "device-lost",
            ScenarioKind::Idle => "idle",
        }
    }

    /// One line for `vramd scenarios`.
    pub fn description(self) -> &'static str {
        match self {
            ScenarioKind::SteadyInference => {
                "inference servers holding a flat working set; nothing should alert"
            }
            ScenarioKind::TrainingFragmentation => {
                "training whose reserved memory grows while allocated stays flat, then allocator retries, then an OOM"
            }
            ScenarioKind::Leak => {
                "one process whose memory grows linearly until the device is nearly full"
            }
            ScenarioKind::OomSpike => {
                "a steady job hit by a sudden short spike to near-full memory, with no trend"
            }
            ScenarioKind::MultiTenant => {
                "several processes share each GPU; one of them keeps growing"
            }
            ScenarioKind::DeviceLost => "steady work until one GPU falls off the bus mid-run",
            ScenarioKind::Idle => "GPUs with no processes and only driver memory in use",
        }
    }
}

impl std::fmt::Display for ScenarioKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The name given is not a known scenario.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown scenario `{given}`; known scenarios: {}", known_names())]
pub struct UnknownScenario {
    pub given: String,
}

fn known_names() -> String {
    ScenarioKind::ALL.iter().map(|kind| kind.name()).collect::<Vec<_>>().join(", ")
}

impl FromStr for ScenarioKind {
    type Err = UnknownScenario;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        ScenarioKind::ALL
            .into_iter()
            .find(|kind| kind.name() == text)
            .ok_or_else(|| UnknownScenario { given: text.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_round_trips_through_its_name() {
        for kind in ScenarioKind::ALL {
            assert_eq!(kind.name().parse::<ScenarioKind>(), Ok(kind));
        }
    }

    #[test]
    fn unknown_scenario_lists_the_known_ones() {
        let error = "lek".parse::<ScenarioKind>().unwrap_err();
        let message = error.to_string();
        assert!(message.contains("`lek`"), "{message}");
        assert!(message.contains("leak") && message.contains("multi-tenant"), "{message}");
    }
}
