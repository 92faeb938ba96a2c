//! The tracer's own thread: reads traced calls from the kernel's ring
//! buffer into the ledger (at most `max_events_per_second`), publishes each
//! process's statistics, probes the libcuda files the listed processes map
//! and forgets processes that exited. A side path: nothing on the sampling
//! path waits for it, and a failure here only takes the trace down
//! (`vramd_driver_trace_up 0`), never sampling or `/readyz`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ::driver_trace::{LoadOptions, Tracer};
use tracing::{info, warn};

use super::board::{DriverBoard, DropReason};
use super::discover::NewlyListed;
use super::ledger::{DriverOom, Ledger, LedgerLimits};
use super::{DriverTraceConfig, StartError};
use crate::clock::Stopwatch;

/// How long one wait for events lasts: the longest the thread takes to
/// notice it should stop, and the most a publication lags.
const POLL: Duration = Duration::from_millis(100);

/// Hands on an out-of-memory failure the process did not retry (the
/// wiring stores it as an OOM event). Called on the tracer's thread.
pub type OomSink = Box<dyn Fn(DriverOom) + Send>;

/// The running trace; dropping it tells its thread to stop (within one
/// `POLL`), without waiting for it, so the runtime never blocks on it.
pub struct TraceHandle {
    stop: Arc<AtomicBool>,
}

impl Drop for TraceHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct Runner {
    tracer: Tracer,
    ledger: Ledger,
    board: Arc<DriverBoard>,
    config: DriverTraceConfig,
    /// The listed processes whose maps named a libcuda.
    newly_listed: NewlyListed,
    /// (device, inode) of each libcuda file probed.
    probed: HashSet<(String, u64)>,
    /// Files the kernel or the loader refused: tried once, logged once.
    refused: HashSet<(String, u64)>,
    stop: Arc<AtomicBool>,
    ooms: OomSink,
}

/// Loads the BPF programs (the kernel's verifier runs here) and starts the
/// thread. Blocking: call off the runtime.
pub fn start(
    config: &DriverTraceConfig,
    board: Arc<DriverBoard>,
    ooms: OomSink,
) -> Result<TraceHandle, StartError> {
    let ring_bytes = u32::try_from(config.ring_buffer_bytes.get()).unwrap_or(u32::MAX);
    let tracer = Tracer::load(LoadOptions { ring_bytes }).map_err(StartError::Load)?;
    board.health.set_up(true);
    let stop = Arc::new(AtomicBool::new(false));
    let mut runner = Runner {
        tracer,
        ledger: Ledger::new(LedgerLimits {
            max_processes: config.max_processes.get(),
            max_live_allocations: config.max_live_allocations.get(),
            max_contexts: config.max_contexts.get(),
        }),
        board,
        config: config.clone(),
        newly_listed: NewlyListed::new(PathBuf::from("/proc")),
        probed: HashSet::new(),
        refused: HashSet::new(),
        stop: stop.clone(),
        ooms,
    };
    std::thread::Builder::new()
        .name("vramd-driver-trace".into())
        .spawn(move || runner.run())
        .map_err(StartError::Thread)?;
    Ok(TraceHandle { stop })
}

impl Runner {
    fn run(&mut self) {
        let clock = Stopwatch::start();
        let mut second = Stopwatch::start();
        let mut handled_this_second = 0usize;
        let mut discovery = Stopwatch::start();
        self.discover();
        while !self.stop.load(Ordering::Relaxed) {
            if second.elapsed() >= Duration::from_secs(1) {
                second = Stopwatch::start();
                handled_this_second = 0;
            }
            let budget =
                self.config.max_events_per_second.get().saturating_sub(handled_this_second);
            if budget == 0 {
                // Over the rate: calls wait in the ring buffer (the kernel
                // drops and counts what no longer fits).
                std::thread::sleep(
                    POLL.min(Duration::from_secs(1).saturating_sub(second.elapsed())),
                );
                continue;
            }
            let ledger = &mut self.ledger;
            let now = clock.elapsed();
            match self.tracer.poll(POLL, budget, |event| ledger.apply(&event, now)) {
                Ok(read) => {
                    handled_this_second += read;
                    self.board.health.count_events(read as u64);
                    if read > 0 {
                        self.board.publish(self.ledger.snapshot());
                    }
                }
                Err(error) => {
                    warn!(error = %error, "the driver trace stopped reading traced calls");
                    self.board.health.set_up(false);
                    return;
                }
            }
            for oom in self.ledger.unretried_ooms(clock.elapsed(), self.config.oom_retry_window) {
                (self.ooms)(oom);
            }
            if discovery.elapsed() >= self.config.discovery_interval {
                discovery = Stopwatch::start();
                self.discover();
            }
        }
    }

    /// Probes the libcuda files of the newly listed processes not probed
    /// yet, forgets exited processes and refreshes the drop counters.
    fn discover(&mut self) {
        let listed = self.board.listed_pids();
        for library in self.newly_listed.libraries(&listed) {
            let known = self.probed.contains(&library.id) || self.refused.contains(&library.id);
            let tried = self.probed.len() + self.refused.len();
            if known || tried >= self.config.max_libraries.get() {
                continue;
            }
            match self.tracer.attach(&library.path) {
                Ok(attached) => {
                    info!(
                        library = %library.path.display(),
                        functions = attached.functions.len(),
                        "driver trace: probing libcuda"
                    );
                    self.probed.insert(library.id);
                }
                Err(error) => {
                    // Not tried again: a file is not a different file
                    // the next time (a replaced one has a new inode).
                    warn!(library = %library.path.display(), error = %error, "driver trace: cannot probe libcuda");
                    self.refused.insert(library.id);
                }
            }
        }
        self.board.health.set_libraries(self.probed.len() as u64);
        let gone: Vec<u32> = listed
            .iter()
            .copied()
            .chain(self.ledger.pids())
            .filter(|pid| !self.newly_listed.alive(*pid))
            .collect();
        if !gone.is_empty() {
            for pid in &gone {
                self.ledger.forget(*pid);
            }
            self.board.forget(&gone);
            self.board.publish(self.ledger.snapshot());
        }
        let health = &self.board.health;
        if let Ok(counters) = self.tracer.counters() {
            health.set_dropped(DropReason::RingFull, counters.ring_full);
            health.set_dropped(DropReason::InFlightFull, counters.in_flight_full);
        }
        let overflow = self.ledger.overflow();
        health.set_dropped(DropReason::ProcessLimit, overflow.processes);
        health.set_dropped(DropReason::LiveAllocationLimit, overflow.live_allocations);
    }
}
