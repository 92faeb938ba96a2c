//! Where the scenario comes from: an override set through the library, or
//! `FAKE_NVML_SCENARIO`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{SCENARIO_ENV, Scenario};

static PATH_OVERRIDE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Sets (or with `None` clears) the scenario path for this library instance;
/// it takes precedence over `FAKE_NVML_SCENARIO`.
pub fn set_path_override(path: Option<PathBuf>) {
    *PATH_OVERRIDE.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = path;
}

/// The configured scenario, read and validated.
pub fn load_configured() -> Result<Scenario, String> {
    let overridden =
        PATH_OVERRIDE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let path = match overridden {
        Some(path) => path,
        None => std::env::var_os(SCENARIO_ENV)
            .map(PathBuf::from)
            .ok_or_else(|| format!("{SCENARIO_ENV} is not set"))?,
    };
    load(&path)
}

pub fn load(path: &Path) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Scenario::parse(&text).map_err(|e| format!("invalid scenario {}: {e}", path.display()))
}
