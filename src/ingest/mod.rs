//! Allocator reports: PyTorch caching-allocator statistics POSTed by the
//! workloads themselves (NVML sees only a process's total).
//!
//! Owns: the report document and its validation, the store of the latest
//! report per reporter (bounded, rate-limited, expiring), and the join of
//! reports onto NVML's processes, which the wiring joins onto every slow
//! reading (through `source::join`); OOM events (`oom`): their document, rate limit and join; the
//! snapshot files uploaded for them (`snapshot`); the checks (`validate`)
//! and the per-reporter rate window (`rate`) reports and OOM events share.
//! A source of readings like the device sources: depends on `model` and
//! `setting` (its section, [`IngestConfig`]) only;
//! knows nothing of history, analysis or HTTP.

mod config;
pub mod oom;
mod rate;
pub mod report;
pub mod snapshot;
pub mod store;
mod validate;

pub use config::IngestConfig;
pub use oom::OomIntake;
pub use rate::Refused;
pub use report::{AllocatorReport, ReportError, ReportLimits, ReportedDevice, Reporter};
pub use snapshot::{SnapshotError, SnapshotLimits, SnapshotStore, Upload};
pub use store::{ReportStore, ReportView, StoreLimits};
#[cfg(test)]
mod tests;
