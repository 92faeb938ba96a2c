//! Allocator reports: PyTorch caching-allocator statistics POSTed by the
//! workloads themselves (NVML sees only a process's total).
//!
//! Owns: the report document and its validation, the store of the latest
//! report per reporter (bounded, rate-limited, expiring), and the join of
//! reports onto NVML's processes, which the sampler applies to every slow
//! reading. A source of readings like the device sources: depends on
//! `model` only; knows nothing of history, analysis or HTTP.

pub mod report;
pub mod store;

pub use report::{AllocatorReport, ReportError, ReportLimits, ReportedDevice, Reporter};
pub use store::{Refused, ReportStore, ReportView, StoreLimits};
#[cfg(test)]
mod tests;
