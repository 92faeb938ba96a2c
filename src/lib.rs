//! vramd: a daemon that watches NVIDIA GPU memory and says where it went,
//! whether it is fragmented or leaking, and when it will run out.
//!
//! Data flows one way: `source` → `sampler` → `history` → `analysis` →
//! `alerts` → `api`/`exposition`. Only `app` knows the concrete types it
//! wires.

pub mod alerts;
pub mod analysis;
pub mod analyze;
pub mod api;
pub mod app;
pub mod cli;
pub mod clock;
pub mod config;
pub mod driver_trace;
pub mod exposition;
pub mod history;
pub mod ingest;
pub mod kubernetes;
pub mod logging;
pub mod model;
pub mod play;
pub mod sampler;
pub mod server;
pub mod setting;
pub mod signals;
pub mod source;
pub mod systemd_notify;
pub mod telemetry;
