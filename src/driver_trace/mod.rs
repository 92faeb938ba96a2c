//! The driver trace: every GPU process's CUDA allocations, seen from
//! outside the process through eBPF uprobes on `libcuda.so.1`'s allocation
//! and free calls (`crates/driver-trace` holds the BPF program and its
//! loader; docs/driver-trace.md).
//!
//! Owns: `[driver_trace]` and the decision whether the trace runs
//! ([`decide`]: mode and privilege), the per-process and per-device
//! accounting (`ledger`, with `contexts`: which device each thread's
//! allocations land on),
//! the discovery of the libcuda files the listed processes map
//! (`discover`), the tracer's thread (`runner`), and the [`DriverBoard`]
//! whose join puts each process's statistics on slow readings (through the
//! `source::join::SlowJoin` built in `app`), like the allocator reports.
//! A source of readings: depends on `model`, `setting` and `clock` only;
//! knows nothing of history, analysis or HTTP.

mod board;
mod config;
mod contexts;
mod discover;
mod ledger;
mod runner;

pub use board::{DriverBoard, DropReason, TraceHealth};
pub use config::{DriverTraceConfig, TraceMode};
pub use ledger::DriverOom;
pub use runner::{OomSink, TraceHandle, start};

/// Why the trace could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "driver_trace.mode is \"on\" but vramd lacks {missing} (run as root, or grant CAP_SYS_ADMIN and CAP_SYS_PTRACE: uprobes need CAP_SYS_ADMIN, CAP_BPF and CAP_PERFMON are not enough; docs/deploy.md)"
    )]
    Privilege { missing: String },
    #[error("loading the driver trace's BPF programs: {0}")]
    Load(#[source] ::driver_trace::TraceError),
    #[error("starting the driver trace's thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("loading the driver trace's BPF programs did not finish within {after:?}")]
    TimedOut { after: std::time::Duration },
}

/// What the configuration and the privileges decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Run,
    /// Off, with the one line to log (none when configured off).
    Skip(Option<String>),
}

/// `mode = "on"` without the privilege is an error; `auto` without it is
/// off, saying why once.
pub fn decide(
    mode: TraceMode,
    privileges: &::driver_trace::Privileges,
) -> Result<Decision, StartError> {
    match mode {
        TraceMode::Off => Ok(Decision::Skip(None)),
        _ if privileges.sufficient() => Ok(Decision::Run),
        TraceMode::On => Err(StartError::Privilege { missing: privileges.missing.join(" and ") }),
        TraceMode::Auto => Ok(Decision::Skip(Some(format!(
            "driver trace off: vramd lacks {} (driver_trace.mode = \"auto\")",
            privileges.missing.join(" and ")
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::driver_trace::Privileges;

    #[test]
    fn on_without_privilege_names_what_is_missing_and_auto_degrades() {
        let lacking = Privileges { missing: vec!["CAP_SYS_ADMIN", "CAP_SYS_PTRACE"] };
        let error = decide(TraceMode::On, &lacking).unwrap_err().to_string();
        assert!(error.contains("CAP_SYS_ADMIN and CAP_SYS_PTRACE"), "{error}");
        assert!(matches!(decide(TraceMode::Auto, &lacking), Ok(Decision::Skip(Some(_)))));
        assert_eq!(decide(TraceMode::Off, &lacking).unwrap(), Decision::Skip(None));
        let root = Privileges { missing: vec![] };
        assert_eq!(decide(TraceMode::Auto, &root).unwrap(), Decision::Run);
        assert_eq!(decide(TraceMode::On, &root).unwrap(), Decision::Run);
    }
}
