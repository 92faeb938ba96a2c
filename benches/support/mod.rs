//! What the benches share: the CPU-time measurement and the fixtures.
//! Included by each bench with `#[path]`; not a bench target itself.

// Each bench uses a different part.
#![allow(dead_code)]

pub mod cpu_time;
pub mod fixtures;
