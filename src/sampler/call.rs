//! Running one blocking source call with a deadline.

use std::time::Duration;

use tokio::task::JoinHandle;

/// What became of a call.
pub(crate) enum CallOutcome<T> {
    Done(T),
    /// Still running at the deadline; the handle lets the caller see when
    /// it finally returns, so it is never started twice at once.
    TimedOut(JoinHandle<T>),
    Panicked(String),
}

/// Runs `call` on the blocking pool and waits at most `deadline`.
pub(crate) async fn call_with_deadline<T, F>(deadline: Duration, call: F) -> CallOutcome<T>
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
) -> CallOutcome<T> {
    match tokio::time::timeout(deadline, &mut handle).await {
        Ok(Ok(value)) => CallOutcome::Done(value),
        Ok(Err(join_error)) => CallOutcome::Panicked(join_error.to_string()),
        Err(_elapsed) => CallOutcome::TimedOut(handle),
    }
}
