//! Report validation, the store's bounds, and the join onto processes.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::report::{ReportError, ReportLimits, parse};
use super::store::{ReportStore, StoreLimits};
use super::{OomIntake, Refused};
use crate::model::{ProcessDetails, ProcessInfo, SlowReading, Timestamp};

const GIB: u64 = 1 << 30;
const UUID: &str = "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20";

fn stats() -> Value {
    json!({
        "allocated_bytes.all.current": 6 * GIB,
        "reserved_bytes.all.current": 8 * GIB,
        "active_bytes.all.current": 6 * GIB,
        "inactive_split_bytes.all.current": GIB,
        "num_alloc_retries": 2,
        "num_ooms": 0,
        "segment.all.current": 40,
    })
}

fn report(pid: u32, at: &str) -> Value {
    json!({
        "version": 1,
        "reporter": { "pid": pid, "hostname": "node-1", "pod": "train-0" },
        "at": at,
        "devices": [ { "uuid": UUID, "index": 0, "memory_stats": stats(),
                       "snapshot": { "segments": 40, "total_bytes": 8 * GIB, "allocated_bytes": 6 * GIB, "largest_free_block_bytes": GIB / 4 } } ],
    })
}

const LIMITS: ReportLimits = ReportLimits { max_devices: 4, max_stats: 64 };

fn parsed(value: &Value) -> Result<super::AllocatorReport, ReportError> {
    parse(value.to_string().as_bytes(), &LIMITS)
}

#[test]
fn a_good_report_parses_into_allocator_stats() {
    let report = parsed(&report(42, "2026-01-01T00:00:10.000Z")).unwrap();
    assert_eq!(report.reporter.pid, 42);
    assert_eq!(report.at, Timestamp::from_unix_millis(1_767_225_610_000));
    let stats = report.devices[0].stats.unwrap();
    assert_eq!(
        (stats.allocated_bytes, stats.reserved_bytes, stats.alloc_retries),
        (6 * GIB, 8 * GIB, 2)
    );
    assert_eq!(report.devices[0].snapshot.map(|s| s.segments), Some(40));
}

#[test]
fn bad_reports_are_refused_with_a_reason() {
    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut unknown_version = report(1, "2026-01-01T00:00:00Z");
    unknown_version["version"] = json!(2);
    cases.push((unknown_version, "unsupported report version 2"));
    let mut negative = report(1, "2026-01-01T00:00:00Z");
    negative["devices"][0]["memory_stats"]["num_ooms"] = json!(-1);
    cases.push((negative, "non-negative finite"));
    let mut too_much = report(1, "2026-01-01T00:00:00Z");
    too_much["devices"][0]["memory_stats"]["allocated_bytes.all.current"] = json!(9 * GIB);
    cases.push((too_much, "exceeds reserved"));
    let mut missing = report(1, "2026-01-01T00:00:00Z");
    missing["devices"][0]["memory_stats"].as_object_mut().unwrap().remove("num_ooms");
    cases.push((missing, "lacks num_ooms"));
    let mut bad_time = report(1, "2026-01-01T00:00:00Z");
    bad_time["at"] = json!("yesterday");
    cases.push((bad_time, "RFC 3339"));
    let mut bad_uuid = report(1, "2026-01-01T00:00:00Z");
    bad_uuid["devices"][0]["uuid"] = json!("0");
    cases.push((bad_uuid, "not a GPU-"));
    let mut unknown_field = report(1, "2026-01-01T00:00:00Z");
    unknown_field["colour"] = json!("red");
    cases.push((unknown_field, "unknown field"));
    let mut many = report(1, "2026-01-01T00:00:00Z");
    let device = many["devices"][0].clone();
    many["devices"] = json!(
        (0..5)
            .map(|i| {
                let mut d = device.clone();
                d["uuid"] = json!(format!("GPU-{i}"));
                d
            })
            .collect::<Vec<_>>()
    );
    cases.push((many, "at most 4"));
    let mut keys = report(1, "2026-01-01T00:00:00Z");
    for i in 0..64 {
        keys["devices"][0]["memory_stats"][format!("extra.{i}")] = json!(1);
    }
    cases.push((keys, "at most 64"));
    for (value, expected) in cases {
        let error = parsed(&value).unwrap_err().to_string();
        assert!(error.contains(expected), "expected `{expected}` in `{error}`");
    }
}

