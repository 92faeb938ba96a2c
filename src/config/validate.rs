//! Validation: the merged, as-written values into the typed [`Config`].
//!
//! Owns: the checks that involve two keys; reading one value within its
//! bounds (which the catalogue holds) is the schema's and [`Field`]'s.
//! Every error names the key, the value, where it came from and why.
//! Depends on the config schema, the merged values, units, `field` and
//! `model`'s rule table only.

use super::error::ConfigError;
use super::sections::{self, Config, SourceSelection};
use super::units::format_duration;
use super::walk::Values;

/// Most samples `history.retention / sampler.fast_interval` may ask for.
pub const MAX_SAMPLES_PER_DEVICE: u128 = 10_000_000;
/// Largest `source.speed`.
pub const MAX_SPEED: f64 = 10_000.0;

/// Turns the merged values into a [`Config`], or says which key is wrong.
pub(super) fn validate(values: &Values) -> Result<Config, ConfigError> {
    let mut config = sections::read(values)?;
    config.alerts.rules.probe_stale_after = config.probe.interval.saturating_mul(2);
    let Config { sampler, history, metrics, probe, kubernetes, .. } = &config;
    let conflict = |first, second, reason: String| Err(values.conflict(first, second, reason));
    let duration = |d| format_duration(d);
    if probe.headroom_time_budget >= probe.timeout {
        return conflict(
            "probe.headroom_time_budget",
            "probe.timeout",
            format!(
                "probe.headroom_time_budget ({}) must be less than probe.timeout ({}), \
                 or every headroom search would be killed",
                duration(probe.headroom_time_budget),
                duration(probe.timeout)
            ),
        );
    }
    if probe.max_backoff < probe.interval {
        return conflict(
            "probe.interval",
            "probe.max_backoff",
            format!(
                "probe.max_backoff ({}) must be at least probe.interval ({})",
                duration(probe.max_backoff),
                duration(probe.interval)
            ),
        );
    }
    if kubernetes.call_timeout > kubernetes.refresh_interval {
        return conflict(
            "kubernetes.call_timeout",
            "kubernetes.refresh_interval",
            format!(
                "kubernetes.call_timeout ({}) must be at most kubernetes.refresh_interval ({}), \
                 or refreshes would queue behind a hung socket",
                duration(kubernetes.call_timeout),
                duration(kubernetes.refresh_interval)
            ),
        );
    }
    if sampler.slow_interval < sampler.fast_interval {
        return conflict(
            "sampler.fast_interval",
            "sampler.slow_interval",
            format!(
                "sampler.slow_interval ({}) must be at least sampler.fast_interval ({})",
                duration(sampler.slow_interval),
                duration(sampler.fast_interval)
            ),
        );
    }
    let samples = history.retention.as_nanos() / sampler.fast_interval.as_nanos().max(1);
    if samples > MAX_SAMPLES_PER_DEVICE {
        return conflict(
            "history.retention",
            "sampler.fast_interval",
            format!(
                "keeping {} at one sample every {} needs {samples} samples per device; \
                 at most {MAX_SAMPLES_PER_DEVICE} are allowed",
                duration(history.retention),
                duration(sampler.fast_interval)
            ),
        );
    }
    if metrics.peak_window > history.retention {
        return conflict(
            "metrics.peak_window",
            "history.retention",
            format!(
                "metrics.peak_window ({}) must not exceed history.retention ({})",
                duration(metrics.peak_window),
                duration(history.retention)
            ),
        );
    }
    if values.get("source.simulate").is_some() && values.get("source.replay").is_some() {
        let reason = "choose one device source: simulate a scenario or replay a trace";
        return conflict("source.simulate", "source.replay", reason.to_owned());
    }
    if let SourceSelection::Replay { path } = &config.source.selection
        && config.source.record.as_ref() == Some(path)
    {
        let reason = "recording into the trace being replayed would overwrite it";
        return conflict("source.replay", "source.record", reason.to_owned());
    }
    Ok(config)
}
