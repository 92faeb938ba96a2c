//! Validation: the raw, as-written values into the typed [`Config`].
//!
//! Owns: the checks that involve two keys; reading one value within its
//! bounds (which `keys` holds) is [`Field`]'s. Every error names the key, the value,
//! where it came from and why. Depends on the config types, raw layer,
//! units and `field` only.

use std::time::Duration;

use super::error::ConfigError;
use super::field::Field;
use super::raw::{RawAlerts, RawConfig, RawIngest, RawNotify, RawProbe, RawRule, Scalar};
use super::types::{
    AlertsConfig, ApiConfig, Config, HistoryConfig, IngestConfig, LogConfig, MetricsConfig,
    NotifyConfig, NvmlConfig, ProbeConfig, RuleConfig, RulesConfig, SamplerConfig, ServerConfig,
    SimulatorConfig, SourceConfig, SourceSelection,
};
use super::units::format_duration;
use super::walk::Origins;
use crate::model::{Direction, RuleId};

/// Most samples `history.retention / sampler.fast_interval` may ask for.
pub const MAX_SAMPLES_PER_DEVICE: u128 = 10_000_000;
/// Largest `source.speed`.
pub const MAX_SPEED: f64 = 10_000.0;

/// Turns the merged raw values into a [`Config`], or says which key is wrong.
pub(super) fn validate(raw: &RawConfig, origins: &Origins) -> Result<Config, ConfigError> {
    let field = |key, value| Field::required(key, value, origins);
    let server = ServerConfig {
        listen: field("server.listen", &raw.server.listen)?.socket_addr()?,
        request_timeout: field("server.request_timeout", &raw.server.request_timeout)?
            .duration()?,
        max_request_body_bytes: field("server.max_request_body", &raw.server.max_request_body)?
            .size()?,
        max_concurrent_requests: field(
            "server.max_concurrent_requests",
            &raw.server.max_concurrent_requests,
        )?
        .count()?,
        shutdown_timeout: field("server.shutdown_timeout", &raw.server.shutdown_timeout)?
            .duration()?,
    };
    let sampler = SamplerConfig {
        fast_interval: field("sampler.fast_interval", &raw.sampler.fast_interval)?.duration()?,
        slow_interval: field("sampler.slow_interval", &raw.sampler.slow_interval)?.duration()?,
        call_timeout: field("sampler.call_timeout", &raw.sampler.call_timeout)?.duration()?,
        max_processes_per_device: field(
            "sampler.max_processes_per_device",
            &raw.sampler.max_processes_per_device,
        )?
        .count()?,
        discovery_retry_max: field(
            "sampler.discovery_retry_max",
            &raw.sampler.discovery_retry_max,
        )?
        .duration()?,
    };
    let history = HistoryConfig {
        retention: field("history.retention", &raw.history.retention)?.duration()?,
    };
    let metrics = MetricsConfig {
        peak_window: field("metrics.peak_window", &raw.metrics.peak_window)?.duration()?,
    };
    let api = ApiConfig {
        max_history_points: field("api.max_history_points", &raw.api.max_history_points)?
            .count()?,
        max_event_streams: field("api.max_event_streams", &raw.api.max_event_streams)?.count()?,
        max_stream_backlog: field("api.max_stream_backlog", &raw.api.max_stream_backlog)?
            .count()?,
    };

    let scenario = optional("source.simulate", &raw.source.simulate, origins, Field::scenario)?;
    let replay_path = optional("source.replay", &raw.source.replay, origins, Field::path)?;
    let record_path = optional("source.record", &raw.source.record, origins, Field::path)?;
    let gpus = field("simulator.gpus", &raw.simulator.gpus)?.integer()?;
    let seed = field("simulator.seed", &raw.simulator.seed)?.integer()?;
    let speed = field("source.speed", &raw.source.speed)?.speed()?;
    let max_trace_line_bytes =
        field("source.max_trace_line", &raw.source.max_trace_line)?.size()?;
    let max_trace_bytes = field("source.max_trace_size", &raw.source.max_trace_size)?.bytes()?;
    let nvml = NvmlConfig {
        library_path: optional("nvml.library_path", &raw.nvml.library_path, origins, Field::path)?,
        require_gpu: field("nvml.require_gpu", &raw.nvml.require_gpu)?.boolean()?,
        init_timeout: field("nvml.init_timeout", &raw.nvml.init_timeout)?.duration()?,
        pcie_throughput: field("nvml.pcie_throughput", &raw.nvml.pcie_throughput)?.boolean()?,
        max_cmdline_bytes: field("nvml.max_cmdline_bytes", &raw.nvml.max_cmdline_bytes)?.size()?,
        xid_events: field("nvml.xid_events", &raw.nvml.xid_events)?.boolean()?,
    };
    let probe = probe(&raw.probe, origins)?;
    let log = LogConfig {
        format: field("log.format", &raw.log.format)?.log_format()?,
        level: field("log.level", &raw.log.level)?.log_level()?,
    };
    let mut alerts = alerts(&raw.alerts, origins)?;
    alerts.rules.probe_stale_after = probe.interval.saturating_mul(2);
    let notify = notify(&raw.notify, origins)?;
    let ingest = ingest(&raw.ingest, origins)?;

    if sampler.slow_interval < sampler.fast_interval {
        return Err(origins.conflict(
            "sampler.fast_interval",
            "sampler.slow_interval",
            format!(
                "sampler.slow_interval ({}) must be at least sampler.fast_interval ({})",
                format_duration(sampler.slow_interval),
                format_duration(sampler.fast_interval)
            ),
        ));
    }
    let samples = history.retention.as_nanos() / sampler.fast_interval.as_nanos().max(1);
    if samples > MAX_SAMPLES_PER_DEVICE {
        return Err(origins.conflict(
            "history.retention",
            "sampler.fast_interval",
            format!(
                "keeping {} at one sample every {} needs {samples} samples per device; \
                 at most {MAX_SAMPLES_PER_DEVICE} are allowed",
                format_duration(history.retention),
                format_duration(sampler.fast_interval)
            ),
        ));
    }
    if metrics.peak_window > history.retention {
        return Err(origins.conflict(
            "metrics.peak_window",
            "history.retention",
            format!(
                "metrics.peak_window ({}) must not exceed history.retention ({})",
                format_duration(metrics.peak_window),
                format_duration(history.retention)
            ),
        ));
    }
    let selection = match (scenario, replay_path) {
        (Some(_), Some(_)) => {
            return Err(origins.conflict(
                "source.simulate",
                "source.replay",
                "choose one device source: simulate a scenario or replay a trace".to_owned(),
            ));
        }
        (Some(scenario), None) => SourceSelection::Simulate(SimulatorConfig {
            scenario,
            gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
            seed,
        }),
        (None, Some(path)) => {
            if record_path.as_ref() == Some(&path) {
                return Err(origins.conflict(
                    "source.replay",
                    "source.record",
                    "recording into the trace being replayed would overwrite it".to_owned(),
                ));
            }
            SourceSelection::Replay { path }
        }
        (None, None) => SourceSelection::Driver,
    };

    Ok(Config {
        server,
        sampler,
        history,
        metrics,
        api,
        source: SourceConfig {
            selection,
            record: record_path,
            speed,
            max_trace_line_bytes,
            max_trace_bytes,
        },
        nvml,
        probe,
        log,
        alerts,
        notify,
        ingest,
    })
}

