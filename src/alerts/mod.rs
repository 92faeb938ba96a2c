//! Alerts: rules over analysis findings, their states, and delivery.
//!
//! Owns: the alert model, the rule set and the state machine (inactive →
//! pending → firing → resolved), and the notifiers that deliver state
//! changes. Depends on: `analysis`, `history` (read-only), `model`,
//! `telemetry`. Knows nothing of HTTP routes.

pub mod board;
mod config;
pub mod engine;
pub mod evaluator;
pub mod model;
pub mod notify;
mod observations;
mod oom_rules;
mod probe_rules;
pub mod rules;
pub mod runner;

pub use config::{AlertsConfig, ForecastRule, FragmentationRule, RulesConfig, WindowRule};
pub use model::{Alert, AlertKey, AlertState, Severity, Transition};
