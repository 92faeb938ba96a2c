//! Plain data that flows from the device sources through the sampler into
//! history and out to the HTTP surfaces.
//!
//! Owns: timestamps, device facts, the readings of the two sampling tiers,
//! the catalogue of simulated scenarios and the built-in rules' table.
//! Depends on nothing else in the crate. An absent value is `None`, never `0`.
//!
//! Layout: `time` (timestamps), `readings` (device facts and what the two
//! tiers read), `process` (processes and allocator statistics), `probe`,
//! `oom`, `error_kind`, `rules`, `scenario`, `shared_str` (`SharedStr`, the
//! reference-counted identity strings); this file keeps the sampling
//! `Tier`, `RecordMode` and the label enums' `as_str` (`label_as_str!`),
//! and re-exports the rest.

mod driver;
mod error_kind;
mod oom;
mod probe;
mod process;
mod readings;
mod rules;
mod scenario;
mod shared_str;
mod time;

pub use driver::{DriverStats, SIZE_BUCKETS};
pub use error_kind::ErrorKind;
pub use oom::{DriverOomEvidence, OomCause, OomEvent, ProcessHolding};
pub use probe::{
    HeadroomSearch, HeadroomStop, ProbeFailure, ProbeFailureKind, ProbeReading, ProbeSkipReason,
};
pub use process::{
    AllocatorRange, AllocatorStats, ProcessDetails, ProcessInfo, ProcessKind, ProcessRole,
    SnapshotSummary,
};
pub use readings::{
    Bar1Memory, ComputeMode, DeviceInfo, EccCounters, FastReading, MemoryInfo, MigInfo,
    PodAllocation, RemappedRows, RetiredPages, SlowDetails, SlowReading, THROTTLE_REASONS,
    keep_by_cap_order, keep_first_by,
};
pub use rules::{Direction, RuleId, RuleSettings, RuleSpec, RuleUnit, Severity};
pub use scenario::{ScenarioKind, UnknownScenario};
pub use shared_str::SharedStr;
pub use time::{Timestamp, TimestampOutOfRange, rfc3339};

use serde::{Deserialize, Serialize};
use strum::{Display, IntoStaticStr};

/// What `--record` does when its file already exists (`source.record_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, strum::EnumString, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum RecordMode {
    /// Keep it: renamed to `<file>.1` (earlier ones shift up, at most
    /// `source.record_keep` kept), so a restart never loses the last run.
    #[default]
    Rotate,
    /// Refuse to start, naming the file.
    Refuse,
    /// Truncate it (the behaviour before 0.2; only on request).
    Overwrite,
}

impl RecordMode {
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;
}

/// The two sampling tiers: fast (memory, utilization) and slow (processes
/// and everything else).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[derive(IntoStaticStr, Display)]
#[strum(serialize_all = "lowercase")]
pub enum Tier {
    Fast,
    Slow,
}

impl Tier {
    pub const ALL: [Tier; 2] = [Tier::Fast, Tier::Slow];
}

/// `as_str` of the label enums (metric labels, REST and trace kinds), which
/// derive strum's `IntoStaticStr` (the same text as their serde form where
/// they have one): written once here, and a method at every caller rather
/// than a `From`.
macro_rules! label_as_str {
    ($($kind:ty),+ $(,)?) => {$(
        impl $kind {
            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }
    )+};
}
pub(crate) use label_as_str;

label_as_str!(
    RecordMode,
    Tier,
    ErrorKind,
    ProcessRole,
    ProcessKind,
    OomCause,
    Severity,
    RuleUnit,
    ComputeMode,
    ProbeFailureKind,
    ProbeSkipReason,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_are_the_serde_names() {
        fn same<T: Serialize>(all: &[T], name: impl Fn(&T) -> &'static str) {
            for value in all {
                assert_eq!(serde_json::to_value(value).unwrap(), name(value));
            }
        }
        same(ErrorKind::ALL, |kind| kind.as_str());
        same(RecordMode::ALL, |mode| mode.as_str());
        same(&Tier::ALL, |tier| tier.as_str());
        same(&[ComputeMode::ExclusiveThread, ComputeMode::ExclusiveProcess], |mode| mode.as_str());
        same(&[ProcessKind::ComputeAndGraphics, ProcessKind::Mps], |kind| kind.as_str());
        same(&[ProcessRole::Probe], |role| role.as_str());
        same(&[Severity::Info, Severity::Warning, Severity::Critical], |severity| {
            severity.as_str()
        });
        assert_eq!(Tier::Slow.to_string(), "slow");
    }
}
