//! vramd's own health metrics, kept in a `prometheus` crate registry.
//!
//! Owns: counters and histograms that record how sampling went (errors by
//! kind, call durations per tier), whether the device source is usable, and
//! build information, configuration reloads. Every error that is logged is also counted here.
//! Depends only on `model` (for [`ErrorKind`]) and `logging` (for its
//! dropped-line count); the sampler writes, exposition reads.

mod driver_trace;

pub use driver_trace::{DriverTraceReader, DriverTraceReading};

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::core::Collector;
use strum::IntoStaticStr;

use crate::model::{ErrorKind, Timestamp};
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// What became of an alert notification (one alert in one delivery), the
/// `outcome` label of `vramd_notifications_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "lowercase")]
pub enum NotificationOutcome {
    /// Accepted by the receiver.
    Sent,
    /// Given up after the last retry failed.
    Failed,
    /// Evicted from a full queue before it was attempted.
    Dropped,
}

impl NotificationOutcome {
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;
}

crate::model::label_as_str!(NotificationOutcome);

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("registering metric {name}: {source}")]
    Register { name: &'static str, source: prometheus::Error },
    #[error("encoding self metrics: {0}")]
    Encode(#[from] prometheus::Error),
}

/// The daemon's self metrics.
pub struct Telemetry {
    registry: Registry,
    source_errors: IntCounterVec,
    sample_duration: HistogramVec,
    sample_cpu: HistogramVec,
    source_up: IntGauge,
    calls_stuck: IntGauge,
    notifications: IntCounterVec,
    notifications_dropped: IntCounterVec,
    notification_duration: HistogramVec,
    alerts_dropped: IntCounter,
    /// Mirrors `logging::dropped_lines()` at every encode: the log sink
    /// exists before any `Telemetry` and must not depend on it.
    log_lines_dropped: IntCounter,
    config_reloads: IntCounterVec,
    mig_reconfigurations: IntCounterVec,
    config_last_success: prometheus::Gauge,
    /// Set once a recording exists: its health, and the series mirroring it.
    recording: OnceLock<RecordingSeries>,
    /// Set once Kubernetes attribution runs (`kubernetes.enabled`).
    kubernetes: OnceLock<KubernetesSeries>,
    /// Set at start-up, whatever `driver_trace.mode` (off exports up 0).
    driver_trace: OnceLock<driver_trace::DriverTraceSeries>,
}

struct KubernetesSeries {
    up: IntGaugeVec,
    errors: IntCounterVec,
    lookups: IntCounter,
}

/// Reads a recording's (errors so far, failing now).
pub type RecordingHealthReader = Box<dyn Fn() -> (u64, bool) + Send + Sync>;

struct RecordingSeries {
    read: RecordingHealthReader,
    errors: IntCounter,
    failing: IntGauge,
}

/// Buckets of the sample timings, from 1 µs: a fast sample on NVML costs
/// a few microseconds, a slow one hundreds.
const SAMPLE_BUCKETS: &[f64] = &[
    0.000_001,
    0.000_002_5,
    0.000_005,
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
];

/// Where one tier's call durations (`Telemetry::call_timer`) or CPU times
/// (`Telemetry::cpu_timer`) are counted.
#[derive(Clone)]
pub struct CallTimer(Histogram);

impl CallTimer {
    pub fn observe(&self, took: Duration) {
        self.0.observe(took.as_secs_f64());
    }
}

impl Telemetry {
    /// `source` names the device source (`nvml`, `simulator`, `replay`).
    pub fn new(source: &str) -> Result<Self, TelemetryError> {
        let registry = Registry::new();
        let source_errors = counter_vec(
            &registry,
            "vramd_source_errors_total",
            "Device-source calls that produced no reading, by kind of failure.",
            &["kind"],
        )?;
        // Pre-created at zero so `rate()` works from the first scrape.
        for kind in ErrorKind::ALL {
            source_errors.with_label_values(&[kind.as_str()]);
        }
        let build_info = "Build of the running vramd; always 1.";
        gauge_vec(&registry, "vramd_build_info", build_info, &["version", "revision"])?
            .with_label_values(&[env!("CARGO_PKG_VERSION"), env!("BUILD_GIT_REVISION")])
            .set(1);
        let source_info = "The device source this daemon reads; always 1.";
        gauge_vec(&registry, "vramd_source_info", source_info, &["source"])?
            .with_label_values(&[source])
            .set(1);
        let config_reloads = counter_vec(
            &registry,
            "vramd_config_reload_total",
            "Configuration reloads (SIGHUP) by result: success (applied; keys that need a restart keep their old values), failure (refused whole; the running configuration stays).",
            &["result"],
        )?;
        for result in ["success", "failure"] {
            config_reloads.with_label_values(&[result]);
        }
        Ok(Self {
            sample_duration: histogram_vec(
                &registry,
                "vramd_sample_duration_seconds",
                "Time one device-source call took, by sampling tier (timed-out calls count at the deadline).",
                SAMPLE_BUCKETS,
                "tier",
            )?,
            sample_cpu: histogram_vec(
                &registry,
                "vramd_sample_cpu_seconds",
                "CPU time the sampler's thread spent on one sample, from the call's start to the reading stored, on the thread's CPU clock; one sample in 16 of each tier is measured.",
                SAMPLE_BUCKETS,
                "tier",
            )?,
            source_up: gauge(
                &registry,
                "vramd_nvml_up",
                "1 when the device source (NVML, or the simulator or trace standing in for it) answered its last device listing, else 0.",
            )?,
            calls_stuck: gauge(
                &registry,
                "vramd_source_calls_stuck",
                "Source calls still running past their deadline; new calls to those devices and tiers are skipped until they return.",
            )?,
            notifications: counter_vec(
                &registry,
                "vramd_notifications_total",
                "Alert notifications (one alert in one delivery) by notifier and outcome: sent, failed (given up after the last retry), dropped (evicted from a full queue).",
                &["notifier", "outcome"],
            )?,
            notifications_dropped: counter_vec(
                &registry,
                "vramd_notifications_dropped_total",
                "Alert notifications evicted from a notifier's full queue (notify.queue_capacity) before delivery was attempted.",
                &["notifier"],
            )?,
            notification_duration: histogram_vec(
                &registry,
                "vramd_notification_duration_seconds",
                "Time one delivery attempt to a notifier took, successful or not.",
                &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0],
                "notifier",
            )?,
            alerts_dropped: counter(
                &registry,
                "vramd_alerts_dropped_total",
                "New alerts not kept because alerts.max_alerts alerts were already pending or firing (resolved ones are evicted first).",
            )?,
            log_lines_dropped: counter(
                &registry,
                "vramd_log_lines_dropped_total",
                "Log lines not written because the log queue was full or stderr failed (closed pipe, full disk); logging never blocks sampling.",
            )?,
            mig_reconfigurations: counter_vec(
                &registry,
                "vramd_mig_reconfigurations_total",
                "MIG layout changes noticed on a GPU while running; its MIG devices were listed again (new ones sampled, removed ones and their series dropped).",
                &["gpu"],
            )?,
            config_last_success: register(
                &registry,
                "vramd_config_last_reload_success_timestamp_seconds",
                prometheus::Gauge::new(
                    "vramd_config_last_reload_success_timestamp_seconds",
                    "When the running configuration was last loaded successfully (start-up or reload), in seconds since the Unix epoch.",
                ),
            )?,
            config_reloads,
            source_errors,
            registry,
            recording: OnceLock::new(),
            kubernetes: OnceLock::new(),
            driver_trace: OnceLock::new(),
        })
    }

    /// Exports a recording's health (`vramd_record_errors_total`,
    /// `vramd_record_failing`); without a recording they are absent. Only
    /// the first call registers.
    pub fn watch_recording(&self, read: RecordingHealthReader) -> Result<(), TelemetryError> {
        if self.recording.get().is_some() {
            return Ok(());
        }
        let errors = counter(
            &self.registry,
            "vramd_record_errors_total",
            "Trace records (readings, errors, probe outcomes, the header) that --record could not write; live monitoring is unaffected.",
        )?;
        let failing = gauge(
            &self.registry,
            "vramd_record_failing",
            "1 while the latest trace write failed (disk full, file gone), else 0.",
        )?;
        // Already checked above; `watch_recording` is called once, at start-up.
        let _ = self.recording.set(RecordingSeries { read, errors, failing });
        Ok(())
    }

    /// Exports the driver trace's health (`vramd_driver_trace_*`), read
    /// through `read` at each encode. Only the first call registers.
    pub fn watch_driver_trace(&self, read: DriverTraceReader) -> Result<(), TelemetryError> {
        if self.driver_trace.get().is_some() {
            return Ok(());
        }
        let series = driver_trace::DriverTraceSeries::register(&self.registry, read)?;
        // Already checked above; called once, at start-up.
        let _ = self.driver_trace.set(series);
        Ok(())
    }

    /// Records a configuration load: `at` (wall time) becomes the last
    /// success when `success`; `counted` is false for the load at start-up,
    /// which is no reload.
    pub fn record_config_load(&self, success: bool, counted: bool, at: Timestamp) {
        if counted {
            let result = if success { "success" } else { "failure" };
            self.config_reloads.with_label_values(&[result]).inc();
        }
        if success {
            self.config_last_success.set(at.unix_seconds_f64());
        }
    }

    /// Exports the health of the Kubernetes APIs (`vramd_kubernetes_up`,
    /// `vramd_kubernetes_errors_total`, by `api`: `pod_resources` or
    /// `runtime`); absent unless attribution runs. Only the first call
    /// registers.
    pub fn watch_kubernetes(&self, apis: &[&str]) -> Result<(), TelemetryError> {
        if self.kubernetes.get().is_some() {
            return Ok(());
        }
        let up = gauge_vec(
            &self.registry,
            "vramd_kubernetes_up",
            "1 when the Kubernetes API (pod_resources: the kubelet's device allocations; runtime: the CRI container list) answered its latest call, else 0.",
            &["api"],
        )?;
        let errors = counter_vec(
            &self.registry,
            "vramd_kubernetes_errors_total",
            "Calls to a Kubernetes API that got no answer, by kind: absent (no socket), connect, denied (the socket's permissions refuse vramd's user), timeout, status (an error or an unreadable answer).",
            &["api", "kind"],
        )?;
        let lookups = counter(
            &self.registry,
            "vramd_kubernetes_lookups_total",
            "Refreshes of both Kubernetes APIs made at once, outside kubernetes.refresh_interval, because a process ran in a container not asked about before (at most one per kubernetes.lookup_interval).",
        )?;
        for api in apis {
            up.with_label_values(&[api]).set(0);
        }
        // Already checked above; called once, at start-up.
        let _ = self.kubernetes.set(KubernetesSeries { up, errors, lookups });
        Ok(())
    }

    pub fn set_kubernetes_up(&self, api: &str, up: bool) {
        if let Some(series) = self.kubernetes.get() {
            series.up.with_label_values(&[api]).set(i64::from(up));
        }
    }

    pub fn count_kubernetes_lookup(&self) {
        if let Some(series) = self.kubernetes.get() {
            series.lookups.inc();
        }
    }

    pub fn count_kubernetes_error(&self, api: &str, kind: &str) {
        if let Some(series) = self.kubernetes.get() {
            series.errors.with_label_values(&[api, kind]).inc();
        }
    }

    /// The HTTP server's connection series: open connections, those
    /// refused at `server.max_connections` and those closed there to make
    /// room.
    pub fn http_series(&self) -> Made<HttpSeries> {
        Ok(HttpSeries {
            open: gauge(
                &self.registry,
                "vramd_http_connections_open",
                "HTTP connections open now (TLS handshakes included).",
            )?,
            rejected: counter(
                &self.registry,
                "vramd_http_connections_rejected_total",
                "Connections closed on accept because server.max_connections were open.",
            )?,
            evicted: counter(
                &self.registry,
                "vramd_http_connections_evicted_total",
                "Idle connections closed at server.max_connections to make room for a new one.",
            )?,
        })
    }

    /// The web configuration's reload health; registered only with a web
    /// configuration file.
    pub fn web_config_series(&self) -> Made<WebConfigSeries> {
        Ok(WebConfigSeries {
            reload_errors: counter(
                &self.registry,
                "vramd_web_config_reload_errors_total",
                "Reloads of the web configuration (or a file it names) that failed; the last good one stays in use.",
            )?,
            last_success: gauge(
                &self.registry,
                "vramd_web_config_last_reload_success_timestamp_seconds",
                "Unix time of the last successful load of the web configuration.",
            )?,
        })
    }

    /// Counts new alerts the engine could not keep (`alerts.max_alerts`).
    pub fn count_alerts_dropped(&self, count: u64) {
        self.alerts_dropped.inc_by(count);
    }

    pub fn count_mig_reconfiguration(&self, gpu: u32) {
        self.mig_reconfigurations.with_label_values(&[&gpu.to_string()]).inc();
    }

    pub fn count_error(&self, kind: ErrorKind) {
        self.source_errors.with_label_values(&[kind.as_str()]).inc();
    }

    /// One tier's sample-duration series, looked up once by its caller: a
    /// label look-up hashes the label on every call, at 800 samples a
    /// second a measurable share of the sampler's cost.
    pub fn call_timer(&self, tier: &str) -> CallTimer {
        CallTimer(self.sample_duration.with_label_values(&[tier]))
    }

    /// One tier's sample CPU-time series (`vramd_sample_cpu_seconds`),
    /// looked up once by its caller as [`Telemetry::call_timer`] is.
    pub fn cpu_timer(&self, tier: &str) -> CallTimer {
        CallTimer(self.sample_cpu.with_label_values(&[tier]))
    }

    pub fn set_source_up(&self, up: bool) {
        self.source_up.set(i64::from(up));
    }

    pub fn source_up(&self) -> bool {
        self.source_up.get() == 1
    }

    pub fn call_stuck(&self) {
        self.calls_stuck.inc();
    }

    pub fn call_unstuck(&self) {
        self.calls_stuck.dec();
    }

    /// Creates a notifier's notification series at zero, so `rate()` works
    /// before its first delivery.
    pub fn register_notifier(&self, notifier: &str) {
        for outcome in NotificationOutcome::ALL {
            self.notifications.with_label_values(&[notifier, outcome.as_str()]);
        }
        self.notifications_dropped.with_label_values(&[notifier]);
        self.notification_duration.with_label_values(&[notifier]);
    }

    /// Counts `count` notifications of `notifier` with `outcome`; dropped
    /// ones also count in `vramd_notifications_dropped_total`.
    pub fn count_notifications(&self, notifier: &str, outcome: NotificationOutcome, count: u64) {
        self.notifications.with_label_values(&[notifier, outcome.as_str()]).inc_by(count);
        if outcome == NotificationOutcome::Dropped {
            self.notifications_dropped.with_label_values(&[notifier]).inc_by(count);
        }
    }

    pub fn observe_notification(&self, notifier: &str, took: Duration) {
        self.notification_duration.with_label_values(&[notifier]).observe(took.as_secs_f64());
    }

    /// Appends the self metrics in the text exposition format.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), TelemetryError> {
        let dropped = crate::logging::dropped_lines();
        self.log_lines_dropped.inc_by(dropped.saturating_sub(self.log_lines_dropped.get()));
        if let Some(recording) = self.recording.get() {
            let (errors, failing) = (recording.read)();
            recording.errors.inc_by(errors.saturating_sub(recording.errors.get()));
            recording.failing.set(i64::from(failing));
        }
        if let Some(series) = self.driver_trace.get() {
            series.mirror();
        }
        TextEncoder::new().encode(&self.registry.gather(), out)?;
        Ok(())
    }
}

