use super::*;
use crate::history::Ring;
use crate::model::{AllocatorStats, FastReading, MemoryInfo, ProcessInfo, SlowReading};

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
            interval: None,
        }),
        details: Default::default(),
    }
}

fn slow(millis: i64, processes: Option<Vec<ProcessInfo>>) -> SlowPoint {
    SlowPoint::from(&SlowReading {
        allocations: None,
        at: ts(millis),
        processes,
        temperature_celsius: None,
        power_usage_watts: None,
        power_limit_watts: None,
        details: Default::default(),
        processes_left_out: 0,
    })
}

#[test]
fn device_used_keeps_the_window_and_skips_absent_memory() {
    let ring = Ring::new(100);
    for (at, used) in [(0, Some(10)), (1_000, None), (2_000, Some(30)), (3_000, Some(40))] {
        ring.push(fast(at, used)).unwrap();
    }
    let snapshot = ring.snapshot();
    let mut used = vec![(ts(9), 9)];
    device_used_into(&snapshot, ts(0), ts(2_000), &mut used);
    assert_eq!(used, vec![(ts(0), 10), (ts(2_000), 30)], "the buffer is cleared first");
}

#[test]
fn process_windows_follow_each_pid_and_leave_gaps_absent() {
    let mut windows = ProcessWindows::default();
    let samples = [
        slow(0, Some(vec![process(1, Some(100), Some(40), 0), process(2, None, None, 0)])),
        slow(1_000, None),
        slow(2_000, Some(vec![process(1, None, Some(50), 1)])),
        slow(3_000, Some(vec![process(3, Some(5), None, 0)])),
    ];
    for sample in &samples {
        windows.add(sample);
    }
    let series = |windows: &ProcessWindows, pid: u32| {
        let process = windows.processes().find(|process| process.pid == pid)?;
        process.preferred().map(|(metric, values)| (metric, values.to_vec()))
    };
    assert_eq!(
        series(&windows, 1),
        Some((ProcessMetric::AllocatorAllocated, vec![(ts(0), 40), (ts(2_000), 50)]))
    );
    assert_eq!(series(&windows, 2), None, "nothing reported: no series");
    assert_eq!(series(&windows, 3), Some((ProcessMetric::NvmlUsed, vec![(ts(3_000), 5)])));
    let pids: Vec<u32> = windows.processes().map(|process| process.pid).collect();
    assert_eq!(pids, vec![1, 2, 3]);
    // Sliding the window: only what arrived since is added, and what left
    // the window is dropped with the processes left with nothing.
    assert_eq!(windows.resume_at(ts(0)), ts(3_001));
    windows.trim(ts(1_500));
    assert_eq!(
        series(&windows, 1),
        Some((ProcessMetric::AllocatorAllocated, vec![(ts(2_000), 50)]))
    );
    let pids: Vec<u32> = windows.processes().map(|process| process.pid).collect();
    assert_eq!(pids, vec![1, 3]);
}

#[test]
fn a_reporting_process_keeps_one_series_and_falls_back_to_nvml_once_its_reports_leave_the_window() {
    let mut windows = ProcessWindows::default();
    windows.add(&slow(0, Some(vec![process(1, Some(100), None, 0)])));
    for second in 1..=3 {
        let allocated = Some(40 + second as u64);
        windows.add(&slow(second * 1_000, Some(vec![process(1, Some(100), allocated, 0)])));
    }
    let entry = windows.processes().next().unwrap();
    assert!(entry.used.is_empty(), "the NVML series is dropped once allocator points arrive");
    assert_eq!(entry.allocated.len(), 3);
    // The reports stop; NVML figures are not kept while allocator points
    // are still in the window, and are again once those have left it.
    windows.add(&slow(4_000, Some(vec![process(1, Some(120), None, 0)])));
    windows.trim(ts(3_500));
    windows.add(&slow(5_000, Some(vec![process(1, Some(130), None, 0)])));
    let entry = windows.processes().next().unwrap();
    assert_eq!(
        entry.preferred().map(|(metric, values)| (metric, values.to_vec())),
        Some((ProcessMetric::NvmlUsed, vec![(ts(5_000), 130)]))
    );
}

#[test]
fn counter_steps_count_from_the_new_value_after_a_reset() {
    assert_eq!(counter_step(5, 7), 2);
    assert_eq!(counter_step(7, 7), 0);
    assert_eq!(counter_step(7, 2), 2, "the process restarted at 2: it counts in full");
}

#[test]
fn metrics_are_named_as_in_the_api() {
    assert_eq!(ProcessMetric::NvmlUsed.as_str(), "nvml_used");
}

