//! The floor under vramd's sampling cost (issue 15): a reference sampler
//! that makes the driver calls vramd's tiers make, for the same devices and
//! at the same rates, and nothing else (no history, no HTTP, no runtime).
//! `scripts/bench-sampler.sh` runs it alternately with vramd against the
//! fake `libnvidia-ml.so` and reports vramd's CPU share above this one's,
//! which cancels what the machine does to both (a KVM guest's drift).
//!
//! What it calls, as `src/source/nvml/` does with the default settings:
//! - fast, every device in turn from one thread at each grid point:
//!   memory info v2 and utilization rates;
//! - slow, every device in turn from one thread, as vramd's slow crew reads
//!   them (or, with `--slow-per-device`, one thread per device on its own
//!   offset of the period, as vramd did before issue 37's slow crew: the
//!   same calls then cost 2-3 times as much, on cold caches): the compute,
//!   graphics and MPS process lists, process utilization since the last sample, and the
//!   health values of `slow::reading` (ECC counters only where ECC is on;
//!   no PCIe throughput, off by default);
//! - Xid events: one event set waited on 500 ms at a time, as vramd's
//!   watcher does.
//!
//! Threads sleep to the next point of a grid from a common origin, as
//! vramd's do, so the floor pays the same wake-ups a sampler must pay: one
//! per fast and per slow tick. It reads no `/proc` (vramd reads a process's
//! identity once per PID lifetime; the benchmark's processes never change).
//! Answers are dropped; an error is counted and printed at exit, so a floor
//! that failed to sample cannot pass for a cheap one. At exit it prints the
//! mean wall time of one device's slow read (NVML's share of a slow sample).
//!
//! Usage: nvml-floor [--library PATH] [--fast-ms 10] [--slow-ms 1000]
//! [--seconds N] [--no-xid] [--slow-per-device]. The library defaults to
//! `$VRAMD_NVML__LIBRARY_PATH`, else the system's; without `--seconds` it
//! runs until killed.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};
// The clock type vramd's sampling threads read (no runtime is started:
// outside one it reads the system's monotonic clock).
use tokio::time::Instant;

/// NVML_FI_DEV_REMAPPED_COR, _UNC, _PENDING, _FAILURE, as vramd reads them
/// (`REMAPPED_ROW_FIELDS` in `src/source/nvml/slow.rs`, private there).
const REMAPPED_ROW_FIELDS: [FieldId; 4] = [FieldId(142), FieldId(143), FieldId(144), FieldId(145)];
/// vramd's Xid watcher waits this long per call.
const XID_WAIT_MS: u32 = 500;

