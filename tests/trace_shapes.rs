//! Recorded traces of shapes the corpus does not draw, replayed through
//! `vramd analyze --replay`'s own pipeline (trace loader, history,
//! analysis, rules, state machine): a gap where the daemon was restarted,
//! a PID reused by a new process with another baseline, a job restarting
//! in place, a device reset, and the clock stepping back. None may raise a
//! benign `leak_suspected` or `exhaustion_forecast` or panic, and a real
//! leak across a gap is still called.
//!
//! Each trace is written as the recorder writes one (NDJSON, version 1) at
//! 1 Hz: a PyTorch-like job whose `allocated` sawtooths per step by its
//! activation size at a pseudo-random phase, warming up towards its level.

// A test crate: a panic here is a failed test, not a failed daemon.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use vramd::alerts::AlertState;
use vramd::analyze::{self, AnalyzeReport};
use vramd::app::Config;
use vramd::model::RuleId;
use vramd::source::simulator::GOLDEN_ORIGIN;

const HEADER: &str = r#"{"format":"vramd-trace","version":1,"source":"nvml","devices":[{"index":0,"uuid":"GPU-972aef12-9421-4446-c663-d8e89bade7ec","name":"NVIDIA H100 80GB HBM3","pci_bus_id":"00000000:18:00.0","driver_version":"570.124.06"}]}"#;
const TOTAL: u64 = 85_520_809_984;
const DRIVER_RESERVED: u64 = 553_648_128;
const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1024.0 * MIB;
/// A CUDA context and what else NVML counts beyond the allocator's cache.
const CONTEXT: f64 = 600.0 * MIB;

/// One life of a training process.
#[derive(Clone, Copy)]
struct Job {
    pid: u32,
    /// Seconds since the trace's start.
    start: f64,
    end: f64,
    /// The floor of `allocated` once warm (weights, optimizer state).
    base: f64,
    /// The per-step sawtooth above the floor.
    activation: f64,
    /// Warm-up time constant, seconds.
    tau: f64,
    /// A leak from `onset` (seconds since the trace's start), bytes/s.
    leak: Option<(f64, f64)>,
    /// A slow warm-up of the floor after the load: (bytes it levels off
    /// at above `base`, time constant in seconds).
    climb: Option<(f64, f64)>,
    /// The cache following the largest batch so far: at each (seconds
    /// since the start, bytes), reserved memory grows by that much.
    cache_steps: &'static [(f64, f64)],
    /// Whether the job's reporter sends allocator statistics (NVML only
    /// where not).
    reports: bool,
}

impl Job {
    const fn steady(pid: u32, start: f64, end: f64, base_gib: f64) -> Job {
        Job {
            pid,
            start,
            end,
            base: base_gib * GIB,
            activation: 3.0 * GIB,
            tau: 40.0,
            leak: None,
            climb: None,
            cache_steps: &[],
            reports: true,
        }
    }

    /// (`allocated`, `reserved`, NVML usage) at `t`, if running then. As
    /// the corpus models a job: the weights load over 20 s, then the floor
    /// stands at `base` while the allocator's cache warms up towards the
    /// step's peak.
    fn at(&self, t: f64) -> Option<(u64, u64, u64)> {
        if t < self.start || t >= self.end {
            return None;
        }
        const LOAD: f64 = 20.0;
        let age = t - self.start;
        let leaked = self.leak.map_or(0.0, |(onset, rate)| rate * (t - onset).max(0.0));
        let climbed = self
            .climb
            .map_or(0.0, |(bytes, tau)| bytes * (1.0 - (-(age - LOAD).max(0.0) / tau).exp()));
        let (floor, activation) = if age < LOAD {
            (self.base * age / LOAD, 0.0)
        } else {
            (self.base + leaked + climbed, self.activation)
        };
        let cached: f64 =
            self.cache_steps.iter().filter(|&&(at, _)| at <= t).map(|&(_, bytes)| bytes).sum();
        let allocated = floor + activation * unit(self.pid, t);
        let warm = 1.0 - (-(age - LOAD).max(0.0) / self.tau).exp();
        // The cache holds the step's peak once warm; it only grows.
        let reserved = (floor + activation * warm).max(allocated) + 64.0 * MIB + cached;
        Some((allocated as u64, reserved as u64, (reserved + CONTEXT) as u64))
    }
}

