use super::*;
use crate::history::Ring;
use crate::model::{AllocatorStats, FastReading, ProcessInfo, SlowReading};

fn ts(millis: i64) -> Timestamp {
    Timestamp::from_unix_millis(millis)
}

fn fast(millis: i64, used: Option<u64>) -> FastPoint {
    FastPoint::from(&FastReading {
        at: ts(millis),
        memory: used.map(|used| MemoryInfo {
            total_bytes: 1_000,
            reserved_bytes: None,
            used_bytes: used,
            free_bytes: 1_000 - used,
        }),
        gpu_utilization: None,
        memory_bandwidth_utilization: None,
    })
}

fn process(pid: u32, used: Option<u64>, allocated: Option<u64>, retries: u64) -> ProcessInfo {
    ProcessInfo {
        pid,
        name: None,
        used_bytes: used,
        allocator: allocated.map(|allocated| AllocatorStats {
            allocated_bytes: allocated,
            reserved_bytes: allocated * 2,
            active_bytes: allocated,
            inactive_split_bytes: 0,
            alloc_retries: retries,
            ooms: 0,
        }),
        details: Default::default(),
    }
}

fn slow(millis: i64, processes: Option<Vec<ProcessInfo>>) -> SlowPoint {
    SlowPoint::from(&SlowReading {
        at: ts(millis),
        processes,
        temperature_celsius: None,
        power_usage_watts: None,
        power_limit_watts: None,
        details: Default::default(),
    })
}

#[test]
fn device_used_keeps_the_window_and_skips_absent_memory() {
    let ring = Ring::new(100);
    for (at, used) in [(0, Some(10)), (1_000, None), (2_000, Some(30)), (3_000, Some(40))] {
        ring.push(fast(at, used)).unwrap();
    }
    let snapshot = ring.snapshot();
    assert_eq!(device_used(&snapshot, ts(0), ts(2_000)), vec![(ts(0), 10), (ts(2_000), 30)]);
    assert_eq!(device_free(&snapshot, ts(2_500), ts(9_000)), vec![(ts(3_000), 960)]);
    assert_eq!(device_free_latest(&snapshot), Some((ts(3_000), 960)));
}

#[test]
fn latest_free_is_absent_when_the_newest_sample_has_no_memory() {
    let ring = Ring::new(100);
    ring.push(fast(0, Some(10))).unwrap();
    ring.push(fast(1_000, None)).unwrap();
    assert_eq!(device_free_latest(&ring.snapshot()), None, "no stale value shown as current");
    assert_eq!(device_free_latest(&Ring::<FastPoint>::new(4).snapshot()), None);
}

#[test]
fn process_series_follows_one_pid_and_leaves_gaps_absent() {
    let ring = Ring::new(100);
    ring.push(slow(0, Some(vec![process(1, Some(100), Some(40), 0), process(2, None, None, 0)])))
        .unwrap();
    ring.push(slow(1_000, None)).unwrap();
    ring.push(slow(2_000, Some(vec![process(1, None, Some(50), 1)]))).unwrap();
    ring.push(slow(3_000, Some(vec![process(3, Some(5), None, 0)]))).unwrap();
    let snapshot = ring.snapshot();
    let (from, to) = (ts(0), ts(3_000));
    assert_eq!(process_series(&snapshot, 1, from, to, ProcessMetric::NvmlUsed), vec![(ts(0), 100)]);
    assert_eq!(
        process_series(&snapshot, 1, from, to, ProcessMetric::AllocatorAllocated),
        vec![(ts(0), 40), (ts(2_000), 50)]
    );
    assert_eq!(
        process_series(&snapshot, 1, from, to, ProcessMetric::AllocatorReserved),
        vec![(ts(0), 80), (ts(2_000), 100)]
    );
    assert_eq!(
        process_series(&snapshot, 1, from, to, ProcessMetric::AllocatorRetries),
        vec![(ts(0), 0), (ts(2_000), 1)]
    );
    assert!(process_series(&snapshot, 2, from, to, ProcessMetric::NvmlUsed).is_empty());
    assert_eq!(pids_in(&snapshot, from, to), vec![1, 2, 3]);
    assert_eq!(pids_in(&snapshot, ts(1_500), ts(2_500)), vec![1]);
}

#[test]
fn counter_increase_sums_growth_and_counts_from_the_new_value_after_a_reset() {
    let series = [(ts(0), 5), (ts(1), 7), (ts(2), 7), (ts(3), 2), (ts(4), 4)];
    // 5→7 is +2, then the process restarted at 2 (counts 2), then +2.
    assert_eq!(counter_increase(&series), Some(6));
    assert_eq!(counter_increase(&[(ts(0), 3), (ts(1), 3)]), Some(0));
    assert_eq!(counter_increase(&[(ts(0), 3)]), None, "one reading shows no change");
    assert_eq!(counter_increase(&[]), None);
}

#[test]
fn counters_are_marked_as_counters() {
    assert!(ProcessMetric::AllocatorOoms.is_counter());
    assert!(ProcessMetric::AllocatorRetries.is_counter());
    assert!(!ProcessMetric::AllocatorAllocated.is_counter());
    assert_eq!(ProcessMetric::NvmlUsed.as_str(), "nvml_used");
}
