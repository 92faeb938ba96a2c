//! Helpers for tests that load the fake library: build it (once per test
//! process, into its own target directory so the nested cargo never waits
//! on the outer `cargo test`'s build lock), install it as `libcuda.so.1`,
//! write scenario files and read the call log.
//!
//! ```no_run
//! use cuda_fake::harness;
//! let dir = tempfile::tempdir().unwrap();
//! let built = harness::build_fake_library().unwrap();
//! let lib = harness::install_as_libcuda(dir.path(), &built);
//! let scenario = harness::write_scenario(dir.path(), &serde_json::json!({"devices": [{}]}));
//! let log = dir.path().join("calls.log");
//! // Run a child process with FAKE_CUDA_SCENARIO=<scenario>,
//! // FAKE_CUDA_LOG=<log> and LD_LIBRARY_PATH=<dir> (or load <lib> by path
//! // there), then check what it did:
//! let calls = harness::read_log(&log);
//! # let _ = (lib, scenario, calls);
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// File name the driver is loaded by (`cuda_driver::DEFAULT_LIBRARY`).
pub const LIBRARY_NAME: &str = "libcuda.so.1";
/// File name of the scenario [`write_scenario`] writes.
pub const SCENARIO_NAME: &str = "fake-cuda-scenario.json";
/// The environment variable the library reads the scenario path from.
pub const SCENARIO_ENV: &str = crate::scenario::SCENARIO_ENV;
/// The environment variable naming the call log.
pub const LOG_ENV: &str = crate::ffi_util::LOG_ENV;

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

fn target_dir() -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    base.join("fake-cuda")
}

static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Builds the fake library once per process (`$CARGO build -p fake-cuda
/// --lib --target-dir <target>/fake-cuda`) and returns the path of the
/// built `libcuda_fake.so`.
pub fn build_fake_library() -> Result<PathBuf, String> {
    BUILT.get_or_init(build).clone()
}

fn build() -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = workspace_root();
    let target = target_dir();
    let output = Command::new(&cargo)
        .current_dir(&root)
        .arg("build")
        .arg("--quiet")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .args(["-p", "fake-cuda", "--lib"])
        .arg("--target-dir")
        .arg(&target)
        .output()
        .map_err(|e| format!("cannot run {cargo:?}: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("building fake-cuda failed ({}):\n{stderr}", output.status));
    }
    let built = target.join("debug").join("libcuda_fake.so");
    if built.is_file() {
        Ok(built)
    } else {
        Err(format!("cargo succeeded but {} is missing", built.display()))
    }
}

/// Copies the built library to `dir/libcuda.so.1` and returns that path.
///
/// # Panics
/// If the copy fails (a test helper: the test cannot go on).
pub fn install_as_libcuda(dir: &Path, built: &Path) -> PathBuf {
    let path = dir.join(LIBRARY_NAME);
    if let Err(error) = std::fs::copy(built, &path) {
        panic!("cannot copy {} to {}: {error}", built.display(), path.display());
    }
    path
}

/// Writes `scenario` (a `serde_json::Value`, or JSON text) as
/// `dir/fake-cuda-scenario.json` and returns the path.
///
/// Takes `impl Display` rather than `&serde_json::Value`: this crate's rlib
/// has no hash in its file name (it is also a cdylib), so builds of it with
/// different feature sets of its dependencies (e.g. as vramd's
/// dev-dependency and on its own) overwrite each other in the shared target
/// directory, and a `serde_json::Value` from the caller's build could then
/// be a different type from this crate's. A std trait has no such problem.
///
/// # Panics
/// If the file cannot be written.
pub fn write_scenario(dir: &Path, scenario: &impl std::fmt::Display) -> PathBuf {
    let path = dir.join(SCENARIO_NAME);
    if let Err(error) = std::fs::write(&path, scenario.to_string()) {
        panic!("cannot write {}: {error}", path.display());
    }
    path
}

/// The lines of a call log (`"cuMemAlloc_v2 ok"`, `"cuInit 100"`, …); empty
/// when the file does not exist (no call was made).
///
/// # Panics
/// If the file exists but cannot be read.
pub fn read_log(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => panic!("cannot read {}: {error}", path.display()),
    }
}
