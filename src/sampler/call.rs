//! Running one blocking source call with a deadline.

use std::time::Duration;

use tokio::task::JoinHandle;

/// What became of a call.
pub(crate) enum CallOutcome<T> {
    Done(T),
    /// Still running at the deadline; the handle lets the caller see when
    /// it finally returns, so it is never started twice at once. `None`
    /// when the caller already holds the handle.
    TimedOut(Option<JoinHandle<T>>),
    Panicked(String),
}

/// Runs `call` on the blocking pool and waits at most `deadline`.
pub(crate) async fn call_with_deadline<T, F>(deadline: Duration, call: F) -> CallOutcome<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut handle = tokio::task::spawn_blocking(call);
    match tokio::time::timeout(deadline, &mut handle).await {
        Ok(Ok(value)) => CallOutcome::Done(value),
        Ok(Err(join_error)) => CallOutcome::Panicked(join_error.to_string()),
        Err(_elapsed) => CallOutcome::TimedOut(Some(handle)),
    }
}
