//! Unknown keys and misplaced tables, named with their full path and origin.

use super::{ConfigError, Origin};
use super::{assert_error, load_env, load_file};

#[test]
fn config_unknown_top_level_key_in_file_is_named() {
    let error = assert_error(
        load_file("listen = \"127.0.0.1:1\"\n"),
        &["unknown configuration key `listen`", "vramd.toml"],
    );
    assert!(matches!(error, ConfigError::UnknownKey { origin: Origin::File(_), .. }), "{error:?}");
}

#[test]
fn config_unknown_section_in_file_is_named_with_a_suggestion() {
    assert_error(
        load_file("[samplr]\nfast_interval = \"1s\"\n"),
        &["unknown configuration key `samplr`", "did you mean `sampler`?"],
    );
}

#[test]
fn config_unknown_nested_key_in_file_is_named_with_its_full_path() {
    let error = assert_error(
        load_file("[sampler]\nfast_intervall = \"100ms\"\n"),
        &[
            "unknown configuration key `sampler.fast_intervall`",
            "vramd.toml",
            "`sampler.fast_interval`",
        ],
    );
    assert_eq!(error.key(), Some("sampler.fast_intervall"));
}

#[test]
fn config_unknown_deeper_table_in_file_is_named() {
    assert_error(
        load_file("[server.tls]\ncert = \"x.pem\"\n"),
        &["unknown configuration key `server.tls`"],
    );
}

#[test]
fn config_unknown_key_in_env_names_the_variable() {
    let error = assert_error(
        load_env(&[("VRAMD_SAMPLER__FAST_INTERVALL", "100ms")]),
        &[
            "unknown configuration key `sampler.fast_intervall`",
            "environment variable VRAMD_SAMPLER__FAST_INTERVALL",
        ],
    );
    assert!(matches!(error, ConfigError::UnknownKey { origin: Origin::Environment(_), .. }));
}

#[test]
fn config_env_with_a_single_underscore_separator_is_unknown() {
    assert_error(
        load_env(&[("VRAMD_SAMPLER_FAST_INTERVAL", "100ms")]),
        &[
            "`sampler_fast_interval`",
            "VRAMD_SAMPLER_FAST_INTERVAL",
            "did you mean `sampler.fast_interval`",
        ],
    );
}

#[test]
fn config_unknown_nested_env_key_names_the_variable() {
    assert_error(
        load_env(&[("VRAMD_SERVER__TLS__CERT", "x.pem")]),
        &["unknown configuration key `server.tls`", "VRAMD_SERVER__TLS__CERT"],
    );
}

#[test]
fn config_section_given_a_value_is_rejected() {
    assert_error(load_file("sampler = 5\n"), &["`sampler`", "must be a section"]);
    assert_error(load_env(&[("VRAMD_LOG", "debug")]), &["`log`", "VRAMD_LOG", "must be a section"]);
}

#[test]
fn config_table_or_list_where_a_value_belongs_is_rejected() {
    assert_error(
        load_file("[sampler.fast_interval]\nvalue = \"1s\"\n"),
        &["sampler.fast_interval", "expected a single value"],
    );
    assert_error(
        load_file("[server]\nlisten = [\"127.0.0.1:1\"]\n"),
        &["server.listen", "(a list)", "expected a single value"],
    );
}

#[test]
fn config_env_variable_below_a_key_names_the_variable() {
    assert_error(
        load_env(&[("VRAMD_SAMPLER__FAST_INTERVAL__X", "1s")]),
        &["sampler.fast_interval", "VRAMD_SAMPLER__FAST_INTERVAL__X", "expected a single value"],
    );
}

#[test]
fn config_unknown_nvml_key_is_named_with_a_suggestion() {
    assert_error(
        load_file("[nvml]\nrequire_gpus = true\n"),
        &["unknown configuration key `nvml.require_gpus`", "did you mean `nvml.require_gpu`?"],
    );
    assert_error(
        load_env(&[("VRAMD_NVML__XID_EVENT", "true")]),
        &["`nvml.xid_event`", "VRAMD_NVML__XID_EVENT", "did you mean `nvml.xid_events`?"],
    );
}

