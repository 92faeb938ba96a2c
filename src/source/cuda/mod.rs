//! The real CUDA driver probe: the child process's work (`child`), the
//! bounded largest-block search (`search`), the answer it prints (`wire`),
//! and the daemon's side that starts it under a deadline (`spawn`).
//!
//! Depends on: `model`, `clock`, `source::probe`, and the `cuda-driver`
//! crate (the one place real driver symbols are called). Knows nothing of
//! history or scheduling; the sampler's probe scheduler decides when.

pub mod child;
pub mod role;
pub mod search;
pub mod spawn;
pub mod wire;

pub use child::ProbeArgs;
pub use spawn::ChildProber;
pub use wire::{ProbeAnswer, WIRE_VERSION, render_text};
