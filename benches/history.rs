//! History benchmarks: the sampler's write path and the REST history
//! query's read path, on full rings (the steady state of a daemon that has
//! run for longer than its retention).
//!
//! `cargo bench --bench history`. Figures and the machine they were taken
//! on are in docs/performance.md.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::measurement::{Measurement, WallTime};
use criterion::{BatchSize, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};

#[path = "support/mod.rs"]
mod support;
use support::cpu_time::CpuTime;
use support::fixtures::{self, GIB, MIB, START_MS};

use vramd::analysis::series::LEAK_FIGURES;
use vramd::history::{DeviceHistory, ProcessFigure, Sizing, WindowAnswer, WindowQuery};
use vramd::model::{FastReading, SlowReading, Timestamp};

/// A fast reading `i` samples in: used memory wobbles around 52 GiB, and
/// both utilizations are present, as on a busy training GPU.
fn fast_reading(at_ms: i64, i: u64) -> FastReading {
    let wobble = (i.wrapping_mul(2_654_435_761) % 512) * MIB;
    let (gpu, bandwidth) = (((i % 97) as f64) / 100.0, ((i % 61) as f64) / 100.0);
    fixtures::fast_reading(Timestamp::from_unix_millis(at_ms), 52 * GIB + wobble, gpu, bandwidth)
}

/// 64 processes whose NVML usage moves by whole pages on every sample.
fn moving_slow_reading(at: Timestamp) -> SlowReading {
    let second = fixtures::second(at);
    let mut reading = slow_reading(at.unix_millis(), 64);
    for (slot, process) in reading.processes.iter_mut().flatten().enumerate() {
        let wobble = (second.wrapping_mul(2_654_435_761) + slot as u64 * 7_919) % 32;
        process.used_bytes = Some(6 * GIB + wobble * 2 * MIB);
    }
    reading
}

fn slow_reading(at_ms: i64, processes: u32) -> SlowReading {
    let list = (0..processes)
        .map(|slot| {
            let mut process = fixtures::process(41_000 + slot, 5 * GIB, 4 * GIB);
            process.used_bytes = Some(6 * GIB + u64::from(slot) * MIB);
            process
        })
        .collect();
    fixtures::slow_reading(Timestamp::from_unix_millis(at_ms), list)
}

/// A device whose rings are full (fast at `interval_ms` spacing, slow at
/// 1 s, over two hours, so they have wrapped and evicted, as in steady
/// state); returns it with the timestamps of the newest fast and slow
/// samples.
fn full_device(interval_ms: i64, slow_processes: u32) -> (Arc<DeviceHistory>, i64, i64) {
    let interval = Duration::from_millis(interval_ms.unsigned_abs());
    let hour = Duration::from_secs(3_600);
    let sizing = Sizing::for_retention(hour, interval, fixtures::SLOW, Duration::from_secs(60));
    let device = Arc::new(DeviceHistory::new(fixtures::info(0), sizing));
    let played = fixtures::fill(
        std::slice::from_ref(&device),
        2 * hour,
        interval,
        |_, at| {
            let i = (at.unix_millis() - START_MS).unsigned_abs() / interval_ms.unsigned_abs();
            fast_reading(at.unix_millis(), i)
        },
        |_, at| slow_reading(at.unix_millis(), slow_processes),
    );
    let newest = played.end.map_or(START_MS, Timestamp::unix_millis);
    (device, newest, newest - (newest - START_MS) % 1_000)
}

