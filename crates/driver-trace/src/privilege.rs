//! Whether this process may load BPF programs and attach uprobes: root's
//! effective capabilities, or `CAP_BPF` + `CAP_PERFMON` (Linux 5.8+).
//! Read from `/proc/self/status`, so no syscall wrapper is needed.

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

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

    /// From the `CapEff:` mask. `CAP_SYS_ADMIN` covers both (kernels before
    /// 5.8 know only it).
    pub fn from_effective(mask: u64) -> Self {
        let holds = |cap: u32| mask & (1u64 << cap) != 0;
        let missing = if holds(CAP_SYS_ADMIN) {
            Vec::new()
        } else {
            [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
                .into_iter()
                .filter(|(cap, _)| !holds(*cap))
                .map(|(_, name)| name)
                .collect()
        };
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
    match mask {
        Some(mask) => Privileges::from_effective(mask),
        None => Privileges { missing: vec!["CAP_BPF", "CAP_PERFMON"] },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_or_both_capabilities_suffice() {
        assert!(Privileges::from_effective(1 << CAP_SYS_ADMIN).sufficient());
        assert!(Privileges::from_effective((1 << CAP_BPF) | (1 << CAP_PERFMON)).sufficient());
        assert_eq!(Privileges::from_effective(1 << CAP_BPF).missing, ["CAP_PERFMON"]);
        assert_eq!(Privileges::from_effective(0).missing, ["CAP_BPF", "CAP_PERFMON"]);
    }
}
