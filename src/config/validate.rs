//! Validation: the merged layers into the typed [`Config`].
//!
//! Owns: reading the merged tree through serde (each failure named by its
//! full key, from `serde_path_to_error`), the bounds check of every key
//! (the bounds are the schema's), the checks of values whose form serde
//! cannot see (URLs, the log filter, speed, ratios) and the checks that
//! involve two keys. Every error names the key, the value, where it came
//! from and why. Depends on the config schema, the written values, units,
//! `field` and `keys`.

use super::error::ConfigError;
use super::field::OUT_OF_RANGE;
use super::keys::{Accepts, spec};
use super::sections::{Config, Document, SourceSelection};
use super::units::format_duration;
use super::walk::{Scalar, Values};

/// Most samples `history.retention / sampler.fast_interval` may ask for.
pub const MAX_SAMPLES_PER_DEVICE: u128 = 10_000_000;
/// Fewest slow samples `alerts.leak_suspected.window` must hold: its 24
/// floor buckets with 5 observations each (`analysis::leak::density`). The
/// detector itself judges a window 10 % short of this, so that clock
/// jitter or a late tick does not leave it unjudged; the configuration
/// asks for the nominal count, so that a window it accepts keeps that
/// margin.
pub const MIN_LEAK_WINDOW_SAMPLES: u128 = 120;
/// Largest `source.speed`.
pub const MAX_SPEED: f64 = 10_000.0;

/// The reason serde's error gives, without the configuration library's
/// own wording around it.
fn reason(error: config::ConfigError) -> String {
    match error {
        config::ConfigError::At { error, .. } => reason(*error),
        config::ConfigError::Message(message) => message,
        other => other.to_string(),
    }
}

/// Turns the merged tree into a [`Config`], or says which key is wrong.
/// `values` holds every value as written, with its origin.
pub(super) fn validate(tree: config::Value, values: &Values) -> Result<Config, ConfigError> {
    let file: Document = serde_path_to_error::deserialize(tree).map_err(|error| {
        let key = error.path().to_string();
        let mut reason = reason(error.into_inner());
        if let (OUT_OF_RANGE, Some(Accepts::Int(min, max))) =
            (reason.as_str(), spec(&key).map(|spec| spec.accepts))
        {
            reason = format!("must be between {min} and {max}");
        }
        values.invalid(&key, None, reason)
    })?;
    file.check(values)?;
    let mut config = Config::from(file);
    config.alerts.rules.probe_stale_after = config.probe.interval.saturating_mul(2);
    forms(&config, values)?;
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
    // The leak rule judges a window only when its 24 floor buckets hold 5
    // process lists each on average (analysis::leak::density); a slower
    // slow tier could never fill the longest, so the rule would silently
    // judge nothing.
    let rules = &config.alerts.rules;
    let lists = rules.leak_window.as_nanos() / sampler.slow_interval.as_nanos().max(1);
    if rules.leak_suspected.enabled && lists < MIN_LEAK_WINDOW_SAMPLES {
        return conflict(
            "sampler.slow_interval",
            "alerts.leak_suspected.window",
            format!(
                "alerts.leak_suspected.window ({}) holds {lists} process lists at one every {}; \
                 leak detection needs at least {MIN_LEAK_WINDOW_SAMPLES}: shorten \
                 sampler.slow_interval, lengthen the window, or disable the rule",
                duration(rules.leak_window),
                duration(sampler.slow_interval)
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

/// The values whose form their type does not hold: numbers within a range
/// of reals, URLs and the log filter.
fn forms(config: &Config, values: &Values) -> Result<(), ConfigError> {
    let check = |key: &str, shown: Scalar, result: Result<(), &str>| {
        result.map_err(|reason| values.invalid(key, Some(shown), reason.to_owned()))
    };
    let speed = config.source.speed;
    if !(speed.is_finite() && speed > 0.0 && speed <= MAX_SPEED) {
        let reason = format!("must be a number above 0 and at most {MAX_SPEED}");
        return Err(values.invalid("source.speed", Some(Scalar::Float(speed)), reason));
    }
    let min_fit = config.alerts.rules.exhaustion_min_fit;
    check(
        "alerts.exhaustion_forecast.min_fit",
        Scalar::Float(min_fit),
        if (0.0..=1.0).contains(&min_fit) { Ok(()) } else { Err("must be a number from 0 to 1") },
    )?;
    let notify = &config.notify;
    for (key, url) in [
        ("notify.alertmanager_url", &notify.alertmanager_url),
        ("notify.webhook_url", &notify.webhook_url),
        ("notify.external_url", &notify.external_url),
    ] {
        if let Some(url) = url {
            check(key, Scalar::Str(url.clone()), url_form(url))?;
        }
    }
    let level = &config.log.level;
    if level.is_empty() {
        return check(
            "log.level",
            Scalar::Str(level.clone()),
            Err("expected a filter such as \"info\" or \"info,vramd=debug\""),
        );
    }
    tracing_subscriber::EnvFilter::try_new(level).map(drop).map_err(|error| {
        let reason = format!("not a tracing filter directive: {error}");
        values.invalid("log.level", Some(Scalar::Str(level.clone())), reason)
    })
}

/// An http:// or https:// URL: something after the scheme, no whitespace.
fn url_form(url: &str) -> Result<(), &'static str> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(rest)
            if !rest.is_empty()
                && !rest.starts_with('/')
                && !rest.contains(char::is_whitespace) =>
        {
            Ok(())
        }
        _ => Err("expected an http:// or https:// URL, such as \"http://alertmanager:9093\""),
    }
}
