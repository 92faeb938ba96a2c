//! Recording what a device source returns into a trace file.
//!
//! Owns: [`Recorder`], a [`DeviceSource`] (and [`Prober`]) that passes every
//! call through to the source (and prober) it wraps and appends the result
//! to an NDJSON trace. Depends
//! only on `model` and `source`; knows nothing of history, sampler or HTTP.
//! The daemon wraps it around the source's joiner (`source::join`), so a
//! slow reading is written with the allocator reports and pods the
//! analysis sees joined onto it.
//!
//! The recorder only writes traces that `Replay` accepts: nothing before the
//! header, no record for a device the header lacks, no out-of-order reading.
//!
//! Recording is a side path: every call returns exactly what the wrapped
//! source returned, whether or not it could be written. What cannot be
//! written is counted in [`RecordHealth`] (exported as
//! `vramd_record_errors_total` and `vramd_record_failing`, and alerted on by
//! the shipped `VramdRecordingFailing` rule) and logged at a bounded rate;
//! a full disk leaves a gap in the trace, never a blind monitor.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::error::TraceError;
use super::format::{TraceHeader, encode};
use super::line::Line;
use super::open::{RecordOptions, open_for_recording};
use crate::clock::Stopwatch;
use crate::model::{
    DeviceInfo, FastReading, OomEvent, ProbeFailure, ProbeFailureKind, ProbeReading, SlowReading,
    Timestamp,
};
use crate::source::probe::{ProbeRequest, Prober};
use crate::source::{DeviceSource, SourceError, Tier};

/// Wraps a source and records every reading and error it returns; given a
/// prober ([`Recorder::with_prober`]), also every probe outcome.
pub struct Recorder<S> {
    inner: S,
    prober: Option<Arc<dyn Prober>>,
    path: String,
    state: Mutex<State>,
    health: Arc<RecordHealth>,
}

/// How often, at most, a recording that keeps failing is logged again.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// How the recording is going; read by telemetry, written by the recorder.
#[derive(Debug, Default)]
pub struct RecordHealth {
    errors: AtomicU64,
    failing: AtomicBool,
}

impl RecordHealth {
    /// Records (readings, errors, probe outcomes, the header) that could
    /// not be written since the recording started.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Whether the latest write failed.
    pub fn failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }
}

/// Each line is encoded whole and handed to the file at once (no buffer), so
/// it reaches the kernel at once (a crash of the daemon loses at most that
/// line) and no user-space buffer holds half-written lines after a failure.
struct State {
    file: File,
    /// Length of the file's complete lines: after a failed write the file is
    /// cut back to this, so the trace never keeps a partial line in the middle.
    good_len: u64,
    damaged: bool,
    /// The device indices of the header once written; frozen from then on.
    header: Option<BTreeSet<u32>>,
    /// Newest timestamp per device and tier (`None`: probe readings).
    latest: HashMap<(u32, Option<Tier>), Timestamp>,
    /// When a failure was last logged, and failures since then.
    last_logged: Option<Stopwatch>,
    unlogged_failures: u64,
    /// The devices of the latest successful `devices()`, if there was one.
    devices: Option<Vec<DeviceInfo>>,
}

impl State {
    /// Whether the written header lists `device` (never before it is written).
    fn lists(&self, device: u32) -> bool {
        self.header.as_ref().is_some_and(|indices| indices.contains(&device))
    }
}

impl<S: DeviceSource> Recorder<S> {
    /// Creates the trace file at `path`, as `options` say about an existing
    /// one (rotate it, refuse, or overwrite). Nothing is written until the
    /// first successful `devices()` call supplies the header.
    pub fn create(inner: S, path: &Path, options: &RecordOptions) -> Result<Self, TraceError> {
        let file: File = open_for_recording(path, options)?;
        let state = State {
            file,
            good_len: 0,
            damaged: false,
            header: None,
            latest: HashMap::new(),
            last_logged: None,
            unlogged_failures: 0,
            devices: None,
        };
        Ok(Self {
            inner,
            prober: None,
            path: path.display().to_string(),
            state: Mutex::new(state),
            health: Arc::default(),
        })
    }

    /// The recording's health, for telemetry.
    pub fn health(&self) -> Arc<RecordHealth> {
        Arc::clone(&self.health)
    }

    /// Counts what a write attempt came to, and logs a failure: the first
    /// at once, then at most once per [`FAILURE_LOG_INTERVAL`] with the
    /// number of failures in between; a recovery once.
    fn account(&self, written: Result<(), SourceError>) {
        // The common case, a write that went out, takes no lock.
        let Err(failure) = written else {
            if self.health.failing.swap(false, Ordering::Relaxed) {
                tracing::info!(path = %self.path, lost = self.health.errors(), "recording recovered");
                self.state.lock().unlogged_failures = 0;
            }
            return;
        };
        let mut state = self.state.lock();
        self.health.errors.fetch_add(1, Ordering::Relaxed);
        let started = !self.health.failing.swap(true, Ordering::Relaxed);
        state.unlogged_failures += 1;
        let due = state.last_logged.as_ref().is_none_or(|at| at.elapsed() >= FAILURE_LOG_INTERVAL);
        if started || due {
            tracing::warn!(
                path = %self.path,
                error = %failure,
                failures = state.unlogged_failures,
                "recording failed; live monitoring is unaffected, the trace has a gap"
            );
            state.last_logged = Some(Stopwatch::start());
            state.unlogged_failures = 0;
        }
    }

