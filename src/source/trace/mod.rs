//! Recording device readings to NDJSON trace files and replaying them.
//!
//! Owns: the trace format (docs/trace-format.md), the [`Recorder`] that wraps
//! any source (and prober) and writes what it returns, and the [`Replay`]
//! source (and prober) that reads a trace back, record by record, and the
//! [`TraceStream`] that `vramd analyze` plays without holding the trace.
//! Depends only on `model` and `source`; knows
//! nothing of history, sampler or HTTP.

mod error;
mod format;
mod line;
mod lines;
mod open;
mod reader;
mod record;
mod reorder;
mod replay;
mod stream;

#[cfg(test)]
mod line_tests;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod validation_tests;

pub use error::{LineError, TraceError};
pub use format::{FORMAT, TraceHeader, TraceRecord, VERSION};
pub use open::{RecordMode, RecordOptions};
pub use record::{RecordHealth, Recorder};
pub use replay::Replay;
pub use stream::{StreamOptions, TraceStream};
