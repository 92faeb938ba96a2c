//! Tests of recording and replaying through real files: the round trip, and
//! that the recorder reports what it could not write.

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use parking_lot::Mutex;

use super::line::Line;
use super::*;
use crate::model::{
    AllocatorStats, ComputeMode, DeviceInfo, EccCounters, FastReading, MemoryInfo, ProcessDetails,
    ProcessInfo, ProcessKind, SlowDetails, SlowReading, Timestamp,
};
use crate::source::{DeviceSource, SourceError, Tier};

const START: i64 = 1_767_225_600_000;
const STEPS: u32 = 12;

/// A source that returns scripted results, one per call, per device and tier.
struct Scripted {
    devices: Vec<DeviceInfo>,
    fast: Mutex<HashMap<u32, VecDeque<Result<FastReading, SourceError>>>>,
    slow: Mutex<HashMap<u32, VecDeque<Result<SlowReading, SourceError>>>>,
}

impl DeviceSource for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, SourceError> {
        Ok(self.devices.clone())
    }

    fn read_fast(&self, index: u32) -> Result<FastReading, SourceError> {
        let mut fast = self.fast.lock();
        let queue = fast.get_mut(&index).ok_or(SourceError::UnknownDevice { index })?;
        queue.pop_front().unwrap_or(Err(SourceError::Unavailable { reason: "script over".into() }))
    }

    fn read_slow(&self, index: u32, _: usize) -> Result<SlowReading, SourceError> {
        let mut slow = self.slow.lock();
        let queue = slow.get_mut(&index).ok_or(SourceError::UnknownDevice { index })?;
        queue.pop_front().unwrap_or(Err(SourceError::Unavailable { reason: "script over".into() }))
    }
}

fn device(index: u32) -> DeviceInfo {
    DeviceInfo {
        index,
        uuid: format!("GPU-{index:08x}"),
        name: "NVIDIA H100 80GB HBM3".into(),
        pci_bus_id: (index == 0).then(|| "00000000:3B:00.0".into()),
        driver_version: (index == 0).then(|| "570.86.15".into()),
        mig: None,
    }
}

/// Readings with awkward floats (computed, not literals: about one in ten
/// would come back one ulp off through serde_json's default parser), absent
/// fields, equal timestamps, and errors of every recordable kind.
fn fast_script(device: u32) -> Vec<Result<FastReading, SourceError>> {
    (0..STEPS)
        .map(|step| {
            let x = f64::from(step) * 0.1 + f64::from(device) / 3.0;
            match (device, step) {
                (1, 3) => Err(SourceError::DeviceLost { index: 1, reason: "GPU_IS_LOST".into() }),
                (0, 5) => Err(SourceError::UnknownDevice { index: 7 }),
                (0, 8) => Err(SourceError::Record { path: "/x".into(), reason: "full".into() }),
                _ => Ok(FastReading {
                    // Steps 6 and 7 share a timestamp: non-decreasing, not increasing.
                    at: Timestamp::from_unix_millis(
                        START + 250 * i64::from(if step == 7 { 6 } else { step }),
                    ),
                    memory: (step % 4 != 1).then_some(MemoryInfo {
                        // Integers beyond 2^53 must survive exactly; no part
                        // may exceed the total, so the total carries them.
                        total_bytes: u64::MAX - u64::from(step),
                        reserved_bytes: (step % 2 == 0).then_some(566_231_040),
                        used_bytes: 1_000_000_000 + u64::from(step) * 123_456_789,
                        free_bytes: u64::MAX - 2_000_000_000 - u64::from(step),
                    }),
                    gpu_utilization: (step % 3 != 2).then(|| x.sin().abs()),
                    memory_bandwidth_utilization: (step % 5 != 4)
                        .then(|| (x * 7.3).cos().abs() / 3.0),
                }),
            }
        })
        .collect()
}

