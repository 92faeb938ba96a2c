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

#[path = "support/mod.rs"]
mod support;
use support::fixtures::{self, FAST, GIB, MIB};

use vramd::history::Sizing;
use vramd::model::ProcessInfo;

const GPUS: u32 = 8;
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
    let sizing = fixtures::default_sizing();
    let before = rss_kib();
    let (store, devices) = fixtures::store(GPUS);
    // The default retention and a full chunk (256 slow samples) past it,
    // so both rings have wrapped and evicted; one device after another, as
    // interleaving them would measure the heap's fragmentation too.
    for (gpu, device) in (0..GPUS).zip(&devices) {
        fixtures::fill(
            std::slice::from_ref(device),
            Duration::from_secs(3_600 + 256),
            FAST,
            |_, at| {
                let used = 40 * GIB + (at.unix_millis().unsigned_abs() / 250 % 97) * MIB;
                fixtures::fast_reading(at, used, 0.83, 0.41)
            },
            |_, at| {
                let second = fixtures::second(at);
                let list = (0..processes).map(|slot| process(gpu, slot, second)).collect();
                fixtures::slow_reading(at, list)
            },
        );
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

fn process(gpu: u32, slot: u32, second: u64) -> ProcessInfo {
    let reserved = 700 * MIB + u64::from(gpu * 131 + slot * 17) * MIB;
    // Allocated wobbles each second, as live tensors do.
    let allocated = reserved * 3 / 4 + (second % 13) * MIB;
    fixtures::process(100_000 + gpu * 1_000 + slot, reserved, allocated)
}