#[test]
fn a_device_the_process_never_allocated_on_is_not_kept() {
    let mut empty = report(1, "2026-01-01T00:00:00Z");
    empty["devices"][0]["memory_stats"] = json!({});
    let with_snapshot = parsed(&empty).unwrap();
    assert_eq!(with_snapshot.devices[0].stats, None, "no statistics, not zeros");
    empty["devices"][0].as_object_mut().unwrap().remove("snapshot");
    assert!(parsed(&empty).unwrap().devices.is_empty());
}

fn store() -> ReportStore {
    ReportStore::new(StoreLimits {
        ttl: Duration::from_secs(30),
        rate_limit_per_second: 2,
        max_reporters: 2,
    })
}

fn reading(at_seconds: i64, processes: Vec<ProcessInfo>) -> SlowReading {
    SlowReading::listing(
        Timestamp::from_unix_millis(1_767_225_600_000 + at_seconds * 1000),
        Some(processes),
    )
}

fn nvml_process(pid: u32, namespace_pid: Option<u32>) -> ProcessInfo {
    ProcessInfo {
        pid,
        name: Some("python3".into()),
        used_bytes: Some(9 * GIB),
        allocator: None,
        details: ProcessDetails { namespace_pid, ..ProcessDetails::default() },
    }
}

#[tokio::test(start_paused = true)]
async fn reporters_are_rate_limited_and_bounded() {
    let store = store();
    let now = Instant::now();
    let report = || parsed(&report(42, "2026-01-01T00:00:10Z")).unwrap();
    store.accept(report(), now).unwrap();
    store.accept(report(), now).unwrap();
    let limited = store.accept(report(), now).unwrap_err();
    assert!(matches!(limited, Refused::RateLimited { .. }));
    // The reporter reads these words in the 429 body: pinned.
    assert_eq!(
        limited.to_string(),
        "more than 2 reports per second from this reporter (ingest.rate_limit)"
    );
    store.accept(report(), now + Duration::from_secs(1)).unwrap();

    store.accept(parsed(&report_for(43)).unwrap(), now).unwrap();
    let full = store.accept(parsed(&report_for(44)).unwrap(), now).unwrap_err();
    assert!(matches!(full, Refused::TooManyReporters { .. }));
    assert_eq!(full.to_string(), "2 reporters are already tracked (ingest.max_reporters)");
}

fn report_for(pid: u32) -> Value {
    report(pid, "2026-01-01T00:00:10Z")
}

#[tokio::test(start_paused = true)]
async fn a_report_joins_by_host_pid_or_by_namespace_pid() {
    let store = store();
    store.accept(parsed(&report_for(42)).unwrap(), Instant::now()).unwrap();
    store.accept(parsed(&report_for(7)).unwrap(), Instant::now()).unwrap();
    // 42 is a host PID; 7 is the PID inside a container whose host PID is 9007.
    let mut slow = reading(
        15,
        vec![nvml_process(42, None), nvml_process(9007, Some(7)), nvml_process(1, None)],
    );
    store.attach(UUID, &mut slow);
    let processes = slow.processes.unwrap();
    assert_eq!(processes[0].allocator.map(|a| a.reserved_bytes), Some(8 * GIB));
    assert_eq!(
        processes[1].allocator.map(|a| a.reserved_bytes),
        Some(8 * GIB),
        "joined through NSpid"
    );
    assert_eq!(processes[2].allocator, None, "nobody reported for it");
    assert_eq!(processes[0].details.snapshot.map(|s| s.largest_free_block_bytes), Some(GIB / 4));
    // The report's own pod name labels the process until the container
    // runtime (Kubernetes attribution, joined later) says otherwise.
    assert_eq!(processes[0].details.pod.as_deref(), Some("train-0"));
    assert_eq!(processes[2].details.pod, None);
    let views = store.views();
    assert!(views.iter().all(|view| view.matched), "{views:?}");
    assert_eq!(views.iter().find(|v| v.reporter.pid == 7).and_then(|v| v.matched_pid), Some(9007));
}