fn slow_script(device: u32) -> Vec<Result<SlowReading, SourceError>> {
    (0..STEPS)
        .map(|step| {
            let x = f64::from(step) * 0.7 + f64::from(device);
            match (device, step) {
                (0, 2) => Err(SourceError::Driver {
                    index: 0,
                    call: "nvmlDeviceGetComputeRunningProcesses_v3".into(),
                    reason: "Timeout".into(),
                }),
                (1, 4) => Err(SourceError::Unavailable { reason: "driver unloaded".into() }),
                (1, 6) => {
                    Err(SourceError::Driver { index: 3, call: "nvmlX".into(), reason: "".into() })
                }
                _ => Ok(SlowReading {
                    allocations: None,
                    processes_left_out: 0,
                    at: Timestamp::from_unix_millis(START + 1000 * i64::from(step)),
                    processes: match step % 3 {
                        0 => None,
                        1 => Some(Vec::new()),
                        _ => Some(vec![
                            ProcessInfo {
                                pid: 4242 + step,
                                name: Some("python3 \"train\" ✓".into()),
                                used_bytes: Some(40 << 30),
                                allocator: Some(AllocatorStats {
                                    allocated_bytes: 30 << 30,
                                    reserved_bytes: 36 << 30,
                                    active_bytes: 31 << 30,
                                    inactive_split_bytes: 2 << 30,
                                    alloc_retries: u64::from(step),
                                    ooms: 1,
                                    interval: None,
                                }),
                                details: ProcessDetails {
                                    kind: Some(ProcessKind::Compute),
                                    cmdline: Some("python3 train.py --lr 3e-4".into()),
                                    container_id: Some("ab".repeat(32).into()),
                                    pod_uid: None,
                                    namespace_pid: Some(7),
                                    sm_utilization_percent: Some(83),
                                    memory_utilization_percent: Some(31),
                                    role: None,
                                    pod: Some("train-0".into()),
                                    namespace: Some("ml".into()),
                                    container: Some("trainer".into()),
                                    snapshot: None,
                                    pool_limit_bytes: Some(40 << 30),
                                    driver: Some(std::sync::Arc::new(crate::model::DriverStats {
                                        allocated_bytes: 36 << 30,
                                        live_allocations: 12,
                                        allocations: 40,
                                        frees: 28,
                                        allocation_failures: 1,
                                        out_of_memory_failures: 1,
                                        allocation_retries: 1,
                                        unmatched_frees: 0,
                                        untracked_allocations: 0,
                                        size_buckets: vec![0, 0, 10, 10, 10, 10, 0, 0, 0],
                                    })),
                                },
                            },
                            ProcessInfo {
                                pid: 7,
                                name: None,
                                used_bytes: None,
                                allocator: None,
                                details: Default::default(),
                            },
                        ]),
                    },
                    temperature_celsius: Some(40.0 + x.sqrt()),
                    power_usage_watts: (step % 2 == 0).then_some(312.456 + x * 1.1),
                    power_limit_watts: (step % 4 != 3).then_some(700.0),
                    details: SlowDetails {
                        sm_clock_mhz: Some(1980),
                        throttle_reasons: Some(0x4),
                        ecc: (step % 2 == 0).then_some(EccCounters {
                            volatile_corrected: 1,
                            volatile_uncorrected: 0,
                            aggregate_corrected: 12,
                            aggregate_uncorrected: 0,
                        }),
                        compute_mode: Some(ComputeMode::ExclusiveProcess),
                        ..Default::default()
                    },
                }),
            }
        })
        .collect()
}

fn scripted() -> Scripted {
    Scripted {
        devices: vec![device(0), device(1)],
        fast: Mutex::new((0..2).map(|d| (d, fast_script(d).into())).collect()),
        slow: Mutex::new((0..2).map(|d| (d, slow_script(d).into())).collect()),
    }
}

