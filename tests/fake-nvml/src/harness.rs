//! Helpers for tests that load the fake library: build it (once per test
//! process, into its own target directory so the nested cargo never waits
//! on the outer `cargo test`'s build lock), install it as
//! `libnvidia-ml.so.1`, and write scenario files.
//!
//! ```no_run
//! use nvidia_ml_fake::harness;
//! let dir = tempfile::tempdir().unwrap();
//! let built = harness::build_fake_library(false).unwrap();
//! let lib = harness::install_as_libnvidia(dir.path(), &built);
//! let scenario = harness::write_scenario(dir.path(), &serde_json::json!({"devices": [{}]}));
//! // Either run a child process with FAKE_NVML_SCENARIO=<scenario> and
//! // LD_LIBRARY_PATH=<dir>, or, in process, point this copy at its scenario:
//! harness::set_scenario_path(&lib, &scenario).unwrap();
//! ```

use std::ffi::CString;
use std::os::raw::c_char;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use nvml_wrapper_sys::bindings::nvmlReturn_t;

/// File name `nvml-wrapper` (and so the daemon) loads by default.
pub const LIBRARY_NAME: &str = "libnvidia-ml.so.1";
/// File name of the scenario [`write_scenario`] writes.
pub const SCENARIO_NAME: &str = "fake-nvml-scenario.json";
/// The environment variable the library reads the scenario path from.
pub const SCENARIO_ENV: &str = crate::scenario::SCENARIO_ENV;

/// The workspace root: the nearest ancestor of this crate with a
/// `[workspace]` manifest.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .ancestors()
        .skip(1)
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|text| text.lines().any(|line| line.trim() == "[workspace]"))
        })
        .map_or_else(|| manifest_dir.join("../.."), Path::to_path_buf)
}

fn target_dir(legacy: bool) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    base.join(if legacy { "fake-nvml-legacy" } else { "fake-nvml" })
}

static BUILT: [OnceLock<Result<PathBuf, String>>; 2] = [OnceLock::new(), OnceLock::new()];

/// Builds the fake library (with `legacy = true`: the `legacy-driver`
/// feature, which leaves newer symbols out) once per process and returns
/// the path of the built `.so`.
pub fn build_fake_library(legacy: bool) -> Result<PathBuf, String> {
    BUILT[usize::from(legacy)].get_or_init(|| build(legacy)).clone()
}

fn build(legacy: bool) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = workspace_root();
    let target = target_dir(legacy);
    let mut command = Command::new(&cargo);
    command
        .current_dir(&root)
        .arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .args(["-p", "fake-nvml", "--lib"])
        .arg("--target-dir")
        .arg(&target);
    if legacy {
        command.args(["--features", "legacy-driver"]);
    }
    let output = command.output().map_err(|e| format!("cannot run {cargo:?}: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("building fake-nvml failed ({}):\n{stderr}", output.status));
    }
    let built = target.join("debug").join("libnvidia_ml_fake.so");
    if built.is_file() {
        Ok(built)
    } else {
        Err(format!("cargo succeeded but {} is missing", built.display()))
    }
}

/// Copies the built library to `dir/libnvidia-ml.so.1` and returns that path.
/// Each copy (a distinct file) loads as a separate instance with its own state.
///
/// # Panics
/// If the copy fails (a test helper: the test cannot go on).
pub fn install_as_libnvidia(dir: &Path, built: &Path) -> PathBuf {
    let path = dir.join(LIBRARY_NAME);
    if let Err(error) = std::fs::copy(built, &path) {
        panic!("cannot copy {} to {}: {error}", built.display(), path.display());
    }
    path
}

/// Writes `scenario` as `dir/fake-nvml-scenario.json` and returns the path.
///
/// # Panics
/// If the file cannot be written.
pub fn write_scenario(dir: &Path, scenario: &serde_json::Value) -> PathBuf {
    let path = dir.join(SCENARIO_NAME);
    if let Err(error) = std::fs::write(&path, scenario.to_string()) {
        panic!("cannot write {}: {error}", path.display());
    }
    path
}

/// Points the library copy at `library` to `scenario` (overriding
/// `FAKE_NVML_SCENARIO` for that copy only), for in-process tests that use
/// several scenarios at once. The copy stays loaded for the rest of the
/// process, so the setting survives `Nvml` being dropped and re-created.
pub fn set_scenario_path(library: &Path, scenario: &Path) -> Result<(), String> {
    type Setter = unsafe extern "C" fn(*const c_char) -> nvmlReturn_t;
    let path = CString::new(scenario.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: the fake library has no load-time initialisers; loading it
    // only maps code and zero-initialised statics.
    let lib = unsafe { libloading::Library::new(library) }.map_err(|e| e.to_string())?;
    // SAFETY: `fake_nvml_set_scenario_path` is defined in ffi_system.rs with
    // exactly this signature.
    let code = unsafe {
        let setter =
            lib.get::<Setter>(b"fake_nvml_set_scenario_path\0").map_err(|e| e.to_string())?;
        setter(path.as_ptr())
    };
    // Keep this copy loaded: unloading would drop the path just set.
    std::mem::forget(lib);
    if code == crate::codes::SUCCESS { Ok(()) } else { Err(format!("setter returned {code}")) }
}