    /// Also answers (and records) the CUDA probe through `prober`.
    pub fn with_prober(mut self, prober: Arc<dyn Prober>) -> Self {
        self.prober = Some(prober);
        self
    }

    fn record_error(&self, reason: impl Into<String>) -> SourceError {
        SourceError::Record { path: self.path.clone(), reason: reason.into() }
    }

    /// Writes the header if it has not gone out yet. Retried on every call
    /// until it succeeds, so a transient failure costs no more than it must.
    fn ensure_header(&self, state: &mut State) -> Result<(), SourceError> {
        if state.header.is_some() {
            return Ok(());
        }
        let Some(devices) = &state.devices else {
            return Err(self.record_error(
                "no header yet: the source has not listed its devices, so nothing is recorded",
            ));
        };
        let devices = devices.clone();
        let mut indices = BTreeSet::new();
        if let Some(duplicate) = devices.iter().find(|device| !indices.insert(device.index)) {
            return Err(self.record_error(format!(
                "the source lists device {} twice; such a trace could not be replayed",
                duplicate.index
            )));
        }
        let line = encode(&TraceHeader::new(self.inner.name(), devices))
            .map_err(|err| self.record_error(format!("cannot encode the header: {err}")))?;
        write_line(state, &line).map_err(|err| self.record_error(err.to_string()))?;
        state.header = Some(indices);
        Ok(())
    }

    /// Appends `what`: a reading (`lane` its tier), a probe outcome or an
    /// OOM event (`lane` `None`; `at` only for a probe reading), unless it
    /// comes before the header, for a device the header lacks, or earlier
    /// than the lane's last: such a trace could not be replayed.
    fn append(
        &self,
        device: u32,
        lane: Option<Tier>,
        at: Option<Timestamp>,
        what: &str,
        line: &Line<'_>,
    ) -> Result<(), SourceError> {
        let mut state = self.state.lock();
        self.ensure_header(&mut state)?;
        if !state.lists(device) {
            return Err(self.record_error(format!(
                "device {device} is not in the trace header, so its {what} is not recorded"
            )));
        }
        if let Some(at) = at
            && let Some(&previous) = state.latest.get(&(device, lane))
            && at < previous
        {
            return Err(self.record_error(format!(
                "{what} of device {device} at {} is earlier than the recorded one at {}; \
                 not recorded",
                at.unix_millis(),
                previous.unix_millis()
            )));
        }
        let line = encode(line)
            .map_err(|err| self.record_error(format!("cannot encode the {what}: {err}")))?;
        write_line(&mut state, &line).map_err(|err| self.record_error(err.to_string()))?;
        if let Some(at) = at {
            state.latest.insert((device, lane), at);
        }
        Ok(())
    }

    /// Appends a read's error (unless it is one never recorded: the end of
    /// a replay).
    fn append_error(
        &self,
        device: u32,
        tier: Tier,
        error: &SourceError,
    ) -> Result<(), SourceError> {
        let Some(line) = Line::error(device, tier, error) else {
            return Ok(());
        };
        let mut state = self.state.lock();
        self.ensure_header(&mut state)?;
        // Replay answers reads of unlisted devices with UnknownDevice by
        // itself; such a record would only make the trace invalid.
        if !state.lists(device) {
            return Ok(());
        }
        let line =
            encode(&line).map_err(|err| self.record_error(format!("cannot encode: {err}")))?;
        write_line(&mut state, &line).map_err(|err| self.record_error(err.to_string()))
    }

    /// Records an allocator OOM event of device `device` (vramd's index).
    /// A side path like every record: a failure is counted and logged.
    pub fn record_oom(&self, device: u32, event: &OomEvent) {
        let written = self.append(device, None, None, "OOM event", &Line::oom(device, event));
        self.account(written);
    }