/// A repeatable draw in [0, 1) per process and second: the phase of the
/// training step a sample catches.
fn unit(pid: u32, t: f64) -> f64 {
    let mut x = u64::from(pid) ^ (t.to_bits().rotate_left(17)) ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// A trace of `jobs` from second 0 to `seconds`, one fast and one slow
/// record per second, with no records in `gap` (from, to) and each
/// record's time `time(t)` milliseconds after the origin. A reading older
/// than the newest one written is left out, as the recorder leaves it out
/// (docs/trace-format.md, "Ordering").
fn trace(jobs: &[Job], seconds: u32, gap: Option<(f64, f64)>, time: &dyn Fn(f64) -> i64) -> String {
    trace_with(jobs, seconds, gap, time, true, 1)
}

fn trace_with(
    jobs: &[Job],
    seconds: u32,
    gap: Option<(f64, f64)>,
    time: &dyn Fn(f64) -> i64,
    as_recorded: bool,
    slow_every: u32,
) -> String {
    let origin = GOLDEN_ORIGIN.unix_millis();
    let mut text = format!("{HEADER}\n");
    let mut newest = i64::MIN;
    for second in 0..=seconds {
        let t = f64::from(second);
        if gap.is_some_and(|(from, to)| t >= from && t < to) {
            continue;
        }
        let at = origin + time(t);
        if as_recorded && at < newest {
            continue;
        }
        newest = newest.max(at);
        let mut used = (4.0 * MIB) as u64;
        let mut processes = Vec::new();
        for job in jobs {
            let Some((allocated, reserved, nvml)) = job.at(t) else { continue };
            used += nvml;
            let allocator = if job.reports {
                format!(
                    r#","allocator":{{"allocated_bytes":{allocated},"reserved_bytes":{reserved},"active_bytes":{allocated},"inactive_split_bytes":0,"alloc_retries":0,"ooms":0}}"#
                )
            } else {
                String::new()
            };
            processes.push(format!(
                r#"{{"pid":{},"name":"python3","used_bytes":{nvml}{allocator}}}"#,
                job.pid
            ));
        }
        let free = TOTAL - DRIVER_RESERVED - used;
        text.push_str(&format!(
            r#"{{"record":"fast","device":0,"at":{at},"memory":{{"total_bytes":{TOTAL},"reserved_bytes":{DRIVER_RESERVED},"used_bytes":{used},"free_bytes":{free}}}}}"#
        ));
        text.push('\n');
        if second % slow_every.max(1) != 0 {
            continue;
        }
        text.push_str(&format!(
            r#"{{"record":"slow","device":0,"at":{at},"processes":[{}]}}"#,
            processes.join(",")
        ));
        text.push('\n');
    }
    text
}

fn seconds(t: f64) -> i64 {
    (t * 1000.0) as i64
}

/// `vramd analyze --replay` of `text` with the default configuration.
fn replay(text: &str) -> AnalyzeReport {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
    let trace = vramd::source::trace::Replay::open_bounded(file.path(), 1 << 20, 1 << 28)
        .unwrap_or_else(|error| panic!("the trace was refused: {error}"));
    let config = Config::default();
    analyze::replay(&vramd::app::analyze_settings(&config), &trace)
}

/// The `leak_suspected` and `exhaustion_forecast` firings: (rule, pid,
/// seconds since the start).
fn firings(report: &AnalyzeReport) -> Vec<(RuleId, Option<u32>, f64)> {
    report
        .timeline
        .iter()
        .filter(|entry| entry.transition.alert.state == AlertState::Firing)
        .filter_map(|entry| {
            let key = &entry.transition.alert.key;
            matches!(key.rule, RuleId::LeakSuspected | RuleId::ExhaustionForecast).then_some((
                key.rule,
                key.pid,
                entry.offset_seconds,
            ))
        })
        .collect()
}

fn assert_silent(what: &str, text: &str) {
    let report = replay(text);
    assert!(report.evaluations > 100, "{} evaluations", report.evaluations);
    let fired = firings(&report);
    assert!(
        fired.is_empty(),
        "{what}: benign alarms {fired:?}\n{}",
        analyze::render_table(&report)
    );
}

fn plain(t: f64) -> i64 {
    seconds(t)
}

#[test]
fn a_restart_gap_in_a_steady_job_raises_nothing() {
    for (from, minutes) in [(1_500.0, 2.0), (1_500.0, 5.0), (200.0, 4.0)] {
        let job = Job::steady(4242, 0.0, 4_000.0, 20.0);
        let gap = Some((from, from + minutes * 60.0));
        assert_silent(&format!("gap {gap:?}"), &trace(&[job], 3_600, gap, &plain));
    }
}

#[test]
fn a_pid_reused_unseen_during_a_gap_is_no_leak() {
    // While the daemon was down the job restarted under the same PID with
    // another baseline: no process list shows it gone.
    for base in [8.0, 35.0] {
        let first = Job::steady(4242, 0.0, 1_600.0, 20.0);
        let second = Job::steady(4242, 1_600.0, 4_000.0, base);
        let gap = Some((1_500.0, 1_740.0));
        let what = format!("gap {gap:?}, baseline {base} GiB after");
        assert_silent(&what, &trace(&[first, second], 3_600, gap, &plain));
    }
}

#[test]
fn a_leak_is_still_called_across_a_restart_gap() {
    // 4 MiB/s from minute 10; the daemon is down from minute 14 to 18.
    let job = Job { leak: Some((600.0, 4.0 * MIB)), ..Job::steady(4242, 0.0, 4_000.0, 20.0) };
    let report = replay(&trace(&[job], 2_400, Some((840.0, 1_080.0)), &plain));
    let fired = firings(&report);
    let leak =
        fired.iter().find(|(rule, pid, _)| *rule == RuleId::LeakSuspected && *pid == Some(4242));
    let Some(&(_, _, at)) = leak else {
        panic!("the leak was not called: {fired:?}\n{}", analyze::render_table(&report))
    };
    assert!(at > 600.0 && at <= 600.0 + 20.0 * 60.0, "called at {at} s");
    assert!(fired.iter().all(|(rule, _, _)| *rule == RuleId::LeakSuspected), "{fired:?}");
}

#[test]
fn a_reused_pid_with_another_baseline_is_no_leak() {
    // The first process exits at minute 25; one second or one minute later
    // a new one gets the same PID, with a higher or a lower baseline.
    for (pause, base) in [(1.0, 45.0), (60.0, 45.0), (1.0, 6.0), (5.0, 30.0)] {
        let first = Job::steady(4242, 0.0, 1_500.0, 20.0);
        let second = Job::steady(4242, 1_500.0 + pause, 4_000.0, base);
        let what = format!("pause {pause} s, baseline {base} GiB");
        assert_silent(&what, &trace(&[first, second], 3_600, None, &plain));
    }
}

#[test]
fn a_job_restarting_in_place_is_no_leak() {
    // The same process drops its memory to nothing and warms up again,
    // three times (a training script restarting its loop after a failure).
    let lives: Vec<Job> = [0.0, 900.0, 1_500.0, 2_400.0]
        .windows(2)
        .map(|w| Job { tau: 90.0, ..Job::steady(4242, w[0], w[1] - 2.0, 30.0) })
        .collect();
    let mut jobs = lives.clone();
    jobs.push(Job { tau: 90.0, ..Job::steady(4242, 2_400.0, 4_000.0, 30.0) });
    assert_silent("restarts", &trace(&jobs, 3_600, None, &plain));
}

#[test]
fn a_device_reset_is_no_leak_and_no_forecast() {
    // Every process is gone for 40 s at minute 20, then the jobs start
    // again under new PIDs and warm up.
    let jobs = [
        Job::steady(4242, 0.0, 1_200.0, 30.0),
        Job::steady(5151, 0.0, 1_200.0, 8.0),
        Job { tau: 120.0, ..Job::steady(4300, 1_240.0, 4_000.0, 30.0) },
        Job { tau: 60.0, ..Job::steady(5200, 1_250.0, 4_000.0, 8.0) },
    ];
    assert_silent("reset", &trace(&jobs, 3_600, None, &plain));
}

#[test]
fn a_clock_stepping_back_is_no_leak() {
    // NTP steps the clock back at minute 20 and at minute 40, so the next
    // reading is a second older than the one before it: the live daemon's
    // history refuses it (an `out_of_order` error) and the recorder leaves
    // it out; the trace as recorded replays silently.
    let job = Job::steady(4242, 0.0, 4_000.0, 20.0);
    let stepped = |t: f64| seconds(t) - 2_000 * (i64::from(t >= 1_200.0) + i64::from(t >= 2_400.0));
    assert_silent("clock stepped back", &trace(&[job], 3_600, None, &stepped));
    // The same steps written as they came (no recorder writes that): the
    // trace is refused with the line named, not replayed out of order.
    let raw = trace_with(&[job], 1_300, None, &stepped, false, 1);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, raw.as_bytes()).unwrap();
    let Err(error) = vramd::source::trace::Replay::open_bounded(file.path(), 1 << 20, 1 << 28)
    else {
        panic!("a backwards trace is refused")
    };
    assert!(error.to_string().contains("line 2402"), "{error}");
}

