//! Validation: the merged, as-written values into the typed [`Config`].
//!
//! Owns: the checks that involve two keys; reading one value within its
//! bounds (which `keys` holds) is [`Field`]'s. Every error names the key,
//! the value, where it came from and why. Depends on the config types, the
//! merged values, units, `field` and `model`'s rule table only.

use std::time::Duration;

use super::error::ConfigError;
use super::field::Field;
use super::types::{
    AlertsConfig, ApiConfig, Config, HistoryConfig, IngestConfig, LogConfig, MetricsConfig,
    NotifyConfig, NvmlConfig, ProbeConfig, RuleConfig, RulesConfig, SamplerConfig, ServerConfig,
    SimulatorConfig, SourceConfig, SourceSelection,
};
use super::units::format_duration;
use super::walk::Values;
use crate::model::{Direction, RuleId};

/// Most samples `history.retention / sampler.fast_interval` may ask for.
pub const MAX_SAMPLES_PER_DEVICE: u128 = 10_000_000;
/// Largest `source.speed`.
pub const MAX_SPEED: f64 = 10_000.0;

/// Turns the merged values into a [`Config`], or says which key is wrong.
pub(super) fn validate(values: &Values) -> Result<Config, ConfigError> {
    let field = |key| Field::required(key, values);
    let server = ServerConfig {
        listen: field("server.listen")?.socket_addr()?,
        request_timeout: field("server.request_timeout")?.duration()?,
        max_request_body_bytes: field("server.max_request_body")?.size()?,
        max_concurrent_requests: field("server.max_concurrent_requests")?.count()?,
        shutdown_timeout: field("server.shutdown_timeout")?.duration()?,
    };
    let sampler = SamplerConfig {
        fast_interval: field("sampler.fast_interval")?.duration()?,
        slow_interval: field("sampler.slow_interval")?.duration()?,
        call_timeout: field("sampler.call_timeout")?.duration()?,
        max_processes_per_device: field("sampler.max_processes_per_device")?.count()?,
        discovery_retry_max: field("sampler.discovery_retry_max")?.duration()?,
    };
    let history = HistoryConfig { retention: field("history.retention")?.duration()? };
    let metrics = MetricsConfig { peak_window: field("metrics.peak_window")?.duration()? };
    let api = ApiConfig {
        max_history_points: field("api.max_history_points")?.count()?,
        max_event_streams: field("api.max_event_streams")?.count()?,
        max_stream_backlog: field("api.max_stream_backlog")?.count()?,
    };

    let scenario = optional("source.simulate", values, Field::scenario)?;
    let replay_path = optional("source.replay", values, Field::path)?;
    let record_path = optional("source.record", values, Field::path)?;
    let gpus = field("simulator.gpus")?.integer()?;
    let seed = field("simulator.seed")?.integer()?;
    let speed = field("source.speed")?.speed()?;
    let max_trace_line_bytes = field("source.max_trace_line")?.size()?;
    let max_trace_bytes = field("source.max_trace_size")?.bytes()?;
    let nvml = NvmlConfig {
        library_path: optional("nvml.library_path", values, Field::path)?,
        require_gpu: field("nvml.require_gpu")?.boolean()?,
        init_timeout: field("nvml.init_timeout")?.duration()?,
        pcie_throughput: field("nvml.pcie_throughput")?.boolean()?,
        max_cmdline_bytes: field("nvml.max_cmdline_bytes")?.size()?,
        xid_events: field("nvml.xid_events")?.boolean()?,
    };
    let probe = probe(values)?;
    let log = LogConfig {
        format: field("log.format")?.log_format()?,
        level: field("log.level")?.log_level()?,
    };
    let mut alerts = alerts(values)?;
    alerts.rules.probe_stale_after = probe.interval.saturating_mul(2);
    let notify = notify(values)?;
    let ingest = ingest(values)?;

    if sampler.slow_interval < sampler.fast_interval {
        return Err(values.conflict(
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
        return Err(values.conflict(
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
        return Err(values.conflict(
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
            return Err(values.conflict(
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
                return Err(values.conflict(
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
    values: &'a Values,
    read: impl FnOnce(&Field<'a>) -> Result<T, ConfigError>,
) -> Result<Option<T>, ConfigError> {
    Field::optional(key, values).as_ref().map(read).transpose()
}

fn probe(values: &Values) -> Result<ProbeConfig, ConfigError> {
    let field = |key| Field::required(key, values);
    let probe = ProbeConfig {
        enabled: field("probe.enabled")?.boolean()?,
        interval: field("probe.interval")?.duration()?,
        timeout: field("probe.timeout")?.duration()?,
        min_free_bytes: field("probe.min_free")?.bytes()?,
        margin_bytes: field("probe.margin")?.bytes()?,
        block_bytes: field("probe.block_size")?.bytes()?,
        samples: u32::try_from(field("probe.samples")?.count()?.get()).unwrap_or(100),
        headroom: field("probe.headroom")?.boolean()?,
        headroom_time_budget: field("probe.headroom_time_budget")?.duration()?,
        max_backoff: field("probe.max_backoff")?.duration()?,
        cuda_library: optional("probe.cuda_library", values, Field::path)?,
    };
    if probe.headroom_time_budget >= probe.timeout {
        return Err(values.conflict(
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
        return Err(values.conflict(
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

fn ingest(values: &Values) -> Result<IngestConfig, ConfigError> {
    let field = |key| Field::required(key, values);
    Ok(IngestConfig {
        token_file: optional("ingest.token_file", values, Field::path)?,
        ttl: field("ingest.ttl")?.duration()?,
        rate_limit_per_second: field("ingest.rate_limit")?.count()?,
        max_reporters: field("ingest.max_reporters")?.count()?,
        max_devices: field("ingest.max_devices")?.count()?,
        max_stats: field("ingest.max_stats")?.count()?,
    })
}

fn alerts(values: &Values) -> Result<AlertsConfig, ConfigError> {
    let field = |key| Field::required(key, values);
    let rule = |id| rule_config(id, values);
    let rules = RulesConfig {
        memory_high: rule(RuleId::MemoryHigh)?,
        exhaustion_forecast: rule(RuleId::ExhaustionForecast)?,
        exhaustion_min_fit: field("alerts.exhaustion_forecast.min_fit")?.fraction()?,
        leak_suspected: rule(RuleId::LeakSuspected)?,
        leak_window: field("alerts.leak_suspected.window")?.duration()?,
        allocator_fragmentation_high: rule(RuleId::AllocatorFragmentationHigh)?,
        fragmentation_min_reserved_bytes: field(
            "alerts.allocator_fragmentation_high.min_reserved",
        )?
        .bytes()?,
        allocator_retries: rule(RuleId::AllocatorRetries)?,
        retries_window: field("alerts.allocator_retries.window")?.duration()?,
        allocator_oom: rule(RuleId::AllocatorOom)?,
        oom_window: field("alerts.allocator_oom.window")?.duration()?,
        device_lost: rule(RuleId::DeviceLost)?,
        xid_error: rule(RuleId::XidError)?,
        xid_window: field("alerts.xid_error.window")?.duration()?,
        probe_free_mismatch: rule(RuleId::ProbeFreeMismatch)?,
        probe_headroom_low: rule(RuleId::ProbeHeadroomLow)?,
        // Set from probe.interval once [probe] is validated.
        probe_stale_after: Duration::ZERO,
    };
    Ok(AlertsConfig {
        evaluation_interval: field("alerts.evaluation_interval")?.duration()?,
        resolved_retention: field("alerts.resolved_retention")?.duration()?,
        max_alerts: field("alerts.max_alerts")?.count()?,
        trend_window: field("alerts.trend_window")?.duration()?,
        rules,
    })
}

/// The keys every rule has, in `[alerts.<name>]`. `clear` must be on the
/// side of `threshold` the value returns to when the condition ends.
fn rule_config(id: RuleId, values: &Values) -> Result<RuleConfig, ConfigError> {
    let spec = id.spec();
    let (unit, direction) = (spec.unit, spec.direction);
    let key = |key: &str| format!("alerts.{}.{key}", spec.name);
    let enabled = Field::required(&key("enabled"), values)?.boolean()?;
    let threshold = Field::required(&key("threshold"), values)?.threshold(unit)?;
    let clear_key = key("clear");
    let clear_field = Field::required(&clear_key, values)?;
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
        for_duration: Field::required(&key("for"), values)?.duration()?,
        severity: Field::required(&key("severity"), values)?.severity()?,
    })
}

fn notify(values: &Values) -> Result<NotifyConfig, ConfigError> {
    let field = |key| Field::required(key, values);
    let url = |key| optional(key, values, Field::url);
    Ok(NotifyConfig {
        alertmanager_url: url("notify.alertmanager_url")?,
        webhook_url: url("notify.webhook_url")?,
        queue_capacity: field("notify.queue_capacity")?.count()?,
        timeout: field("notify.timeout")?.duration()?,
        resend_interval: field("notify.resend_interval")?.duration()?,
        max_retries: u32::try_from(field("notify.max_retries")?.integer()?).unwrap_or(u32::MAX),
        retry_backoff_max: field("notify.retry_backoff_max")?.duration()?,
        external_url: url("notify.external_url")?,
    })
}