/// Readings of the counters, for tests.
#[cfg(test)]
impl Telemetry {
    pub fn alerts_dropped(&self) -> u64 {
        self.alerts_dropped.get()
    }

    pub fn config_reloads(&self, success: bool) -> u64 {
        let result = if success { "success" } else { "failure" };
        self.config_reloads.with_label_values(&[result]).get()
    }

    pub fn error_count(&self, kind: ErrorKind) -> u64 {
        self.source_errors.with_label_values(&[kind.as_str()]).get()
    }

    pub fn calls_stuck(&self) -> i64 {
        self.calls_stuck.get()
    }

    pub fn notification_count(&self, notifier: &str, outcome: NotificationOutcome) -> u64 {
        self.notifications.with_label_values(&[notifier, outcome.as_str()]).get()
    }

    pub fn notifications_dropped(&self, notifier: &str) -> u64 {
        self.notifications_dropped.with_label_values(&[notifier]).get()
    }

    /// Delivery attempts observed for `notifier`.
    pub fn notification_attempts(&self, notifier: &str) -> u64 {
        self.notification_duration.with_label_values(&[notifier]).get_sample_count()
    }
}

/// The HTTP server's connection series.
#[derive(Clone)]
pub struct HttpSeries {
    pub open: IntGauge,
    pub rejected: IntCounter,
    pub evicted: IntCounter,
}