/// Process lists every `every` seconds (the fast tier each second): a
/// steady job stays silent, and a 4 MiB/s leak from 600 s on is called;
/// returns when, in seconds from the trace's start.
fn sparse_slow_tier_calls_a_leak(every: u32) -> f64 {
    let label = format!("slow tier {every} s");
    let steady = Job::steady(4242, 0.0, 4_000.0, 20.0);
    assert_silent(&label, &trace_with(&[steady], 3_600, None, &plain, true, every));
    let leaking = Job { leak: Some((600.0, 4.0 * MIB)), ..steady };
    let report = replay(&trace_with(&[leaking], 3_600, None, &plain, true, every));
    let fired = firings(&report);
    let leak =
        fired.iter().find(|(rule, pid, _)| *rule == RuleId::LeakSuspected && *pid == Some(4242));
    let Some(&(_, _, at)) = leak else {
        panic!("{label}: the leak was not called: {fired:?}\n{}", analyze::render_table(&report))
    };
    at
}

#[test]
fn a_slow_tier_of_ten_seconds_stays_silent_and_still_calls_a_leak() {
    // The short leak windows hold too few lists to be judged; the
    // 30-minute one still is.
    let at = sparse_slow_tier_calls_a_leak(10);
    assert!(at > 600.0 && at <= 600.0 + 35.0 * 60.0, "called at {at} s");
}