#[test]
fn a_recorded_trace_replays_the_same_results_in_the_same_order_then_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.ndjson");
    let recorder = Recorder::create(scripted(), &path, &RecordOptions::default()).unwrap();
    assert_eq!(recorder.name(), "scripted");
    assert_eq!(recorder.devices().unwrap(), vec![device(0), device(1)]);

    // Interleave devices and tiers as a sampler would; remember the order.
    let mut expected_records = Vec::new();
    for step in 0..STEPS as usize {
        for d in 0..2 {
            let fast = recorder.read_fast(d);
            assert_eq!(fast, fast_script(d)[step], "the recorder passes results through");
            expected_records.push(match fast {
                Ok(reading) => TraceRecord::Fast { device: d, reading },
                Err(error) => TraceRecord::Error { device: d, tier: Tier::Fast, error },
            });
            let slow = recorder.read_slow(d, usize::MAX);
            assert_eq!(slow, slow_script(d)[step]);
            expected_records.push(match slow {
                Ok(reading) => TraceRecord::Slow { device: d, reading: Box::new(reading) },
                Err(error) => TraceRecord::Error { device: d, tier: Tier::Slow, error },
            });
        }
    }
    drop(recorder);

    let replay = Replay::open(&path, 64 * 1024).unwrap();
    assert_eq!(replay.name(), "replay");
    assert_eq!(replay.header(), &TraceHeader::new("scripted", vec![device(0), device(1)]));
    assert_eq!(replay.devices().unwrap(), vec![device(0), device(1)]);
    assert_eq!(replay.records(), expected_records.as_slice());
    // Read device 1 first and tiers in turn: cursors are independent.
    for d in [1, 0] {
        for (step, (fast, slow)) in fast_script(d).into_iter().zip(slow_script(d)).enumerate() {
            assert_eq!(replay.read_fast(d), fast, "device {d} fast step {step}");
            assert_eq!(replay.read_slow(d, usize::MAX), slow, "device {d} slow step {step}");
        }
        for _ in 0..2 {
            assert_eq!(
                replay.read_fast(d),
                Err(SourceError::TraceEnded { index: d, tier: Tier::Fast })
            );
            assert_eq!(
                replay.read_slow(d, usize::MAX),
                Err(SourceError::TraceEnded { index: d, tier: Tier::Slow })
            );
        }
    }
    assert_eq!(replay.read_fast(2), Err(SourceError::UnknownDevice { index: 2 }));
    assert_eq!(replay.records().len(), expected_records.len(), "records outlive the cursors");
}

#[test]
fn recording_a_replay_writes_the_same_records_and_not_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.ndjson");
    let recorder = Recorder::create(scripted(), &first, &RecordOptions::default()).unwrap();
    recorder.devices().unwrap();
    for d in 0..2 {
        for _ in 0..STEPS {
            let _ = recorder.read_fast(d);
            let _ = recorder.read_slow(d, usize::MAX);
        }
    }
    drop(recorder);
    let original = Replay::open(&first, 64 * 1024).unwrap();
    let expected = original.records().to_vec();

    let second = dir.path().join("second.ndjson");
    let recorder = Recorder::create(original, &second, &RecordOptions::default()).unwrap();
    recorder.devices().unwrap();
    for d in 0..2 {
        for _ in 0..=STEPS {
            let _ = recorder.read_fast(d);
            let _ = recorder.read_slow(d, usize::MAX);
        }
    }
    assert_eq!(recorder.read_fast(0), Err(SourceError::TraceEnded { index: 0, tier: Tier::Fast }));
    drop(recorder);
    let copy = Replay::open(&second, 64 * 1024).unwrap();
    assert_eq!(copy.header().source, "replay");
    assert_eq!(copy.records(), expected.as_slice());
}

fn one_device(readings: Vec<Result<FastReading, SourceError>>) -> Scripted {
    Scripted {
        devices: vec![device(0)],
        fast: Mutex::new([(0, readings.into())].into_iter().collect()),
        slow: Mutex::new([(0, VecDeque::new())].into_iter().collect()),
    }
}

