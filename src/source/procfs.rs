//! Process identity from `/proc`, for the NVML source.
//!
//! Owns: reading `/proc/<pid>/{comm,cmdline,cgroup,status}` for a host PID
//! that NVML reported, and the pure parsers that turn those files into a
//! [`ProcessIdentity`]: short name, command line, container ID, Kubernetes
//! pod UID and the PID inside the process's own PID namespace.
//!
//! Depends on `model::SharedStr` only: an identity is read once per process
//! and then repeated in every slow sample, so its strings are shared, never
//! copied per sample. [`ProcReader::identify`] does file I/O, so
//! callers run it on blocking threads (the slow tier's `spawn_blocking`).
//! It never fails and never panics: a field the kernel will not give (the
//! process exited, no permission, an old kernel) is `None`. Every read is
//! bounded, so a hostile or huge file cannot make the daemon allocate much.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::model::SharedStr;

/// The most bytes read from any one `/proc` file.
const READ_LIMIT: u64 = 64 * 1024;

/// The largest command-line length a [`ProcReader`] honours; larger
/// settings are clamped so the bounded read always covers what is shown.
pub const MAX_CMDLINE_BYTES: usize = 32 * 1024;

/// Length of a full container ID (docker, containerd, cri-o, podman).
const CONTAINER_ID_LEN: usize = 64;

/// Runtime prefixes of container cgroup names (`docker-<id>.scope`, …).
const CONTAINER_PREFIXES: [&str; 4] = ["docker-", "cri-containerd-", "crio-", "libpod-"];

/// What `/proc` says about one process. Each field is `None` when it could
/// not be read or does not apply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// `/proc/<pid>/comm`, trimmed.
    pub comm: Option<SharedStr>,
    /// `/proc/<pid>/cmdline` with NUL separators as spaces, cut as
    /// [`format_cmdline`] does; `None` when disabled, empty (kernel
    /// threads) or unreadable.
    pub cmdline: Option<SharedStr>,
    /// 64-hex container ID from `/proc/<pid>/cgroup`.
    pub container_id: Option<SharedStr>,
    /// Kubernetes pod UID from `/proc/<pid>/cgroup`, with dashes.
    pub pod_uid: Option<SharedStr>,
    /// Innermost PID from the `NSpid` line of `/proc/<pid>/status`; equal to
    /// the host PID when the process is in the reader's PID namespace.
    pub namespace_pid: Option<u32>,
    /// `PPid` from `/proc/<pid>/status` (tells the daemon's own children).
    pub parent_pid: Option<u32>,
}

/// Reads process identities from a procfs tree.
#[derive(Clone, Debug)]
pub struct ProcReader {
    root: PathBuf,
    max_cmdline_bytes: usize,
}

impl ProcReader {
    /// `root` is `/proc` in production (a fake tree in tests);
    /// `max_cmdline_bytes` of 0 turns command lines off, and values above
    /// [`MAX_CMDLINE_BYTES`] are clamped to it.
    pub fn new(root: impl Into<PathBuf>, max_cmdline_bytes: usize) -> Self {
        Self { root: root.into(), max_cmdline_bytes: max_cmdline_bytes.min(MAX_CMDLINE_BYTES) }
    }

    /// Everything readable about `pid`. Never fails; see [`ProcessIdentity`].
    pub fn identify(&self, pid: u32) -> ProcessIdentity {
        let dir = self.root.join(pid.to_string());
        let comm = read_text(&dir.join("comm"))
            .map(|text| text.trim().to_owned())
            .filter(|comm| !comm.is_empty());
        // A few bytes past the cut are enough to know a cut is needed.
        let limit = (self.max_cmdline_bytes as u64 + 4).min(READ_LIMIT);
        let cmdline = (self.max_cmdline_bytes > 0)
            .then(|| read_bounded(&dir.join("cmdline"), limit))
            .flatten()
            .and_then(|raw| format_cmdline(&raw, self.max_cmdline_bytes));
        let cgroup = read_text(&dir.join("cgroup"));
        let container_id = cgroup.as_deref().and_then(parse_container_id);
        let pod_uid = cgroup.as_deref().and_then(parse_pod_uid);
        let status = read_text(&dir.join("status"));
        let namespace_pid = status.as_deref().and_then(parse_namespace_pid);
        let parent_pid = status.as_deref().and_then(parse_parent_pid);
        let shared = |text: Option<String>| text.map(SharedStr::from);
        ProcessIdentity {
            comm: shared(comm),
            cmdline: shared(cmdline),
            container_id: shared(container_id),
            pod_uid: shared(pod_uid),
            namespace_pid,
            parent_pid,
        }
    }