struct Options {
    library: Option<String>,
    fast: Duration,
    slow: Duration,
    run_for: Option<Duration>,
    xid: bool,
    slow_per_device: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        library: std::env::var("VRAMD_NVML__LIBRARY_PATH").ok(),
        fast: Duration::from_millis(10),
        slow: Duration::from_millis(1000),
        run_for: None,
        xid: true,
        slow_per_device: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            let value = args.next().ok_or_else(|| format!("{name} needs a value"))?;
            value.parse().map_err(|_| format!("{name}: not a number: {value}"))
        };
        match arg.as_str() {
            "--library" => options.library = Some(args.next().ok_or("--library needs a path")?),
            "--fast-ms" => options.fast = Duration::from_millis(number("--fast-ms")?.max(1)),
            "--slow-ms" => options.slow = Duration::from_millis(number("--slow-ms")?.max(1)),
            "--seconds" => options.run_for = Some(Duration::from_secs(number("--seconds")?)),
            "--no-xid" => options.xid = false,
            "--slow-per-device" => options.slow_per_device = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("nvml-floor: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let options = options()?;
    let mut builder = Nvml::builder();
    if let Some(library) = &options.library {
        builder.lib_path(library.as_ref());
    }
    let nvml = builder.init().map_err(|error| format!("NVML init: {error}"))?;
    // Kept for the life of the process, as vramd keeps it, so the handles
    // can live on the sampling threads.
    let nvml: &'static Nvml = Box::leak(Box::new(nvml));
    let count = nvml.device_count().map_err(|error| format!("device count: {error}"))?;
    let devices = (0..count)
        .map(|index| nvml.device_by_index(index))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("device handles: {error}"))?;
    let devices = Arc::new(devices);
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let origin = Instant::now();
    if options.xid {
        let (stop, errors) = (stop.clone(), errors.clone());
        spawn("floor-xid", move || watch_xid(nvml, count, &stop, &errors))?;
    }
    // Wall time of every device's slow read, summed, and how many: what
    // `scripts/bench-sampler.sh` takes as NVML's own share of a slow sample.
    let slow_nanos = Arc::new(AtomicU64::new(0));
    let slow_reads = Arc::new(AtomicU64::new(0));
    // One thread for every device in turn, or (`--slow-per-device`) one
    // thread per device, as vramd's slow tiers run, each on its own offset
    // of the period: a thread that wakes once a second to read one device
    // finds its caches cold, a loop over every device mostly warm.
    let slow_groups: Vec<(Vec<usize>, Duration)> = if options.slow_per_device {
        let count = devices.len().max(1) as u32;
        (0..devices.len()).map(|index| (vec![index], options.slow / count * index as u32)).collect()
    } else {
        vec![((0..devices.len()).collect(), Duration::ZERO)]
    };
    let mut slow = Vec::new();
    for (group, offset) in slow_groups {
        let (devices, stop, errors) = (devices.clone(), stop.clone(), errors.clone());
        let (nanos, reads) = (slow_nanos.clone(), slow_reads.clone());
        let period = options.slow;
        slow.push(spawn("floor-slow", move || {
            let mut last_seen = vec![None; devices.len()];
            let mut first = true;
            tick(origin + offset, period, &stop, || {
                let mut failed = 0;
                for &index in &group {
                    let started = Instant::now();
                    failed += read_slow(&devices[index], &mut last_seen[index]);
                    let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    nanos.fetch_add(took, Ordering::Relaxed);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                if std::mem::take(&mut first) {
                    // Unsupported values fail here and are absent in vramd:
                    // the same calls either way.
                    eprintln!("nvml-floor: first slow sample: {failed} calls without a value");
                }
                errors.fetch_add(failed, Ordering::Relaxed);
            });
        })?);
    }
    eprintln!("nvml-floor: {count} devices, fast {:?}, slow {:?}", options.fast, options.slow);
    // The fast tier on the main thread: one wake-up per grid point for all.
    let deadline = options.run_for.map(|run_for| origin + run_for);
    let mut first = true;
    tick(origin, options.fast, &stop, || {
        let failed: u64 = devices.iter().map(read_fast).sum();
        if std::mem::take(&mut first) {
            eprintln!("nvml-floor: first fast sample: {failed} calls without a value");
        }
        errors.fetch_add(failed, Ordering::Relaxed);
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            stop.store(true, Ordering::Relaxed);
        }
    });
    for thread in slow {
        thread.thread().unpark();
        let _ = thread.join();
    }
    let reads = slow_reads.load(Ordering::Relaxed);
    let mean_us = slow_nanos.load(Ordering::Relaxed) as f64 / 1000.0 / reads.max(1) as f64;
    eprintln!("nvml-floor: slow device read mean {mean_us:.1} us over {reads} reads");
    eprintln!("nvml-floor: done, {} failed calls", errors.load(Ordering::Relaxed));
    Ok(())
}

fn spawn(
    name: &str,
    body: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(body)
        .map_err(|error| format!("cannot start {name}: {error}"))
}

/// Runs `sample` at every point of the grid `origin + k * period` until
/// `stop`, skipping points missed rather than catching up: vramd's grid
/// (`Grid::after` in `src/sampler/worker.rs`, private there).
fn tick(origin: Instant, period: Duration, stop: &AtomicBool, mut sample: impl FnMut()) {
    let mut next = origin;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            std::thread::park_timeout(next - now);
            continue;
        }
        sample();
        let behind = now.saturating_duration_since(next).as_nanos() / period.as_nanos().max(1);
        next = u32::try_from(behind + 1)
            .ok()
            .and_then(|steps| period.checked_mul(steps))
            .and_then(|ahead| next.checked_add(ahead))
            .unwrap_or(now + period);
    }
}

