//! Allocator report ingestion without the network: parsing and validating
//! one report (a full 122-key `memory_stats()` dictionary), and taking it
//! into the store. The HTTP figure comes from scripts/bench-ingest.sh.
//!
//! `cargo bench --bench ingest`; figures in docs/performance.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};

use vramd::ingest::report::parse;
use vramd::ingest::{ReportLimits, ReportStore, StoreLimits};

fn document(pid: u32) -> String {
    let fixture: Value = serde_json::from_str(include_str!(
        "../tests/fixtures/memory_stats/pytorch-2-documented-keys.json"
    ))
    .unwrap_or(Value::Null);
    json!({
        "version": 1,
        "reporter": { "pid": pid, "hostname": "node-1", "pod": "train-0" },
        "at": "2026-11-21T01:00:00.123Z",
        "devices": [ { "uuid": "GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20", "index": 0, "memory_stats": fixture["memory_stats"] } ],
    })
    .to_string()
}

fn ingest(c: &mut Criterion) {
    let limits = ReportLimits { max_devices: 16, max_stats: 1024 };
    let body = document(42);
    let mut group = c.benchmark_group("ingest");
    group.measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(1));
    group.bench_function("parse_and_validate_122_keys", |b| {
        b.iter(|| black_box(parse(body.as_bytes(), &limits).is_ok()))
    });
    let store = ReportStore::new(StoreLimits {
        ttl: Duration::from_secs(30),
        rate_limit_per_second: usize::MAX,
        max_reporters: 100_000,
    });
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build();
    let Ok(runtime) = runtime else { return };
    let _guard = runtime.enter();
    let mut pid = 0u32;
    group.bench_function("parse_validate_and_store", |b| {
        b.iter(|| {
            pid = (pid + 1) % 1_000;
            if let Ok(report) = parse(document(pid).as_bytes(), &limits) {
                black_box(store.accept(report, tokio::time::Instant::now()).is_ok());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, ingest);
criterion_main!(benches);