/// An optional key, read with `read` when it is set.
fn optional<'a, T>(
    key: &'a str,
    value: &'a Option<Scalar>,
    origins: &'a Origins,
    read: impl FnOnce(&Field<'a>) -> Result<T, ConfigError>,
) -> Result<Option<T>, ConfigError> {
    Field::optional(key, value, origins).as_ref().map(read).transpose()
}

fn probe(raw: &RawProbe, origins: &Origins) -> Result<ProbeConfig, ConfigError> {
    let field = |key, value| Field::required(key, value, origins);
    let probe = ProbeConfig {
        enabled: field("probe.enabled", &raw.enabled)?.boolean()?,
        interval: field("probe.interval", &raw.interval)?.duration()?,
        timeout: field("probe.timeout", &raw.timeout)?.duration()?,
        min_free_bytes: field("probe.min_free", &raw.min_free)?.bytes()?,
        margin_bytes: field("probe.margin", &raw.margin)?.bytes()?,
        block_bytes: field("probe.block_size", &raw.block_size)?.bytes()?,
        samples: u32::try_from(field("probe.samples", &raw.samples)?.count()?.get()).unwrap_or(100),
        headroom: field("probe.headroom", &raw.headroom)?.boolean()?,
        headroom_time_budget: field("probe.headroom_time_budget", &raw.headroom_time_budget)?
            .duration()?,
        max_backoff: field("probe.max_backoff", &raw.max_backoff)?.duration()?,
        cuda_library: optional("probe.cuda_library", &raw.cuda_library, origins, Field::path)?,
    };
    if probe.headroom_time_budget >= probe.timeout {
        return Err(origins.conflict(
            "probe.headroom_time_budget",
            "probe.timeout",
            format!(
                "probe.headroom_time_budget ({}) must be less than probe.timeout ({}), \
                 or every headroom search would be killed",
                format_duration(probe.headroom_time_budget),
                format_duration(probe.timeout)
            ),
        ));
    }
    if probe.max_backoff < probe.interval {
        return Err(origins.conflict(
            "probe.interval",
            "probe.max_backoff",
            format!(
                "probe.max_backoff ({}) must be at least probe.interval ({})",
                format_duration(probe.max_backoff),
                format_duration(probe.interval)
            ),
        ));
    }
    Ok(probe)
}

