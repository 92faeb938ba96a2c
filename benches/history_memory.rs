//! Resident memory of full history rings, by processes per GPU: fills a
//! `HistoryStore` sized for the defaults (1 h at 250 ms fast / 1 s slow) for
//! 8 GPUs past capacity, in a fresh child process per case, and prints how
//! much VmRSS grew. Checks the bytes-per-sample model in docs/performance.md
//! without running the daemon, and shows the cases the simulator cannot
//! produce (many processes per GPU).
//!
//! `cargo bench --bench history_memory` (a few seconds; not criterion).

use std::process::Command;
use std::time::Duration;

use vramd::history::{HistoryStore, Sizing};
use vramd::model::{
    AllocatorStats, DeviceInfo, FastReading, MemoryInfo, ProcessInfo, SlowReading, Timestamp,
};

const GPUS: u32 = 8;
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const START_MS: i64 = 1_767_225_600_000;
const TOTAL: u64 = 81_559_187_456;
const CHILD_ENV: &str = "VRAMD_HISTORY_MEMORY_PROCESSES";
const CASES: [u32; 5] = [0, 4, 8, 16, 64];

fn main() {
    match std::env::var(CHILD_ENV).ok().and_then(|value| value.parse::<u32>().ok()) {
        Some(processes) => child(processes),
        None => parent(),
    }
}

fn parent() {
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("cannot find this executable; nothing measured");
        return;
    };
    println!(
        "8 GPUs, default sizing, rings filled past capacity; every process with allocator stats"
    );
    println!(
        "{:>13}  {:>14}  {:>14}  {:>16}",
        "processes/GPU", "history (MiB)", "model (MiB)", "RSS after (MiB)"
    );
    for processes in CASES {
        match Command::new(&exe).env(CHILD_ENV, processes.to_string()).output() {
            Ok(output) if output.status.success() => {
                print!("{}", String::from_utf8_lossy(&output.stdout));
            }
            Ok(output) => eprintln!(
                "case {processes}: child failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ),
            Err(error) => eprintln!("case {processes}: cannot run child: {error}"),
        }
    }
}

fn child(processes: u32) {
    let sizing = Sizing::for_retention(
        Duration::from_secs(3_600),
        Duration::from_millis(250),
        Duration::from_secs(1),
        Duration::from_secs(60),
    );
    let before = rss_kib();
    let store = HistoryStore::new(sizing);
    let devices = store.set_devices((0..GPUS).map(info).collect());
    for (gpu, device) in (0..GPUS).zip(&devices) {
        // A full chunk past capacity, so the rings have wrapped and evicted.
        for i in 0..(sizing.fast_capacity + 256) as i64 {
            let used = 40 * GIB + (i.unsigned_abs() % 97) * MIB;
            let _ = device.record_fast(FastReading {
                at: Timestamp::from_unix_millis(START_MS + i * 250),
                memory: Some(MemoryInfo {
                    total_bytes: TOTAL,
                    reserved_bytes: Some(535 * MIB),
                    used_bytes: used,
                    free_bytes: TOTAL - 535 * MIB - used,
                }),
                gpu_utilization: Some(0.83),
                memory_bandwidth_utilization: Some(0.41),
            });
        }
        for s in 0..(sizing.slow_capacity + 256) as i64 {
            let _ = device.record_slow(
                SlowReading {
                    at: Timestamp::from_unix_millis(START_MS + s * 1_000),
                    processes: Some((0..processes).map(|slot| process(gpu, slot, s)).collect()),
                    temperature_celsius: Some(58.0),
                    power_usage_watts: Some(412.5),
                    power_limit_watts: Some(700.0),
                    details: Default::default(),
                },
                0,
            );
        }
    }
    let after = rss_kib();
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "{:>13}  {:>14.1}  {:>14.1}  {:>16.1}",
        processes,
        mib(after.saturating_sub(before)),
        model_bytes(sizing, processes) as f64 / (1024.0 * 1024.0),
        mib(after)
    );
    drop(store);
}

/// docs/performance.md's model: chunks of 256 points plus one open chunk,
/// and per slow sample one shared allocation of the process list (16-byte
/// header, 72 bytes per process, glibc rounding to 16 with 8 bytes of
/// overhead).
fn model_bytes(sizing: Sizing, processes: u32) -> u64 {
    let chunked = |capacity: usize, point: u64| {
        let chunks = capacity.div_ceil(256) as u64;
        chunks * (256 * point + 16) + 256 * point
    };
    let list = if processes == 0 { 16 } else { 16 + 72 * u64::from(processes) };
    let list_alloc = (list + 8).div_ceil(16) * 16;
    let fast = chunked(sizing.fast_capacity, 56);
    let slow = chunked(sizing.slow_capacity, 24) + sizing.slow_capacity as u64 * list_alloc;
    u64::from(GPUS) * (fast + slow)
}

fn rss_kib() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn info(index: u32) -> DeviceInfo {
    DeviceInfo {
        index,
        uuid: format!("GPU-5f0c3e2a-{index:04x}-7d1b-9a6e-0b3c8d2e4f{index:02x}"),
        name: "NVIDIA H100 80GB HBM3".into(),
        pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index * 0x10)),
        driver_version: Some("570.133.20".into()),
        mig: None,
    }
}

fn process(gpu: u32, slot: u32, second: i64) -> ProcessInfo {
    let reserved = 700 * MIB + u64::from(gpu * 131 + slot * 17) * MIB;
    // Allocated wobbles each second, as live tensors do.
    let allocated = reserved * 3 / 4 + (second.unsigned_abs() % 13) * MIB;
    ProcessInfo {
        pid: 100_000 + gpu * 1_000 + slot,
        name: Some("python3".into()),
        used_bytes: Some(reserved + 500 * MIB),
        allocator: Some(AllocatorStats {
            allocated_bytes: allocated,
            reserved_bytes: reserved,
            active_bytes: allocated + 16 * MIB,
            inactive_split_bytes: (reserved - allocated) / 3,
            alloc_retries: 0,
            ooms: 0,
        }),
        details: Default::default(),
    }
}
