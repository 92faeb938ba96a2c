//! Why a socket refused vramd's user, and the one setting that changes it.
//!
//! Owns: reading the socket's owner and mode and vramd's own identity (uid
//! and gid from the owner of `/proc/self`, supplementary groups from
//! `/proc/self/status`: no `unsafe`, no libc call) once a connect failed
//! with "permission denied", and the advice derived from them. A connect
//! to a unix socket needs write permission on it: its owner (with the
//! usual `0755 root:root` kubelet socket, uid 0 and no capability), a
//! member of its group where the mode lets the group write, or
//! `CAP_DAC_OVERRIDE`. Depends on nothing in the crate.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A socket's ownership and mode beside the identity it refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Permission bits of the socket (`0o755`).
    pub mode: u32,
    pub owner: u32,
    pub group: u32,
    /// vramd's effective user and group, when `/proc/self` could be read.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub groups: Vec<u32>,
}

impl Refusal {
    /// Reads both sides; `None` when the socket cannot even be stat'ed.
    /// Blocking file I/O: call it off the async runtime.
    pub fn inspect(socket: &Path) -> Option<Self> {
        let socket = std::fs::metadata(socket).ok()?;
        let me = std::fs::metadata("/proc/self").ok();
        let groups = std::fs::read_to_string("/proc/self/status")
            .ok()
            .map(|status| parse_groups(&status))
            .unwrap_or_default();
        Some(Self {
            mode: socket.mode() & 0o7777,
            owner: socket.uid(),
            group: socket.gid(),
            uid: me.as_ref().map(MetadataExt::uid),
            gid: me.as_ref().map(MetadataExt::gid),
            groups,
        })
    }

    /// The setting to change, in the DaemonSet's terms.
    pub fn advice(&self) -> String {
        let root = "run vramd as uid 0 with every capability dropped \
                    (securityContext runAsUser: 0, runAsNonRoot: false, capabilities drop [ALL], \
                    as deploy/kubernetes/daemonset.yaml does)";
        let writable_by_group = self.mode & 0o020 != 0;
        let in_group = self.gid == Some(self.group) || self.groups.contains(&self.group);
        let owner_may = self.mode & 0o200 != 0;
        if self.mode & 0o002 != 0 || (writable_by_group && in_group) || self.uid == Some(self.owner)
        {
            // The socket itself would let this identity in: a directory on
            // the way refused to be searched.
            return format!(
                "the socket's mode would allow this user, so a directory above it refuses to be \
                 searched: mount the socket's directory with its parents readable, or {root}"
            );
        }
        match (writable_by_group, owner_may) {
            (true, _) => format!(
                "add the socket's group (securityContext supplementalGroups: [{}]) or {root}",
                self.group
            ),
            (false, true) if self.owner == 0 => format!(
                "only uid 0 may connect (the group cannot write the socket, so \
                 supplementalGroups cannot help): {root}"
            ),
            (false, true) => format!(
                "only uid {} may connect: run vramd as that user (securityContext runAsUser: {}) \
                 with every capability dropped",
                self.owner, self.owner
            ),
            (false, false) => format!(
                "nobody but a process with CAP_DAC_OVERRIDE may connect: add that capability \
                 (securityContext capabilities add [DAC_OVERRIDE]) and {root}"
            ),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = |value: Option<u32>| value.map_or_else(|| "?".to_owned(), |v| v.to_string());
        let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
        write!(
            f,
            "socket mode {:04o} owner {}:{}, vramd runs as uid {} gid {} groups [{}]; {}",
            self.mode,
            self.owner,
            self.group,
            id(self.uid),
            id(self.gid),
            groups.join(","),
            self.advice()
        )
    }
}

/// The supplementary groups of a `/proc/PID/status` text (`Groups:` line).
fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|groups| groups.split_whitespace().filter_map(|g| g.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(mode: u32, groups: &[u32]) -> Refusal {
        Refusal {
            mode,
            owner: 0,
            group: 0,
            uid: Some(65532),
            gid: Some(65532),
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn a_0755_root_socket_needs_uid_0_and_says_a_group_cannot_help() {
        let advice = refusal(0o755, &[0]).advice();
        assert!(advice.contains("only uid 0 may connect"), "{advice}");
        assert!(advice.contains("runAsUser: 0"), "{advice}");
        assert!(advice.contains("capabilities drop [ALL]"), "{advice}");
    }

    #[test]
    fn a_0660_socket_names_its_group() {
        let advice = refusal(0o660, &[]).advice();
        assert!(advice.contains("supplementalGroups: [0]"), "{advice}");
        let text = refusal(0o660, &[]).to_string();
        assert!(text.starts_with("socket mode 0660 owner 0:0, vramd runs as uid 65532"), "{text}");
    }

    #[test]
    fn a_socket_that_would_allow_the_user_blames_its_directory() {
        assert!(refusal(0o660, &[0]).advice().contains("directory above it"));
        assert!(refusal(0o666, &[]).advice().contains("directory above it"));
    }

    #[test]
    fn groups_are_read_from_the_status_text() {
        assert_eq!(parse_groups("Name:\tx\nGroups:\t0 44 65532 \nVmRSS: 1\n"), [0, 44, 65532]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("Name:\tx\n"), Vec::<u32>::new());
    }
}
