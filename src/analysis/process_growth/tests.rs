//! The forecast read process by process, as a user of a shared GPU sees
//! it: a tenant's chunks beside a growing job, a job levelling off, and the
//! cases that fall back to the device floor.

use std::time::Duration;

use super::*;
use crate::history::Sizing;
use crate::model::{DeviceInfo, FastReading, MemoryInfo, ProcessInfo, SlowReading};

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1024.0 * MIB;
const TOTAL: u64 = 80 * 1024 * 1024 * 1024;
/// The trend window, at 4 Hz fast and 1 Hz slow.
const WINDOW_S: u64 = 600;

fn at(seconds: f64) -> Timestamp {
    Timestamp::from_unix_millis(1_767_225_600_000 + (seconds * 1000.0).round() as i64)
}

fn process(pid: u32, used: f64) -> ProcessInfo {
    ProcessInfo {
        pid,
        name: None,
        used_bytes: Some(used.round() as u64),
        allocator: None,
        details: Default::default(),
    }
}

/// A device whose processes hold `processes(t)` (pid, bytes) at second
/// `t`, plus 4 MiB nobody is listed for, over the trend window; a list
/// cut by the cap where `capped(t)`.
fn device(
    processes: impl Fn(f64) -> Vec<(u32, f64)>,
    capped: impl Fn(f64) -> bool,
) -> DeviceHistory {
    with_unlisted(processes, capped, 4.0 * MIB)
}

/// [`device`] with `unlisted` bytes held by nobody the list shows.
fn with_unlisted(
    processes: impl Fn(f64) -> Vec<(u32, f64)>,
    capped: impl Fn(f64) -> bool,
    unlisted: f64,
) -> DeviceHistory {
    listed_every(processes, capped, unlisted, 4)
}

/// [`with_unlisted`] with a process list every `quarters` fast samples
/// (4 Hz): 4 is a list a second.
fn listed_every(
    processes: impl Fn(f64) -> Vec<(u32, f64)>,
    capped: impl Fn(f64) -> bool,
    unlisted: f64,
    quarters: u64,
) -> DeviceHistory {
    let info = DeviceInfo {
        index: 0,
        uuid: "GPU-process-growth".into(),
        name: "Test GPU".into(),
        pci_bus_id: None,
        driver_version: None,
        mig: None,
    };
    let sizing = Sizing {
        fast_capacity: 4 * WINDOW_S as usize + 8,
        slow_capacity: 4 * WINDOW_S as usize + 8,
        peak_window: Duration::from_secs(30),
        oom_events: 4,
    };
    let history = DeviceHistory::new(info, sizing);
    for quarter in 0..=4 * WINDOW_S {
        let t = quarter as f64 / 4.0;
        let listed = processes(t);
        let used = listed.iter().map(|&(_, bytes)| bytes).sum::<f64>() + unlisted;
        let used = used.round() as u64;
        let memory = MemoryInfo {
            total_bytes: TOTAL,
            reserved_bytes: Some(0),
            used_bytes: used,
            free_bytes: TOTAL - used,
        };
        let fast = FastReading {
            at: at(t),
            memory: Some(memory),
            gpu_utilization: None,
            memory_bandwidth_utilization: None,
        };
        history.record_fast(fast).unwrap_or_else(|_| panic!("in order"));
        if quarter % quarters == 0 {
            let slow = SlowReading::listing(
                at(t),
                Some(listed.iter().map(|&(pid, bytes)| process(pid, bytes)).collect()),
            );
            let dropped = usize::from(capped(t));
            history.record_slow(slow, dropped).unwrap_or_else(|_| panic!("in order"));
        }
    }
    history
}

/// A trend and whether its growth is sustained.
type Estimate = Option<(Trend, bool)>;

/// The device floor's estimate and the one read process by process.
fn estimates(history: &DeviceHistory) -> (Estimate, Option<Estimate>) {
    let params = ForecastParams::default();
    let mut scratch = FloorScratch::default();
    let mut used = Vec::new();
    let (from, to) = (at(0.0), at(WINDOW_S as f64));
    crate::analysis::series::device_used_into(&history.fast_snapshot(), from, to, &mut used);
    let floor = params.trend(&mut scratch, &used);
    let mut growth = ProcessGrowth::default();
    growth.gather(history, from, to);
    let mut cleaned = Vec::new();
    (floor, growth.rate(&params, &mut scratch, &mut cleaned, &used, floor))
}

/// A notebook holding 0–3 chunks of `chunk` bytes, drawn afresh every
/// `period` seconds (a fixed, irregular sequence).
fn notebook(t: f64, chunk: f64, period: f64) -> f64 {
    const HELD: [f64; 12] = [2.0, 0.0, 3.0, 1.0, 3.0, 0.0, 2.0, 1.0, 0.0, 3.0, 2.0, 0.0];
    let slot = (t / period) as usize;
    GIB + chunk * HELD.get(slot % HELD.len()).copied().unwrap_or(0.0)
}