    /// Records one read's outcome and returns it unchanged: what could not
    /// be written is counted and logged, never returned.
    fn record<T>(
        &self,
        device: u32,
        tier: Tier,
        result: Result<T, SourceError>,
        line: impl Fn(&T) -> (Timestamp, Line<'_>),
    ) -> Result<T, SourceError> {
        let written = match &result {
            Ok(value) => {
                let (at, line) = line(value);
                let what = match tier {
                    Tier::Fast => "fast reading",
                    Tier::Slow => "slow reading",
                };
                self.append(device, Some(tier), Some(at), what, &line)
            }
            Err(error) => self.append_error(device, tier, error),
        };
        self.account(written);
        result
    }
}

/// Appends one whole line. A write that fails part-way is cut back at once,
/// so the file ends with a whole line whenever no write is in flight (a
/// reader of a trace whose disk filled up sees every line up to the
/// failure; one reading while the daemon runs may catch a try in flight);
/// if even the cut fails, it is retried before the next line.
fn write_line(state: &mut State, line: &[u8]) -> std::io::Result<()> {
    if state.damaged {
        cut_back(state).map_err(|err| {
            std::io::Error::new(
                err.kind(),
                format!("cannot remove the partial line of an earlier failed write: {err}"),
            )
        })?;
    }
    // `write_all` by hand, to know whether part of the line went out (only
    // then is there anything to cut, which a device like /dev/full refuses).
    let mut written = 0;
    while let Some(rest) = line.get(written..).filter(|rest| !rest.is_empty()) {
        let failure = match state.file.write(rest) {
            Ok(0) => std::io::ErrorKind::WriteZero.into(),
            Ok(n) => {
                written += n;
                continue;
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => err,
        };
        if written > 0 {
            state.damaged = cut_back(state).is_err();
        }
        return Err(failure);
    }
    let written = u64::try_from(written).unwrap_or(u64::MAX);
    state.good_len = state.good_len.saturating_add(written);
    Ok(())
}

/// Truncates the file to its whole lines and moves the cursor there.
fn cut_back(state: &mut State) -> std::io::Result<()> {
    state.file.set_len(state.good_len)?;
    state.file.seek(SeekFrom::Start(state.good_len))?;
    state.damaged = false;
    Ok(())
}

impl<S: DeviceSource> Prober for Recorder<S> {
    fn name(&self) -> &'static str {
        self.prober.as_ref().map_or("none", |prober| prober.name())
    }

    /// The outcome stands whether or not it could be written.
    fn probe(
        &self,
        device: &DeviceInfo,
        request: &ProbeRequest,
    ) -> Result<ProbeReading, ProbeFailure> {
        let Some(prober) = &self.prober else {
            return Err(ProbeFailure::new(
                ProbeFailureKind::SpawnFailed,
                "the recorder was given no prober",
            ));
        };
        let outcome = prober.probe(device, request);
        let at = outcome.as_ref().ok().map(|reading| reading.at);
        let line = Line::probe(device.index, outcome.as_ref());
        self.account(self.append(device.index, None, at, "probe", &line));
        outcome
    }
}

impl<S: DeviceSource> DeviceSource for Recorder<S> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn layout_generation(&self) -> u64 {
        self.inner.layout_generation()
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        let devices = self.inner.devices()?;
        let written = {
            let mut state = self.state.lock();
            state.devices = Some(devices.clone());
            if state.header.is_some() {
                return Ok(devices);
            }
            self.ensure_header(&mut state)
        };
        self.account(written);
        Ok(devices)
    }

    // The inner calls run without the lock: one may be a slow driver call
    // and other devices' reads must not queue behind it.
    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        let result = self.inner.read_fast(index);
        self.record(index, Tier::Fast, result, |reading| (reading.at, Line::fast(index, reading)))
    }

    fn read_slow(&self, index: u32, max_processes: usize) -> Result<SlowReading, SourceError> {
        let result = self.inner.read_slow(index, max_processes);
        self.record(index, Tier::Slow, result, |reading| (reading.at, Line::slow(index, reading)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct One;

    impl DeviceSource for One {
        fn name(&self) -> &'static str {
            "one"
        }
        fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
            Ok(vec![DeviceInfo {
                index: 0,
                uuid: "GPU-0".into(),
                name: "Fake".into(),
                pci_bus_id: None,
                driver_version: None,
                mig: None,
            }])
        }
        fn read_fast(&self, _: u32) -> Result<FastReading, SourceError> {
            Ok(FastReading {
                at: Timestamp::from_unix_millis(1),
                memory: None,
                gpu_utilization: None,
                memory_bandwidth_utilization: None,
            })
        }
        fn read_slow(&self, index: u32, _: usize) -> Result<SlowReading, SourceError> {
            Err(SourceError::UnknownDevice { index })
        }
    }

    #[test]
    fn the_partial_line_of_a_failed_write_is_cut_off_before_the_next_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.ndjson");
        let recorder = Recorder::create(One, &path, &RecordOptions::default()).unwrap();
        recorder.devices().unwrap();
        recorder.read_fast(0).unwrap();
        let good = std::fs::read_to_string(&path).unwrap();
        // What a write that failed half-way leaves behind.
        {
            let mut state = recorder.state.lock();
            state.file.write_all(br#"{"record":"fast","dev"#).unwrap();
            state.damaged = true;
        }
        recorder.read_fast(0).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let last = text.lines().last().unwrap().to_owned();
        assert_eq!(text, format!("{good}{last}\n"));
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(super::super::Replay::open(&path, 4096).is_ok());
    }
}
