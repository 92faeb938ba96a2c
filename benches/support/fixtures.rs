//! The host the benches measure: H100s as NVML memory info v2 reports
//! them, PyTorch processes with allocator statistics, and a history filled
//! through `vramd::play`, the loop `vramd analyze` uses.
//!
//! Realistic magnitudes (epoch milliseconds, an 80 GB board's exact size)
//! keep the encoded numbers as long as a real host's.

use std::sync::Arc;
use std::time::Duration;

use vramd::history::{DeviceHistory, HistoryStore, Sizing};
use vramd::model::{
    AllocatorStats, DeviceInfo, FastReading, MemoryInfo, ProcessInfo, SlowReading, Timestamp,
};
use vramd::play::{self, Played, Schedule};

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;
/// 2026-01-01T00:00:00Z.
pub const START_MS: i64 = 1_767_225_600_000;
/// An H100 80GB as NVML memory info v2 reports it.
pub const TOTAL: u64 = 81_559_187_456;
pub const DRIVER_RESERVED: u64 = 535 * MIB;
/// The default sampling intervals.
pub const FAST: Duration = Duration::from_millis(250);
pub const SLOW: Duration = Duration::from_secs(1);

pub fn start() -> Timestamp {
    Timestamp::from_unix_millis(START_MS)
}

/// Whole seconds from [`START_MS`] to `at`.
pub fn second(at: Timestamp) -> u64 {
    (at.unix_millis() - START_MS).unsigned_abs() / 1_000
}

/// The daemon's default sizing: one hour at the default intervals.
pub fn default_sizing() -> Sizing {
    Sizing::for_retention(Duration::from_secs(3_600), FAST, SLOW, Duration::from_secs(60))
}

pub fn info(index: u32) -> DeviceInfo {
    DeviceInfo {
        index,
        uuid: format!("GPU-5f0c3e2a-{index:04x}-7d1b-9a6e-0b3c8d2e4f{index:02x}"),
        name: "NVIDIA H100 80GB HBM3".into(),
        pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index * 0x10)),
        driver_version: Some("570.133.20".into()),
        mig: None,
    }
}

/// A fast reading with `used` bytes in use and both utilizations present,
/// as on a busy training GPU.
pub fn fast_reading(at: Timestamp, used: u64, gpu: f64, bandwidth: f64) -> FastReading {
    FastReading {
        at,
        memory: Some(MemoryInfo {
            total_bytes: TOTAL,
            reserved_bytes: Some(DRIVER_RESERVED),
            used_bytes: used,
            free_bytes: TOTAL - DRIVER_RESERVED - used,
        }),
        gpu_utilization: Some(gpu),
        memory_bandwidth_utilization: Some(bandwidth),
    }
}

/// A PyTorch process holding `reserved` bytes in its allocator, `allocated`
/// of them live, and 500 MiB outside the allocator (its CUDA context).
pub fn process(pid: u32, reserved: u64, allocated: u64) -> ProcessInfo {
    ProcessInfo {
        pid,
        name: Some("python3".into()),
        used_bytes: Some(reserved + 500 * MIB),
        allocator: Some(AllocatorStats {
            allocated_bytes: allocated,
            reserved_bytes: reserved,
            active_bytes: allocated + 16 * MIB,
            inactive_split_bytes: (reserved - allocated) / 3,
            alloc_retries: 0,
            ooms: 0,
            interval: None,
        }),
        details: Default::default(),
    }
}

pub fn slow_reading(at: Timestamp, processes: Vec<ProcessInfo>) -> SlowReading {
    SlowReading {
        allocations: None,
        at,
        processes: Some(processes),
        temperature_celsius: Some(58.0),
        power_usage_watts: Some(412.5),
        power_limit_watts: Some(700.0),
        details: Default::default(),
        processes_left_out: 0,
    }
}

/// Plays `duration` from [`START_MS`] into `devices`, a fast reading every
/// `fast` and a slow one every second, each read from the given function
/// of (GPU index, time).
pub fn fill(
    devices: &[Arc<DeviceHistory>],
    duration: Duration,
    fast: Duration,
    mut fast_at: impl FnMut(u32, Timestamp) -> FastReading,
    mut slow_at: impl FnMut(u32, Timestamp) -> SlowReading,
) -> Played {
    let schedule = Schedule { from: start(), duration, fast, slow: SLOW };
    play::play(
        devices,
        schedule,
        play::ProcessCap(vramd::app::Config::default().sampler.max_processes_per_device.get()),
        |gpu, at| Ok(fast_at(gpu, at)),
        |gpu, at| Ok(slow_at(gpu, at)),
        |_| {},
    )
}

/// A store with `gpus` devices and their histories, default sizing.
pub fn store(gpus: u32) -> (HistoryStore, Vec<Arc<DeviceHistory>>) {
    let store = HistoryStore::new(default_sizing());
    let devices = store.set_devices((0..gpus).map(info).collect());
    (store, devices)
}

/// `count` PyTorch processes at `at` whose figures all move on every
/// sample, as on a training host: NVML usage by 0–31 whole 2 MiB pages,
/// live bytes anywhere in 8 MiB at 512-byte blocks, active 16 MiB above
/// live, reserved every 30 s, the inactive split every 10 s.
pub fn moving_processes(at: Timestamp, count: u32) -> SlowReading {
    let second = second(at);
    let list = (0..count)
        .map(|slot| {
            let mix = second.wrapping_mul(2_654_435_761).wrapping_add(u64::from(slot) * 7_919);
            let reserved = 5 * GIB + (second / 30 % 4) * 128 * MIB;
            let allocated = 4 * GIB + (mix >> 3) % 16_384 * 512;
            let mut process = process(41_000 + slot, reserved, allocated);
            process.used_bytes = Some(6 * GIB + mix % 32 * 2 * MIB);
            if let Some(stats) = process.allocator.as_mut() {
                stats.inactive_split_bytes = (second / 10 % 7) * 3 * MIB;
            }
            process
        })
        .collect();
    slow_reading(at, list)
}

/// One device whose slow tier holds `duration` of [`moving_processes`]
/// at 1 s (fast tier at the default interval, holding still), as the
/// daemon's default sizing keeps them; returns it with its newest sample's time.
pub fn moving_device(processes: u32, duration: Duration) -> (Arc<DeviceHistory>, Timestamp) {
    let device = Arc::new(DeviceHistory::new(info(0), default_sizing()));
    let played = fill(
        std::slice::from_ref(&device),
        duration,
        FAST,
        |_, at| fast_reading(at, 52 * GIB, 0.5, 0.5),
        |_, at| moving_processes(at, processes),
    );
    (device, played.end.unwrap_or_else(start))
}