#[test]
fn a_job_growing_beside_a_notebook_tenants_chunks_is_forecast_at_its_own_rate() {
    // 27 MiB/s from the window's start; two notebooks take and free chunks
    // of 1.2 and 1.3 GiB every 155 s and 69 s.
    let rate = 27.0 * MIB;
    let history = device(
        |t| {
            vec![
                (10, 30.0 * GIB + rate * t),
                (20, notebook(t, 1.2 * GIB, 155.0)),
                (21, notebook(t + 40.0, 1.3 * GIB, 69.0)),
            ]
        },
        |_| false,
    );
    let (_, per_process) = estimates(&history);
    let Some(Some((trend, sustained))) = per_process else { panic!("{per_process:?}") };
    assert!(sustained, "{trend:?}");
    assert!(((trend.slope_per_second - rate) / rate).abs() < 0.05, "{trend:?}");
    assert!(trend.fit >= 0.8, "a confident deadline: {trend:?}");
}

#[test]
fn a_job_levelling_off_beside_a_tenant_is_judged_as_it_would_be_alone() {
    // A warm-up filling 12 GiB that levels off: with τ 60 s it is flat by
    // the window's last quarters and gets no forecast. Whatever its shape,
    // the tenant's chunks beside it do not change the verdict the job's
    // own floor gets (with τ 120 s its floor still creeps up through the
    // last quarter; the device-floor rules call that growth, alone or not,
    // and its rate, well under 10 MiB/s, forecasts no deadline soon).
    let warm_up = |tau: f64| move |t: f64| 20.0 * GIB + 12.0 * GIB * (1.0 - (-t / tau).exp());
    for tau in [60.0, 120.0] {
        let job = warm_up(tau);
        let (alone, _) = estimates(&device(|t| vec![(10, job(t))], |_| false));
        let shared = device(|t| vec![(10, job(t)), (20, notebook(t, 1.5 * GIB, 90.0))], |_| false);
        let (_, per_process) = estimates(&shared);
        let Some(verdict) = per_process else { panic!("the processes account for the device") };
        let sustained = |estimate: Option<(Trend, bool)>| estimate.is_some_and(|(_, on)| on);
        assert_eq!(sustained(verdict), sustained(alone), "τ {tau} s: {verdict:?} / {alone:?}");
        if tau < 100.0 {
            assert!(!sustained(verdict), "{verdict:?}");
        }
    }
}

#[test]
fn notebooks_taking_and_freeing_chunks_are_no_growth() {
    let history = device(
        |t| {
            let chunks = [notebook(t, 2.0 * GIB, 70.0), notebook(t + 30.0, 1.0 * GIB, 150.0)];
            vec![(10, 20.0 * GIB), (20, chunks[0]), (21, chunks[1])]
        },
        |_| false,
    );
    let (_, per_process) = estimates(&history);
    let Some(verdict) = per_process else { panic!("the processes account for the device") };
    assert!(!verdict.is_some_and(|(_, sustained)| sustained), "{verdict:?}");
}

/// A second job that starts `at` seconds in and warms up to 6 GiB (τ 60 s).
fn second_job(t: f64, at: f64) -> Option<(u32, f64)> {
    (t >= at).then(|| (11, 6.0 * GIB * (1.0 - (-(t - at) / 60.0).exp())))
}

#[test]
fn a_second_job_warming_up_inside_the_window_is_no_growth() {
    // A flat job, a notebook's chunks, and a second job starting 7 minutes
    // in: its start is a step and a warm-up, which the device floor's
    // newest quarter reads as growth. It is read as the job it is, from
    // nothing before its first list: no growth.
    let history = device(
        |t| {
            let mut listed = vec![(10, 20.0 * GIB), (20, notebook(t, 1.5 * GIB, 90.0))];
            listed.extend(second_job(t, 420.0));
            listed
        },
        |_| false,
    );
    let (_, per_process) = estimates(&history);
    let Some(verdict) = per_process else { panic!("the processes account for the device") };
    assert!(!verdict.is_some_and(|(_, sustained)| sustained), "{verdict:?}");
}

#[test]
fn a_job_growing_beside_a_second_job_that_joined_is_forecast_at_its_own_rate() {
    // 27 MiB/s from the window's start; a notebook; a second job joins
    // 4 minutes in and warms up. Its step is not the first job's growth.
    let rate = 27.0 * MIB;
    let history = device(
        |t| {
            let mut listed = vec![(10, 30.0 * GIB + rate * t), (20, notebook(t, 1.2 * GIB, 155.0))];
            listed.extend(second_job(t, 240.0));
            listed
        },
        |_| false,
    );
    let (_, per_process) = estimates(&history);
    let Some(Some((trend, sustained))) = per_process else { panic!("{per_process:?}") };
    assert!(sustained, "{trend:?}");
    assert!(((trend.slope_per_second - rate) / rate).abs() < 0.05, "{trend:?}");
}

