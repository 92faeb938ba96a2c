//! Resident memory of full history rings: fills a `HistoryStore` sized as
//! the daemon sizes it for 8 GPUs past capacity, in a fresh child process
//! per case, and prints how much VmRSS grew and what one stored
//! process-sample costs. Shows the cases the simulator cannot produce
//! (many processes per GPU, every process's figures moving).
//!
//! Scenarios:
//! - `constant`: every process's figures hold still, sample after sample
//!   (what `scripts/bench-sampler.sh` used to fill the rings with);
//! - `moving`: every process's figures change on every sample, as on a
//!   training host: NVML `used` moves by whole 2 MiB pages, the allocator's
//!   live bytes by 512-byte blocks, reserved every 30 s, inactive split
//!   every 10 s;
//! - `moving-nvml`: every process's NVML `used` changes on every sample
//!   and there are no allocator reports (the fake NVML scenario of the
//!   benchmark scripts).
//!
//! Sizings: `1h`, the defaults (1 h at 250 ms fast / 1 s slow, the slow
//! tier kept as long as the alert rules read it); `120s`, rings of 120 s at
//! 10 ms fast / 100 ms slow.
//!
//! After the fill, every device is recorded in step for a whole merge
//! cycle of the slow ring (256 slow samples), VmRSS read after each slow
//! sample: the ring holds its newest samples whole until it seals them,
//! so one reading depends on where in the cycle it falls.
//!
//! Bytes per process-sample: (mean growth of the case over the cycle −
//! that of the same sizing with no processes) / (GPUs × processes × slow
//! samples kept, averaged over the cycle); in brackets the same with the
//! cycle's highest growth. "encoded" is what the sealed chunks' bytes
//! alone take per process-sample.
//! The fill hands the heap's free pages back as the daemon does, every
//! `history.heap_release_interval` of its simulated time
//! (`VRAMD_HISTORY__HEAP_RELEASE_INTERVAL=0s` to see the heap without it);
//! "heap free" is what malloc holds free at the end (glibc's `mallinfo2`).
//!
//! `cargo bench --bench history_memory` (a minute; not criterion).

use std::process::Command;
use std::time::Duration;

#[path = "support/mod.rs"]
mod support;
use support::fixtures::{self, GIB, MIB};

use vramd::history::{HistoryStore, Sizing};
use vramd::model::{AllocatorStats, ProcessInfo, Timestamp};
use vramd::play::{self, ProcessCap, Schedule};

const GPUS: u32 = 8;
const CHILD_ENV: &str = "VRAMD_HISTORY_MEMORY_CASE";
/// Slow samples read through once the rings are full: a whole cycle of the
/// slow ring's merging, and so of its sealing too.
const CYCLE: u32 = vramd::history::SLOW_MERGED_LEN as u32;
/// (sizing, scenario, processes per GPU); each sizing's 0-process case
/// first, as the others are measured against it.
const CASES: [(&str, &str, u32); 9] = [
    ("1h", "constant", 0),
    ("1h", "constant", 64),
    ("1h", "moving", 64),
    ("1h", "moving-nvml", 64),
    ("1h", "constant", 256),
    ("1h", "moving", 256),
    ("120s", "constant", 0),
    ("120s", "moving", 64),
    ("120s", "moving-nvml", 64),
];

fn main() {
    match std::env::var(CHILD_ENV).ok() {
        Some(case) => child(&case),
        None => parent(),
    }
}