fn record(c: &mut Criterion) {
    let mut group = c.benchmark_group("history/record");
    group.throughput(Throughput::Elements(1));

    // Default sizing: 1 h at 250 ms (14,401 fast samples), ring already full.
    let (device, mut at, _) = full_device(250, 6);
    let mut i = 0u64;
    group.bench_function("record_fast_steady_4hz", |b| {
        b.iter_batched(
            || {
                at += 250;
                i += 1;
                fast_reading(at, i)
            },
            |reading| black_box(device.record_fast(reading)),
            BatchSize::SmallInput,
        );
    });

    // Slow tier with 6 PyTorch processes, ring full (3,601 samples).
    let (device, _, mut slow_at) = full_device(250, 6);
    group.bench_function("record_slow_steady_6_processes", |b| {
        b.iter_batched(
            || {
                slow_at += 1_000;
                slow_reading(slow_at, 6)
            },
            |reading| black_box(device.record_slow(reading, 0)),
            BatchSize::SmallInput,
        );
    });

    // Slow tier with 64 processes whose figures move on every sample, ring
    // full: each list is new, so chunks are sealed every 4 samples and the
    // young chunks merged, in two levels (the cost of merging, amortised over pushes).
    let (device, _, mut slow_at) = full_device(250, 64);
    let mut second = 0u64;
    group.bench_function("record_slow_moving_64_processes", |b| {
        b.iter_batched(
            || {
                slow_at += 1_000;
                second += 1;
                let mut reading = slow_reading(slow_at, 64);
                for (slot, process) in reading.processes.iter_mut().flatten().enumerate() {
                    let wobble = (second.wrapping_mul(2_654_435_761) + slot as u64 * 7_919) % 32;
                    process.used_bytes = Some(6 * GIB + wobble * 2 * MIB);
                }
                reading
            },
            |reading| black_box(device.record_slow(reading, 0)),
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

fn query(c: &mut Criterion) {
    query_in(c, "history/query_1h_10hz", SamplingMode::Auto);
}

/// The same queries timed by the thread's CPU time (see support/cpu_time.rs).
fn query_cpu(c: &mut Criterion<CpuTime>) {
    if CpuTime::available().is_none() {
        eprintln!("no /proc/thread-self/schedstat; CPU-time benchmarks skipped");
        return;
    }
    query_in(c, "history_cpu/query_1h_10hz", SamplingMode::Flat);
}

fn query_in<M: Measurement>(c: &mut Criterion<M>, group_name: &str, sampling: SamplingMode) {
    // One device sampled at 10 Hz for one hour: 36,001 fast samples.
    let (device, _, _) = full_device(100, 4);
    let hour = Duration::from_secs(3_600);
    let mut group = c.benchmark_group(group_name);
    group.sampling_mode(sampling);
    let cases = [
        ("raw", WindowQuery { window: hour, step: None, max_points: 50_000 }),
        (
            "step_1s",
            WindowQuery { window: hour, step: Some(Duration::from_secs(1)), max_points: 50_000 },
        ),
        (
            "step_10s",
            WindowQuery { window: hour, step: Some(Duration::from_secs(10)), max_points: 50_000 },
        ),
    ];
    for (name, window_query) in cases {
        // Check once that the case does what its name says.
        match device.query(&window_query) {
            Ok(WindowAnswer::Raw { points, .. }) => eprintln!("{name}: {} points", points.len()),
            Ok(WindowAnswer::Downsampled { buckets, .. }) => {
                eprintln!("{name}: {} buckets", buckets.to_vec().len());
            }
            other => {
                eprintln!("{name}: unexpected answer {other:?}; skipped");
                continue;
            }
        }
        group.throughput(Throughput::Elements(device.fast_len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| black_box(walk(device.query(black_box(&window_query)))));
        });
    }
    group.finish();
}

/// Reads every entry of an answer, as the response body does: a query only
/// finds its window, the samples are read (and downsampled) as walked.
fn walk(answer: Result<WindowAnswer, vramd::history::QueryError>) -> usize {
    match answer {
        Ok(WindowAnswer::Raw { points, .. }) => points.into_cursor().count(),
        Ok(WindowAnswer::Downsampled { buckets, .. }) => buckets.into_cursor().count(),
        _ => 0,
    }
}

fn snapshot(c: &mut Criterion) {
    let mut group = c.benchmark_group("history/snapshot");
    let (device, _, _) = full_device(250, 6);
    group.bench_function("fast_14401", |b| b.iter(|| black_box(device.fast_snapshot())));
    group.bench_function("slow_3601", |b| b.iter(|| black_box(device.slow_snapshot())));
    group.bench_function("live", |b| b.iter(|| black_box(device.live())));
    let (device, _, _) = full_device(100, 4);
    group.bench_function("fast_36001", |b| b.iter(|| black_box(device.fast_snapshot())));
    group.finish();
}

/// The analyzer's reads of the slow tier at 8 × 64 scale on one device:
/// every pass visits what arrived since the last (a few samples), and a
/// window read whole (a leak window's first fill, or process growth after
/// a flat spell) walks 30 minutes of process lists. Every process's
/// figures move on every sample, so no list is shared.
fn slow_reads(c: &mut Criterion) {
    let mut group = c.benchmark_group("history/slow_read_64_moving");
    let hour = Duration::from_secs(3_600);
    let sizing =
        Sizing::for_retention(hour, fixtures::FAST, fixtures::SLOW, Duration::from_secs(60));
    let device = Arc::new(DeviceHistory::new(fixtures::info(0), sizing));
    let played = fixtures::fill(
        std::slice::from_ref(&device),
        hour + Duration::from_secs(300),
        fixtures::FAST,
        |_, at| fast_reading(at.unix_millis(), 0),
        |_, at| moving_slow_reading(at),
    );
    let newest = played.end.unwrap_or_else(fixtures::start);
    let recent = newest.saturating_sub(Duration::from_secs(5));
    let window = newest.saturating_sub(Duration::from_secs(1_800));
    group.bench_function("visit_last_5s", |b| {
        b.iter(|| {
            let mut seen = 0usize;
            device.visit_recent_slow(recent, newest, |point| {
                seen += point.processes().map_or(0, <[_]>::len);
            });
            black_box(seen)
        })
    });
    group.throughput(Throughput::Elements(1_801));
    group.bench_function("window_30min", |b| {
        b.iter(|| {
            let snapshot = device.slow_snapshot();
            let seen: usize = snapshot
                .range(window, newest)
                .map(|point| point.processes().map_or(0, |list| list.len()))
                .sum();
            black_box(seen)
        })
    });
    // What process growth reads of such a window: every process's NVML
    // usage, at every sample.
    group.bench_function("window_30min_used", |b| {
        b.iter(|| {
            let snapshot = device.slow_snapshot();
            let mut total = 0u64;
            for point in snapshot.range(window, newest) {
                for process in point.processes().into_iter().flatten() {
                    total = total.wrapping_add(process.used_bytes().unwrap_or(0));
                }
            }
            black_box(total)
        })
    });
    // The same read through the figure reader: NVML usage decoded alone.
    group.bench_function("window_30min_used_figure", |b| {
        b.iter(|| {
            let snapshot = device.slow_snapshot();
            let mut total = 0u64;
            snapshot.visit_figures(window, newest, [ProcessFigure::NvmlUsed], |sample| {
                for row in sample.processes.into_iter().flatten() {
                    total = total.wrapping_add(row.values[0].unwrap_or(0));
                }
            });
            black_box(total)
        })
    });
    // What each analysis pass reads: the leak figures of the samples since
    // the last pass (one slow sample at defaults). A sample is recorded
    // before each read, untimed, so the reads fall at every point of the
    // ring's sealing and merging cycle rather than at one: the figure is
    // the cycle's mean.
    let mut at = newest;
    group.bench_function("pass_leak_figures_through_cycle", |b| {
        b.iter_custom(|iterations| {
            let mut spent = Duration::ZERO;
            for _ in 0..iterations {
                let since = at.saturating_add(Duration::from_millis(1));
                at = at.saturating_add(fixtures::SLOW);
                let recorded = device.record_slow(moving_slow_reading(at), 0);
                assert!(recorded.is_ok(), "samples are recorded in order");
                let started = WallTime.start();
                let mut seen = 0usize;
                device.visit_recent_slow_figures(since, at, LEAK_FIGURES, |sample| {
                    seen += sample.processes.map_or(0, <[_]>::len);
                });
                spent += WallTime.end(started);
                black_box(seen);
            }
            spent
        })
    });
    // The same with whole process lists over the last 5 s (what
    // `visit_last_5s` reads at one point of the cycle).
    group.bench_function("visit_last_5s_through_cycle", |b| {
        b.iter_custom(|iterations| {
            let mut spent = Duration::ZERO;
            for _ in 0..iterations {
                at = at.saturating_add(fixtures::SLOW);
                let recorded = device.record_slow(moving_slow_reading(at), 0);
                assert!(recorded.is_ok(), "samples are recorded in order");
                let started = WallTime.start();
                let mut seen = 0usize;
                device.visit_recent_slow(at.saturating_sub(Duration::from_secs(5)), at, |point| {
                    seen += point.processes().map_or(0, <[_]>::len);
                });
                spent += WallTime.end(started);
                black_box(seen);
            }
            spent
        })
    });
    group.finish();
}

fn config() -> Criterion {
    // Short runs: the benchmark machine has 2 cores shared with builds.
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

fn cpu_config() -> Criterion<CpuTime> {
    // The kernel updates a running thread's CPU time only at scheduler
    // ticks (4 ms here): flat sampling with 20 samples of ~150 ms each keeps
    // that quantisation to a few per cent per sample.
    config().with_measurement(CpuTime).sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = record, query, snapshot, slow_reads
}
criterion_group! {
    name = benches_cpu;
    config = cpu_config();
    targets = query_cpu
}
criterion_main!(benches, benches_cpu);
