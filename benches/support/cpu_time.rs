//! A criterion measurement of the benchmark thread's own CPU time, read from
//! `/proc/thread-self/schedstat` (nanoseconds on CPU). On a small machine
//! shared with builds, wall time includes the time other processes hold the
//! CPU; on-CPU time does not, so it stays comparable with a target.
//!
//! Shared by the benches through `#[path]`; not a bench target itself.

use criterion::Throughput;
use criterion::measurement::{Measurement, ValueFormatter};

pub struct CpuTime;

impl CpuTime {
    /// `None` where the kernel does not expose schedstat.
    pub fn available() -> Option<Self> {
        thread_cpu_ns().map(|_| CpuTime)
    }
}

fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns().unwrap_or(0)
    }

    fn end(&self, started: u64) -> u64 {
        thread_cpu_ns().unwrap_or(started).saturating_sub(started)
    }

    fn add(&self, a: &u64, b: &u64) -> u64 {
        a.saturating_add(*b)
    }

    fn zero(&self) -> u64 {
        0
    }

    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuTimeFormatter
    }
}

/// Formats nanoseconds of CPU time like criterion formats wall time.
struct CpuTimeFormatter;

impl ValueFormatter for CpuTimeFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (divisor, unit) = if typical < 1e3 {
            (1.0, "ns cpu")
        } else if typical < 1e6 {
            (1e3, "µs cpu")
        } else if typical < 1e9 {
            (1e6, "ms cpu")
        } else {
            (1e9, "s cpu")
        };
        for value in values {
            *value /= divisor;
        }
        unit
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per_iteration = match *throughput {
            Throughput::Bytes(n)
            | Throughput::BytesDecimal(n)
            | Throughput::Elements(n)
            | Throughput::Bits(n) => n as f64,
            _ => 1.0,
        };
        for value in values {
            *value = per_iteration * 1e9 / *value;
        }
        "/s cpu"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