fn ingest(raw: &RawIngest, origins: &Origins) -> Result<IngestConfig, ConfigError> {
    let field = |key, value| Field::required(key, value, origins);
    Ok(IngestConfig {
        token_file: optional("ingest.token_file", &raw.token_file, origins, Field::path)?,
        ttl: field("ingest.ttl", &raw.ttl)?.duration()?,
        rate_limit_per_second: field("ingest.rate_limit", &raw.rate_limit)?.count()?,
        max_reporters: field("ingest.max_reporters", &raw.max_reporters)?.count()?,
        max_devices: field("ingest.max_devices", &raw.max_devices)?.count()?,
        max_stats: field("ingest.max_stats", &raw.max_stats)?.count()?,
    })
}

fn alerts(raw: &RawAlerts, origins: &Origins) -> Result<AlertsConfig, ConfigError> {
    let field = |key, value| Field::required(key, value, origins);
    let rule = |id, raw| rule_config(id, raw, origins);
    let rules = RulesConfig {
        memory_high: rule(RuleId::MemoryHigh, &raw.memory_high)?,
        exhaustion_forecast: rule(RuleId::ExhaustionForecast, &raw.exhaustion_forecast)?,
        exhaustion_min_fit: field(
            "alerts.exhaustion_forecast.min_fit",
            &raw.exhaustion_forecast.min_fit,
        )?
        .fraction()?,
        leak_suspected: rule(RuleId::LeakSuspected, &raw.leak_suspected)?,
        leak_window: field("alerts.leak_suspected.window", &raw.leak_suspected.window)?
            .duration()?,
        allocator_fragmentation_high: rule(
            RuleId::AllocatorFragmentationHigh,
            &raw.allocator_fragmentation_high,
        )?,
        fragmentation_min_reserved_bytes: field(
            "alerts.allocator_fragmentation_high.min_reserved",
            &raw.allocator_fragmentation_high.min_reserved,
        )?
        .bytes()?,
        allocator_retries: rule(RuleId::AllocatorRetries, &raw.allocator_retries)?,
        retries_window: field("alerts.allocator_retries.window", &raw.allocator_retries.window)?
            .duration()?,
        allocator_oom: rule(RuleId::AllocatorOom, &raw.allocator_oom)?,
        oom_window: field("alerts.allocator_oom.window", &raw.allocator_oom.window)?.duration()?,
        device_lost: rule(RuleId::DeviceLost, &raw.device_lost)?,
        xid_error: rule(RuleId::XidError, &raw.xid_error)?,
        xid_window: field("alerts.xid_error.window", &raw.xid_error.window)?.duration()?,
        probe_free_mismatch: rule(RuleId::ProbeFreeMismatch, &raw.probe_free_mismatch)?,
        probe_headroom_low: rule(RuleId::ProbeHeadroomLow, &raw.probe_headroom_low)?,
        // Set from probe.interval once [probe] is validated.
        probe_stale_after: Duration::ZERO,
    };
    Ok(AlertsConfig {
        evaluation_interval: field("alerts.evaluation_interval", &raw.evaluation_interval)?
            .duration()?,
        resolved_retention: field("alerts.resolved_retention", &raw.resolved_retention)?
            .duration()?,
        max_alerts: field("alerts.max_alerts", &raw.max_alerts)?.count()?,
        trend_window: field("alerts.trend_window", &raw.trend_window)?.duration()?,
        rules,
    })
}

