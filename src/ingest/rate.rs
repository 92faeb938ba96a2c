//! The per-reporter rate limit that allocator reports and OOM events
//! share: a one-second window per reporter and the documents counted in it.
//!
//! Owns the counting and [`Refused`]; who is a reporter and the limits are
//! `store`'s and `oom`'s. Depends on nothing in the crate.

use std::time::Duration;

use tokio::time::Instant;

/// Why a document (`what`: reports, OOM events) was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("more than {limit} {what} per second from this reporter (ingest.rate_limit)")]
    RateLimited { what: &'static str, limit: usize, retry_after: Duration },
    /// `full` says how the reporters fill the table: tracked until they
    /// expire (reports), or heard from this second (OOM events).
    #[error("{max} reporters {full} (ingest.max_reporters)")]
    TooManyReporters { full: &'static str, max: usize, retry_after: Duration },
}

impl Refused {
    /// When the reporter may try again.
    pub fn retry_after(&self) -> Duration {
        match self {
            Self::RateLimited { retry_after, .. } | Self::TooManyReporters { retry_after, .. } => {
                *retry_after
            }
        }
    }
}

/// How long one window lasts.
pub(super) const WINDOW: Duration = Duration::from_secs(1);

/// One reporter's current window: when it opened and what it took since.
#[derive(Clone, Copy, Debug)]
pub(super) struct RateWindow {
    start: Instant,
    count: usize,
}

impl RateWindow {
    /// A window opening at `now` with nothing counted yet.
    pub(super) fn open(now: Instant) -> Self {
        Self { start: now, count: 0 }
    }

    /// A window opening at `now` with its first document counted.
    pub(super) fn first(now: Instant) -> Self {
        Self { start: now, count: 1 }
    }

    /// Counts one more document at `now`, at most `limit` a window; a full
    /// window answers how long until the next one opens.
    pub(super) fn admit(&mut self, now: Instant, limit: usize) -> Result<(), Duration> {
        if now.duration_since(self.start) >= WINDOW {
            *self = Self::open(now);
        }
        if self.count >= limit {
            return Err(WINDOW.saturating_sub(now.duration_since(self.start)));
        }
        self.count += 1;
        Ok(())
    }

    /// Whether the reporter was heard from within the last window.
    pub(super) fn is_current(&self, now: Instant) -> bool {
        now.duration_since(self.start) < WINDOW
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_window_refuses_until_the_next_one_opens() {
        let start = Instant::now();
        let mut window = RateWindow::first(start);
        assert_eq!(window.admit(start, 2), Ok(()));
        let later = start + Duration::from_millis(400);
        assert_eq!(window.admit(later, 2), Err(Duration::from_millis(600)));
        assert!(window.is_current(later));
        let next = start + WINDOW;
        assert!(!window.is_current(next));
        assert_eq!(window.admit(next, 2), Ok(()));
        assert_eq!(window.admit(next, 2), Ok(()));
        assert_eq!(window.admit(next, 2), Err(WINDOW));
    }
}
