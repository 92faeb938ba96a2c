//! [`WebConfigHandle`]: the web configuration in force, swapped whole when
//! the file or a file it names changes (polled by size and modification
//! time) or on SIGHUP (`prepare_reload`, then `install`), and the cache of
//! verified credentials.
//!
//! Owns: the current [`WebState`], the reload health series, the
//! credential cache and its bcrypt bound. File reads and bcrypt run on
//! blocking threads under a deadline; a failed reload keeps the last good
//! state. Depends on `web_config`, `telemetry` (series), `clock`.

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::ServerConfig;
use super::web_config::{self, WebConfigError, WebState};
use crate::api::FailureBudget;
use crate::telemetry::WebConfigSeries;

/// bcrypt checks at once. Each costs tens of milliseconds of one core;
/// one keeps a flood of wrong passwords to one core, away from the
/// blocking threads driver calls need. A check that finds it busy is not
/// queued: the client is asked to retry (nobody waits in a request slot
/// that scrapes or probes need).
const BCRYPT_AT_ONCE: usize = 1;

/// How long one reload (reading a few small files) may take.
const RELOAD_DEADLINE: Duration = Duration::from_secs(5);

/// The web configuration in force. Cheap to clone.
#[derive(Clone)]
pub struct WebConfigHandle {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    state: RwLock<Arc<WebState>>,
    /// (size, modified) of each watched file at the last load.
    stamps: Mutex<Vec<Option<(u64, Duration)>>>,
    /// Digests of user, hash and password that bcrypt accepted.
    verified: Mutex<HashSet<[u8; 32]>>,
    /// Digests that bcrypt refused: the same wrong password again costs
    /// no bcrypt.
    refused: Mutex<HashSet<[u8; 32]>>,
    failures: FailureBudget,
    cache_size: usize,
    bcrypt: Arc<Semaphore>,
    series: Mutex<Option<WebConfigSeries>>,
}

/// A web configuration read and checked, not yet in force.
pub struct PreparedWebConfig {
    state: WebState,
    stamps: Vec<Option<(u64, Duration)>>,
}

/// Why a request's credentials were not accepted.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Refused,
    /// bcrypt did not answer within the deadline.
    TimedOut,
    /// The client address spent `server.auth_failure_budget`.
    Limited,
    /// The bcrypt worker is checking another password; retry.
    Busy,
}

