//! The FFI boundary every exported function goes through: panic containment,
//! the call log (`FAKE_CUDA_LOG`), writes into caller memory, and the
//! injected hang.
//!
//! A panic (a bug in the fake) becomes `CUDA_ERROR_UNKNOWN` and never
//! unwinds into C, which would abort the host process.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use crate::codes::*;

/// The environment variable naming the call log (one line appended per call).
pub const LOG_ENV: &str = "FAKE_CUDA_LOG";

/// Runs `body`, mapping `Ok` to `CUDA_SUCCESS`, `Err(code)` to `code` and a
/// panic to `CUDA_ERROR_UNKNOWN`; no log line.
pub fn boundary(body: impl FnOnce() -> Result<(), CUresult>) -> CUresult {
    // AssertUnwindSafe: the only shared state is the state mutex, whose
    // poisoning `state::lock` ignores on purpose; every mutation under it
    // leaves it consistent at each point a panic could occur.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

/// [`boundary`], then one log line: `"<name> ok"` or `"<name> <code>"`.
pub fn entry(name: &'static str, body: impl FnOnce() -> Result<(), CUresult>) -> CUresult {
    let code = boundary(body);
    let outcome = if code == SUCCESS { "ok".to_owned() } else { code.to_string() };
    log_line(name, &outcome);
    code
}

/// Logs `"<name> hang"`, then never returns (the calling thread sleeps
/// forever; only killing the process ends it).
pub fn hang(name: &'static str) -> ! {
    log_line(name, "hang");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Serialises appends from several threads, so lines never interleave.
static LOG_LOCK: Mutex<()> = Mutex::new(());

/// Appends `"<name> <outcome>\n"` to the log, if `FAKE_CUDA_LOG` is set
/// (read once, at the first call). Failures to write are ignored: the log
/// is for tests, and the call's result must not depend on it.
fn log_line(name: &str, outcome: &str) {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    let write = || {
        let Some(path) = PATH.get_or_init(|| std::env::var_os(LOG_ENV).map(PathBuf::from)) else {
            return;
        };
        let _guard = LOG_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        if let Ok(mut file) = OpenOptions::new().create(true).append(true).open(path) {
            let _ = file.write_all(format!("{name} {outcome}\n").as_bytes());
        }
    };
    let _ = catch_unwind(write);
}

/// Writes `value` through `out`; INVALID_VALUE when `out` is null.
///
/// # Safety
/// `out` must be null or valid for a write of one `T` (the C contract).
pub unsafe fn write<T>(out: *mut T, value: T) -> Result<(), CUresult> {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null, and the caller guarantees it is valid for a write of `T`.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boundary_maps_results_and_panics_to_codes() {
        assert_eq!(boundary(|| Ok(())), SUCCESS);
        assert_eq!(boundary(|| Err(OUT_OF_MEMORY)), OUT_OF_MEMORY);
        assert_eq!(entry("cuTest", || panic!("a bug in the fake")), UNKNOWN);
    }

    #[test]
    fn write_refuses_null() {
        let mut out = 0u64;
        // SAFETY: a live local, then null.
        unsafe {
            assert_eq!(write(&mut out, 7), Ok(()));
            assert_eq!(write(std::ptr::null_mut::<u64>(), 7), Err(INVALID_VALUE));
        }
        assert_eq!(out, 7);
    }
}
