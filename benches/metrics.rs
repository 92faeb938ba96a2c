//! `/metrics` rendering for a large host: 8 GPUs with 64 processes each
//! (the default per-device cap), every process reporting PyTorch allocator
//! statistics, so every per-process family is written: 8 × 64 × 9 = 4,608
//! process series plus the device series.
//!
//! `cargo bench --bench metrics`. Figures are in docs/performance.md. The
//! `8gpu_64proc_pods` group renders the same host with Kubernetes
//! attribution: `pod`, `namespace`, `container` on every process (8 pods
//! per GPU) and one allocation series per pod.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::Measurement;
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};

use vramd::alerts::board::AlertBoard;
#[path = "support/mod.rs"]
mod support;
use support::cpu_time::CpuTime;
use support::fixtures::{self, FAST, GIB, MIB};

use vramd::exposition::{render, render_devices};
use vramd::history::HistoryStore;
use vramd::model::{
    Bar1Memory, ComputeMode, EccCounters, PodAllocation, ProcessDetails, ProcessInfo, ProcessKind,
    RemappedRows, SlowDetails,
};
use vramd::telemetry::Telemetry;

const GPUS: u32 = 8;
const PROCESSES: u32 = 64;

fn process(gpu: u32, slot: u32) -> ProcessInfo {
    // Sizes vary per process so the numbers are not all the same digits.
    let reserved = 700 * MIB + u64::from(gpu * 131 + slot * 17) * MIB;
    let mut process = fixtures::process(100_000 + gpu * 1_000 + slot, reserved, reserved * 3 / 4);
    if slot.is_multiple_of(3) {
        process.name = Some("pt_main_thread".into());
    }
    if let Some(stats) = process.allocator.as_mut() {
        stats.alloc_retries = u64::from(slot % 4);
        stats.ooms = u64::from(slot.is_multiple_of(7));
    }
    // Kubernetes pods: every process carries its container identity, so
    // `vramd_process_info` has its full label set.
    process.details = ProcessDetails {
        kind: Some(ProcessKind::Compute),
        cmdline: Some(
            format!("python3 -m torch.distributed.run --nproc-per-node 8 train.py --rank {slot}")
                .into(),
        ),
        container_id: Some(format!("{:064x}", u64::from(gpu * 1_000 + slot) * 0x9E37_79B9).into()),
        pod_uid: Some(format!("7c1e4b2a-{gpu:04x}-4d5e-8f90-{slot:012x}").into()),
        namespace_pid: Some(1 + slot),
        ..ProcessDetails::default()
    };
    process
}

/// What the slow tier reads on a healthy H100 with ECC on.
fn slow_details() -> SlowDetails {
    SlowDetails {
        bar1: Some(Bar1Memory {
            total_bytes: 128 * GIB,
            used_bytes: 40 * MIB,
            free_bytes: 128 * GIB - 40 * MIB,
        }),
        sm_clock_mhz: Some(1_980),
        memory_clock_mhz: Some(2_619),
        throttle_reasons: Some(0x4),
        ecc: Some(EccCounters {
            volatile_corrected: 0,
            volatile_uncorrected: 0,
            aggregate_corrected: 3,
            aggregate_uncorrected: 0,
        }),
        remapped_rows: Some(RemappedRows {
            correctable: 0,
            uncorrectable: 0,
            pending: false,
            failure: false,
        }),
        persistence_mode: Some(true),
        compute_mode: Some(ComputeMode::Default),
        mig_enabled: Some(false),
        ..SlowDetails::default()
    }
}

/// Pods per GPU when attributed: 8 ranks of one job each.
const PODS_PER_GPU: u32 = 8;

fn pod_name(gpu: u32, slot: u32) -> String {
    format!("train-job-{gpu}-{}", slot / (PROCESSES / PODS_PER_GPU))
}

fn attribute(gpu: u32, slot: u32, process: &mut ProcessInfo) {
    process.details.pod = Some(pod_name(gpu, slot).into());
    process.details.namespace = Some("ml-training".into());
    process.details.container = Some("trainer".into());
}

