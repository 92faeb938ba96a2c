//! Loading: finding the configuration file and merging the four layers,
//! lowest first: the built-in defaults (the document's `Default`, written
//! out as the file would write it), the file, `VRAMD_<SECTION>__<KEY>`
//! variables, command-line options ([`Override`]s). Each layer is a tree
//! of values as written; each key's origin is the last layer that set it.
//! The process environment is passed in, never read here.
//!
//! No `config` crate since the sections moved into their components:
//! every layer is walked here anyway (origins, moved keys), so the crate
//! only parsed TOML (`toml` does) and added one more representation of
//! every value. `serde_path_to_error` names the full key serde refuses.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::Document;
use super::catalogue::{ENV_PREFIX, ENV_SEPARATOR};
use super::error::{ConfigError, Origin};
use super::render::key_values;
use super::tree::{self, Origins};
use crate::setting::{Keys, read_at_most};

/// Where the configuration file is looked for when `--config` is not
/// given, first match wins.
pub const DEFAULT_SEARCH_PATHS: [&str; 2] = ["config/vramd.toml", "/etc/vramd/vramd.toml"];

/// One command-line option that sets a key: it wins over every other
/// layer. The value is as given; a path that is not UTF-8 is refused when
/// the layer is read, naming the flag.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub key: &'static str,
    pub flag: &'static str,
    pub value: std::ffi::OsString,
}

/// Everything [`load`] reads, passed in so tests control all of it.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadOptions {
    /// `--config PATH`: this file must exist.
    pub config_path: Option<PathBuf>,
    /// Looked at in order when `config_path` is `None`; the first that is
    /// a file is read, and none is fine.
    pub search_paths: Vec<PathBuf>,
    /// The process environment (or a test's); only `VRAMD_*` names are used.
    pub env: Vec<(String, String)>,
    /// The command-line options that are set (`cli::Overrides::entries`).
    pub overrides: Vec<Override>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            config_path: None,
            search_paths: DEFAULT_SEARCH_PATHS.iter().map(PathBuf::from).collect(),
            env: Vec::new(),
            overrides: Vec::new(),
        }
    }
}

/// The process environment for [`LoadOptions::env`]. Unlike
/// `std::env::vars`, it does not panic on a variable that is not UTF-8:
/// a `VRAMD_*` one is kept lossily (validation then rejects its value by
/// name), any other is irrelevant and skipped.
pub fn process_environment() -> Vec<(String, String)> {
    std::env::vars_os()
        .map(|(name, value)| (name.to_string_lossy().into_owned(), value))
        .filter(|(name, _)| name.starts_with(ENV_PREFIX))
        .map(|(name, value)| (name, value.to_string_lossy().into_owned()))
        .collect()
}

/// The configuration file [`load`] reads, if any: `config_path` (which
/// must exist), else the first search path that is a file.
pub fn config_file(options: &LoadOptions) -> Result<Option<PathBuf>, ConfigError> {
    match &options.config_path {
        Some(path) => match std::fs::metadata(path) {
            Ok(_) => Ok(Some(path.clone())),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                Err(ConfigError::FileNotFound { path: path.clone() })
            }
            Err(source) => Err(ConfigError::FileRead { path: path.clone(), source }),
        },
        None => Ok(options.search_paths.iter().find(|path| path.is_file()).cloned()),
    }
}

/// A moved key read under its old spelling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deprecated {
    pub old: String,
    pub new: String,
    pub origin: Origin,
}

impl std::fmt::Display for Deprecated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (from {}) is deprecated: write {} instead", self.old, self.origin, self.new)
    }
}

/// Loads and validates the configuration: built-in defaults, then the
/// file, then the environment, then the overrides.
pub fn load<D: Document>(options: &LoadOptions) -> Result<D, ConfigError> {
    load_noting(options).map(|(document, _)| document)
}

/// [`load`], with the moved keys that were read under their old spelling.
pub fn load_noting<D: Document>(
    options: &LoadOptions,
) -> Result<(D, Vec<Deprecated>), ConfigError> {
    let keys = D::keys();
    let mut merged = Map::new();
    for (spec, value) in key_values(&D::default()) {
        if !value.is_null() {
            tree::set(&mut merged, &spec.key, value);
        }
    }
    let mut origins = Origins::new();
    let mut deprecated = Vec::new();
    let file = config_file(options)?;
    let mut layers = Vec::new();
    if let Some(path) = &file {
        layers.push(file_layer(path)?);
    }
    layers.push(environment_layer(&options.env)?);
    layers.push(override_layer(&options.overrides)?);
    for (mut layer, mut set_by) in layers {
        for (old, new) in D::moved() {
            if let Some(value) = tree::take(&mut layer, &old) {
                let origin = set_by.remove(&old).unwrap_or(Origin::Default);
                deprecated.push(Deprecated { old, new: new.clone(), origin: origin.clone() });
                set_by.insert(new.clone(), origin);
                tree::set(&mut layer, &new, value);
            }
        }
        let mut leaves = Vec::new();
        tree::leaves("", &layer, &mut leaves);
        for (key, value) in leaves {
            let origin = set_by.get(&key).cloned().unwrap_or(Origin::Default);
            origins.insert(key.clone(), origin);
            tree::set(&mut merged, &key, value);
        }
    }
    tree::check_shape(keys, &merged, "", &origins)?;
    let origin = |key: &str| origins.get(key).cloned().unwrap_or(Origin::Default);
    let mut written = BTreeMap::new();
    for spec in keys {
        let Some(value) = tree::take(&mut merged, &spec.key) else { continue };
        let read = tree::read(spec, &value).map_err(|reason| ConfigError::InvalidValue {
            key: spec.key.clone(),
            value: value.to_string(),
            origin: origin(&spec.key),
            reason,
        })?;
        if origins.contains_key(&spec.key) {
            written.insert(spec.key.as_str(), value.to_string());
        }
        tree::set(&mut merged, &spec.key, read);
    }
    let document: D = serde_path_to_error::deserialize(Value::Object(merged)).map_err(|error| {
        let key = error.path().to_string();
        ConfigError::InvalidValue {
            value: written.get(key.as_str()).cloned().unwrap_or_else(|| "(not set)".into()),
            origin: origin(&key),
            reason: error.into_inner().to_string(),
            key,
        }
    })?;
    let mut checked = Keys::default();
    document.check(&mut checked);
    if let Some(refused) = checked.refused() {
        return Err(ConfigError::InvalidValue {
            value: written.get(refused.key.as_str()).cloned().unwrap_or(refused.shown),
            origin: origin(&refused.key),
            reason: refused.reason,
            key: refused.key,
        });
    }
    document.check_across().map_err(|conflict| ConfigError::Conflict {
        first_origin: origin(conflict.first),
        second_origin: origin(conflict.second),
        first: conflict.first,
        second: conflict.second,
        reason: conflict.reason,
    })?;
    Ok((document, deprecated))
}

