//! Analysis, its own stage between history and alerts: pure functions over
//! readings and history windows, and the analyzer that runs them per
//! device and publishes snapshots.
//!
//! Owns: the memory accounting model of DESIGN.md, pressure, trend and time
//! to exhaustion, leak and fragmentation findings, and the per-device
//! findings the alert rules, `/metrics` and the REST API read. No I/O, no
//! clocks: every input is data. Depends on: `model`, `history`
//! (read-only). Knows nothing of alerts, configuration or HTTP.

pub mod accounting;
pub mod analyzer;
mod config;
mod counters;
mod driver_retries;
pub mod floor;
pub mod leak;
pub mod pressure;
pub mod process_growth;
pub mod remediation;
pub mod runner;
pub mod series;
pub mod snapshot;
pub mod summary;
pub mod trend;

pub use config::AnalysisConfig;
