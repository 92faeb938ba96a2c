//! Why a device-source call produced no reading, as one closed set.
//!
//! Owns: [`ErrorKind`], the `kind` label of `vramd_source_errors_total`,
//! the `kind` of a trace's `error` records and of the REST `failures`.
//! Depends on nothing else in the crate.

use serde::{Deserialize, Serialize};
use strum::{IntoStaticStr, VariantArray};

/// One enum rather than strings, so a new kind is pre-created as a metric
/// series, recorded and shown the same way everywhere or not compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum ErrorKind {
    DeviceLost,
    UnknownDevice,
    Unavailable,
    Driver,
    TraceEnded,
    Record,
    /// The call did not answer within its deadline.
    Timeout,
    /// The previous call on that device and tier has not returned yet.
    StillRunning,
    Panicked,
    /// History refused a reading older than the newest it holds.
    OutOfOrder,
}

impl ErrorKind {
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_match_serde() {
        let mut seen = std::collections::BTreeSet::new();
        for kind in ErrorKind::ALL {
            assert!(seen.insert(kind.as_str()), "{kind:?}");
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