/// A reporter sends its pod name report after report; the process it
/// labels carries one string for all of them, not one per report.
#[tokio::test(start_paused = true)]
async fn a_reporters_pod_name_is_one_string_from_report_to_report() {
    let store = store();
    let pod_of = |at: i64| {
        let mut slow = reading(at, vec![nvml_process(42, None)]);
        store.attach(UUID, &mut slow);
        slow.processes.unwrap().remove(0).details.pod
    };
    store.accept(parsed(&report(42, "2026-01-01T00:00:10Z")).unwrap(), Instant::now()).unwrap();
    let first = pod_of(15);
    let later = Instant::now() + Duration::from_secs(1);
    store.accept(parsed(&report(42, "2026-01-01T00:00:20Z")).unwrap(), later).unwrap();
    let second = pod_of(25);
    let (Some(a), Some(b)) = (&first, &second) else { panic!("joined: {second:?}") };
    assert_eq!(a, "train-0");
    assert!(crate::model::SharedStr::ptr_eq(a, b), "the second report's copy was dropped");
}

#[tokio::test(start_paused = true)]
async fn an_unmatched_report_is_kept_and_shown_unmatched() {
    let store = store();
    store.accept(parsed(&report_for(42)).unwrap(), Instant::now()).unwrap();
    let mut slow = reading(15, vec![nvml_process(1, None)]);
    store.attach(UUID, &mut slow);
    let views = store.views();
    assert_eq!(views.len(), 1);
    assert!(!views[0].matched);
    assert_eq!(slow.processes.unwrap()[0].allocator, None);
}

#[tokio::test(start_paused = true)]
async fn stale_reports_expire_and_exited_processes_take_their_report() {
    let store = store();
    store.accept(parsed(&report_for(42)).unwrap(), Instant::now()).unwrap();
    let mut late = reading(10 + 31, vec![nvml_process(42, None)]);
    store.attach(UUID, &mut late);
    assert_eq!(late.processes.unwrap()[0].allocator, None, "a report 31 s old is not live");
    assert_eq!(store.reporters(), 0);

    store.accept(parsed(&report_for(42)).unwrap(), Instant::now()).unwrap();
    let mut live = reading(12, vec![nvml_process(42, None)]);
    store.attach(UUID, &mut live);
    assert!(live.processes.unwrap()[0].allocator.is_some());
    let mut gone = reading(13, vec![nvml_process(1, None)]);
    store.attach(UUID, &mut gone);
    assert_eq!(store.reporters(), 0, "the process exited: its report left with it");
}

#[test]
fn a_full_memory_stats_dictionary_from_the_fixture_is_accepted() {
    // Built from PyTorch's documented keys (no GPU was available to record
    // one): 122 keys including max_split_size = -1, as PyTorch sends it.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/memory_stats/pytorch-2-documented-keys.json"
    );
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut document = report(42, "2026-01-01T00:00:10Z");
    document["devices"][0]["memory_stats"] = fixture["memory_stats"].clone();
    let limits = ReportLimits { max_devices: 4, max_stats: 1024 };
    let parsed = parse(document.to_string().as_bytes(), &limits).unwrap();
    let stats = parsed.devices[0].stats.unwrap();
    let expected = |key: &str| fixture["memory_stats"][key].as_u64().unwrap();
    assert_eq!(stats.allocated_bytes, expected("allocated_bytes.all.current"));
    assert_eq!(stats.reserved_bytes, expected("reserved_bytes.all.current"));
    assert_eq!(stats.inactive_split_bytes, expected("inactive_split_bytes.all.current"));
    assert_eq!(stats.alloc_retries, 3);

    document["devices"][0]["memory_stats"]["segment.all.current"] = json!(-1);
    let error = parse(document.to_string().as_bytes(), &limits).unwrap_err();
    assert!(error.to_string().contains("segment.all.current"), "{error}");
}