/// One fast sample; returns the number of failed calls.
fn read_fast(device: &Device<'_>) -> u64 {
    u64::from(device.memory_info().is_err()) + u64::from(device.utilization_rates().is_err())
}

/// One slow sample; returns the number of failed calls. A value the
/// device does not support counts as failed here as it is absent in vramd:
/// either way the call was made.
fn read_slow(device: &Device<'_>, last_seen: &mut Option<u64>) -> u64 {
    let mut failed = 0;
    let mut note = |ok: bool| failed += u64::from(!ok);
    note(device.running_compute_processes().is_ok());
    note(device.running_graphics_processes().is_ok());
    note(device.mps_running_compute_processes().is_ok());
    match device.process_utilization_stats(*last_seen) {
        Ok(samples) => {
            let newest = samples.iter().map(|sample| sample.timestamp).max();
            *last_seen = newest.max(*last_seen);
        }
        // Nothing newer than `last_seen`: an answer, not a failure.
        Err(nvml_wrapper::error::NvmlError::NotFound) => {}
        Err(_) => note(false),
    }
    note(device.temperature(TemperatureSensor::Gpu).is_ok());
    note(device.power_usage().is_ok());
    note(device.enforced_power_limit().is_ok());
    match device.is_ecc_enabled() {
        Ok(mode) if mode.currently_enabled => {
            for error in [MemoryError::Corrected, MemoryError::Uncorrected] {
                for counter in [EccCounter::Volatile, EccCounter::Aggregate] {
                    note(device.total_ecc_errors(error, counter).is_ok());
                }
            }
        }
        Ok(_) => {}
        Err(_) => note(false),
    }
    note(device.bar1_memory_info().is_ok());
    note(device.clock_info(Clock::SM).is_ok());
    note(device.clock_info(Clock::Memory).is_ok());
    note(device.current_throttle_reasons().is_ok());
    let single = device.retired_pages(RetirementCause::MultipleSingleBitEccErrors);
    // vramd reads the second list and the pending flag only after the first.
    if single.is_ok() {
        note(device.retired_pages(RetirementCause::DoubleBitEccError).is_ok());
        note(device.are_pages_pending_retired().is_ok());
    } else {
        note(false);
    }
    note(device.field_values_for(&REMAPPED_ROW_FIELDS).is_ok());
    note(device.is_in_persistent_mode().is_ok());
    note(device.compute_mode().is_ok());
    note(device.mig_mode().is_ok());
    note(device.total_energy_consumption().is_ok());
    note(device.performance_state().is_ok());
    note(device.encoder_utilization().is_ok());
    note(device.decoder_utilization().is_ok());
    failed
}

/// Waits on the devices' critical Xid events until `stop`.
fn watch_xid(nvml: &'static Nvml, count: u32, stop: &AtomicBool, errors: &AtomicU64) {
    let mut set = match nvml.create_event_set() {
        Ok(set) => set,
        Err(_) => {
            errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else {
            errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        // As vramd: only devices that say they deliver Xid events.
        let supported = device
            .supported_event_types()
            .is_ok_and(|types| types.contains(EventTypes::CRITICAL_XID_ERROR));
        if !supported {
            continue;
        }
        match device.register_events(EventTypes::CRITICAL_XID_ERROR, set).map_err(|_| ()) {
            Ok(updated) => set = updated,
            Err(()) => {
                // The set is gone with a failed registration: stop watching.
                errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
    while !stop.load(Ordering::Relaxed) {
        match set.wait(XID_WAIT_MS) {
            Ok(_) | Err(nvml_wrapper::error::NvmlError::Timeout) => {}
            Err(_) => {
                errors.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(u64::from(XID_WAIT_MS)));
            }
        }
    }
}
