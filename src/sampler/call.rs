//! Running one blocking source call with a deadline on the blocking pool
//! (device discovery, which happens rarely; tier calls have their own
//! threads, see `worker`).

use std::time::Duration;

use tokio::task::JoinHandle;

/// What became of a call; `P` is where a call still running can be
/// watched.
pub(crate) enum CallOutcome<T, P> {
    Done(T),
    /// Still running at the deadline; the handle lets the caller see when
    /// it finally returns, so it is never started twice at once.
    TimedOut(P),
    Panicked(String),
}

/// Runs `call` on the blocking pool and waits at most `deadline`.
pub(crate) async fn call_with_deadline<T, F>(
    deadline: Duration,
    call: F,
) -> CallOutcome<T, JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    wait_with_deadline(deadline, tokio::task::spawn_blocking(call)).await
}

/// Waits at most `deadline` for a call already running (one that timed out
/// before and is waited on again rather than started a second time).
pub(crate) async fn wait_with_deadline<T>(
    deadline: Duration,
    mut handle: JoinHandle<T>,
) -> CallOutcome<T, JoinHandle<T>> {
    match tokio::time::timeout(deadline, &mut handle).await {
        Ok(Ok(value)) => CallOutcome::Done(value),
        Ok(Err(join_error)) => CallOutcome::Panicked(join_error.to_string()),
        Err(_elapsed) => CallOutcome::TimedOut(handle),
    }
}