/// The web configuration's reload series.
#[derive(Clone)]
pub struct WebConfigSeries {
    pub reload_errors: IntCounter,
    pub last_success: IntGauge,
}

type Made<T> = Result<T, TelemetryError>;

/// Registers a metric just made, naming it in either error.
fn register<C: Collector + Clone + 'static>(
    r: &Registry,
    name: &'static str,
    made: prometheus::Result<C>,
) -> Made<C> {
    let error = |source| TelemetryError::Register { name, source };
    let metric = made.map_err(error)?;
    r.register(Box::new(metric.clone())).map_err(error)?;
    Ok(metric)
}

fn gauge(r: &Registry, name: &'static str, help: &str) -> Made<IntGauge> {
    register(r, name, IntGauge::new(name, help))
}

fn counter(r: &Registry, name: &'static str, help: &str) -> Made<IntCounter> {
    register(r, name, IntCounter::new(name, help))
}

fn counter_vec(
    r: &Registry,
    name: &'static str,
    help: &str,
    labels: &[&str],
) -> Made<IntCounterVec> {
    register(r, name, IntCounterVec::new(Opts::new(name, help), labels))
}

fn gauge_vec(r: &Registry, name: &'static str, help: &str, labels: &[&str]) -> Made<IntGaugeVec> {
    register(r, name, IntGaugeVec::new(Opts::new(name, help), labels))
}

