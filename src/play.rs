//! Playing readings into history as fast as the CPU allows, on the
//! readings' own timestamps: the one loop behind `vramd analyze`, the golden
//! and scenario tests, the API tests and the benches.
//!
//! Owns: the fixed fast/slow schedule ([`Schedule`], [`play`]) and the
//! mapping of simulator readings ([`play_simulator`]) and trace records
//! ([`play_trace`] from a loaded trace, [`play_stream`] from one read as it
//! is played) onto a [`HistoryStore`]; and the writing of a simulated
//! trace as fast as the CPU allows ([`record_simulator`]). Depends on `source` (the
//! simulator and replay), `history` and `model`; knows nothing of analysis,
//! alerts or HTTP: a caller that evaluates passes a callback that runs after
//! each step.
//!
//! Unlike the sampler: no deadline, backoff or telemetry, as these reads
//! come from memory and cannot hang.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use crate::history::{DeviceHistory, HistoryStore};
use crate::model::{DeviceInfo, FastReading, RecordMode, SlowReading, Timestamp};
use crate::source::simulator::{GOLDEN_ORIGIN, Simulator};
use crate::source::trace::{RecordOptions, Recorder, Replay, TraceError, TraceRecord, TraceStream};
use crate::source::{DeviceSource, SourceError, Tier};

/// When readings are taken: a fast reading every `fast` from `from` through
/// `from + duration` inclusive, and a slow one with every fast reading that
/// falls on a multiple of `slow` (rounded to whole fast steps, at least one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub from: Timestamp,
    pub duration: Duration,
    pub fast: Duration,
    pub slow: Duration,
}

/// The sampler's per-device process cap (`sampler.max_processes_per_device`),
/// applied to every slow reading played as the sampler applies it, so that
/// a play keeps, and marks as capped, the lists the daemon did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessCap(pub usize);

/// What a play recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Played {
    /// Readings and recorded errors written into history.
    pub samples: u64,
    /// The newest timestamp played; `None` when nothing carried one.
    pub end: Option<Timestamp>,
}

/// Plays `schedule` into `devices`, reading each device's tiers from `fast`
/// and `slow` (given the device index and the time), and calls `after_step`
/// with each step's time once every device has been recorded.
pub fn play(
    devices: &[Arc<DeviceHistory>],
    schedule: Schedule,
    cap: ProcessCap,
    mut fast: impl FnMut(u32, Timestamp) -> Result<FastReading, SourceError>,
    mut slow: impl FnMut(u32, Timestamp) -> Result<SlowReading, SourceError>,
    mut after_step: impl FnMut(Timestamp),
) -> Played {
    let mut played = Played::default();
    let fast_ns = schedule.fast.as_nanos().max(1);
    let slow_every = (schedule.slow.as_nanos() / fast_ns).max(1);
    for step in 0..=schedule.duration.as_nanos() / fast_ns {
        let offset = schedule.fast.saturating_mul(u32::try_from(step).unwrap_or(u32::MAX));
        let at = schedule.from.saturating_add(offset);
        for device in devices {
            let index = device.info().index;
            record_fast(device, fast(index, at));
            played.samples += 1;
            if step % slow_every == 0 {
                record_slow(device, slow(index, at), cap);
                played.samples += 1;
            }
        }
        played.end = Some(at);
        after_step(at);
    }
    played
}

/// Lists `simulator`'s devices into `store` and plays `schedule` from them.
pub fn play_simulator(
    simulator: &Simulator,
    store: &HistoryStore,
    schedule: Schedule,
    cap: ProcessCap,
    after_step: impl FnMut(Timestamp),
) -> Result<Played, SourceError> {
    let devices = store.set_devices(simulator.devices()?);
    let fast = |index, at| simulator.fast_at(index, at);
    let slow = |index, at| simulator.slow_at(index, at);
    Ok(play(&devices, schedule, cap, fast, slow, after_step))
}

/// Lists the trace's devices into `store` and records every record in file
/// order, calling `after_record` with the time of each record that has one.
/// Records of a device the header does not list are skipped.
pub fn play_trace(
    trace: &Replay,
    store: &HistoryStore,
    cap: ProcessCap,
    mut after_record: impl FnMut(Timestamp),
) -> Played {
    let devices = store.set_devices(trace.header().devices.clone());
    let mut played = Played::default();
    for record in trace.records() {
        play_record(&devices, record.clone(), cap, &mut played, &mut after_record);
    }
    played
}

/// [`play_trace`] of a trace read as it is played: the records in the order
/// the stream gives them (time order within its window), none held after it
/// is played. Stops at the stream's first error.
pub fn play_stream(
    trace: &mut TraceStream,
    store: &HistoryStore,
    cap: ProcessCap,
    mut after_record: impl FnMut(Timestamp),
) -> Result<Played, TraceError> {
    let devices = store.set_devices(trace.header().devices.clone());
    let mut played = Played::default();
    while let Some(record) = trace.next_record()? {
        play_record(&devices, record, cap, &mut played, &mut after_record);
    }
    Ok(played)
}

