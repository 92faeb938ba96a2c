//! Loading: finding the configuration file and merging the four layers.
//!
//! Owns: [`LoadOptions`], [`Overrides`] (the command-line options that set
//! keys, which `cli` flattens into its own), [`load`] and the file search.
//! Layers, lowest first: built-in defaults (serde's, from each section's
//! `Default`), the configuration file, `VRAMD_<SECTION>__<KEY>`
//! environment variables, command-line options. Every value is kept as
//! written (strings stay strings), collected with its origin by `walk` and
//! read through serde by `validate`. The process environment is never read
//! here; the caller passes it in. Depends on the config submodules and the
//! `config` crate.
//!
//! Why the `config` crate with `serde_path_to_error` and not figment:
//! errors must name the exact variable (`VRAMD_SAMPLER__FAST_INTERVAL`);
//! here each key is mapped to the variable or flag that set it (a value
//! set by neither came from the file), and `serde_path_to_error` names the
//! full key serde refused. figment's per-value `Metadata` names a provider
//! and interpolates the key path, so the exact variable would still need a
//! custom interpolater; its `Env` provider also parses values (`"1"`
//! becomes an integer), while here environment values stay the text the
//! user wrote, which validation quotes back. Cost: `config` and
//! `serde_path_to_error` were both already built (the latter for axum);
//! figment would add it and its own dependencies, among them a proc-macro
//! crate, to every clean build on a 2-core machine, for no gain in what
//! errors can say.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use config::{Environment, FileFormat, Map, Source, Value};

use super::error::{ConfigError, Origin};
use super::keys::{ENV_PREFIX, ENV_SEPARATOR};
use super::sections::Config;
use super::validate::validate;
use super::walk::{self, OriginContext};
use crate::model::ScenarioKind;

/// Where the configuration file is looked for when `--config` is not
/// given, first match wins.
pub const DEFAULT_SEARCH_PATHS: [&str; 2] = ["config/vramd.toml", "/etc/vramd/vramd.toml"];

/// Values from the command line; each set one wins over every other layer.
/// The doc comments are the options' help; each names the key it sets.
#[derive(Clone, Debug, Default, PartialEq, clap::Args)]
pub struct Overrides {
    /// Serve /metrics, the REST API and health checks on this address
    /// [server.listen].
    #[arg(long, global = true, value_name = "ADDR")]
    pub listen: Option<String>,

    /// Read a simulated scenario instead of the GPU driver
    /// [source.simulate]; `vramd scenarios` lists them.
    #[arg(long, global = true, value_name = "SCENARIO", value_parser = scenario_names())]
    pub simulate: Option<String>,

    /// Number of simulated GPUs, 1 to 8 [simulator.gpus].
    #[arg(long, global = true, value_name = "N")]
    pub gpus: Option<u32>,

    /// Seed of the simulator; the same seed gives the same readings
    /// [simulator.seed].
    #[arg(long, global = true, value_name = "N")]
    pub seed: Option<u64>,

    /// Simulated or replayed seconds per real second, above 0 and at most
    /// 10000 [source.speed].
    #[arg(long, global = true, value_name = "X")]
    pub speed: Option<f64>,

    /// Replay this recorded NDJSON trace instead of reading the GPU driver
    /// [source.replay].
    #[arg(long, global = true, value_name = "FILE")]
    pub replay: Option<PathBuf>,

    /// Also record every reading to this NDJSON trace [source.record].
    #[arg(long, global = true, value_name = "FILE")]
    pub record: Option<PathBuf>,

    /// Serve TLS, client certificates, basic auth and extra headers from
    /// this exporter-toolkit web configuration [server.web_config].
    #[arg(long = "web.config.file", global = true, value_name = "FILE")]
    pub web_config: Option<PathBuf>,

    /// Log line format [log.format].
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["text", "json"])]
    pub log_format: Option<String>,

    /// Log filter, such as `info` or `info,vramd=debug` [log.level].
    #[arg(long, global = true, value_name = "FILTER")]
    pub log_level: Option<String>,

    // Sets the key to `true`; absent (`false`) leaves it to the other layers.
    /// Exit with status 1 at start-up, naming the library, when NVML cannot
    /// be initialised, instead of serving `vramd_nvml_up 0` and retrying
    /// [nvml.require_gpu].
    #[arg(long, global = true)]
    pub require_gpu: bool,
}

/// Only scenario names are accepted, and `--help` lists them.
fn scenario_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(ScenarioKind::ALL.iter().map(|kind| kind.name()))
}

