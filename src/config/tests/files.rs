//! Finding and reading the configuration file, and the shipped
//! `config/vramd.toml` and `docs/configuration.md`.

use std::path::{Path, PathBuf};

use super::{Accepts, ConfigError, KEYS, LoadOptions, config_file, defaults, load};
use super::{assert_error, file, isolated, load_file};

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

#[test]
fn config_explicit_path_that_is_missing_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let (_other, present) = file("[server]\nlisten = \"127.0.0.1:1\"\n");
    let options = LoadOptions {
        config_path: Some(missing.clone()),
        // A search path that exists must not be used instead.
        search_paths: vec![present],
        ..isolated()
    };
    let error = assert_error(load(&options), &[&missing.display().to_string(), "does not exist"]);
    assert!(matches!(error, ConfigError::FileNotFound { path } if path == missing));
}

#[test]
fn config_default_search_paths_first_existing_wins() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.toml");
    let second = dir.path().join("second.toml");
    let missing = dir.path().join("missing.toml");
    std::fs::write(&second, "[server]\nlisten = \"127.0.0.1:2\"\n").unwrap();
    let options = LoadOptions {
        search_paths: vec![missing.clone(), first.clone(), second.clone()],
        ..isolated()
    };
    assert_eq!(config_file(&options).unwrap(), Some(second.clone()));
    assert_eq!(load(&options).unwrap().server.listen.port(), 2);

    std::fs::write(&first, "[server]\nlisten = \"127.0.0.1:1\"\n").unwrap();
    assert_eq!(config_file(&options).unwrap(), Some(first));
    assert_eq!(load(&options).unwrap().server.listen.port(), 1);

    // A directory is not a configuration file.
    let options =
        LoadOptions { search_paths: vec![dir.path().to_path_buf(), second], ..isolated() };
    assert_eq!(load(&options).unwrap().server.listen.port(), 2);
}

#[test]
fn config_no_file_found_means_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let options = LoadOptions { search_paths: vec![dir.path().join("absent.toml")], ..isolated() };
    assert_eq!(config_file(&options).unwrap(), None);
    assert_eq!(load(&options).unwrap(), defaults());
}

#[test]
fn config_default_options_search_the_documented_paths() {
    let paths = LoadOptions::default().search_paths;
    assert_eq!(paths, [PathBuf::from("config/vramd.toml"), PathBuf::from("/etc/vramd/vramd.toml")]);
}

#[test]
fn config_file_that_is_not_toml_names_the_file() {
    let error = assert_error(load_file("[server\nlisten = 1\n"), &["vramd.toml", "cannot parse"]);
    assert!(matches!(error, ConfigError::FileParse { .. }));
}

#[test]
fn config_file_with_byte_order_mark_loads() {
    let config = load_file("\u{feff}[server]\nlisten = \"127.0.0.1:5\"\n").unwrap();
    assert_eq!(config.server.listen.port(), 5);
}

#[test]
fn config_shipped_file_loads_to_exactly_the_defaults() {
    let options =
        LoadOptions { config_path: Some(manifest_path("config/vramd.toml")), ..isolated() };
    assert_eq!(load(&options).unwrap(), defaults());
}

/// `name = ` or `# name = ` inside the `[table]` block of `text` (a
/// section, or a rule's table such as `[alerts.memory_high]`).
fn table_mentions(text: &str, table: &str, name: &str) -> bool {
    let header = format!("[{table}]");
    let Some(start) = text.lines().position(|line| line.trim() == header) else { return false };
    text.lines()
        .skip(start + 1)
        .take_while(|line| !line.trim_start().starts_with('['))
        .map(|line| line.trim_start().trim_start_matches('#').trim_start())
        .any(|line| line.starts_with(&format!("{name} =")))
}

#[test]
fn config_shipped_file_has_every_key_in_its_table() {
    let text = std::fs::read_to_string(manifest_path("config/vramd.toml")).unwrap();
    for spec in KEYS.iter() {
        assert!(
            table_mentions(&text, spec.table(), spec.name()),
            "{} missing from config/vramd.toml",
            spec.key
        );
    }
}

#[test]
fn config_reference_documents_every_key_and_its_variable() {
    let text = std::fs::read_to_string(manifest_path("docs/configuration.md")).unwrap();
    for spec in KEYS.iter() {
        assert!(text.contains(&format!("`{}`", spec.key)), "{} missing from docs", spec.key);
        let env_var = super::env_var_for(&spec.key);
        assert!(text.contains(&env_var), "{env_var} missing from docs");
    }
    for needle in ["VRAMD_<SECTION>__<KEY>", "Exit status", "--config"] {
        assert!(text.contains(needle), "{needle} missing from docs");
    }
}

/// The range column of `key`'s row in the reference's key tables.
fn documented_range<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let row = text.lines().find(|line| line.starts_with(&format!("| `{key}` |")))?;
    row.split('|').nth(4).map(str::trim)
}

#[test]
fn config_reference_ranges_are_the_validated_bounds() {
    let text = std::fs::read_to_string(manifest_path("docs/configuration.md")).unwrap();
    let mut wrong = Vec::new();
    for spec in KEYS.iter() {
        if let Accepts::Words(_) = spec.accepts {
            continue;
        }
        let bounds = spec.accepts.bounds();
        let bounds = bounds.trim_start_matches("size, ");
        let documented = documented_range(&text, &spec.key).unwrap_or("(no row)");
        if !documented.starts_with(bounds) {
            wrong.push(format!("{}: documented `{documented}`, accepted {bounds}", spec.key));
        }
    }
    assert!(wrong.is_empty(), "docs/configuration.md is out of step:\n{}", wrong.join("\n"));
}

/// The comment lines right above `name = ` in the `[table]` block of
/// `text`, joined with spaces.
fn comment_above(text: &str, table: &str, name: &str) -> Option<String> {
    let header = format!("[{table}]");
    let start = text.lines().position(|line| line.trim() == header)?;
    let mut comment = Vec::new();
    for line in text.lines().skip(start + 1) {
        if line.starts_with('[') {
            return None;
        }
        if let Some(words) = line.strip_prefix('#') {
            comment.push(words.trim());
        } else if line.starts_with(&format!("{name} =")) {
            return Some(comment.join(" "));
        } else if !line.trim().is_empty() {
            comment.clear();
        }
    }
    None
}

#[test]
fn config_shipped_file_states_the_validated_bounds() {
    let text = std::fs::read_to_string(manifest_path("config/vramd.toml")).unwrap();
    let mut wrong = Vec::new();
    for spec in KEYS.iter() {
        if let Accepts::Words(_) = spec.accepts {
            continue;
        }
        let bounds = spec.accepts.bounds();
        let bounds = bounds.trim_start_matches("size, ");
        let comment = comment_above(&text, spec.table(), spec.name()).unwrap_or_default();
        if !comment.contains(bounds) {
            wrong.push(format!("{}: `{comment}` does not say {bounds}", spec.key));
        }
    }
    assert!(wrong.is_empty(), "config/vramd.toml is out of step:\n{}", wrong.join("\n"));
}
