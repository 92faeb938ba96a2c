//! Whether this process may trace: load BPF programs, create uprobes, and
//! reach other processes' libcuda through `/proc/PID/root`. Read from the
//! effective capabilities in `/proc/self/status`, so no syscall wrapper is
//! needed.
//!
//! What is needed was measured by dropping capabilities with `setpriv`
//! (docs/deploy.md, "The driver trace"): `CAP_SYS_ADMIN`, because kernels
//! since the 2025 uprobe fix (mainline and the stable series; 6.1.146 is
//! one) refuse a uprobe perf event to `CAP_PERFMON` alone, so `CAP_BPF` +
//! `CAP_PERFMON` load the programs but attach nothing; and `CAP_SYS_PTRACE`,
//! because `/proc/PID/root` and `/proc/PID/maps` of a process of another
//! user, or with capabilities vramd lacks, are behind the ptrace check.

const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;

/// Each capability tracing needs, and its name.
const NEEDED: [(u32, &str); 2] =
    [(CAP_SYS_ADMIN, "CAP_SYS_ADMIN"), (CAP_SYS_PTRACE, "CAP_SYS_PTRACE")];

/// What the process holds, and what it lacks for tracing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Privileges {
    /// The capabilities tracing needs that the process does not hold;
    /// empty when it may trace.
    pub missing: Vec<&'static str>,
}

impl Privileges {
    pub fn sufficient(&self) -> bool {
        self.missing.is_empty()
    }

    /// From the `CapEff:` mask.
    pub fn from_effective(mask: u64) -> Self {
        let holds = |cap: u32| mask & (1u64 << cap) != 0;
        let missing =
            NEEDED.into_iter().filter(|(cap, _)| !holds(*cap)).map(|(_, name)| name).collect();
        Self { missing }
    }
}

/// This process's privileges; when `/proc/self/status` cannot be read,
/// everything is reported missing.
pub fn privileges() -> Privileges {
    let mask = std::fs::read_to_string("/proc/self/status").ok().and_then(|status| {
        let line = status.lines().find_map(|line| line.strip_prefix("CapEff:"))?;
        u64::from_str_radix(line.trim(), 16).ok()
    });
    Privileges::from_effective(mask.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;

    #[test]
    fn sys_admin_and_sys_ptrace_are_needed_bpf_and_perfmon_are_not_enough() {
        let both = (1 << CAP_SYS_ADMIN) | (1 << CAP_SYS_PTRACE);
        assert!(Privileges::from_effective(both).sufficient());
        let bpf = (1u64 << CAP_BPF) | (1 << CAP_PERFMON) | (1 << CAP_SYS_PTRACE);
        assert_eq!(Privileges::from_effective(bpf).missing, ["CAP_SYS_ADMIN"]);
        assert_eq!(Privileges::from_effective(1 << CAP_SYS_ADMIN).missing, ["CAP_SYS_PTRACE"]);
        assert_eq!(Privileges::from_effective(0).missing, ["CAP_SYS_ADMIN", "CAP_SYS_PTRACE"]);
    }
}