fn parent() {
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("cannot find this executable; nothing measured");
        return;
    };
    println!(
        "{GPUS} GPUs, rings filled past capacity, then read through a cycle of {CYCLE} slow samples"
    );
    println!(
        "{:>6}  {:>12}  {:>9}  {:>10}  {:>12}  {:>8}  {:>14}  {:>20}  {:>8}",
        "sizing",
        "scenario",
        "processes",
        "slow kept",
        "history MiB",
        "RSS MiB",
        "heap free MiB",
        "B/proc-sample (max)",
        "encoded"
    );
    let mut empty_growth = std::collections::HashMap::new();
    for (sizing, scenario, processes) in CASES {
        let case = format!("{sizing}:{scenario}:{processes}");
        let output = match Command::new(&exe).env(CHILD_ENV, &case).output() {
            Ok(output) if output.status.success() => output,
            Ok(output) => {
                eprintln!("{case}: child failed: {}", String::from_utf8_lossy(&output.stderr));
                continue;
            }
            Err(error) => {
                eprintln!("{case}: cannot run child: {error}");
                continue;
            }
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let figures: Vec<u64> =
            text.split_whitespace().filter_map(|word| word.parse().ok()).collect();
        let [mean_kib, max_kib, rss_kib, slow_kept, heap_free_kib, sealed_bytes, sealed_samples] =
            figures[..]
        else {
            eprintln!("{case}: unexpected output {text:?}");
            continue;
        };
        if processes == 0 {
            empty_growth.insert(sizing, mean_kib);
        }
        let stored = (u64::from(GPUS) * u64::from(processes) * slow_kept) as f64;
        let per_sample = |growth_kib: u64| {
            let empty = empty_growth.get(sizing).filter(|_| processes > 0)?;
            Some(growth_kib.saturating_sub(*empty) as f64 * 1024.0 / stored)
        };
        let per_sample = match (per_sample(mean_kib), per_sample(max_kib)) {
            (Some(mean), Some(max)) => format!("{mean:.2} ({max:.2})"),
            _ => "-".to_owned(),
        };
        // What the sealed chunks' encoding alone costs: the rest of the
        // figure is samples not yet sealed, the latest reading and the heap.
        let encoded = (processes > 0 && sealed_samples > 0)
            .then(|| sealed_bytes as f64 / (sealed_samples as f64 * f64::from(processes)));
        println!(
            "{:>6}  {:>12}  {:>9}  {:>10}  {:>12.1}  {:>8.1}  {:>14.2}  {:>20}  {:>8}",
            sizing,
            scenario,
            processes,
            slow_kept,
            mean_kib as f64 / 1024.0,
            rss_kib as f64 / 1024.0,
            heap_free_kib as f64 / 1024.0,
            per_sample,
            encoded.map_or("-".to_owned(), |bytes| format!("{bytes:.2}"))
        );
    }
}

/// The sizing and its fast and slow intervals.
fn sizing(name: &str) -> (Sizing, Duration, Duration) {
    let config = vramd::app::Config::default();
    let (retention, fast, slow) = match name {
        "120s" => (Duration::from_secs(120), Duration::from_millis(10), Duration::from_millis(100)),
        _ => (Duration::from_secs(3_600), fixtures::FAST, fixtures::SLOW),
    };
    let sizing = Sizing::for_retention(retention, fast, slow, Duration::from_secs(60))
        .with_slow_retention(config.alerts.rules.slow_history_needed(), slow);
    (sizing, fast, slow)
}

fn child(case: &str) {
    let mut parts = case.split(':');
    let (Some(sizing_name), Some(scenario), Some(Ok(processes))) =
        (parts.next(), parts.next(), parts.next().map(str::parse::<u32>))
    else {
        eprintln!("bad case {case:?}");
        std::process::exit(2);
    };
    let (sizing, fast, slow) = sizing(sizing_name);
    // The daemon hands the heap's free pages back every
    // `history.heap_release_interval`; the fill does so at the same pace of
    // its own (simulated) time, so what is measured is what the daemon
    // holds between two releases.
    let release_every = release_every(slow);
    let before = rss_kib();
    let store = HistoryStore::new(sizing);
    let devices = store.set_devices((0..GPUS).map(fixtures::info).collect());
    let cap = ProcessCap(processes.max(1) as usize);
    let fast_reading = |_, at: Timestamp| {
        let used = 40 * GIB + (at.unix_millis().unsigned_abs() / 250 % 97) * MIB;
        Ok(fixtures::fast_reading(at, used, 0.83, 0.41))
    };
    let slow_reading = |gpu: u32, at: Timestamp| {
        let sample = sample_number(at, slow);
        if release_every > 0 && sample.is_multiple_of(release_every) {
            resident_trim::release_free_heap();
        }
        let list = (0..processes).map(|slot| process(scenario, gpu, slot, sample)).collect();
        Ok(fixtures::slow_reading(at, list))
    };
    // Both rings past capacity by a chunk, so they have wrapped and
    // evicted; one device after another, the cheapest way there. The cycle
    // measured below records them in step, heap fragmentation included.
    let retention = fast.saturating_mul(sizing.fast_capacity as u32);
    let duration = retention.saturating_add(slow.saturating_mul(CYCLE));
    for device in &devices {
        let schedule = Schedule { from: fixtures::start(), duration, fast, slow };
        play::play(std::slice::from_ref(device), schedule, cap, fast_reading, slow_reading, |_| {});
    }
    // Then every device on together, as the daemon's samplers run, through
    // a whole cycle of the slow ring's sealing and merging, VmRSS read after
    // every slow sample: what the rings hold depends on where in that cycle
    // it is read (samples not yet sealed are held whole), so the figure is
    // the cycle's mean and its highest.
    let from = fixtures::start().saturating_add(duration).saturating_add(slow);
    let schedule = Schedule { from, duration: slow.saturating_mul(CYCLE - 1), fast, slow };
    let slow_ms = u64::try_from(slow.as_millis()).unwrap_or(1).max(1);
    let mut readings: Vec<(u64, usize)> = Vec::new();
    play::play(&devices, schedule, cap, fast_reading, slow_reading, |at| {
        let since = at.unix_millis().saturating_sub(from.unix_millis()).unsigned_abs();
        if since.is_multiple_of(slow_ms) {
            let kept = devices.first().map_or(0, |device| device.slow_len());
            readings.push((rss_kib().saturating_sub(before), kept));
        }
    });
    let count = readings.len().max(1) as u64;
    let mean_growth = readings.iter().map(|&(growth, _)| growth).sum::<u64>() / count;
    let max_growth = readings.iter().map(|&(growth, _)| growth).max().unwrap_or(0);
    let mean_kept = readings.iter().map(|&(_, kept)| kept as u64).sum::<u64>() / count;
    let heap_free_kib = resident_trim::heap_free_bytes().map_or(0, |free| free / 1024);
    let (sealed_bytes, sealed_samples) = devices.iter().fold((0, 0), |(bytes, samples), device| {
        let (more_bytes, more_samples) = device.slow_snapshot().sealed_footprint();
        (bytes + more_bytes, samples + more_samples)
    });
    println!(
        "{mean_growth} {max_growth} {} {mean_kept} {heap_free_kib} {sealed_bytes} {sealed_samples}",
        rss_kib()
    );
    drop(store);
}