/// A layer: its tree, and where each of its keys came from.
type Layer = (Map<String, Value>, Origins);

/// Largest configuration file read. A fixed bound, not a key: the file
/// cannot bound its own reading (`--config /dev/zero` must not fill RAM).
pub const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;

fn file_layer(path: &Path) -> Result<Layer, ConfigError> {
    let read_error = |source| ConfigError::FileRead { path: path.to_path_buf(), source };
    let text = read_at_most(path, MAX_CONFIG_FILE_BYTES).map_err(read_error)?.ok_or_else(|| {
        let why = format!(
            "larger than {MAX_CONFIG_FILE_BYTES} bytes; a configuration file is at most 1 MiB"
        );
        read_error(io::Error::new(io::ErrorKind::InvalidData, why))
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let parse_error = |reason: String| ConfigError::FileParse {
        path: path.to_path_buf(),
        reason: reason.trim().to_owned(),
    };
    let mut table: toml::Table =
        toml::from_str(text).map_err(|error| parse_error(error.to_string()))?;
    dates_as_text(&mut table);
    match serde_json::to_value(table).map_err(|error| parse_error(error.to_string()))? {
        Value::Object(tree) => {
            let mut leaves = Vec::new();
            tree::leaves("", &tree, &mut leaves);
            let origin = Origin::File(path.to_path_buf());
            let set_by = leaves.into_iter().map(|(key, _)| (key, origin.clone())).collect();
            Ok((tree, set_by))
        }
        _ => Err(parse_error("not a table".into())),
    }
}

/// TOML dates and times as the text they were written as: no key takes
/// one, so each is refused by its key's form with the value quoted.
fn dates_as_text(table: &mut toml::Table) {
    for (_, value) in table.iter_mut() {
        match value {
            toml::Value::Datetime(date) => *value = toml::Value::String(date.to_string()),
            toml::Value::Table(inner) => dates_as_text(inner),
            _ => {}
        }
    }
}

/// The dotted key an environment variable sets: lowercased, prefix
/// removed, `__` → `.`.
fn env_key(name: &str) -> Option<String> {
    let rest = name.strip_prefix(ENV_PREFIX)?;
    Some(rest.to_lowercase().replace(ENV_SEPARATOR, "."))
}

/// Most levels an environment variable's key may have (keys have two or
/// three): a name with thousands of `__` is refused, not walked.
const MAX_ENV_KEY_LEVELS: usize = 64;

/// The `VRAMD_*` variables as a layer, and which variable set which key.
fn environment_layer(env: &[(String, String)]) -> Result<Layer, ConfigError> {
    let mut names = Origins::new();
    let mut tree = Map::new();
    for (name, value) in env {
        let Some(key) = env_key(name) else { continue };
        if key.split('.').nth(MAX_ENV_KEY_LEVELS).is_some() || key.split('.').any(str::is_empty) {
            let origin = Origin::Environment(name.clone());
            return Err(ConfigError::UnknownKey { key, origin, suggestion: None });
        }
        if let Some(Origin::Environment(first)) =
            names.insert(key.clone(), Origin::Environment(name.clone()))
            && first != *name
        {
            let (first, second) =
                if first < *name { (first, name.clone()) } else { (name.clone(), first) };
            return Err(ConfigError::AmbiguousEnvironment { key, first, second });
        }
        tree::set(&mut tree, &key, Value::String(value.clone()));
    }
    Ok((tree, names))
}

/// The command-line options that are set, as a layer.
fn override_layer(overrides: &[Override]) -> Result<Layer, ConfigError> {
    let mut names = Origins::new();
    let mut tree = Map::new();
    for Override { key, flag, value } in overrides {
        let origin = Origin::CommandLine(flag);
        let Some(text) = value.to_str() else {
            return Err(ConfigError::InvalidValue {
                key: (*key).to_owned(),
                value: format!("{:?}", value.to_string_lossy()),
                origin,
                reason: "paths must be valid UTF-8".to_owned(),
            });
        };
        names.insert((*key).to_owned(), origin);
        tree::set(&mut tree, key, Value::String(text.to_owned()));
    }
    Ok((tree, names))
}