#[test]
fn reporter_names_are_bounded() {
    let mut long = report(1, "2026-01-01T00:00:00Z");
    long["reporter"]["hostname"] = json!("h".repeat(254));
    let error = parsed(&long).unwrap_err().to_string();
    assert!(error.contains("reporter.hostname is 254 bytes"), "{error}");
    long["reporter"]["hostname"] = json!("h".repeat(253));
    assert!(parsed(&long).is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_report_dated_in_the_future_expires_too() {
    let store = store();
    store.accept(parsed(&report(42, "2026-01-01T01:00:00Z")).unwrap(), Instant::now()).unwrap();
    let mut now = reading(10, vec![nvml_process(1, None)]);
    store.attach(UUID, &mut now);
    assert_eq!(store.reporters(), 0, "an hour ahead of the device's clock is not live");
}

#[test]
fn implausible_values_are_refused_naming_the_field() {
    let with_stat = |key: &str, value: Value| {
        let mut body = report(7, "2026-01-01T00:00:00Z");
        body["devices"][0]["memory_stats"][key] = value;
        parsed(&body).unwrap_err().to_string()
    };
    let error = with_stat("num_ooms", json!(1e300));
    assert!(error.contains("memory_stats[num_ooms]") && error.contains("2^53"), "{error}");
    let error = with_stat("reserved_bytes.all.current", json!(u64::MAX));
    assert!(error.contains("memory_stats[reserved_bytes.all.current]"), "{error}");
    let error = with_stat("max_split_size", json!(-2));
    assert!(error.contains("max_split_size") && error.contains("-1"), "{error}");
    // -1 is PyTorch's "unset" and stays accepted.
    let mut unset = report(7, "2026-01-01T00:00:00Z");
    unset["devices"][0]["memory_stats"]["max_split_size"] = json!(-1);
    assert!(parsed(&unset).is_ok());
    let mut huge_snapshot = report(7, "2026-01-01T00:00:00Z");
    huge_snapshot["devices"][0]["snapshot"]["total_bytes"] = json!(u64::MAX);
    let error = parsed(&huge_snapshot).unwrap_err().to_string();
    assert!(error.contains("snapshot.total_bytes"), "{error}");
    // Found by the fuzz run: every documented maximum is enforced.
    let mut many_segments = report(7, "2026-01-01T00:00:00Z");
    many_segments["devices"][0]["snapshot"]["segments"] = json!((1_u64 << 53) + 1);
    let error = parsed(&many_segments).unwrap_err().to_string();
    assert!(error.contains("snapshot.segments"), "{error}");
    // Times RFC 3339 cannot write are refused at the edge.
    assert!(parsed(&report(7, "1969-12-31T23:59:59Z")).is_err());
}

#[test]
fn a_report_holding_more_than_its_device_has_is_refused() {
    let report = parsed(&report(7, "2026-01-01T00:00:00Z")).unwrap();
    // 8 GiB reserved on a 40 GiB device is fine, on a 4 GiB one it is not;
    // a device not read yet is not judged.
    assert!(super::report::check_device_totals(&report, |_| Some(40 * GIB)).is_ok());
    assert!(super::report::check_device_totals(&report, |_| None).is_ok());
    let error = super::report::check_device_totals(&report, |_| Some(4 * GIB)).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("reserved_bytes.all.current") && text.contains(&(4 * GIB).to_string()),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_jax_pool_limit_reaches_the_process_and_a_torch_report_has_none() {
    let store = store();
    let mut jax = report_for(42);
    jax["devices"][0]["memory_stats"]["bytes_limit"] = json!(60 * GIB);
    store.accept(parsed(&jax).unwrap(), Instant::now()).unwrap();
    store.accept(parsed(&report_for(43)).unwrap(), Instant::now()).unwrap();
    let mut slow = reading(15, vec![nvml_process(42, None), nvml_process(43, None)]);
    store.attach(UUID, &mut slow);
    let processes = slow.processes.unwrap();
    assert_eq!(processes[0].details.pool_limit_bytes, Some(60 * GIB));
    assert_eq!(processes[1].details.pool_limit_bytes, None, "PyTorch reports no bytes_limit");
    // A limit below what is in use is not a limit.
    let mut odd = report_for(44);
    odd["devices"][0]["memory_stats"]["bytes_limit"] = json!(GIB);
    assert_eq!(parsed(&odd).unwrap().devices[0].pool_limit_bytes, None);
}

/// OOM events are counted per reporter (host and PID): a reporter beyond
/// `ingest.max_reporters` heard from this second is refused with the words
/// the 429 body carries, and is taken again once that second is over.
#[tokio::test(start_paused = true)]
async fn oom_reporters_beyond_the_bound_are_refused_for_the_second() {
    let intake = OomIntake::new(2, 2);
    let now = Instant::now();
    let event_from = |pid: u32| {
        let mut body = crate::ingest::oom::example_event();
        body["reporter"]["pid"] = json!(pid);
        crate::ingest::oom::parse(body.to_string().as_bytes(), 64).unwrap()
    };
    intake.admit(&event_from(1), now).unwrap();
    intake.admit(&event_from(2), now).unwrap();
    let full = intake.admit(&event_from(3), now).unwrap_err();
    assert!(matches!(full, Refused::TooManyReporters { .. }));
    assert_eq!(
        full.to_string(),
        "2 reporters already sent OOM events this second (ingest.max_reporters)"
    );
    intake.admit(&event_from(3), now + Duration::from_secs(1)).unwrap();
}

/// A report with the interval's range of `allocated` and `reserved`.
fn report_with_range(range: [u64; 4], keys: usize) -> Value {
    let mut value = report(7, "2026-01-01T00:00:10.000Z");
    let stats = &mut value["devices"][0]["memory_stats"];
    for (key, figure) in super::validate::INTERVAL_KEYS.iter().zip(range).take(keys) {
        stats[*key] = json!(figure);
    }
    value
}

#[test]
fn the_interval_range_is_read_when_sent_and_absent_from_older_reporters() {
    let range = [5 * GIB, 7 * GIB, 8 * GIB, 8 * GIB];
    let stats = parsed(&report_with_range(range, 4)).unwrap().devices[0].stats.unwrap();
    let read = stats.interval.unwrap();
    assert_eq!(
        [
            read.allocated_min_bytes,
            read.allocated_max_bytes,
            read.reserved_min_bytes,
            read.reserved_max_bytes
        ],
        range
    );
    assert_eq!(stats.floor_allocated_bytes(), 5 * GIB, "the floor reads the interval's minimum");
    let older = parsed(&report(7, "2026-01-01T00:00:10.000Z")).unwrap().devices[0].stats.unwrap();
    assert_eq!(older.interval, None);
    assert_eq!(older.floor_allocated_bytes(), 6 * GIB, "without a range, the point sample");
}

#[test]
fn an_interval_range_that_is_partial_or_excludes_the_current_value_is_refused() {
    let error = parsed(&report_with_range([5 * GIB, 7 * GIB, 8 * GIB, 8 * GIB], 2)).unwrap_err();
    assert!(error.to_string().contains("reserved_bytes.all.interval_min"), "{error}");
    // Allocated is 6 GiB now; a range of 7..9 GiB cannot have held it.
    let error = parsed(&report_with_range([7 * GIB, 9 * GIB, 8 * GIB, 8 * GIB], 4)).unwrap_err();
    assert!(error.to_string().contains("allocated range"), "{error}");
    let error = parsed(&report_with_range([5 * GIB, 7 * GIB, 9 * GIB, 8 * GIB], 4)).unwrap_err();
    assert!(error.to_string().contains("reserved range"), "{error}");
}