fn play_record(
    devices: &[Arc<DeviceHistory>],
    record: TraceRecord,
    cap: ProcessCap,
    played: &mut Played,
    after_record: &mut impl FnMut(Timestamp),
) {
    let Some(device) = devices.iter().find(|device| device.info().index == record.device()) else {
        return;
    };
    let at = record.at();
    match record {
        TraceRecord::Fast { reading, .. } => record_fast(device, Ok(reading)),
        TraceRecord::Slow { reading, .. } => record_slow(device, Ok(*reading), cap),
        TraceRecord::Error { tier: Tier::Fast, error, .. } => record_fast(device, Err(error)),
        TraceRecord::Error { tier: Tier::Slow, error, .. } => record_slow(device, Err(error), cap),
        // As the daemon's intake stores them; the record's time is the
        // one the event was judged by when it was recorded.
        TraceRecord::Oom { event, .. } => {
            device.record_oom(*event);
        }
        // As the daemon's probe scheduler records them, so the probe
        // rules judge a replay as they judged the recording.
        TraceRecord::Probe { outcome, .. } => {
            let newest = device.newest_at().unwrap_or(GOLDEN_ORIGIN);
            device.update_probe(|state| {
                state.scheduled = true;
                match outcome {
                    Ok(reading) => state.record_success(*reading),
                    Err(failure) => state.record_failure(newest, failure),
                }
            });
        }
    }
    played.samples += 1;
    if let Some(at) = at {
        played.end = Some(played.end.map_or(at, |end| end.max(at)));
        after_record(at);
    }
}

/// The simulator read at the time the writing loop sets, so that a
/// [`Recorder`] (which reads without a time) writes that step's readings.
struct SimulatorAt {
    simulator: Simulator,
    now: Arc<AtomicI64>,
}

impl SimulatorAt {
    fn at(&self) -> Timestamp {
        Timestamp::from_unix_millis(self.now.load(Ordering::Relaxed))
    }
}

impl DeviceSource for SimulatorAt {
    fn name(&self) -> &'static str {
        "simulator"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        self.simulator.devices()
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        self.simulator.fast_at(index, self.at())
    }

    fn read_slow(&self, index: u32, max_processes: usize) -> Result<SlowReading, SourceError> {
        let mut reading = self.simulator.slow_at(index, self.at())?;
        reading.cap_processes(max_processes);
        Ok(reading)
    }
}

/// Writes what `simulator` reads on `schedule` to a trace at `path`
/// (replacing the file), through the recorder the daemon records with, as
/// fast as the CPU allows: the large traces the replay benchmark and tests
/// play. Returns the records written; a record that could not be written
/// is an error, so a short trace never passes for a whole one.
pub fn record_simulator(
    simulator: Simulator,
    schedule: Schedule,
    path: &Path,
) -> Result<u64, TraceError> {
    let now = Arc::new(AtomicI64::new(schedule.from.unix_millis()));
    let source = SimulatorAt { simulator, now: now.clone() };
    let options = RecordOptions { mode: RecordMode::Overwrite, keep: 1, protect: None };
    let recorder = Recorder::create(source, path, &options)?;
    let devices = recorder.devices().map(|devices| devices.len()).unwrap_or(0);
    let devices = u32::try_from(devices).unwrap_or(u32::MAX);
    let fast_ns = schedule.fast.as_nanos().max(1);
    let slow_every = (schedule.slow.as_nanos() / fast_ns).max(1);
    let mut written = 0_u64;
    for step in 0..=schedule.duration.as_nanos() / fast_ns {
        let offset = schedule.fast.saturating_mul(u32::try_from(step).unwrap_or(u32::MAX));
        now.store(schedule.from.saturating_add(offset).unix_millis(), Ordering::Relaxed);
        for index in 0..devices {
            // A read error (a lost device) is recorded as such.
            let _ = recorder.read_fast(index);
            written += 1;
            if step % slow_every == 0 {
                // Uncapped: a play applies its own cap to what it reads.
                let _ = recorder.read_slow(index, usize::MAX);
                written += 1;
            }
        }
    }
    match recorder.health().errors() {
        0 => Ok(written),
        failed => Err(TraceError::Incomplete { path: path.display().to_string(), failed }),
    }
}

fn record_fast(device: &DeviceHistory, result: Result<FastReading, SourceError>) {
    match result {
        // Out of order cannot happen: every play only moves time forward.
        Ok(reading) => {
            let _ = device.record_fast(reading);
        }
        Err(error) => device.record_fast_failure(error.kind(), error.to_string()),
    }
}

fn record_slow(
    device: &DeviceHistory,
    result: Result<SlowReading, SourceError>,
    ProcessCap(max): ProcessCap,
) {
    match result {
        Ok(mut reading) => {
            reading.cap_processes(max);
            let left_out = reading.processes_left_out;
            let _ = device.record_slow(reading, left_out);
        }
        Err(error) => device.record_slow_failure(error.kind(), error.to_string()),
    }
}

#[cfg(test)]
#[path = "play_tests.rs"]
mod tests;