#[test]
fn config_unknown_rule_is_named_with_its_full_path_and_a_suggestion() {
    let error = assert_error(
        load_file("[alerts.memory_hgh]\nthreshold = 0.9\n"),
        &[
            "unknown configuration key `alerts.memory_hgh.threshold`",
            "vramd.toml",
            "did you mean `alerts.memory_high.threshold`?",
        ],
    );
    assert_eq!(error.key(), Some("alerts.memory_hgh.threshold"));
    let error = assert_error(
        load_env(&[("VRAMD_ALERTS__MEMORY_HGH__THRESHOLD", "0.9")]),
        &[
            "unknown configuration key `alerts.memory_hgh.threshold`",
            "environment variable VRAMD_ALERTS__MEMORY_HGH__THRESHOLD",
            "did you mean `alerts.memory_high.threshold`?",
        ],
    );
    assert!(matches!(error, ConfigError::UnknownKey { origin: Origin::Environment(_), .. }));
    // A rule name like none of the rules is named as the table.
    assert_error(
        load_file("[alerts.gpu_on_fire]\nthreshold = 1\n"),
        &["unknown configuration key `alerts.gpu_on_fire`", "vramd.toml"],
    );
}

#[test]
fn config_unknown_rule_key_is_named_with_its_full_path_and_a_suggestion() {
    let error = assert_error(
        load_file("[alerts.memory_high]\ntreshold = 0.9\n"),
        &[
            "unknown configuration key `alerts.memory_high.treshold`",
            "vramd.toml",
            "did you mean `alerts.memory_high.threshold`?",
        ],
    );
    assert_eq!(error.key(), Some("alerts.memory_high.treshold"));
    assert_error(
        load_env(&[("VRAMD_ALERTS__LEAK_SUSPECTED__WINDOWS", "1h")]),
        &[
            "unknown configuration key `alerts.leak_suspected.windows`",
            "environment variable VRAMD_ALERTS__LEAK_SUSPECTED__WINDOWS",
            "did you mean `alerts.leak_suspected.window`?",
        ],
    );
    // A key another rule has is unknown in this one.
    assert_error(
        load_file("[alerts.memory_high]\nwindow = \"5m\"\n"),
        &["unknown configuration key `alerts.memory_high.window`"],
    );
    // So is a rule key written directly in `[alerts]`.
    assert_error(
        load_file("[alerts]\nthreshold = 0.9\n"),
        &["unknown configuration key `alerts.threshold`"],
    );
}

#[test]
fn config_unknown_notify_key_is_named_with_a_suggestion() {
    assert_error(
        load_env(&[("VRAMD_NOTIFY__ALERTMANAGER", "http://am:9093")]),
        &[
            "unknown configuration key `notify.alertmanager`",
            "VRAMD_NOTIFY__ALERTMANAGER",
            "did you mean `notify.alertmanager_url`?",
        ],
    );
}

#[test]
fn config_rule_table_given_a_value_is_rejected() {
    assert_error(
        load_file("[alerts]\nmemory_high = 0.9\n"),
        &["`alerts.memory_high`", "vramd.toml", "must be a section"],
    );
    assert_error(
        load_env(&[("VRAMD_ALERTS__MEMORY_HIGH", "0.9")]),
        &["`alerts.memory_high`", "VRAMD_ALERTS__MEMORY_HIGH", "must be a section"],
    );
    assert_error(
        load_file("[alerts.memory_high.threshold]\nvalue = 0.9\n"),
        &["alerts.memory_high.threshold", "(a table)", "expected a single value"],
    );
    assert_error(
        load_env(&[("VRAMD_ALERTS__MEMORY_HIGH__FOR__X", "1m")]),
        &["alerts.memory_high.for", "VRAMD_ALERTS__MEMORY_HIGH__FOR__X", "expected a single value"],
    );
}

#[test]
fn config_env_variable_nested_thousands_deep_is_refused_without_overflowing() {
    // Each `__` is one more level of nested tables for the configuration
    // library, which recurses over them.
    let name = format!("VRAMD_SERVER{}", "__A".repeat(20_000));
    let error = assert_error(
        load_env(&[(name.as_str(), "1")]),
        &["unknown configuration key `server.a.a.", "environment variable VRAMD_SERVER__A__A"],
    );
    assert!(matches!(error, ConfigError::UnknownKey { origin: Origin::Environment(_), .. }));
}
