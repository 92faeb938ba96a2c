//! Cost of one alert evaluation pass (analysis + rules + state machine) for
//! 8 GPUs × 64 processes with 30 minutes of history at the default rates
//! (4 Hz fast tier, 1 Hz slow tier), and offline pipeline throughput.
//!
//! `cargo bench --bench alerts`; figures in docs/performance.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

#[path = "support/mod.rs"]
mod support;
use support::fixtures::{self, FAST, GIB, MIB};

use vramd::alerts::evaluator::{Evaluator, SourceState};
use vramd::analysis::analyzer::Analyzer;
use vramd::analyze;
use vramd::app::Config;
use vramd::history::HistoryStore;
use vramd::model::{ProcessInfo, Timestamp};
use vramd::source::simulator::ScenarioKind;
use vramd::source::{Simulation, SimulatorConfig};

fn process(gpu: u32, slot: u32, second: u64) -> ProcessInfo {
    // Slot 0 grows (a leak); the others are flat with a little noise.
    let growth = if slot == 0 { second * MIB / 2 } else { (second % 7) * MIB };
    let reserved = GIB + u64::from(slot) * 16 * MIB + growth;
    let mut process = fixtures::process(10_000 + gpu * 100 + slot, reserved, reserved * 3 / 4);
    if let Some(stats) = process.allocator.as_mut() {
        stats.alloc_retries = second / 600;
    }
    process
}

/// `gpus` devices whose used memory grows 1 MiB a second, for `minutes`.
fn store(gpus: u32, processes: u32, minutes: u64) -> (HistoryStore, Timestamp) {
    let (store, devices) = fixtures::store(gpus);
    let played = fixtures::fill(
        &devices,
        Duration::from_secs(minutes * 60),
        FAST,
        |_, at| fixtures::fast_reading(at, 40 * GIB + fixtures::second(at) * MIB, 0.8, 0.4),
        |gpu, at| {
            let second = fixtures::second(at);
            let list = (0..processes).map(|slot| process(gpu, slot, second)).collect();
            fixtures::slow_reading(at, list)
        },
    );
    (store, played.end.unwrap_or_else(fixtures::start))
}

fn evaluation(c: &mut Criterion) {
    let config = Config::default();
    let (store, now) = store(8, 64, 30);
    let mut group = c.benchmark_group("alerts");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(2));
    group.bench_function("evaluate_8_gpus_x_64_processes", |b| {
        let mut analyzer = Analyzer::new(vramd::app::analysis_settings(&config));
        let mut evaluator = Evaluator::new(&config.alerts);
        b.iter(|| {
            let snapshot = analyzer.analyse(&store, now);
            black_box(evaluator.evaluate(&snapshot, SourceState::Up, now).alerts.len())
        })
    });
    group.finish();
}

fn offline_throughput(c: &mut Criterion) {
    let config = Config::default();
    let simulator = Simulation {
        scenario: ScenarioKind::MultiTenant,
        simulator: SimulatorConfig { gpus: 8, seed: 1, container_ids: false },
    };
    let duration = Duration::from_secs(30 * 60);
    let settings = vramd::app::analyze_settings(&config);
    let samples =
        analyze::simulate(&settings, &simulator, duration).map(|r| r.samples).unwrap_or(0);
    let mut group = c.benchmark_group("offline");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(samples));
    group.bench_function("analyze_multi_tenant_8_gpus_30m", |b| {
        b.iter(|| {
            black_box(analyze::simulate(&settings, &simulator, duration).map(|r| r.timeline.len()))
        })
    });
    group.finish();
}

criterion_group!(benches, evaluation, offline_throughput);
criterion_main!(benches);