fn store(pods: bool) -> HistoryStore {
    let (store, devices) = fixtures::store(GPUS);
    // Eight fast and two slow samples: rendering reads only the live state
    // and the ring lengths, not the ring contents.
    fixtures::fill(
        &devices,
        Duration::from_millis(1_750),
        FAST,
        |gpu, at| {
            let step = (at.unix_millis() - fixtures::START_MS).unsigned_abs() / 250;
            let used = 40 * GIB + u64::from(gpu) * GIB + step * 7 * MIB;
            fixtures::fast_reading(at, used, 0.83, 0.41)
        },
        |gpu, at| {
            let list = (0..PROCESSES)
                .map(|slot| {
                    let mut process = process(gpu, slot);
                    if pods {
                        attribute(gpu, slot, &mut process);
                    }
                    process
                })
                .collect();
            let mut reading = fixtures::slow_reading(at, list);
            reading.allocations = pods.then(|| {
                (0..PODS_PER_GPU)
                    .map(|pod| PodAllocation {
                        pod: pod_name(gpu, pod * (PROCESSES / PODS_PER_GPU)).into(),
                        namespace: "ml-training".into(),
                        container: "trainer".into(),
                        resource: "nvidia.com/gpu".into(),
                        replica: Some(pod.to_string().into()),
                        claim: None,
                        claim_namespace: None,
                    })
                    .collect()
            });
            reading.temperature_celsius = Some(58.0 + f64::from(gpu));
            reading.details = slow_details();
            reading
        },
    );
    store
}

fn metrics(c: &mut Criterion) {
    metrics_in(c, "metrics/8gpu_64proc", SamplingMode::Auto, false);
    metrics_in(c, "metrics/8gpu_64proc_pods", SamplingMode::Auto, true);
}

/// The same renders timed by the thread's CPU time (see support/cpu_time.rs).
fn metrics_cpu(c: &mut Criterion<CpuTime>) {
    if CpuTime::available().is_none() {
        eprintln!("no /proc/thread-self/schedstat; CPU-time benchmarks skipped");
        return;
    }
    metrics_in(c, "metrics_cpu/8gpu_64proc", SamplingMode::Flat, false);
    metrics_in(c, "metrics_cpu/8gpu_64proc_pods", SamplingMode::Flat, true);
}

fn metrics_in<M: Measurement>(
    c: &mut Criterion<M>,
    group_name: &str,
    sampling: SamplingMode,
    pods: bool,
) {
    let store = store(pods);
    let Ok(telemetry) = Telemetry::new("simulator") else {
        eprintln!("cannot build the self-metrics registry; metrics benchmarks skipped");
        return;
    };
    // Populate the histograms as a running sampler would.
    for tier in ["fast", "slow"] {
        for micros in [20, 80, 400, 4_500] {
            telemetry.call_timer(tier).observe(Duration::from_micros(micros));
        }
    }
    let devices_only = render_devices(&store, &Default::default());
    // An empty board: alert and analysis series are measured with the
    // evaluator's own benchmarks.
    let board = AlertBoard::new(16, 1);
    let analyses = vramd::analysis::snapshot::AnalysisSnapshot::default();
    let full =
        render(&store, &telemetry, &analyses, &board, &Default::default()).unwrap_or_default();
    let lines = |text: &[u8]| text.iter().filter(|&&b| b == b'\n').count();
    eprintln!(
        "exposition: devices {} bytes / {} lines; full {} bytes / {} lines",
        devices_only.len(),
        lines(&devices_only),
        full.len(),
        lines(&full)
    );

    let mut group = c.benchmark_group(group_name);
    group.sampling_mode(sampling);
    group.throughput(Throughput::Bytes(devices_only.len() as u64));
    group.bench_function("render_devices", |b| {
        b.iter(|| black_box(render_devices(&store, &Default::default())))
    });
    group.throughput(Throughput::Bytes(full.len() as u64));
    group.bench_function("render_full", |b| {
        b.iter(|| black_box(render(&store, &telemetry, &analyses, &board, &Default::default())))
    });
    // What the HTTP layer adds when Prometheus asks for gzip (it always
    // does): the cost and the ratio, at the fastest level and the default.
    for level in [1, 6] {
        let compressed = gzip(&full, level);
        eprintln!(
            "gzip level {level}: {} -> {} bytes ({:.1}x smaller)",
            full.len(),
            compressed.len(),
            full.len() as f64 / compressed.len().max(1) as f64
        );
        group.throughput(Throughput::Bytes(full.len() as u64));
        group.bench_function(format!("gzip_full_level_{level}"), |b| {
            b.iter(|| black_box(gzip(&full, level)))
        });
    }
    group.finish();
}

fn gzip(bytes: &[u8], level: u32) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::new(level),
    );
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
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
    targets = metrics
}
criterion_group! {
    name = benches_cpu;
    config = cpu_config();
    targets = metrics_cpu
}
criterion_main!(benches, benches_cpu);