impl WebConfigHandle {
    /// Loads `path` (blocking); an error names the file and field.
    pub fn load(path: &Path, server: &ServerConfig) -> Result<Self, WebConfigError> {
        let state = web_config::load(path)?;
        let stamps = stamps(&state.watched);
        Ok(Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                state: RwLock::new(Arc::new(state)),
                stamps: Mutex::new(stamps),
                verified: Mutex::new(HashSet::new()),
                refused: Mutex::new(HashSet::new()),
                failures: FailureBudget::new(
                    server.auth_failure_budget,
                    server.auth_cache_size.get(),
                ),
                cache_size: server.auth_cache_size.get(),
                bcrypt: Arc::new(Semaphore::new(BCRYPT_AT_ONCE)),
                series: Mutex::new(None),
            }),
        })
    }

    /// The state connections and requests use now.
    pub fn current(&self) -> Arc<WebState> {
        self.inner.state.read().clone()
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Exports reload health from now on.
    pub fn watch_with(&self, series: WebConfigSeries) {
        series.last_success.set(unix_now());
        *self.inner.series.lock() = Some(series);
    }

    /// Reloads if a watched file's size or modification time changed.
    pub async fn reload_if_changed(&self) -> Result<(), WebConfigError> {
        let handle = self.clone();
        let work = tokio::task::spawn_blocking(move || {
            let watched = handle.current().watched.clone();
            if stamps(&watched) == *handle.inner.stamps.lock() {
                return Ok(());
            }
            handle.prepare_reload().map(|prepared| handle.install(prepared))
        });
        let failed = |message: String| {
            let source = std::io::Error::other(message);
            let error = WebConfigError::Read { path: self.inner.path.clone(), source };
            self.failed(&error);
            error
        };
        match tokio::time::timeout(RELOAD_DEADLINE, work).await {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => Err(failed(format!("reload task failed: {error}"))),
            Err(_) => Err(failed(format!("reading took longer than {RELOAD_DEADLINE:?}"))),
        }
    }

    /// Reads and checks the file and every file it names (blocking), for a
    /// configuration reload that must be able to refuse before anything
    /// changes; [`Self::install`] then puts it in force.
    pub fn prepare_reload(&self) -> Result<PreparedWebConfig, WebConfigError> {
        // Stamps taken before reading: a change during the read is seen by
        // the next poll instead of being lost.
        let before = stamps(&self.current().watched);
        let path = &self.inner.path;
        // An emptied or half-written file (an editor saving in two steps,
        // a configuration run that failed half-way) must not turn
        // protection off behind the operator's back.
        let loaded =
            web_config::load(path).and_then(|state| match self.current().lost_in(&state) {
                Some(lost) => Err(WebConfigError::Weaker { path: path.clone(), lost }),
                None => Ok(state),
            });
        match loaded {
            Ok(state) => {
                let stamps = if state.watched == self.current().watched {
                    before
                } else {
                    stamps(&state.watched)
                };
                Ok(PreparedWebConfig { state, stamps })
            }
            Err(error) => {
                // Not retried until a file changes again: one log line per
                // bad version, not one per poll.
                *self.inner.stamps.lock() = before;
                self.failed(&error);
                Err(error)
            }
        }
    }

    /// Puts a prepared configuration in force (cheap: no file access).
    pub fn install(&self, prepared: PreparedWebConfig) {
        *self.inner.stamps.lock() = prepared.stamps;
        *self.inner.state.write() = Arc::new(prepared.state);
        self.inner.verified.lock().clear();
        self.inner.refused.lock().clear();
        if let Some(series) = self.inner.series.lock().as_ref() {
            series.last_success.set(unix_now());
        }
        info!(path = %self.inner.path.display(), "web configuration reloaded");
    }

    fn failed(&self, error: &WebConfigError) {
        if let Some(series) = self.inner.series.lock().as_ref() {
            series.reload_errors.inc();
        }
        warn!(error = %error, "web configuration not reloaded; keeping the last good one");
    }

    /// Checks `user`/`password` from `peer` against `state`'s users: from
    /// the caches when this exact pair (and hash) was checked before, else
    /// by bcrypt on a blocking thread, at most [`BCRYPT_AT_ONCE`] at a
    /// time and never queued, within `deadline`. A peer past its failure
    /// budget is refused unchecked for the rest of its window.
    pub async fn verify(
        &self,
        state: &WebState,
        peer: Option<IpAddr>,
        user: &str,
        password: &str,
        deadline: Duration,
    ) -> Verdict {
        let Some(hash) = state.users.get(user) else {
            return self.failed_check(peer);
        };
        let key = digest(user, hash, password);
        if self.inner.verified.lock().contains(&key) {
            return Verdict::Accepted;
        }
        if self.inner.failures.spent(peer) {
            return Verdict::Limited;
        }
        if self.inner.refused.lock().contains(&key) {
            return self.failed_check(peer);
        }
        let Ok(permit) = self.inner.bcrypt.clone().try_acquire_owned() else {
            return Verdict::Busy;
        };
        let (owned_password, owned_hash) = (password.to_owned(), hash.clone());
        let work = tokio::task::spawn_blocking(move || {
            // Held until bcrypt ends, even past the deadline, so the bound
            // counts threads, not waiters.
            let _permit = permit;
            bcrypt::verify(owned_password, &owned_hash).unwrap_or(false)
        });
        match tokio::time::timeout(deadline, work).await {
            Ok(Ok(true)) => {
                remember(&self.inner.verified, key, self.inner.cache_size);
                Verdict::Accepted
            }
            Ok(_) => {
                remember(&self.inner.refused, key, self.inner.cache_size);
                self.failed_check(peer)
            }
            Err(_) => Verdict::TimedOut,
        }
    }

    /// Counts a failed check against `peer`'s budget; always `Refused`.
    fn failed_check(&self, peer: Option<IpAddr>) -> Verdict {
        self.inner.failures.fail(peer);
        Verdict::Refused
    }

    /// Polls the watched files every `interval` until `cancel`.
    pub async fn watch(self, interval: Duration, cancel: CancellationToken) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = ticks.tick() => {
                    // Logged and counted inside; polling goes on.
                    let _ = self.reload_if_changed().await;
                }
            }
        }
    }
}

/// Adds `key` to a bounded set; a full set starts over (the next request
/// of each client pays one bcrypt again).
fn remember(set: &Mutex<HashSet<[u8; 32]>>, key: [u8; 32], capacity: usize) {
    let mut set = set.lock();
    if set.len() >= capacity {
        set.clear();
    }
    set.insert(key);
}

fn stamps(paths: &[PathBuf]) -> Vec<Option<(u64, Duration)>> {
    paths
        .iter()
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.len(), meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?))
        })
        .collect()
}

fn digest(user: &str, hash: &str, password: &str) -> [u8; 32] {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user, hash, password] {
        context.update(&(part.len() as u64).to_le_bytes());
        context.update(part.as_bytes());
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

fn unix_now() -> i64 {
    crate::clock::wall_now().unix_seconds_f64() as i64
}
