//! Log output that can never stop or stall the daemon.
//!
//! Owns: the writer behind `tracing`'s fmt layer. A thread that logs (the
//! sampler, an HTTP worker) only formats its line and hands it to a bounded
//! queue; one dedicated thread writes the queue to stderr. A full queue (a
//! reader that stopped reading, a paused pager) or a write that fails (a
//! closed pipe, `/dev/full`) drops the line and counts it in
//! [`dropped_lines`], exported as `vramd_log_lines_dropped_total`.
//!
//! Why not tracing-subscriber's own stderr writer: it reports a failed write
//! with `eprintln!`, which panics when stderr itself is broken, so the first
//! log line after `| head` closed the pipe killed whichever task was logging,
//! the sampler included. A blocking pipe write would likewise have stalled
//! sampling.
//!
//! Also owns the live log filter ([`LevelControl`]): `log.level` is the one
//! logging key a configuration reload changes; the format and the queue
//! are fixed at start. Depends only on `clock`.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::{EnvFilter, Registry, reload};

use crate::clock::Stopwatch;

mod config;
pub use config::{LogConfig, LogFormat};

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Log lines formatted but never written, since the process started.
pub fn dropped_lines() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

fn count_dropped() {
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// How long exit waits for queued lines to reach stderr; a reader that
/// stopped reading must not keep the process alive.
pub const FLUSH_DEADLINE: Duration = Duration::from_millis(500);

/// What travels to the writer thread.
enum Message {
    Line(Vec<u8>),
    /// Everything queued before it has been written or dropped once the
    /// writer acknowledges it.
    Flush,
}

/// The `MakeWriter` handed to tracing-subscriber: each event becomes one
/// [`LogLine`], queued when the line is complete.
#[derive(Clone)]
pub struct LogSink {
    queue: SyncSender<Message>,
}

/// Held by `main` for the daemon's lifetime; dropping it waits (at most
/// [`FLUSH_DEADLINE`]) for the queued lines, so the last ones ("stopped")
/// are not lost at exit.
pub struct LogGuard {
    sink: LogSink,
    flushed: Receiver<()>,
}

impl LogSink {
    /// Starts the writer thread over what `open` returns (stderr; tests use
    /// a failing or a stalling writer). `capacity` is how many formatted
    /// lines may wait for it (`log.queue_lines`).
    pub fn spawn<W: Write>(
        capacity: usize,
        open: impl FnOnce() -> W + Send + 'static,
    ) -> io::Result<(LogSink, LogGuard)> {
        let (queue, messages) = mpsc::sync_channel::<Message>(capacity.max(1));
        let (acknowledge, flushed) = mpsc::sync_channel(1);
        std::thread::Builder::new().name("vramd-log".into()).spawn(move || {
            let mut out = open();
            for message in messages {
                match message {
                    Message::Line(line) => {
                        if out.write_all(&line).and_then(|()| out.flush()).is_err() {
                            count_dropped();
                        }
                    }
                    Message::Flush => {
                        let _ = acknowledge.try_send(());
                    }
                }
            }
        })?;
        let sink = LogSink { queue };
        Ok((sink.clone(), LogGuard { sink, flushed }))
    }

    /// A full queue or a writer thread gone drops the line.
    fn send(&self, line: Vec<u8>) {
        if self.queue.try_send(Message::Line(line)).is_err() {
            count_dropped();
        }
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        let watch = Stopwatch::start();
        loop {
            match self.sink.queue.try_send(Message::Flush) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return,
                Err(TrySendError::Full(_)) if watch.elapsed() >= FLUSH_DEADLINE => return,
                Err(TrySendError::Full(_)) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        let _ = self.flushed.recv_timeout(FLUSH_DEADLINE.saturating_sub(watch.elapsed()));
    }
}

/// A `log.level` that is not a valid filter directive.
#[derive(Debug, thiserror::Error)]
#[error("log.level {level:?} is not a valid filter: {reason}")]
pub struct LevelError {
    pub level: String,
    pub reason: String,
}

/// Parses a `log.level` filter directive (`info`, `info,vramd=debug`).
pub fn filter(level: &str) -> Result<EnvFilter, LevelError> {
    EnvFilter::try_new(level)
        .map_err(|error| LevelError { level: level.to_owned(), reason: error.to_string() })
}

/// The filter layer to put first on the subscriber (directly on the
/// `Registry`), and the control that swaps its filter while running.
pub fn reloadable_filter(
    level: &str,
) -> Result<(reload::Layer<EnvFilter, Registry>, LevelControl), LevelError> {
    let (layer, handle) = reload::Layer::new(filter(level)?);
    Ok((layer, LevelControl { handle }))
}

/// Changes the running log filter.
#[derive(Clone)]
pub struct LevelControl {
    handle: reload::Handle<EnvFilter, Registry>,
}

impl LevelControl {
    /// Makes `filter` the log filter from now on. Fails only when the
    /// subscriber is gone (the process is exiting).
    pub fn apply(&self, filter: EnvFilter) -> Result<(), String> {
        self.handle.reload(filter).map_err(|error| error.to_string())
    }
}

/// One formatted event, queued on drop (tracing-subscriber writes each
/// event with one `write_all` and then drops its writer).
pub struct LogLine<'a> {
    sink: &'a LogSink,
    line: Vec<u8>,
}

impl Write for LogLine<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine<'_> {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            self.sink.send(std::mem::take(&mut self.line));
        }
    }
}

impl<'a> MakeWriter<'a> for LogSink {
    type Writer = LogLine<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine { sink: self, line: Vec::with_capacity(256) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    struct Failing;
    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_log_level_changes_while_running() {
        use tracing_subscriber::layer::SubscriberExt;
        let (layer, control) = reloadable_filter("info").unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            assert!(!tracing::enabled!(tracing::Level::DEBUG));
            control.apply(filter("info,vramd=debug").unwrap()).unwrap();
            assert!(tracing::enabled!(tracing::Level::DEBUG));
        });
        assert!(filter("info,[").is_err(), "a bad directive is refused before anything changes");
    }

    #[test]
    fn a_failing_stderr_drops_and_counts_instead_of_panicking() {
        let before = dropped_lines();
        let (sink, guard) = LogSink::spawn(8, || Failing).unwrap();
        for _ in 0..3 {
            let mut line = sink.make_writer();
            line.write_all(b"sampler tick\n").unwrap();
        }
        drop(guard); // waits until the writer has tried all three
        assert!(dropped_lines() >= before + 3);
    }

    /// A writer that blocks until released: a reader that stopped reading.
    struct Stalled(Arc<Barrier>);
    impl Write for Stalled {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.wait();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stalled_reader_never_blocks_the_logging_thread() {
        let release = Arc::new(Barrier::new(2));
        let stalled = Stalled(Arc::clone(&release));
        let before = dropped_lines();
        let (sink, _guard) = LogSink::spawn(2, move || stalled).unwrap();
        // One line is taken by the stalled writer, two wait in the queue,
        // the rest must be dropped at once rather than block this thread.
        for _ in 0..10 {
            sink.make_writer().write_all(b"line\n").unwrap();
        }
        assert!(dropped_lines() >= before + 7, "lines beyond the queue are dropped");
        release.wait();
    }
}
