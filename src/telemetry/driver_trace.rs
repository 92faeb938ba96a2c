//! The driver trace's own series (`vramd_driver_trace_*`), mirrored at each
//! encode from what the trace keeps (its thread writes atomics; telemetry
//! knows nothing of it but this reading).

use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};

use super::{Made, counter, counter_vec, gauge};

/// The trace's health at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverTraceReading {
    pub up: bool,
    pub libraries: u64,
    pub events: u64,
    /// Calls lost since start, by reason (`ring_full`, …).
    pub dropped: Vec<(&'static str, u64)>,
}

/// Reads the trace's health.
pub type DriverTraceReader = Box<dyn Fn() -> DriverTraceReading + Send + Sync>;

pub(super) struct DriverTraceSeries {
    read: DriverTraceReader,
    up: IntGauge,
    libraries: IntGauge,
    events: IntCounter,
    dropped: IntCounterVec,
}

impl DriverTraceSeries {
    pub(super) fn register(registry: &Registry, read: DriverTraceReader) -> Made<Self> {
        let series = Self {
            up: gauge(
                registry,
                "vramd_driver_trace_up",
                "1 while the eBPF trace of libcuda's allocation calls runs, else 0 (driver_trace.mode off, no privilege, or it failed).",
            )?,
            libraries: gauge(
                registry,
                "vramd_driver_trace_libraries",
                "Distinct libcuda files (device and inode) the driver trace probes.",
            )?,
            events: counter(
                registry,
                "vramd_driver_trace_events_total",
                "Traced allocation and free calls the driver trace handled.",
            )?,
            dropped: counter_vec(
                registry,
                "vramd_driver_trace_dropped_events_total",
                "Traced calls lost, by reason: ring_full (the kernel's ring buffer was full: the trace behind or held at driver_trace.max_events_per_second), in_flight_full (an allocation call lost to another thread that shares its in-flight slot, both allocating at once), process_limit (driver_trace.max_processes), live_allocation_limit (driver_trace.max_live_allocations).",
                &["reason"],
            )?,
            read,
        };
        series.mirror();
        Ok(series)
    }

    pub(super) fn mirror(&self) {
        let reading = (self.read)();
        self.up.set(i64::from(reading.up));
        self.libraries.set(i64::try_from(reading.libraries).unwrap_or(i64::MAX));
        self.events.inc_by(reading.events.saturating_sub(self.events.get()));
        for (reason, total) in reading.dropped {
            let counter = self.dropped.with_label_values(&[reason]);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }
}