#[test]
fn unchanged_figures_are_stored_once_and_read_back_point_by_point() {
    let mut windows = ProcessWindows::default();
    for second in 0..100 {
        let allocated = if second < 60 { 40 } else { 50 };
        let mut listed = vec![process(1, Some(100), Some(allocated), 0)];
        let used = (second % 2 == 1).then_some(7);
        listed.push(process(2, used, None, 0));
        windows.add(&slow(second * 1_000, Some(listed)));
        windows.add(&slow(second * 1_000 + 500, None));
    }
    // Two values for process 1, one for process 2; process 2 without a
    // figure in every other sample breaks its runs, which is the gap that
    // must stay, while a sample without a process list is no gap. (A
    // process left out of a read list altogether starts a new life: see
    // `a_pid_left_out_of_a_read_list_starts_a_new_life`.)
    assert_eq!(windows.pids[0].allocated.runs(), 2);
    assert_eq!(windows.pids[1].used.runs(), 50);
    // Read back once per sample, allocator figures as NVML usage: a value
    // that holds is still observed (its plateau ends at the newest sample,
    // so a leak that stopped is seen to have stopped).
    let read: Vec<PidSeries> = windows.processes().collect();
    let (_, first) = read[0].preferred().unwrap();
    assert_eq!(first.len(), 100);
    assert_eq!(first[59], (ts(59_000), 40));
    assert_eq!(first[60], (ts(60_000), 50));
    let (_, second) = read[1].preferred().unwrap();
    assert_eq!(second.len(), 50);
    assert_eq!(second[1], (ts(3_000), 7));

    // Trimming inside a run keeps exactly the samples from `from` on.
    windows.trim(ts(30_000));
    let read: Vec<PidSeries> = windows.processes().collect();
    let (_, first) = read[0].preferred().unwrap();
    assert_eq!(first.len(), 70);
    assert_eq!(first[0], (ts(30_000), 40));
    let (_, second) = read[1].preferred().unwrap();
    assert_eq!(second.len(), 35);
    assert_eq!(windows.pids[0].allocated.runs(), 2);
    windows.trim(ts(80_100));
    let read: Vec<PidSeries> = windows.processes().collect();
    assert_eq!(read[0].preferred().unwrap().1.first(), Some(&(ts(81_000), 50)));
    assert_eq!(read[1].preferred().unwrap().1.first(), Some(&(ts(81_000), 7)));
}

#[test]
fn a_pid_listed_twice_in_one_sample_keeps_both_points() {
    let mut windows = ProcessWindows::default();
    windows.add(&slow(0, Some(vec![process(1, Some(5), None, 0), process(1, Some(5), None, 0)])));
    windows.add(&slow(1_000, Some(vec![process(1, Some(5), None, 0)])));
    let read: Vec<PidSeries> = windows.processes().collect();
    assert_eq!(
        read[0].preferred().unwrap().1,
        &[(ts(0), 5), (ts(0), 5), (ts(1_000), 5)][..],
        "as before the change: one point per listing"
    );
}

#[test]
fn a_reused_buffer_reads_each_process_exactly_as_a_fresh_one() {
    let mut windows = ProcessWindows::default();
    for second in 0..40_i64 {
        let seconds = u64::try_from(second).unwrap_or(0);
        let mut list = vec![process(1, Some(100 + seconds % 3), Some(40 + seconds / 5), 0)];
        if second % 4 != 0 {
            list.push(process(2, Some(7), None, 0));
        }
        if second < 10 {
            list.push(process(3, Some(1_000 + seconds), None, 0));
        }
        windows.add(&slow(second * 1_000, Some(list)));
    }
    windows.trim(ts(5_000));
    type Read = (u32, Option<(ProcessMetric, Vec<(Timestamp, u64)>)>);
    let fresh: Vec<Read> = windows
        .processes()
        .map(|process| (process.pid, process.preferred().map(|(m, v)| (m, v.to_vec()))))
        .collect();
    // A buffer left holding a longer series than any process here: what
    // each visit sees must not keep any of it.
    let mut buffer = PidSeries {
        pid: 99,
        since: Some(ts(-1)),
        allocated: vec![(ts(0), 1); 500],
        used: vec![(ts(0), 2); 500],
    };
    let mut visited = Vec::new();
    windows.visit_processes(&mut buffer, |process| {
        visited.push((process.pid, process.preferred().map(|(m, v)| (m, v.to_vec()))));
    });
    assert_eq!(visited, fresh);
    assert_eq!(fresh.len(), 3);
}

