//! How the probe child is told apart from workloads: it names itself
//! `vramd-probe` (argv[0] set by the daemon, `comm` set by the child), and
//! the process list marks it by that name or by being the daemon's own
//! child, so it is never attributed to a pod nor assessed for leaks.
//!
//! Must not depend on anything beyond `source::procfs`.

use std::path::Path;

use crate::source::procfs::ProcessIdentity;

/// argv[0] and `comm` of the probe child (under the kernel's 15 bytes).
pub const PROBE_PROCESS_NAME: &str = "vramd-probe";

/// Sets the calling process's `comm` (what `ps`, `top` and NVML-based tools
/// show) to [`PROBE_PROCESS_NAME`]. Executed as `/proc/self/exe`, the child
/// would otherwise show as `exe`. Writing `/proc/self/comm` needs no
/// `prctl` and so no `unsafe`; a failure only leaves the old name.
pub fn name_this_process() -> std::io::Result<()> {
    name_process(Path::new("/proc/self/comm"))
}

fn name_process(comm: &Path) -> std::io::Result<()> {
    std::fs::write(comm, PROBE_PROCESS_NAME)
}

/// Whether a process on a GPU is a vramd probe: the daemon's own child
/// (`own_pid`), or any process named like one (another vramd on the host,
/// or a child whose parent link is unreadable).
pub fn is_probe(identity: &ProcessIdentity, own_pid: u32) -> bool {
    identity.parent_pid == Some(own_pid) || identity.comm.as_deref() == Some(PROBE_PROCESS_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_writes_its_name_where_the_kernel_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let comm = dir.path().join("comm");
        name_process(&comm).unwrap();
        assert_eq!(std::fs::read_to_string(comm).unwrap(), "vramd-probe");
        assert!(PROBE_PROCESS_NAME.len() <= 15, "the kernel would cut the name");
    }

    #[test]
    fn the_probe_is_recognised_by_parent_or_name_and_workloads_are_not() {
        let own = 4_000;
        let identity = |comm: &str, parent: Option<u32>| ProcessIdentity {
            comm: Some(comm.into()),
            parent_pid: parent,
            ..ProcessIdentity::default()
        };
        assert!(is_probe(&identity("exe", Some(own)), own));
        assert!(is_probe(&identity("vramd-probe", Some(1)), own));
        assert!(is_probe(&identity("vramd-probe", None), own));
        assert!(!is_probe(&identity("python3", Some(1)), own));
        assert!(!is_probe(&identity("python3", None), own));
    }
}