#[test]
fn process_lists_every_twelve_seconds_still_call_a_leak() {
    // 12 s does not divide the window: the first list inside it falls up
    // to 12 s after its start, and a process there all along must still
    // count as covering it.
    sparse_slow_tier_calls_a_leak(12);
}

/// A trace whose readings jump a year ahead (a machine suspended, a trace
/// stitched from two runs) is judged in a few passes across the gap, not
/// one every `analysis.evaluation_interval` of it (issue 35, item 7:
/// a year took 35.6 s).
#[test]
fn a_year_long_gap_is_judged_in_a_few_passes() {
    let year = 365.0 * 86_400.0;
    let jump = move |t: f64| seconds(if t < 300.0 { t } else { t + year });
    let job = Job::steady(4242, 0.0, 4_000.0, 20.0);
    let report = replay(&trace(&[job], 600, None, &jump));
    // 600 s of readings at one pass every 5 s, and an hour's passes (720)
    // and one more for the gap.
    assert!(report.evaluations <= 125 + 721, "{} passes", report.evaluations);
    assert!(report.duration_seconds > year, "the gap is still played: {}", report.duration_seconds);
}

/// A job of `base` GiB warming up by `climb` GiB more with time constant
/// `tau` seconds, its allocator reporting or not, over an hour.
fn warming(climb: f64, tau: f64, reports: bool) -> Job {
    let steady = Job::steady(4242, 0.0, 4_000.0, 20.0);
    Job { climb: Some((climb * GIB, tau)), reports, ..steady }
}