/// The keys every rule has, in `[alerts.<name>]`. `clear` must be on the
/// side of `threshold` the value returns to when the condition ends.
fn rule_config(id: RuleId, raw: &RawRule, origins: &Origins) -> Result<RuleConfig, ConfigError> {
    let spec = id.spec();
    let (unit, direction) = (spec.unit, spec.direction);
    let key = |key: &str| format!("alerts.{}.{key}", spec.name);
    let enabled = Field::required(&key("enabled"), &raw.enabled, origins)?.boolean()?;
    let threshold = Field::required(&key("threshold"), &raw.threshold, origins)?.threshold(unit)?;
    let clear_key = key("clear");
    let clear_field = Field::required(&clear_key, &raw.clear, origins)?;
    let clear = clear_field.threshold(unit)?;
    match direction {
        Direction::Above if clear > threshold => {
            return Err(clear_field.invalid(format!(
                "must not exceed threshold {threshold} for a rule that fires above it"
            )));
        }
        Direction::Below if clear < threshold => {
            return Err(clear_field.invalid(format!(
                "must not be below threshold {threshold} for a rule that fires below it"
            )));
        }
        _ => {}
    }
    Ok(RuleConfig {
        enabled,
        threshold,
        clear,
        for_duration: Field::required(&key("for"), &raw.for_duration, origins)?.duration()?,
        severity: Field::required(&key("severity"), &raw.severity, origins)?.severity()?,
    })
}

fn notify(raw: &RawNotify, origins: &Origins) -> Result<NotifyConfig, ConfigError> {
    let field = |key, value| Field::required(key, value, origins);
    let url = |key, value| optional(key, value, origins, Field::url);
    Ok(NotifyConfig {
        alertmanager_url: url("notify.alertmanager_url", &raw.alertmanager_url)?,
        webhook_url: url("notify.webhook_url", &raw.webhook_url)?,
        queue_capacity: field("notify.queue_capacity", &raw.queue_capacity)?.count()?,
        timeout: field("notify.timeout", &raw.timeout)?.duration()?,
        resend_interval: field("notify.resend_interval", &raw.resend_interval)?.duration()?,
        max_retries: u32::try_from(field("notify.max_retries", &raw.max_retries)?.integer()?)
            .unwrap_or(u32::MAX),
        retry_backoff_max: field("notify.retry_backoff_max", &raw.retry_backoff_max)?.duration()?,
        external_url: url("notify.external_url", &raw.external_url)?,
    })
}
