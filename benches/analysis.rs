//! Analysis benchmarks: the analyzer's per-evaluation costs on realistic
//! series (the forecast's trend of 30 points and of a long window reduced
//! to 30 floor buckets, the pressure rules, and leak detection over 30
//! minutes at 1 Hz).
//!
//! `cargo bench --bench analysis`. The offline pipeline needs ≥ 1 M
//! samples/s, so the 10 000-sample trend must stay well under 10 ms.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

#[path = "support/mod.rs"]
mod support;
use support::fixtures;

use vramd::analysis::floor::FloorScratch;
use vramd::analysis::leak::{LeakParams, Prior, assess_leak, detect_process_leak};
use vramd::analysis::pressure::{PressureInput, PressureThresholds, pressure};
use vramd::analysis::series::{LEAK_FIGURES, PidSeries, ProcessWindows};
use vramd::analysis::trend::ForecastParams;
use vramd::model::Timestamp;

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1_073_741_824.0;
/// 2026-01-01T00:00:00Z: realistic epoch-millisecond magnitudes.
const START_MS: i64 = 1_767_225_600_000;

/// `count` samples `step_ms` apart: steady growth of 1 MiB/s from 40 GiB
/// with ±64 MiB of deterministic noise, as a leaking training job shows.
fn growing(count: usize, step_ms: i64) -> Vec<(Timestamp, u64)> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..count)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let noise = (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            let at_ms = START_MS + i as i64 * step_ms;
            let seconds = (i as i64 * step_ms) as f64 / 1000.0;
            (
                Timestamp::from_unix_millis(at_ms),
                (40.0 * GIB + MIB * seconds + 64.0 * MIB * noise) as u64,
            )
        })
        .collect()
}

fn trend(c: &mut Criterion) {
    let mut group = c.benchmark_group("forecast_trend");
    let (params, mut scratch) = (ForecastParams::default(), FloorScratch::default());
    let short = growing(30, 1_000);
    group.throughput(Throughput::Elements(short.len() as u64));
    group.bench_function("30_points", |b| b.iter(|| params.trend(&mut scratch, black_box(&short))));
    // 10 000 fast-tier samples (about 40 minutes at 4 Hz) reduced to 30.
    let long = growing(10_000, 250);
    group.throughput(Throughput::Elements(long.len() as u64));
    group.bench_function("10000_points_to_30", |b| {
        b.iter(|| params.trend(&mut scratch, black_box(&long)))
    });
    group.finish();
}

fn pressure_rules(c: &mut Criterion) {
    let input = PressureInput {
        total_bytes: 81_559_187_456,
        used_bytes: 76_000_000_000,
        free_bytes: 4_900_000_000,
        time_to_exhaustion_seconds: Some(1_500.0),
        retries_in_window: Some(2),
        ooms_in_window: Some(0),
    };
    let thresholds = PressureThresholds::default();
    c.bench_function("pressure", |b| b.iter(|| pressure(black_box(&input), &thresholds)));
}

fn leak(c: &mut Criterion) {
    let mut group = c.benchmark_group("detect_leak");
    // 30 minutes at 1 Hz: the default leak window on the slow tier.
    let series = growing(30 * 60 + 1, 1_000);
    let params = LeakParams::default();
    let from = series[0].0;
    let fresh = |series: &[(Timestamp, u64)]| {
        assess_leak(&mut FloorScratch::default(), series, from, false, &params)
    };
    assert!(fresh(&series).is_ok(), "the bench series must be a leak");
    group.throughput(Throughput::Elements(series.len() as u64));
    group.bench_function("30min_1hz", |b| b.iter(|| fresh(black_box(&series))));
    let mut scratch = FloorScratch::default();
    group.bench_function("30min_1hz_reused_scratch", |b| {
        b.iter(|| assess_leak(&mut scratch, black_box(&series), from, false, &params))
    });
    group.finish();
}

/// The leak windows of one device with 64 processes whose figures all move
/// on every sample, over the default 30-minute window at 1 Hz: what every
/// leak check reads (`visit`), with the detection it feeds, and the first
/// fill from the history (a daemon's first check, or one after a gap).
fn process_windows(c: &mut Criterion) {
    let mut group = c.benchmark_group("process_windows_64_moving");
    let window = std::time::Duration::from_secs(1_800);
    let (device, newest) = fixtures::moving_device(64, window + std::time::Duration::from_secs(60));
    let from = newest.saturating_sub(window);
    let fill = || {
        let mut windows = ProcessWindows::default();
        // As the analyzer fills them: only the two figures kept decoded.
        device.visit_recent_slow_figures(windows.resume_at(from), newest, LEAK_FIGURES, |sample| {
            windows.add_figures(sample)
        });
        windows.trim(from);
        windows
    };
    let mut windows = fill();
    let mut buffer = PidSeries::default();
    group.throughput(Throughput::Elements(64 * 1_801));
    group.bench_function("visit_30min", |b| {
        b.iter(|| {
            let mut points = 0usize;
            windows.visit_processes(&mut buffer, |process| {
                points += process.preferred().map_or(0, |(_, series)| series.len());
            });
            black_box(points)
        })
    });
    let (params, mut scratch) = (LeakParams::default(), FloorScratch::default());
    group.bench_function("visit_and_detect_30min", |b| {
        b.iter(|| {
            let mut found = 0usize;
            windows.visit_processes(&mut buffer, |process| {
                found += usize::from(
                    detect_process_leak(&mut scratch, process, from, &mut Prior::Nothing, &params)
                        .is_ok(),
                );
            });
            black_box(found)
        })
    });
    group.bench_function("fill_30min", |b| b.iter(|| black_box(fill().resume_at(from))));
    group.finish();
}

criterion_group!(benches, trend, pressure_rules, leak, process_windows);
criterion_main!(benches);
