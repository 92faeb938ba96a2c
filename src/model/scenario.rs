//! The catalogue of simulated scenarios: names, one-line descriptions and
//! parsing. Here rather than in the simulator so configuration can name a
//! scenario without depending on a source; the behaviour of each lives in
//! `source::simulator`.

use strum::{Display, EnumMessage, EnumString, IntoStaticStr, VariantArray};

/// A scripted situation the simulator can play; its name (kebab-case) is
/// the one used on the command line and in configuration.
#[derive(IntoStaticStr, Display, EnumString, EnumMessage, VariantArray)]
#[strum(serialize_all = "kebab-case", parse_err_ty = UnknownScenario, parse_err_fn = unknown)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScenarioKind {
    #[strum(message = "inference servers holding a flat working set; nothing should alert")]
    SteadyInference,
    #[strum(
        message = "training whose reserved memory grows while allocated stays flat, then allocator retries, then an OOM"
    )]
    TrainingFragmentation,
    #[strum(message = "one process whose memory grows linearly until the device is nearly full")]
    Leak,
    #[strum(
        message = "a steady job hit by a sudden short spike to near-full memory, with no trend"
    )]
    OomSpike,
    #[strum(message = "several processes share each GPU; one of them keeps growing")]
    MultiTenant,
    #[strum(message = "steady work until one GPU falls off the bus mid-run")]
    DeviceLost,
    #[strum(message = "GPUs with no processes and only driver memory in use")]
    Idle,
}

impl ScenarioKind {
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;

    pub fn name(self) -> &'static str {
        self.into()
    }

    /// One line for `vramd scenarios`: the variant's strum message.
    pub fn description(self) -> &'static str {
        self.get_message().unwrap_or_default()
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

fn unknown(given: &str) -> UnknownScenario {
    UnknownScenario { given: given.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_round_trips_through_its_name() {
        for &kind in ScenarioKind::ALL {
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
