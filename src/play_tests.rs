//! The schedule's cadence, and a recorded trace played back into history as
//! it was recorded, errors included.

use std::collections::VecDeque;

use parking_lot::Mutex;

use super::*;
use crate::history::Sizing;
use crate::model::{DeviceInfo, MemoryInfo};
use crate::source::trace::Recorder;

const START: i64 = 1_767_225_600_000;

fn sizing() -> Sizing {
    Sizing {
        fast_capacity: 100,
        slow_capacity: 100,
        peak_window: Duration::from_secs(60),
        oom_events: 64,
    }
}

fn info(index: u32) -> DeviceInfo {
    DeviceInfo {
        index,
        uuid: format!("GPU-{index}"),
        name: "fake".into(),
        pci_bus_id: None,
        driver_version: None,
        mig: None,
    }
}

fn fast(at: Timestamp) -> FastReading {
    let memory =
        MemoryInfo { total_bytes: 100, reserved_bytes: None, used_bytes: 40, free_bytes: 60 };
    FastReading {
        at,
        memory: Some(memory),
        gpu_utilization: None,
        memory_bandwidth_utilization: None,
    }
}

fn slow(at: Timestamp) -> SlowReading {
    SlowReading {
        allocations: None,
        at,
        processes: Some(Vec::new()),
        temperature_celsius: None,
        power_usage_watts: None,
        power_limit_watts: None,
        details: Default::default(),
        processes_left_out: 0,
    }
}

#[test]
fn a_schedule_reads_fast_every_step_and_slow_on_its_interval() {
    let store = HistoryStore::new(sizing());
    let devices = store.set_devices(vec![info(0), info(1)]);
    let schedule = Schedule {
        from: Timestamp::from_unix_millis(START),
        duration: Duration::from_secs(2),
        fast: Duration::from_millis(250),
        slow: Duration::from_secs(1),
    };
    let mut steps = Vec::new();
    let mut slow_reads = Vec::new();
    let played = play(
        &devices,
        schedule,
        ProcessCap(usize::MAX),
        |_, at| Ok(fast(at)),
        |index, at| {
            slow_reads.push((index, at.unix_millis() - START));
            Ok(slow(at))
        },
        |at| steps.push(at.unix_millis() - START),
    );
    assert_eq!(steps, [0, 250, 500, 750, 1_000, 1_250, 1_500, 1_750, 2_000]);
    assert_eq!(slow_reads, [(0, 0), (1, 0), (0, 1_000), (1, 1_000), (0, 2_000), (1, 2_000)]);
    assert_eq!(played.samples, 2 * 9 + 6);
    assert_eq!(played.end, Some(Timestamp::from_unix_millis(START + 2_000)));
    for device in &devices {
        assert_eq!((device.fast_len(), device.slow_len()), (9, 3));
    }
}

/// One device whose fast tier answers twice, fails, then answers again,
/// and whose slow tier answers once.
struct Scripted {
    fast: Mutex<VecDeque<Result<FastReading, SourceError>>>,
    slow: Mutex<VecDeque<Result<SlowReading, SourceError>>>,
}

impl DeviceSource for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        Ok(vec![info(0)])
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        self.fast.lock().pop_front().unwrap_or(Err(SourceError::UnknownDevice { index }))
    }

    fn read_slow(&self, index: u32, _: usize) -> Result<SlowReading, SourceError> {
        self.slow.lock().pop_front().unwrap_or(Err(SourceError::UnknownDevice { index }))
    }
}

/// The trace `source` records while `reads` reads from it (after listing
/// its devices), opened for replay.
fn recorded(source: Scripted, reads: impl FnOnce(&Recorder<Scripted>)) -> Replay {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.ndjson");
    let recorder =
        Recorder::create(source, &path, &crate::source::trace::RecordOptions::default()).unwrap();
    recorder.devices().unwrap();
    reads(&recorder);
    drop(recorder);
    Replay::open_bounded(&path, 1 << 20, u64::MAX).unwrap()
}

#[test]
fn a_trace_plays_back_in_file_order_with_its_errors() {
    let at = |offset: i64| Timestamp::from_unix_millis(START + offset);
    let lost = SourceError::DeviceLost { index: 0, reason: "fell off the bus".into() };
    let source = Scripted {
        fast: Mutex::new(VecDeque::from([Ok(fast(at(0))), Ok(fast(at(250))), Err(lost)])),
        slow: Mutex::new(VecDeque::from([Ok(slow(at(0)))])),
    };
    let trace = recorded(source, |recorder| {
        recorder.read_fast(0).unwrap();
        recorder.read_slow(0, usize::MAX).unwrap();
        recorder.read_fast(0).unwrap();
        recorder.read_fast(0).unwrap_err();
    });
    let store = HistoryStore::new(sizing());
    let mut times = Vec::new();
    let played = play_trace(&trace, &store, ProcessCap(usize::MAX), |at| {
        times.push(at.unix_millis() - START)
    });
    assert_eq!(played.samples, 4);
    // The error carries no time: the callback sees the readings only.
    assert_eq!(times, [0, 0, 250]);
    assert_eq!(played.end, Some(at(250)));
    let device = &store.devices()[0];
    assert_eq!((device.fast_len(), device.slow_len()), (2, 1));
    let live = device.live();
    assert!(live.fast.is_none(), "the failed read leaves no current fast reading");
    assert_eq!(
        live.fast_failure.map(|failure| failure.kind),
        Some(crate::model::ErrorKind::DeviceLost)
    );
}

/// `vramd analyze --replay` of a host with more processes than the cap
/// keeps the processes the daemon kept and marks the list capped, as the
/// sampler did: a list the cap cut must not start a process's new life in
/// the leak detector (`analysis::series`), live or replayed.
#[test]
fn a_replay_applies_the_process_cap_the_sampler_applied() {
    let at = Timestamp::from_unix_millis(START);
    let process = |pid: u32, mib: u64| crate::model::ProcessInfo {
        pid,
        name: None,
        used_bytes: Some(mib << 20),
        allocator: None,
        details: Default::default(),
    };
    let crowded = SlowReading {
        processes: Some(vec![process(10, 1), process(11, 300), process(12, 20)]),
        ..slow(at)
    };
    let source = Scripted {
        fast: Mutex::new(VecDeque::from([Ok(fast(at))])),
        slow: Mutex::new(VecDeque::from([Ok(crowded)])),
    };
    let trace = recorded(source, |recorder| {
        recorder.read_fast(0).unwrap();
        recorder.read_slow(0, usize::MAX).unwrap();
    });
    let store = HistoryStore::new(sizing());
    play_trace(&trace, &store, ProcessCap(2), |_| {});
    let live = store.devices()[0].live();
    assert_eq!(live.processes_dropped, 1);
    let kept: Vec<u32> =
        live.slow.iter().flat_map(|slow| slow.processes.iter().flatten()).map(|p| p.pid).collect();
    assert_eq!(kept, [11, 12], "the two largest, as the sampler keeps them");
    let points = store.devices()[0].slow_snapshot();
    assert!(points.iter().all(|point| point.capped()), "the stored list is marked capped");
}
