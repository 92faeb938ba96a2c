//! The driver trace's cost per call: a C program (examples/overhead.c)
//! calls the fake libcuda's `cuMemAlloc_v2`/`cuMemFree_v2` (traced) and
//! `cuMemGetInfo_v2` (not traced) in a loop, once untraced and once with
//! the trace attached and its events drained, and prints the mean time per
//! call of each. Root (or CAP_SYS_ADMIN + CAP_SYS_PTRACE) only.
//!
//!   scripts/bench-driver-trace.sh [ITERATIONS]

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_types)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use driver_trace::{LoadOptions, Tracer};

/// Runs the program; ns per call of: the allocation and free pair, the
/// untraced call, the allocation alone, the free alone.
fn run(
    program: &Path,
    library: &Path,
    scenario: &Path,
    iterations: &str,
    tracer: Option<&mut Tracer>,
) -> [f64; 4] {
    let mut child = Command::new(program)
        .arg(library)
        .arg(iterations)
        .env("FAKE_CUDA_SCENARIO", scenario)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut events = 0usize;
    if let Some(tracer) = tracer {
        while child.try_wait().unwrap().is_none() {
            events += tracer.poll(Duration::from_millis(10), usize::MAX, |_| ()).unwrap();
        }
        events += tracer.poll(Duration::from_millis(100), usize::MAX, |_| ()).unwrap();
        eprintln!("events drained: {events}; dropped: {:?}", tracer.counters().unwrap());
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", output.status);
    let text = String::from_utf8(output.stdout).unwrap();
    let numbers: Vec<f64> = text.split_whitespace().map(|word| word.parse().unwrap()).collect();
    numbers.try_into().unwrap()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (program, library, scenario) =
        (args.next().unwrap(), args.next().unwrap(), args.next().unwrap());
    let iterations = args.next().unwrap_or_else(|| "200000".into());
    let (program, library, scenario) =
        (Path::new(&program), Path::new(&library), Path::new(&scenario));
    let untraced = run(program, library, scenario, &iterations, None);
    let mut tracer = Tracer::load(LoadOptions { ring_bytes: 16 << 20 }).unwrap();
    tracer.attach(library).unwrap();
    let traced = run(program, library, scenario, &iterations, Some(&mut tracer));
    println!("calls per loop: {iterations}");
    for (label, at) in [
        ("alloc/free call:     ", 0),
        ("cuMemAlloc_v2 call:  ", 2),
        ("cuMemFree_v2 call:   ", 3),
        ("cuMemGetInfo_v2 call:", 1),
    ] {
        println!(
            "{label} untraced {:8.1} ns, traced {:8.1} ns, overhead {:8.1} ns{}",
            untraced[at],
            traced[at],
            traced[at] - untraced[at],
            if at == 1 { " (not probed)" } else { "" }
        );
    }
}
