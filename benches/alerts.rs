//! Cost of one alert evaluation pass (analysis + rules + state machine) for
//! 8 GPUs × 64 processes with 30 minutes of history at the default rates
//! (4 Hz fast tier, 1 Hz slow tier), and offline pipeline throughput.
//!
//! `cargo bench --bench alerts`; figures in docs/performance.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use vramd::alerts::evaluator::{Evaluator, SourceState};
use vramd::analysis::analyzer::Analyzer;
use vramd::analyze;
use vramd::config::{SimulatorConfig, defaults};
use vramd::history::{HistoryStore, Sizing};
use vramd::model::{
    AllocatorStats, DeviceInfo, FastReading, MemoryInfo, ProcessInfo, SlowReading, Timestamp,
};
use vramd::source::simulator::ScenarioKind;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const START: i64 = 1_767_225_600_000;

fn process(gpu: u32, slot: u32, second: u64) -> ProcessInfo {
    // Slot 0 grows (a leak); the others are flat with a little noise.
    let growth = if slot == 0 { second * MIB / 2 } else { (second % 7) * MIB };
    let reserved = GIB + u64::from(slot) * 16 * MIB + growth;
    ProcessInfo {
        pid: 10_000 + gpu * 100 + slot,
        name: Some("python3".into()),
        used_bytes: Some(reserved + 400 * MIB),
        allocator: Some(AllocatorStats {
            allocated_bytes: reserved * 3 / 4,
            reserved_bytes: reserved,
            active_bytes: reserved * 3 / 4,
            inactive_split_bytes: reserved / 8,
            alloc_retries: second / 600,
            ooms: 0,
        }),
        details: Default::default(),
    }
}

fn store(gpus: u32, processes: u32, minutes: u64) -> (HistoryStore, Timestamp) {
    let sizing = Sizing::for_retention(
        Duration::from_secs(3_600),
        Duration::from_millis(250),
        Duration::from_secs(1),
        Duration::from_secs(60),
    );
    let store = HistoryStore::new(sizing);
    let infos = (0..gpus)
        .map(|index| DeviceInfo {
            index,
            uuid: format!("GPU-bench-{index}"),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: None,
            driver_version: None,
            mig: None,
        })
        .collect();
    let devices = store.set_devices(infos);
    let mut at = Timestamp::from_unix_millis(START);
    for quarter in 0..minutes * 240 {
        at = Timestamp::from_unix_millis(START + quarter as i64 * 250);
        let second = quarter / 4;
        for device in &devices {
            let gpu = device.info().index;
            let used = 40 * GIB + second * MIB;
            let _ = device.record_fast(FastReading {
                at,
                memory: Some(MemoryInfo {
                    total_bytes: 80 * GIB,
                    reserved_bytes: Some(GIB / 2),
                    used_bytes: used,
                    free_bytes: 80 * GIB - GIB / 2 - used,
                }),
                gpu_utilization: Some(0.8),
                memory_bandwidth_utilization: Some(0.4),
            });
            if quarter % 4 == 0 {
                let _ = device.record_slow(
                    SlowReading {
                        at,
                        processes: Some(
                            (0..processes).map(|slot| process(gpu, slot, second)).collect(),
                        ),
                        temperature_celsius: Some(60.0),
                        power_usage_watts: Some(400.0),
                        power_limit_watts: Some(700.0),
                        details: Default::default(),
                    },
                    0,
                );
            }
        }
    }
    (store, at)
}

fn evaluation(c: &mut Criterion) {
    let config = defaults();
    let (store, now) = store(8, 64, 30);
    let mut group = c.benchmark_group("alerts");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(2));
    group.bench_function("evaluate_8_gpus_x_64_processes", |b| {
        let mut analyzer = Analyzer::new(vramd::app::analysis_settings(&config.alerts));
        let mut evaluator = Evaluator::new(&config.alerts);
        b.iter(|| {
            let snapshot = analyzer.analyse(&store, now);
            black_box(evaluator.evaluate(&snapshot, SourceState::Up, now).alerts.len())
        })
    });
    group.finish();
}

fn offline_throughput(c: &mut Criterion) {
    let config = defaults();
    let simulator = SimulatorConfig { scenario: ScenarioKind::MultiTenant, gpus: 8, seed: 1 };
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