/// Slow samples between two heap releases (0: never), from the daemon's
/// default setting, or `VRAMD_HISTORY__HEAP_RELEASE_INTERVAL` (a duration
/// as the configuration writes it, e.g. `30s`, `0s`).
fn release_every(slow: Duration) -> u64 {
    let default = vramd::app::Config::default().history.heap_release_interval;
    let interval = match std::env::var("VRAMD_HISTORY__HEAP_RELEASE_INTERVAL") {
        Ok(text) => vramd::setting::parse_duration(&text).unwrap_or_else(|error| {
            eprintln!("VRAMD_HISTORY__HEAP_RELEASE_INTERVAL={text:?}: {error}");
            std::process::exit(2);
        }),
        Err(_) => default,
    };
    let slow_ms = slow.as_millis().max(1);
    u64::try_from(interval.as_millis() / slow_ms).unwrap_or(u64::MAX)
}

fn sample_number(at: Timestamp, slow: Duration) -> u64 {
    let elapsed = (at.unix_millis() - fixtures::START_MS).unsigned_abs();
    elapsed / u64::try_from(slow.as_millis()).unwrap_or(1).max(1)
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

/// A well-mixed number from a sample and a process, so moving figures do
/// not follow a pattern a codec could exploit and a real host would not.
fn mix(sample: u64, pid: u32) -> u64 {
    let mut x = sample.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(pid).rotate_left(32);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn process(scenario: &str, gpu: u32, slot: u32, sample: u64) -> ProcessInfo {
    let pid = 100_000 + gpu * 1_000 + slot;
    let base = 700 * MIB + u64::from(gpu * 131 + slot * 17) * MIB;
    match scenario {
        "moving" => {
            let reserved = base + ((sample / 30 + u64::from(slot)) % 4) * 128 * MIB;
            let allocated = reserved / 2 + (mix(sample, pid) % 16_384) * 512;
            ProcessInfo {
                used_bytes: Some(reserved + 500 * MIB + (mix(sample, !pid) % 32) * 2 * MIB),
                allocator: Some(AllocatorStats {
                    allocated_bytes: allocated,
                    reserved_bytes: reserved,
                    active_bytes: allocated + 16 * MIB,
                    inactive_split_bytes: ((sample / 10 + u64::from(slot)) % 16) * MIB,
                    alloc_retries: sample / 600,
                    ooms: 0,
                    interval: None,
                }),
                ..fixtures::process(pid, reserved, allocated)
            }
        }
        "moving-nvml" => ProcessInfo {
            used_bytes: Some(base + (mix(sample, pid) % 32) * 2 * MIB),
            allocator: None,
            ..fixtures::process(pid, base, base / 2)
        },
        _ => fixtures::process(pid, base, base * 3 / 4),
    }
}