#[test]
fn warm_ups_of_any_length_levelling_off_below_capacity_raise_nothing() {
    // A large model loading and caches filling for minutes: 20 GiB, then
    // +10 or +30 GiB more approached exponentially, on an 80 GiB device.
    for reports in [false, true] {
        for climb in [10.0, 30.0] {
            for tau in [60.0, 150.0, 300.0, 600.0] {
                let what = format!("+{climb} GiB, tau {tau} s, reports {reports}");
                assert_silent(&what, &trace(&[warming(climb, tau, reports)], 3_600, None, &plain));
            }
        }
    }
}

#[test]
fn young_warm_ups_under_a_large_sawtooth_raise_nothing() {
    // The corpus's warm-up runs that still raised `leak_suspected` 6-18
    // minutes in (seeds 2, 3 and 5): a 12 GiB model, +6 to +19 GiB more
    // with a time constant of 5.5-8.5 minutes, under a 2.5-4 GiB
    // sawtooth, its allocator reporting. A short window, most of the
    // young process's life, "sped up" by its scatter while the life's rate
    // fell by ten noises; the rate's fall at minute 5 stood under two.
    // The first half hour: the tail beyond is docs/alerts.md's open case.
    // These recorded counterparts stayed silent before the fix too (this
    // trace's phases are not the corpus's); the corpus runs themselves,
    // which did not, are tests/detection.rs's
    // `slow_warm_ups_that_raised_leaks_stay_silent`.
    for (climb, tau, activation) in
        [(19.0, 467.0, 2.5), (12.0, 479.0, 3.0), (11.0, 506.0, 4.0), (6.0, 338.0, 2.5)]
    {
        let job =
            Job { base: 12.0 * GIB, activation: activation * GIB, ..warming(climb, tau, true) };
        let what = format!("+{climb} GiB, tau {tau} s, sawtooth {activation} GiB");
        assert_silent(&what, &trace(&[job], 1_800, None, &plain));
    }
}

#[test]
fn a_leak_after_a_long_warm_up_is_still_called() {
    // +10 GiB with a 5-minute time constant, then 4 MiB/s from minute 30.
    let job = Job { leak: Some((1_800.0, 4.0 * MIB)), ..warming(10.0, 300.0, false) };
    let report = replay(&trace(&[job], 3_600, None, &plain));
    let fired = firings(&report);
    let called = fired.iter().find(|(rule, _, _)| *rule == RuleId::LeakSuspected);
    let Some(&(_, _, at)) = called else {
        panic!("the leak was not called: {fired:?}\n{}", analyze::render_table(&report))
    };
    assert!(at > 1_800.0 && at <= 1_800.0 + 15.0 * 60.0, "called at {at} s");
}

#[test]
fn an_nvml_only_cache_following_the_largest_batch_is_not_called_a_leak() {
    // No reporter: reserved memory grows in a few large irregular steps
    // as ever larger batches come, then holds. Without allocator figures
    // that is cache growth or a leak: said so under its own rule
    // (`reserved_growth`, severity info), never `leak_suspected`, with the
    // way to tell them apart.
    const STEPS: [(f64, f64); 5] = [
        (420.0, 1.5 * GIB),
        (610.0, 0.75 * GIB),
        (980.0, 2.5 * GIB),
        (1_150.0, 0.5 * GIB),
        (1_900.0, 1.25 * GIB),
    ];
    let job = Job { cache_steps: &STEPS, reports: false, ..Job::steady(4242, 0.0, 4_000.0, 20.0) };
    let report = replay(&trace(&[job], 3_600, None, &plain));
    let table = analyze::render_table(&report);
    for entry in &report.timeline {
        let alert = &entry.transition.alert;
        assert_ne!(alert.key.rule, RuleId::LeakSuspected, "called a leak: {table}");
        if alert.key.rule != RuleId::ReservedGrowth {
            continue;
        }
        assert_eq!(alert.severity, vramd::alerts::Severity::Info, "{table}");
        assert!(alert.summary.contains("cache growth or a leak"), "{table}");
        assert!(alert.remediation.starts_with("attach the reporter to tell them apart"), "{table}");
    }
}
