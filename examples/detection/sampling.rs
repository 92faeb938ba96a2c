//! The benchmark's sampling flags (`--fast-interval`, `--slow-interval`,
//! `--evaluation-interval`) applied to the configuration with the bounds
//! and the cross-key check the configuration itself applies.

use std::time::Duration;

use vramd::config::Config;

use super::Args;

pub fn duration(flag: &str, value: &str) -> Duration {
    vramd::config::parse_duration(value).unwrap_or_else(|error| panic!("{flag} {value}: {error}"))
}

/// The sampler and evaluation flags into `config`, refused where the
/// configuration would refuse them (bounds of each key, a slow tier
/// faster than the fast one).
pub fn apply(config: &mut Config, args: &Args) {
    let within = |flag: &str, value: Duration, low: Duration, high: Duration| {
        assert!(
            (low..=high).contains(&value),
            "{flag} must be between {low:?} and {high:?} (the configuration's bounds)"
        );
        value
    };
    let (ms, hour) = (Duration::from_millis, Duration::from_secs(3600));
    if let Some(value) = args.fast_interval {
        config.sampler.fast_interval = within("--fast-interval", value, ms(10), hour);
    }
    if let Some(value) = args.slow_interval {
        config.sampler.slow_interval = within("--slow-interval", value, ms(100), hour);
    }
    if let Some(value) = args.evaluation_interval {
        let ten_min = Duration::from_secs(600);
        config.alerts.evaluation_interval =
            within("--evaluation-interval", value, ms(100), ten_min);
    }
    assert!(
        config.sampler.slow_interval >= config.sampler.fast_interval,
        "the slow interval must be at least the fast interval (sampler.slow_interval)"
    );
    // As the configuration refuses it (`config::validate`): the leak
    // window must hold 120 process lists, or no window is ever judged.
    let rules = &config.alerts.rules;
    let lists = rules.leak_window.as_nanos() / config.sampler.slow_interval.as_nanos().max(1);
    assert!(
        !rules.leak_suspected.enabled || lists >= 120,
        "--slow-interval leaves alerts.leak_suspected.window {lists} process lists; at least 120"
    );
}
