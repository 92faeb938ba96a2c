//! What each catchable signal does to the daemon, decided here and nowhere
//! else.
//!
//! - SIGTERM, SIGINT, SIGQUIT: graceful shutdown (logged).
//! - SIGHUP: the operator's "reload"; logged and handed to [`Hangups`],
//!   which `reload` drains. Hangups that arrive while one waits are one
//!   reload: the file is read once, after the last of them.
//! - Every other signal whose default action would end the process
//!   (SIGUSR1/2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSTKFLT,
//!   SIGXCPU, SIGXFSZ, SIGTRAP, SIGABRT sent by `kill`, and every real-time
//!   signal): logged at `warn` and ignored. A stray `kill -USR1` from a
//!   log-rotation script must never take a monitor down silently.
//! - Left at their default, deliberately: SIGPIPE (already ignored by the
//!   Rust runtime, so a closed socket is an `EPIPE` error), the job-control
//!   stops (SIGTSTP/SIGTTIN/SIGTTOU: Ctrl-Z must still work in a terminal),
//!   and the fault signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGSYS): they
//!   mean a bug or a seccomp violation, and a core dump is what helps.
//!   SIGKILL and SIGSTOP cannot be caught.
//!
//! Depends on nothing else in the crate.

use std::future::Future;
use std::io;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// Signals that stop the daemon gracefully.
const SHUTDOWN: [(i32, &str); 3] =
    [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT"), (libc::SIGQUIT, "SIGQUIT")];

/// Signals that are logged and otherwise ignored (real-time ones are added
/// at run time: their range is the C library's).
const IGNORED: [(i32, &str); 12] = [
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGALRM, "SIGALRM"),
    (libc::SIGVTALRM, "SIGVTALRM"),
    (libc::SIGPROF, "SIGPROF"),
    (libc::SIGIO, "SIGIO"),
    (libc::SIGPWR, "SIGPWR"),
    (libc::SIGSTKFLT, "SIGSTKFLT"),
    (libc::SIGXCPU, "SIGXCPU"),
    (libc::SIGXFSZ, "SIGXFSZ"),
    (libc::SIGTRAP, "SIGTRAP"),
    (libc::SIGABRT, "SIGABRT"),
];

/// SIGHUPs not yet acted on; at most one waits, so a burst of them is one
/// reload.
pub struct Hangups(mpsc::Receiver<()>);

impl Hangups {
    /// Waits for the next SIGHUP; `None` once the handler is gone.
    pub async fn next(&mut self) -> Option<()> {
        self.0.recv().await
    }

    /// Hangups fed by hand, for tests and callers without signals: the
    /// sender is the signal.
    pub fn channel() -> (mpsc::Sender<()>, Hangups) {
        let (sender, receiver) = mpsc::channel(1);
        (sender, Hangups(receiver))
    }
}

/// Installs every handler now, so a signal that arrives during start-up is
/// already handled, and returns the future that completes on a shutdown
/// signal and the SIGHUPs to reload on. Must be called inside the Tokio
/// runtime.
pub fn install() -> io::Result<(impl Future<Output = ()> + Send + 'static, Hangups)> {
    let mut shutdown = Vec::with_capacity(SHUTDOWN.len());
    for (number, name) in SHUTDOWN {
        shutdown.push((signal(SignalKind::from_raw(number))?, name));
    }
    let mut hangup = signal(SignalKind::hangup())?;
    let (pending, hangups) = Hangups::channel();
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            info!(signal = "SIGHUP", "reloading the configuration");
            // Full: a reload is already waiting and will read the file
            // after this signal. Closed: nothing reloads (logged there).
            if pending.try_send(()).is_err() {
                debug!(signal = "SIGHUP", "a reload is already pending; this one joins it");
            }
        }
    });
    let realtime = (libc::SIGRTMIN()..=libc::SIGRTMAX()).map(|number| (number, "SIGRT"));
    for (number, name) in IGNORED.into_iter().chain(realtime) {
        let mut stream = signal(SignalKind::from_raw(number))?;
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                warn!(signal = name, number, "signal ignored: it does not stop vramd");
            }
        });
    }
    let shutdown = async move {
        let waits = shutdown.into_iter().map(|(mut stream, name)| {
            Box::pin(async move {
                stream.recv().await;
                name
            })
        });
        let (name, _, _) = futures_util::future::select_all(waits).await;
        info!(signal = name, "shutting down");
    };
    Ok((shutdown, hangups))
}
