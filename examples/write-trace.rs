//! Writes a simulated trace as the daemon would record it, as fast as the
//! CPU allows: the input of `scripts/bench-replay.sh` (replay of 8 GPUs ×
//! 6 h) and of anyone who wants a large trace without waiting for the
//! daemon to record one in real time. The simulator's processes carry
//! their allocator statistics in the readings, as joined from reports.
//!
//! Usage: write-trace --out FILE [--scenario training-fragmentation]
//! [--gpus 8] [--hours 6] [--seed 1] [--fast-ms 250] [--slow-ms 1000]

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use vramd::clock::ScaledClock;
use vramd::model::ScenarioKind;
use vramd::play::{Schedule, record_simulator};
use vramd::source::simulator::{GOLDEN_ORIGIN, Simulator, SimulatorSpec};

struct Args {
    out: PathBuf,
    spec: SimulatorSpec,
    hours: f64,
    fast_ms: u64,
    slow_ms: u64,
}

fn parse_args() -> Result<Args, String> {
    let spec = SimulatorSpec { scenario: ScenarioKind::TrainingFragmentation, gpus: 8, seed: 1 };
    let mut args = Args { out: PathBuf::new(), spec, hours: 6.0, fast_ms: 250, slow_ms: 1000 };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |what: &str| format!("{flag}: {what} expected, got {value:?}");
        match flag.as_str() {
            "--out" => args.out = PathBuf::from(&value),
            "--scenario" => args.spec.scenario = value.parse().map_err(|e| format!("{e}"))?,
            "--gpus" => args.spec.gpus = value.parse().map_err(|_| number("a count"))?,
            "--seed" => args.spec.seed = value.parse().map_err(|_| number("a seed"))?,
            "--hours" => args.hours = value.parse().map_err(|_| number("hours"))?,
            "--fast-ms" => args.fast_ms = value.parse().map_err(|_| number("milliseconds"))?,
            "--slow-ms" => args.slow_ms = value.parse().map_err(|_| number("milliseconds"))?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.out.as_os_str().is_empty() {
        return Err("--out FILE is required".to_owned());
    }
    if args.fast_ms == 0
        || args.slow_ms < args.fast_ms
        || !args.hours.is_finite()
        || args.hours <= 0.0
    {
        return Err("need 0 < --fast-ms <= --slow-ms and --hours above 0".to_owned());
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("write-trace: {message}");
            return ExitCode::from(2);
        }
    };
    let clock = ScaledClock::starting_at(GOLDEN_ORIGIN, 1.0);
    let schedule = Schedule {
        from: GOLDEN_ORIGIN,
        duration: Duration::from_secs_f64(args.hours * 3600.0),
        fast: Duration::from_millis(args.fast_ms),
        slow: Duration::from_millis(args.slow_ms),
    };
    let written = Simulator::with_origin(args.spec, clock, GOLDEN_ORIGIN)
        .map_err(|error| error.to_string())
        .and_then(|simulator| {
            record_simulator(simulator, schedule, &args.out).map_err(|error| error.to_string())
        });
    match written {
        Ok(records) => {
            println!("{records} records written to {}", args.out.display());
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("write-trace: {message}");
            ExitCode::from(1)
        }
    }
}
