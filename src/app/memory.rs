//! Hands memory the daemon no longer uses back to the kernel: once after
//! start-up (freed heap and code run only then), and then the heap's free
//! pages every `history.heap_release_interval`. A side path: nothing waits
//! on it, and a failure is logged, never fatal.
//!
//! Depends on `resident_trim` (the FFI) and tokio; nothing depends on it
//! but the wiring.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How long after the server is built start-up is taken to be over: the
/// first samples, discovery and the first alert evaluation
/// (`analysis.evaluation_interval`, 5 s by default) have run by then, so the
/// code mapped again afterwards is the code an idle daemon keeps running.
const START_UP_SETTLE: Duration = Duration::from_secs(10);

/// /proc and malloc's locks answer in about a millisecond (a release walks
/// every arena's free lists: 40–210 µs on a 10 MiB heap); the deadline only
/// keeps a wedged kernel from holding this task forever.
const RELEASE_DEADLINE: Duration = Duration::from_secs(10);

/// Start-up leaves ~2 MiB of freed heap (the OpenAPI document at its peak)
/// and ~4 MiB of code run only once (command line, configuration layers,
/// router, TLS set-up) resident for the daemon's life; hand both back once
/// (issue 15). Then, every `interval` (none when zero), hand back the free
/// pages the heap keeps: the history frees and makes chunks all the time,
/// and glibc returns a freed hole to the kernel only at the top of the heap,
/// so holes left between live chunks stay resident (issue 37: 0.2–0.3 B
/// per stored process-sample at 8 GPUs × 64 moving processes).
pub async fn release_freed_memory(interval: Duration, cancel: CancellationToken) {
    releases(START_UP_SETTLE, interval, cancel).await;
}

async fn releases(settle: Duration, interval: Duration, cancel: CancellationToken) {
    if !sleep_or_cancelled(settle, &cancel).await {
        return;
    }
    let released = tokio::task::spawn_blocking(|| {
        resident_trim::release_free_heap();
        resident_trim::release_idle_code()
    });
    match tokio::time::timeout(RELEASE_DEADLINE, released).await {
        Ok(Ok(Ok(bytes))) => tracing::debug!(bytes, "start-up code unmapped"),
        Ok(Ok(Err(error))) => warn!(error = %error, "cannot unmap start-up code"),
        Ok(Err(error)) => warn!(error = %error, "start-up memory release did not finish"),
        Err(_) => warn!(deadline = ?RELEASE_DEADLINE, "start-up memory release still running"),
    }
    if interval.is_zero() {
        return;
    }
    while sleep_or_cancelled(interval, &cancel).await {
        let released = tokio::task::spawn_blocking(resident_trim::release_free_heap);
        match tokio::time::timeout(RELEASE_DEADLINE, released).await {
            Ok(Ok(returned)) => tracing::trace!(returned, "free heap pages released"),
            Ok(Err(error)) => warn!(error = %error, "heap release did not finish"),
            // One release still stuck: do not stack another behind it.
            Err(_) => {
                warn!(deadline = ?RELEASE_DEADLINE, "heap release still running; releases stop");
                return;
            }
        }
    }
}

/// Sleeps `duration`; false when cancelled first.
async fn sleep_or_cancelled(duration: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = tokio::time::sleep(duration) => true,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::releases;

    #[tokio::test]
    async fn releases_go_on_until_shutdown_and_stop_with_it() {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(releases(
            Duration::from_millis(1),
            Duration::from_millis(5),
            cancel.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!task.is_finished(), "releases stopped before shutdown");
        cancel.cancel();
        let stopped = tokio::time::timeout(Duration::from_secs(10), task).await;
        assert!(matches!(stopped, Ok(Ok(()))), "releases did not stop at shutdown");
    }

    #[tokio::test]
    async fn a_zero_interval_releases_once_after_start_up_and_ends() {
        let task = releases(Duration::from_millis(1), Duration::ZERO, CancellationToken::new());
        let ended = tokio::time::timeout(Duration::from_secs(10), task).await;
        assert!(ended.is_ok(), "a zero interval kept releasing");
    }
}