    /// When `pid` started (clock ticks after boot, `/proc/<pid>/stat` field
    /// 22): with the PID, what tells one process from a later one reusing
    /// its PID. `None` when the process is gone or the file is malformed.
    pub fn start_time(&self, pid: u32) -> Option<u64> {
        let stat = read_bounded(&self.root.join(pid.to_string()).join("stat"), 4096)?;
        parse_start_time(&String::from_utf8_lossy(&stat))
    }
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` text. The name in field 2
/// may hold spaces and parentheses, so fields are counted after its last
/// `)`, where field 3 begins.
pub fn parse_start_time(stat_text: &str) -> Option<u64> {
    let (_, after_name) = stat_text.rsplit_once(')')?;
    after_name.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// At most `limit` bytes of the file, or `None` when it cannot be read.
fn read_bounded(path: &Path, limit: u64) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    File::open(path).ok()?.take(limit).read_to_end(&mut buf).ok()?;
    Some(buf)
}

fn read_text(path: &Path) -> Option<String> {
    read_bounded(path, READ_LIMIT).map(|raw| String::from_utf8_lossy(&raw).into_owned())
}

/// The cgroup path of each line of `/proc/<pid>/cgroup`
/// (`hierarchy-id:controllers:path`); malformed lines are skipped.
fn cgroup_paths(cgroup_text: &str) -> impl Iterator<Item = &str> {
    cgroup_text.lines().filter_map(|line| line.splitn(3, ':').nth(2).map(str::trim))
}

/// The container ID in a `/proc/<pid>/cgroup` text, lowercase.
///
/// Recognises a bare 64-hex path segment (docker cgroupfs `/docker/<id>`,
/// Kubernetes cgroupfs `/kubepods/…/pod<uid>/<id>`) and the systemd scopes
/// `docker-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope` and
/// `libpod-<id>.scope`, in cgroup v1 and v2 files. The innermost match of
/// the first line that has one wins (nested containers report their own).
pub fn parse_container_id(cgroup_text: &str) -> Option<String> {
    cgroup_paths(cgroup_text).find_map(|path| path.split('/').rev().find_map(container_segment_id))
}

fn container_segment_id(segment: &str) -> Option<String> {
    let name = segment.strip_suffix(".scope").unwrap_or(segment);
    let id = CONTAINER_PREFIXES.iter().find_map(|prefix| name.strip_prefix(prefix)).unwrap_or(name);
    (id.len() == CONTAINER_ID_LEN && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| id.to_ascii_lowercase())
}

/// The Kubernetes pod UID in a `/proc/<pid>/cgroup` text, with dashes.
///
/// Recognises the cgroupfs driver's `pod<uid>` segment below a `kubepods`
/// segment and the systemd driver's `kubepods-<qos>-pod<uid_underscored>.slice`
/// (also `kubepods-pod<uid>.slice` for guaranteed pods and kubelet cgroup
/// roots such as `kubelet-kubepods-…`). The UID is an RFC 4122 UUID or, for
/// static pods, a 32-hex hash.
pub fn parse_pod_uid(cgroup_text: &str) -> Option<String> {
    cgroup_paths(cgroup_text).find_map(pod_uid_in_path)
}

fn pod_uid_in_path(path: &str) -> Option<String> {
    let mut under_kubepods = false;
    for segment in path.split('/') {
        let candidate = if segment.contains("kubepods") {
            under_kubepods = true;
            segment
                .strip_suffix(".slice")
                .and_then(|name| name.rfind("-pod").and_then(|at| name.get(at + "-pod".len()..)))
        } else if under_kubepods {
            segment.strip_prefix("pod")
        } else {
            None
        };
        if let Some(uid) = candidate.and_then(normalize_pod_uid) {
            return Some(uid);
        }
    }
    None
}

fn normalize_pod_uid(raw: &str) -> Option<String> {
    let uid = raw.replace('_', "-").to_ascii_lowercase();
    let is_uuid = uid.len() == 36
        && uid.char_indices().all(|(at, c)| {
            if matches!(at, 8 | 13 | 18 | 23) { c == '-' } else { c.is_ascii_hexdigit() }
        });
    let is_hash = uid.len() == 32 && uid.bytes().all(|b| b.is_ascii_hexdigit());
    (is_uuid || is_hash).then_some(uid)
}

/// The innermost PID (last field) of the `NSpid` line of a
/// `/proc/<pid>/status` text; `None` when the line is missing or malformed.
/// With a single field the process shares the reader's namespace, and that
/// field is returned.
pub fn parse_namespace_pid(status_text: &str) -> Option<u32> {
    status_text
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .and_then(|fields| fields.split_whitespace().next_back())
        .and_then(|pid| pid.parse().ok())
}

/// The `PPid` line of `/proc/<pid>/status`.
pub fn parse_parent_pid(status_text: &str) -> Option<u32> {
    let line = status_text.lines().find_map(|line| line.strip_prefix("PPid:"))?;
    line.trim().parse().ok()
}

/// A `/proc/<pid>/cmdline` as one line: NUL separators become spaces
/// (trailing NULs are dropped), invalid UTF-8 is replaced lossily, and text
/// longer than `max_bytes` is cut on a char boundary at or below
/// `max_bytes` with `…` appended (so the result may exceed `max_bytes` by
/// the ellipsis' three bytes). `None` when `max_bytes` is 0 or the command
/// line is empty.
pub fn format_cmdline(raw: &[u8], max_bytes: usize) -> Option<String> {
    if max_bytes == 0 {
        return None;
    }
    let end = raw.iter().rposition(|&b| b != 0)? + 1;
    let bytes: Vec<u8> = raw.get(..end)?.iter().map(|&b| if b == 0 { b' ' } else { b }).collect();
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if text.len() > max_bytes {
        let mut cut = max_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use tempfile::TempDir;

    use super::*;

    const ID: &str = "3f4e5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081";
    const POD: &str = "8a1c4f2e-5b3d-4e6f-9a7b-0c1d2e3f4a5b";
    const POD_UNDERSCORED: &str = "8a1c4f2e_5b3d_4e6f_9a7b_0c1d2e3f4a5b";

    fn docker_v1() -> String {
        format!(
            "12:memory:/docker/{ID}\n11:cpuset:/docker/{ID}\n10:devices:/docker/{ID}\n\
             1:name=systemd:/docker/{ID}\n0::/system.slice/containerd.service\n"
        )
    }

    fn docker_v2() -> String {
        format!("0::/system.slice/docker-{ID}.scope\n")
    }

    fn kube_cgroupfs() -> String {
        format!(
            "12:memory:/kubepods/burstable/pod{POD}/{ID}\n\
             11:pids:/kubepods/burstable/pod{POD}/{ID}\n\
             1:name=systemd:/kubepods/burstable/pod{POD}/{ID}\n"
        )
    }

    fn kube_systemd() -> String {
        format!(
            "0::/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod{POD_UNDERSCORED}.slice/cri-containerd-{ID}.scope\n"
        )
    }

    fn crio() -> String {
        format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/\
             kubepods-besteffort-pod{POD_UNDERSCORED}.slice/crio-{ID}.scope\n"
        )
    }

    fn podman() -> String {
        format!("0::/machine.slice/libpod-{ID}.scope/container\n")
    }

    const HOST: &str = "0::/user.slice/user-1000.slice/session-2.scope\n";

    #[test]
    fn start_time_is_read_past_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (py (worker) 1) S 1 4242 4242 0 -1 4194560 90 0 0 0 7 3 0 0 \
                    20 0 12 0 987654 1234567 890";
        assert_eq!(parse_start_time(stat), Some(987_654));
        assert_eq!(parse_start_time("4242 (short) S 1 2"), None);
        assert_eq!(parse_start_time("no name at all"), None);
    }

    #[test]
    fn container_id_docker_cgroup_v1() {
        assert_eq!(parse_container_id(&docker_v1()).as_deref(), Some(ID));
    }

    #[test]
    fn container_id_docker_cgroup_v2() {
        assert_eq!(parse_container_id(&docker_v2()).as_deref(), Some(ID));
    }

    #[test]
    fn container_id_kubernetes_cgroupfs() {
        assert_eq!(parse_container_id(&kube_cgroupfs()).as_deref(), Some(ID));
    }

    #[test]
    fn container_id_kubernetes_systemd_containerd() {
        assert_eq!(parse_container_id(&kube_systemd()).as_deref(), Some(ID));
    }

    #[test]
    fn container_id_crio() {
        assert_eq!(parse_container_id(&crio()).as_deref(), Some(ID));
        let cgroupfs = format!("0::/kubepods/besteffort/pod{POD}/crio-{ID}\n");
        assert_eq!(parse_container_id(&cgroupfs).as_deref(), Some(ID));
    }

    #[test]
    fn container_id_podman() {
        assert_eq!(parse_container_id(&podman()).as_deref(), Some(ID));
        let v1 = format!("4:memory:/machine.slice/libpod-{ID}.scope\n");
        assert_eq!(parse_container_id(&v1).as_deref(), Some(ID));
    }

    #[test]
    fn container_id_uppercase_is_lowercased() {
        let text = format!("0::/docker/{}\n", ID.to_ascii_uppercase());
        assert_eq!(parse_container_id(&text).as_deref(), Some(ID));
    }

    #[test]
    fn container_id_nested_picks_innermost() {
        let outer = "a".repeat(64);
        let text = format!("0::/docker/{outer}/docker/{ID}\n");
        assert_eq!(parse_container_id(&text).as_deref(), Some(ID));
    }

    #[test]
    fn container_id_none_for_host_process() {
        assert_eq!(parse_container_id(HOST), None);
        assert_eq!(parse_container_id("0::/\n"), None);
        assert_eq!(parse_container_id("0::/init.scope\n"), None);
    }

    #[test]
    fn container_id_none_for_garbage() {
        assert_eq!(parse_container_id(""), None);
        assert_eq!(parse_container_id("not a cgroup file\n\0\u{fffd}::::"), None);
        assert_eq!(parse_container_id(&format!("{ID}\n")), None); // no path field
        // One short, one long, one non-hex, an unknown runtime prefix.
        let short = &ID[1..];
        let long = format!("{ID}0");
        let non_hex = format!("{}g", &ID[1..]);
        for text in [
            format!("0::/docker/{short}\n"),
            format!("0::/docker/{long}\n"),
            format!("0::/docker/{non_hex}\n"),
            format!("0::/system.slice/other-{ID}.scope\n"),
            format!("0::/system.slice/docker-{ID}.service\n"),
        ] {
            assert_eq!(parse_container_id(&text), None, "{text}");
        }
    }

    #[test]
    fn pod_uid_kubernetes_cgroupfs() {
        assert_eq!(parse_pod_uid(&kube_cgroupfs()).as_deref(), Some(POD));
    }

    #[test]
    fn pod_uid_kubernetes_systemd_underscores_become_dashes() {
        assert_eq!(parse_pod_uid(&kube_systemd()).as_deref(), Some(POD));
        assert_eq!(parse_pod_uid(&crio()).as_deref(), Some(POD));
    }

    #[test]
    fn pod_uid_guaranteed_and_kubelet_root_and_static_pod() {
        let guaranteed = format!(
            "0::/kubepods.slice/kubepods-pod{POD_UNDERSCORED}.slice/cri-containerd-{ID}.scope\n"
        );
        assert_eq!(parse_pod_uid(&guaranteed).as_deref(), Some(POD));
        let kind = format!(
            "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/\
             kubelet-kubepods-besteffort-pod{POD_UNDERSCORED}.slice/cri-containerd-{ID}.scope\n"
        );
        assert_eq!(parse_pod_uid(&kind).as_deref(), Some(POD));
        let hash = "0f6b8b3c5b3ad7d4f4b7c6f0e0c3b1a2";
        let static_pod = format!("0::/kubepods/burstable/pod{hash}/{ID}\n");
        assert_eq!(parse_pod_uid(&static_pod).as_deref(), Some(hash));
    }

    #[test]
    fn pod_uid_none_outside_kubernetes() {
        for text in [docker_v1(), docker_v2(), podman(), HOST.to_owned()] {
            assert_eq!(parse_pod_uid(&text), None, "{text}");
        }
        // A `pod…` segment that is not under kubepods.
        assert_eq!(parse_pod_uid(&format!("0::/system.slice/pod{POD}\n")), None);
    }

    #[test]
    fn pod_uid_none_for_garbage() {
        assert_eq!(parse_pod_uid(""), None);
        assert_eq!(parse_pod_uid("::::\n:\n"), None);
        assert_eq!(parse_pod_uid("0::/kubepods/burstable/podnotauid/x\n"), None);
        assert_eq!(parse_pod_uid("0::/kubepods.slice/kubepods-burstable-pod.slice\n"), None);
        let misplaced = "0::/kubepods/pod8a1c4f2e5-b3d-4e6f-9a7b-0c1d2e3f4a5b/x\n";
        assert_eq!(parse_pod_uid(misplaced), None);
    }

    #[test]
    fn namespace_pid_takes_innermost() {
        let status =
            "Name:\tpython3\nTgid:\t1234\nPid:\t1234\nNSpid:\t1234\t56\nNSpgid:\t1234\t56\n";
        assert_eq!(parse_namespace_pid(status), Some(56));
        assert_eq!(parse_namespace_pid("NSpid:\t1234\t56\t7\n"), Some(7));
    }

    #[test]
    fn namespace_pid_single_field_is_the_pid() {
        assert_eq!(parse_namespace_pid("Name:\tbash\nNSpid:\t1234\n"), Some(1234));
    }

    #[test]
    fn namespace_pid_missing_or_malformed() {
        assert_eq!(parse_namespace_pid("Name:\tbash\nPid:\t1234\n"), None);
        assert_eq!(parse_namespace_pid(""), None);
        assert_eq!(parse_namespace_pid("NSpid:\n"), None);
        assert_eq!(parse_namespace_pid("NSpid:\t1234\tabc\n"), None);
        assert_eq!(parse_namespace_pid("NSpid:\t99999999999\n"), None);
    }

    #[test]
    fn cmdline_nuls_become_spaces() {
        let raw = b"python3\0train.py\0--epochs\x0010\0";
        assert_eq!(format_cmdline(raw, 4096).as_deref(), Some("python3 train.py --epochs 10"));
    }

    #[test]
    fn cmdline_empty_is_none() {
        assert_eq!(format_cmdline(b"", 4096), None);
        assert_eq!(format_cmdline(b"\0\0", 4096), None);
    }

    #[test]
    fn cmdline_disabled_is_none() {
        assert_eq!(format_cmdline(b"python3\0", 0), None);
    }

    #[test]
    fn cmdline_invalid_utf8_is_lossy() {
        assert_eq!(format_cmdline(b"a\xffb\0", 4096).as_deref(), Some("a\u{fffd}b"));
    }

    #[test]
    fn cmdline_truncation_at_exactly_max_and_one_over() {
        assert_eq!(format_cmdline(b"abcdef\0", 6).as_deref(), Some("abcdef"));
        assert_eq!(format_cmdline(b"abcdefg\0", 6).as_deref(), Some("abcdef…"));
        // A NUL separator counts as one byte of text.
        assert_eq!(format_cmdline(b"abc\0def\0", 7).as_deref(), Some("abc def"));
        assert_eq!(format_cmdline(b"abc\0defg\0", 7).as_deref(), Some("abc def…"));
    }

    #[test]
    fn cmdline_truncation_respects_char_boundaries() {
        // "é" is two bytes; a cut at 2 would split it.
        assert_eq!(format_cmdline("aéb".as_bytes(), 2).as_deref(), Some("a…"));
        assert_eq!(format_cmdline("aéb".as_bytes(), 3).as_deref(), Some("aé…"));
        // Cut below the first char leaves only the ellipsis.
        assert_eq!(format_cmdline("€x".as_bytes(), 1).as_deref(), Some("…"));
    }

    struct FakeProc {
        dir: TempDir,
    }

    impl FakeProc {
        fn new() -> Self {
            Self { dir: TempDir::new().unwrap() }
        }

        fn file(&self, pid: u32, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
            let dir = self.dir.path().join(pid.to_string());
            fs::create_dir_all(&dir).unwrap();
            let path = dir.join(name);
            fs::write(&path, contents).unwrap();
            path
        }

        fn reader(&self, max_cmdline_bytes: usize) -> ProcReader {
            ProcReader::new(self.dir.path(), max_cmdline_bytes)
        }
    }

    #[test]
    fn identify_reads_a_containerised_process() {
        let proc = FakeProc::new();
        proc.file(4242, "comm", "python3\n");
        proc.file(4242, "cmdline", b"python3\0train.py\0--lr\x000.1\0");
        proc.file(4242, "cgroup", kube_systemd());
        proc.file(4242, "status", "Name:\tpython3\nPid:\t4242\nPPid:\t17\nNSpid:\t4242\t7\n");
        let identity = proc.reader(4096).identify(4242);
        assert_eq!(
            identity,
            ProcessIdentity {
                comm: Some("python3".into()),
                cmdline: Some("python3 train.py --lr 0.1".into()),
                container_id: Some(ID.into()),
                pod_uid: Some(POD.into()),
                namespace_pid: Some(7),
                parent_pid: Some(17),
            }
        );
    }

    #[test]
    fn identify_host_process_and_kernel_thread() {
        let proc = FakeProc::new();
        proc.file(1000, "comm", "Xorg\n");
        proc.file(1000, "cmdline", b"/usr/lib/xorg/Xorg\0:0\0");
        proc.file(1000, "cgroup", HOST);
        proc.file(1000, "status", "Name:\tXorg\nNSpid:\t1000\n");
        proc.file(2, "comm", "kthreadd\n");
        proc.file(2, "cmdline", b"");
        let reader = proc.reader(4096);
        let host = reader.identify(1000);
        assert_eq!(host.cmdline.as_deref(), Some("/usr/lib/xorg/Xorg :0"));
        assert_eq!((host.container_id, host.pod_uid), (None, None));
        assert_eq!(host.namespace_pid, Some(1000));
        let kthread = reader.identify(2);
        assert_eq!(kthread.comm.as_deref(), Some("kthreadd"));
        assert_eq!(kthread.cmdline, None);
    }

    #[test]
    fn identify_missing_pid_is_all_none() {
        let proc = FakeProc::new();
        assert_eq!(proc.reader(4096).identify(31337), ProcessIdentity::default());
        assert_eq!(
            ProcReader::new("/nonexistent/proc", 4096).identify(1),
            ProcessIdentity::default()
        );
    }

    #[test]
    fn identify_unreadable_files_are_none() {
        let proc = FakeProc::new();
        proc.file(7, "comm", "worker\n");
        // A directory where a file should be: open may succeed, read fails,
        // whatever the privileges of the test.
        fs::create_dir_all(proc.dir.path().join("7").join("cgroup")).unwrap();
        fs::create_dir_all(proc.dir.path().join("7").join("status")).unwrap();
        let identity = proc.reader(4096).identify(7);
        assert_eq!(identity.comm.as_deref(), Some("worker"));
        assert_eq!(identity.container_id, None);
        assert_eq!(identity.pod_uid, None);
        assert_eq!(identity.namespace_pid, None);
        assert_eq!(identity.cmdline, None);
    }

    #[test]
    fn identify_permission_denied_is_none() {
        use std::os::unix::fs::PermissionsExt;
        let proc = FakeProc::new();
        proc.file(8, "comm", "worker\n");
        let cmdline = proc.file(8, "cmdline", b"secret\0--token\0");
        fs::set_permissions(&cmdline, fs::Permissions::from_mode(0o000)).unwrap();
        let identity = proc.reader(4096).identify(8);
        assert_eq!(identity.comm.as_deref(), Some("worker"));
        // Privileged test runs (root, CAP_DAC_OVERRIDE) can still read it.
        if fs::read(&cmdline).is_err() {
            assert_eq!(identity.cmdline, None);
        } else {
            assert_eq!(identity.cmdline.as_deref(), Some("secret --token"));
        }
    }

    #[test]
    fn identify_cmdline_truncation_and_invalid_utf8() {
        let proc = FakeProc::new();
        proc.file(10, "cmdline", b"abcdef\0");
        proc.file(11, "cmdline", b"abcdefg\0");
        proc.file(12, "cmdline", b"py\xff\0x\0");
        let reader = proc.reader(6);
        assert_eq!(reader.identify(10).cmdline.as_deref(), Some("abcdef"));
        assert_eq!(reader.identify(11).cmdline.as_deref(), Some("abcdef…"));
        // The limit applies to the decoded text: U+FFFD is three bytes.
        assert_eq!(reader.identify(12).cmdline.as_deref(), Some("py\u{fffd} …"));
        assert_eq!(proc.reader(7).identify(12).cmdline.as_deref(), Some("py\u{fffd} x"));
    }

    #[test]
    fn identify_cmdline_disabled_by_zero() {
        let proc = FakeProc::new();
        proc.file(20, "comm", "python3\n");
        proc.file(20, "cmdline", b"python3\0train.py\0");
        let identity = proc.reader(0).identify(20);
        assert_eq!(identity.cmdline, None);
        assert_eq!(identity.comm.as_deref(), Some("python3"));
    }

    #[test]
    fn identify_reads_are_bounded() {
        let proc = FakeProc::new();
        // An NSpid line beyond the read limit is never seen.
        let mut status = "X".repeat(usize::try_from(READ_LIMIT).unwrap());
        status.push_str("\nNSpid:\t30\t3\n");
        proc.file(30, "status", status);
        // A huge command line with a huge setting is clamped and cut.
        proc.file(30, "cmdline", vec![b'a'; 1024 * 1024]);
        let identity = proc.reader(usize::MAX).identify(30);
        assert_eq!(identity.namespace_pid, None);
        let cmdline = identity.cmdline.unwrap();
        assert_eq!(cmdline.len(), MAX_CMDLINE_BYTES + '…'.len_utf8());
        assert!(cmdline.ends_with('…'));
    }

    #[test]
    fn identify_real_proc_self() {
        let identity = ProcReader::new("/proc", 4096).identify(std::process::id());
        assert!(identity.comm.is_some_and(|comm| !comm.is_empty()));
        assert!(identity.namespace_pid.is_some());
        assert!(identity.cmdline.is_some());
    }
}