#[test]
fn a_pid_left_out_of_a_read_list_starts_a_new_life() {
    let mut windows = ProcessWindows::default();
    let samples = [
        slow(0, Some(vec![process(7, Some(900), None, 0)])),
        slow(1_000, Some(vec![process(7, Some(900), None, 0)])),
        // The process exited: listed nowhere in a list that was read.
        slow(2_000, Some(vec![process(8, Some(5), None, 0)])),
        // A new process with the same PID and another baseline.
        slow(3_000, Some(vec![process(7, Some(100), None, 0)])),
        // No list read (a failed call, or a gap in sampling): no evidence.
        slow(4_000, None),
        slow(5_000, Some(vec![process(7, Some(110), None, 0)])),
    ];
    for sample in &samples {
        windows.add(sample);
    }
    let process = windows.processes().find(|process| process.pid == 7).unwrap();
    let (_, values) = process.preferred().unwrap();
    assert_eq!(values, [(ts(3_000), 100), (ts(5_000), 110)], "only the second life");
    assert_eq!(process.since, Some(ts(3_000)), "the second life's first listing");
}

#[test]
fn a_process_keeps_its_first_listing_as_the_window_slides_past_it() {
    let mut windows = ProcessWindows::default();
    for second in 0..10 {
        windows
            .add(&slow(second * 1_000, Some(vec![process(7, Some(900 + second as u64), None, 0)])));
    }
    windows.trim(ts(6_000));
    let mut buffer = PidSeries::default();
    let mut since = Vec::new();
    windows.visit_processes(&mut buffer, |process| since.push((process.pid, process.since)));
    assert_eq!(since, [(7, Some(ts(0)))], "its age, which the window's points no longer show");
    let (_, values) =
        windows.processes().next().unwrap().preferred().map(|(m, v)| (m, v.to_vec())).unwrap();
    assert_eq!(values.first(), Some(&(ts(6_000), 906)));
}

#[test]
fn a_pid_left_out_only_of_lists_the_process_cap_cut_keeps_its_life() {
    let capped = |millis, listed| {
        let reading = SlowReading::listing(ts(millis), Some(listed));
        SlowPoint::sharing(&reading, None, true)
    };
    let mut windows = ProcessWindows::default();
    windows.add(&slow(0, Some(vec![process(7, Some(900), None, 0)])));
    // Process 7 sits at the cap: two lists cut by it leave it out.
    windows.add(&capped(1_000, vec![process(8, Some(950), None, 0)]));
    windows.add(&capped(2_000, vec![process(8, Some(950), None, 0)]));
    windows.add(&slow(3_000, Some(vec![process(7, Some(910), None, 0)])));
    let seven = windows.processes().find(|process| process.pid == 7).unwrap();
    let (_, values) = seven.preferred().unwrap();
    assert_eq!(values, [(ts(0), 900), (ts(3_000), 910)], "one life across the capped lists");
    // A whole list without it is evidence that it exited.
    windows.add(&slow(4_000, Some(vec![process(8, Some(950), None, 0)])));
    windows.add(&slow(5_000, Some(vec![process(7, Some(100), None, 0)])));
    let seven = windows.processes().find(|process| process.pid == 7).unwrap();
    let (_, values) = seven.preferred().unwrap();
    assert_eq!(values, [(ts(5_000), 100)], "a new life after a whole list left it out");
}

/// The trend window slid check by check holds, at every check, exactly the
/// points of reading the whole window again: through samples at one time
/// arriving across checks, absent memory, a ring too short for the window,
/// a window that grows and time that goes back.
#[test]
fn a_slid_used_window_equals_the_whole_window_read_again() {
    for capacity in [40, 400] {
        let ring = Ring::new(capacity);
        let mut window = UsedWindow::default();
        let mut state = 7_u64;
        let mut next = move |bound: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % bound
        };
        let mut at = 0_i64;
        let mut length = 30_000_i64;
        for check in 0..400 {
            for _ in 0..next(12) {
                // Some samples share a time; some have no memory reading.
                at += [0, 250, 250, 1_000][next(4) as usize];
                let used = (next(5) != 0).then(|| next(1_000));
                ring.push(fast(at, used)).unwrap();
            }
            if check % 97 == 0 {
                length += 10_000;
            }
            let to = if check % 53 == 0 { ts(at - 500) } else { ts(at) };
            let from = ts(to.unix_millis() - length);
            let snapshot = ring.snapshot();
            window.slide(&snapshot, from, to);
            let mut whole = Vec::new();
            device_used_into(&snapshot, from, to, &mut whole);
            assert_eq!(window.points(), &whole[..], "check {check}, ring of {capacity}");
        }
    }
}