fn histogram_vec(
    r: &Registry,
    name: &'static str,
    help: &str,
    buckets: &[f64],
    label: &str,
) -> Made<HistogramVec> {
    register(
        r,
        name,
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), &[label]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_is_exported_from_the_start() {
        let telemetry = Telemetry::new("simulator").unwrap();
        let mut text = Vec::new();
        telemetry.encode_into(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        for kind in ErrorKind::ALL.iter().map(|kind| kind.as_str()) {
            assert!(
                text.contains(&format!("vramd_source_errors_total{{kind=\"{kind}\"}} 0")),
                "{kind}"
            );
        }
        assert!(text.contains("vramd_source_info{source=\"simulator\"} 1"));
        assert!(text.contains("vramd_build_info{"));
    }

    #[test]
    fn counting_shows_in_the_exposition() {
        let telemetry = Telemetry::new("nvml").unwrap();
        telemetry.count_error(ErrorKind::Timeout);
        telemetry.count_error(ErrorKind::Timeout);
        telemetry.set_source_up(true);
        let mut text = Vec::new();
        telemetry.encode_into(&mut text).unwrap();
        let before = String::from_utf8(text.clone()).unwrap();
        assert!(
            before.contains("vramd_alerts_dropped_total 0"),
            "absent is not zero: exported from the start"
        );
        telemetry.count_alerts_dropped(3);
        text.clear();
        telemetry.encode_into(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("vramd_alerts_dropped_total 3"));
        assert_eq!(telemetry.alerts_dropped(), 3);
        assert!(text.contains("vramd_source_errors_total{kind=\"timeout\"} 2"));
        assert!(text.contains("vramd_nvml_up 1"));
        assert_eq!(telemetry.error_count(ErrorKind::Timeout), 2);
    }
}
