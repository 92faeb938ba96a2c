//! Recording device readings to NDJSON trace files and replaying them.
//!
//! Owns: the trace format (docs/trace-format.md), the [`Recorder`] that wraps
//! any source (and prober) and writes what it returns, the
//! [`StreamedReplay`] source (and prober) that the daemon's `--replay` reads
//! back record by record through bounded queues, the whole-trace [`Replay`]
//! of the offline tools, and the [`TraceStream`] that `vramd analyze` plays
//! without holding the trace.
//! Depends only on `model` and `source`; knows
//! nothing of history, sampler or HTTP.

mod by_hand;
mod error;
mod feeders;
mod format;
mod line;
mod lines;
mod open;
mod queues;
mod reader;
mod record;
mod reorder;
mod replay;
mod stream;
mod streamed;

#[cfg(test)]
mod by_hand_tests;
#[cfg(test)]
mod line_tests;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod streamed_tests;
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
pub use streamed::{NextOom, OomFeed, ReplayOptions, StreamedReplay};