impl Overrides {
    /// `(key, flag, value as text)` for every override that is set.
    fn entries(&self) -> Result<Vec<(&'static str, &'static str, String)>, ConfigError> {
        let path = |key: &'static str, flag: &'static str, path: &Option<PathBuf>| {
            path.as_ref()
                .map(|path| match path.to_str() {
                    Some(text) => Ok((key, flag, text.to_owned())),
                    None => Err(ConfigError::InvalidValue {
                        key: key.to_owned(),
                        value: format!("{:?}", path.to_string_lossy()),
                        origin: Origin::CommandLine(flag),
                        reason: "paths must be valid UTF-8".to_owned(),
                    }),
                })
                .transpose()
        };
        let text = |key, flag, value: Option<String>| value.map(|value| (key, flag, value));
        Ok([
            text("server.listen", "--listen", self.listen.clone()),
            text("source.simulate", "--simulate", self.simulate.clone()),
            text("simulator.gpus", "--gpus", self.gpus.map(|n| n.to_string())),
            text("simulator.seed", "--seed", self.seed.map(|n| n.to_string())),
            // Display of f64 is the shortest text that parses back exactly.
            text("source.speed", "--speed", self.speed.map(|x| x.to_string())),
            path("source.replay", "--replay", &self.replay)?,
            path("source.record", "--record", &self.record)?,
            path("server.web_config", "--web.config.file", &self.web_config)?,
            text("log.format", "--log-format", self.log_format.clone()),
            text("log.level", "--log-level", self.log_level.clone()),
            text("nvml.require_gpu", "--require-gpu", self.require_gpu.then(|| "true".to_owned())),
        ]
        .into_iter()
        .flatten()
        .collect())
    }
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
    /// The command-line options.
    pub overrides: Overrides,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            config_path: None,
            search_paths: DEFAULT_SEARCH_PATHS.iter().map(PathBuf::from).collect(),
            env: Vec::new(),
            overrides: Overrides::default(),
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

/// Loads and validates the configuration: built-in defaults, then the
/// file, then the environment, then the overrides.
pub fn load(options: &LoadOptions) -> Result<Config, ConfigError> {
    let other = |error: config::ConfigError| ConfigError::Other { reason: error.to_string() };
    // Built-in defaults are serde's (`#[serde(default)]` on every section),
    // so the layers hold only what was set.
    let mut builder = config::Config::builder();
    let file = config_file(options)?;
    if let Some(path) = &file {
        builder = builder.add_source(file_layer(path)?);
    }

    let (env_layer, env_vars) = environment_layer(&options.env)?;
    builder = builder.add_source(env_layer);

    let mut override_flags = BTreeMap::new();
    for (key, flag, value) in options.overrides.entries()? {
        override_flags.insert(key, flag);
        builder = builder.set_override(key, value).map_err(other)?;
    }

    let merged = builder.build().map_err(other)?;
    let context =
        OriginContext { file: file.as_deref(), env_vars: &env_vars, overrides: &override_flags };
    let values = walk::check(&merged.cache, &context)?;
    validate(merged.cache, &values)
}

/// The configuration file, parsed once up front so a syntax error is
/// reported as the file's, not as a merge failure.
#[derive(Clone, Debug)]
struct FileLayer(Map<String, Value>);

impl Source for FileLayer {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<Map<String, Value>, config::ConfigError> {
        Ok(self.0.clone())
    }
}

/// Largest configuration file read. A fixed bound, not a key: the file
/// cannot bound its own reading (`--config /dev/zero` must not fill RAM).
pub const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;

/// The text file at `path`, or `None` when it is larger than `max` bytes
/// (read no further: a file cannot bound its own reading).
pub fn read_at_most(path: &Path, max: u64) -> io::Result<Option<String>> {
    let mut text = String::new();
    std::fs::File::open(path)?.take(max + 1).read_to_string(&mut text)?;
    Ok((text.len() as u64 <= max).then_some(text))
}

fn file_layer(path: &Path) -> Result<FileLayer, ConfigError> {
    let read_error = |source| ConfigError::FileRead { path: path.to_path_buf(), source };
    let text = read_at_most(path, MAX_CONFIG_FILE_BYTES).map_err(read_error)?.ok_or_else(|| {
        let why = format!(
            "larger than {MAX_CONFIG_FILE_BYTES} bytes; a configuration file is at most 1 MiB"
        );
        read_error(io::Error::new(io::ErrorKind::InvalidData, why))
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let map = config::File::from_str(text, FileFormat::Toml).collect().map_err(|error| {
        let reason = match error {
            config::ConfigError::FileParse { cause, .. } => cause.to_string(),
            other => other.to_string(),
        };
        ConfigError::FileParse { path: path.to_path_buf(), reason: reason.trim().to_owned() }
    })?;
    Ok(FileLayer(map))
}

/// The dotted key an environment variable sets, the way
/// `config::Environment` derives it: lowercased, prefix removed, `__` → `.`.
fn env_key(name: &str) -> Option<String> {
    let rest = name.strip_prefix(ENV_PREFIX)?;
    Some(rest.to_lowercase().replace(ENV_SEPARATOR, "."))
}

/// Most levels an environment variable's key may have. Keys have two or
/// three; the configuration library nests one table per level, recursively,
/// so a name with thousands of `__` would overflow the stack before the
/// unknown-key walk could refuse it.
const MAX_ENV_KEY_LEVELS: usize = 64;

/// The `VRAMD_*` variables as a layer, and which variable set which key.
fn environment_layer(
    env: &[(String, String)],
) -> Result<(Environment, BTreeMap<String, String>), ConfigError> {
    let mut vars = BTreeMap::new();
    let mut source = Map::new();
    for (name, value) in env {
        let Some(key) = env_key(name) else { continue };
        if key.split('.').nth(MAX_ENV_KEY_LEVELS).is_some() {
            let origin = Origin::Environment(name.clone());
            return Err(ConfigError::UnknownKey { key, origin, suggestion: None });
        }
        if let Some(first) = vars.insert(key.clone(), name.clone())
            && first != *name
        {
            let (first, second) =
                if first < *name { (first, name.clone()) } else { (name.clone(), first) };
            return Err(ConfigError::AmbiguousEnvironment { key, first, second });
        }
        source.insert(name.clone(), value.clone());
    }
    let layer = Environment::with_prefix(ENV_PREFIX.trim_end_matches('_'))
        .prefix_separator("_")
        .separator(ENV_SEPARATOR)
        .source(Some(source));
    Ok((layer, vars))
}