#[test]
fn a_capped_process_list_or_unlisted_memory_leaves_the_device_floor_in_charge() {
    let growing = |t: f64| vec![(10, 20.0 * GIB + 30.0 * MIB * t), (20, notebook(t, GIB, 80.0))];
    assert!(estimates(&device(growing, |_| false)).1.is_some(), "accounted for");
    assert_eq!(estimates(&device(growing, |t| t > 300.0)).1, None, "a capped list");
    // Something the list does not show holds 6 GiB of 26 or more.
    assert_eq!(estimates(&with_unlisted(growing, |_| false, 6.0 * GIB)).1, None, "unlisted");
}

#[test]
fn a_pid_missing_from_a_list_inside_the_window_starts_afresh() {
    // The job exits and its PID is reused by a new one a minute later.
    let history = device(
        |t| {
            let mut listed = vec![(20, 4.0 * GIB)];
            if !(200.0..260.0).contains(&t) {
                listed.push((10, 20.0 * GIB + 30.0 * MIB * t));
            }
            listed
        },
        |_| false,
    );
    assert_eq!(estimates(&history).1, None);
}

#[test]
fn reading_check_by_check_sees_what_reading_the_window_whole_sees() {
    let rate = 27.0 * MIB;
    let history = device(
        |t| {
            let chunk = notebook(t, 1.2 * GIB, 70.0);
            vec![(10, 30.0 * GIB + rate * t), (20, chunk), (21, notebook(t + 9.0, GIB, 45.0))]
        },
        |_| false,
    );
    let params = ForecastParams::default();
    let mut scratch = FloorScratch::default();
    let mut cleaned = Vec::new();
    let mut used = Vec::new();
    let mut slid = ProcessGrowth::default();
    // Checks every 15 s (new lists read under the ring's lock), then every
    // 75 s (read from a snapshot); the window is the last 300 s.
    let ends = (300..=450).step_by(15).chain((525..=600).step_by(75));
    for end in ends {
        let (from, to) = (at(end as f64 - 300.0), at(end as f64));
        crate::analysis::series::device_used_into(&history.fast_snapshot(), from, to, &mut used);
        let floor = params.trend(&mut scratch, &used);
        slid.gather(&history, from, to);
        let by_check = slid.rate(&params, &mut scratch, &mut cleaned, &used, floor);
        let mut whole = ProcessGrowth::default();
        whole.gather(&history, from, to);
        let at_once = whole.rate(&params, &mut scratch, &mut cleaned, &used, floor);
        assert_eq!(by_check, at_once, "window ending at {end} s");
        assert!(by_check.is_some(), "the processes account for the device");
    }
}

/// A window of more process lists than the reading holds (lists at 4 Hz
/// over 10 min: 2,401 > `MAX_LISTS`) leaves the forecast on the device
/// floor rather than holding a point per process and list; the same
/// device listed once a second is read process by process.
#[test]
fn a_window_of_more_lists_than_the_bound_leaves_the_device_floor_in_charge() {
    let rate = 27.0 * MIB;
    let processes = |t: f64| {
        vec![(10, 30.0 * GIB + rate * t), (20, notebook(t, 1.2 * GIB, 70.0)), (21, 2.0 * GIB)]
    };
    let dense = listed_every(processes, |_| false, 4.0 * MIB, 1);
    assert!(dense.slow_snapshot().count_in(at(0.0), at(WINDOW_S as f64)) > MAX_LISTS);
    let (_, by_process) = estimates(&dense);
    assert_eq!(by_process, None);
    let (_, by_process) = estimates(&device(processes, |_| false));
    assert!(by_process.is_some());
}

#[test]
fn a_window_of_moving_processes_costs_a_few_bits_a_point_between_checks() {
    // 64 processes whose usage moves by whole 2 MiB pages on every list,
    // the fake NVML's moving scenario, over the 600-list window.
    let page = 2.0 * MIB;
    let moving = |t: f64| -> Vec<(u32, f64)> {
        (0..64_u32)
            .map(|pid| {
                let step = ((u64::from(pid + 1) * 2_654_435_761) ^ (t as u64 * 40_503)) % 32;
                (100 + pid, GIB + page * (step as f64 + f64::from(pid)))
            })
            .collect()
    };
    let history = device(moving, |_| false);
    let (from, to) = (at(0.0), at(WINDOW_S as f64));
    let mut growth = ProcessGrowth::default();
    growth.gather(&history, from, to);
    let points = growth.points();
    assert_eq!(points, 64 * (WINDOW_S as usize + 1), "every process's usage on every list");
    let per_point = growth.stored_bytes() as f64 / points as f64;
    assert!(per_point < 2.0, "{per_point:.2} B a point, against 16 kept as recorded");

    let params = ForecastParams::default();
    let (mut scratch, mut cleaned, mut used) = (FloorScratch::default(), Vec::new(), Vec::new());
    crate::analysis::series::device_used_into(&history.fast_snapshot(), from, to, &mut used);
    let floor = params.trend(&mut scratch, &used);
    growth.rate(&params, &mut scratch, &mut cleaned, &used, floor);
    assert!(
        growth.stored_bytes() as f64 / (points as f64) < 2.0,
        "the points a check decodes are let go after it"
    );
}