fn fast_at(millis: i64) -> FastReading {
    FastReading {
        at: Timestamp::from_unix_millis(millis),
        memory: None,
        gpu_utilization: Some(0.5),
        memory_bandwidth_utilization: None,
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_failed_write_is_counted_and_never_changes_what_the_source_returned() {
    let lost = SourceError::DeviceLost { index: 0, reason: "gone".into() };
    let source = one_device(vec![Ok(fast_at(START)), Err(lost.clone()), Ok(fast_at(START + 1))]);
    // /dev/full accepts the open and fails every write with ENOSPC.
    let recorder =
        Recorder::create(source, Path::new("/dev/full"), &RecordOptions::default()).unwrap();
    let health = recorder.health();
    assert_eq!(recorder.devices().map(|devices| devices.len()), Ok(1), "devices still listed");
    assert_eq!(recorder.read_fast(0), Ok(fast_at(START)), "the reading is served");
    assert_eq!(recorder.read_fast(0), Err(lost), "a device error is passed through");
    assert_eq!(recorder.read_fast(0), Ok(fast_at(START + 1)));
    assert_eq!(health.errors(), 4, "header + three records could not be written");
    assert!(health.failing());
}

#[test]
fn creating_a_trace_where_no_file_can_be_made_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing-dir").join("trace.ndjson");
    let err =
        Recorder::create(one_device(Vec::new()), &path, &RecordOptions::default()).err().unwrap();
    assert!(matches!(err, TraceError::Create { .. }));
    assert!(err.to_string().contains("missing-dir"), "{err}");
}

#[test]
fn readings_the_trace_could_not_replay_are_refused_and_the_trace_stays_valid() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.ndjson");
    let mut not_finite = fast_at(START + 600);
    not_finite.gpu_utilization = Some(f64::NAN);
    let source = one_device(vec![
        Ok(fast_at(START)),
        Ok(fast_at(START + 500)),
        Ok(fast_at(START + 200)),
        Ok(not_finite),
        Ok(fast_at(START + 700)),
    ]);
    let recorder = Recorder::create(source, &path, &RecordOptions::default()).unwrap();
    let health = recorder.health();
    // Before devices() there is no header, so nothing can be written; the
    // reading is served all the same.
    assert_eq!(recorder.read_fast(0), Ok(fast_at(START)));
    assert_eq!(health.errors(), 1);
    recorder.devices().unwrap();
    assert!(!health.failing(), "the header went out");
    assert!(recorder.read_fast(0).is_ok());
    // Out of order and non-finite: served, not recorded, counted.
    assert_eq!(recorder.read_fast(0), Ok(fast_at(START + 200)));
    assert!(
        recorder.read_fast(0).is_ok_and(|reading| reading.gpu_utilization.is_some_and(f64::is_nan))
    );
    assert_eq!(health.errors(), 3);
    assert_eq!(recorder.read_fast(0), Ok(fast_at(START + 700)));
    assert!(!health.failing(), "recovered");
    assert!(matches!(recorder.read_fast(3), Err(SourceError::UnknownDevice { index: 3 })));
    drop(recorder);

    let replay = Replay::open(&path, 4096).unwrap();
    let times: Vec<_> = replay.records().iter().filter_map(TraceRecord::at).collect();
    let expected = [START + 500, START + 700].map(Timestamp::from_unix_millis);
    assert_eq!(times, expected);
}

/// The example in docs/trace-format.md, so the document cannot drift from
/// what the code reads and writes.
fn documented_example() -> String {
    let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/trace-format.md"));
    let (_, after_marker) = doc.split_once("<!-- trace-example").unwrap();
    let (_, block) = after_marker.split_once("```json\n").unwrap();
    let (example, _) = block.split_once("```").unwrap();
    example.to_owned()
}

#[test]
fn the_documented_example_replays_and_is_exactly_what_the_recorder_writes() {
    let example = documented_example();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("example.ndjson");
    std::fs::write(&path, &example).unwrap();
    let replay = Replay::open(&path, 4096).unwrap();

    let mut written = format::encode(replay.header()).unwrap();
    for record in replay.records() {
        written.extend(format::encode(&Line::of(record).unwrap()).unwrap());
    }
    assert_eq!(String::from_utf8(written).unwrap(), example);

    assert!(replay.read_fast(1).unwrap().memory.is_some());
    let blank = replay.read_fast(1).unwrap();
    assert_eq!((blank.memory, blank.gpu_utilization), (None, None));
    let lost = SourceError::DeviceLost { index: 1, reason: "GPU_IS_LOST".into() };
    assert_eq!(replay.read_fast(1), Err(lost));
    assert_eq!(replay.read_fast(1), Err(SourceError::TraceEnded { index: 1, tier: Tier::Fast }));

    use crate::model::ProbeFailureKind;
    use crate::source::probe::Prober;
    assert!(replay.has_probe_records());
    let devices = replay.devices().unwrap();
    let request = crate::source::probe::ProbeRequest {
        block_bytes: 64 << 20,
        samples: 5,
        margin_bytes: 1 << 30,
        headroom_time_budget: None,
        timeout: std::time::Duration::from_secs(60),
        cuda_library: None,
        nvml_library: None,
    };
    let reading = replay.probe(&devices[0], &request).unwrap();
    assert_eq!(reading.context_bytes, Some(531_628_032));
    assert_eq!(reading.free_difference_bytes(), Some(2_096_128));
    assert_eq!(replay.probe(&devices[0], &request).unwrap_err().kind, ProbeFailureKind::Timeout);
    assert_eq!(replay.probe(&devices[0], &request).unwrap_err().kind, ProbeFailureKind::TraceEnded);
    assert_eq!(replay.probe(&devices[1], &request).unwrap_err().kind, ProbeFailureKind::TraceEnded);
}
