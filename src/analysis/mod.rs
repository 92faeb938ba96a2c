//! Analysis: pure functions over readings and history windows.
//!
//! Owns: the memory accounting model of DESIGN.md (and, later, pressure,
//! trend, leak and fragmentation findings). No I/O, no clocks: every input
//! is data. Depends on: `model`, `history` (read-only). Knows nothing of
//! HTTP or alerts delivery.

pub mod accounting;
pub mod floor;
pub mod fragmentation;
pub mod leak;
pub mod pressure;
pub mod remediation;
pub mod series;
pub mod summary;
pub mod trend;
