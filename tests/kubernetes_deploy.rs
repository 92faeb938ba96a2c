//! Kubernetes attribution under the DaemonSet's own mounts and identity:
//! the daemon in a mount namespace with the manifest's socket mounts while
//! the fake kubelet and runtime restart as the real ones do (re-creating
//! their sockets), and the daemon as the users a pod could run as, against
//! sockets with the modes a stock node gives them.
//!
//! Needs root (mounts, `setpriv`); where that is missing, each test says so
//! on stderr and passes without checking anything.

// A test crate: a panic here is a failed test, not a failed daemon; and
// these tests run real processes in real time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_types)]

#[path = "support/kubernetes.rs"]
mod fake;
mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use fake::{FakeApi, container, pod, process_info, value};
use support::{Deadline, Process, SERVE, get, pause};

const SHOWS_WITHIN: Duration = Duration::from_secs(30);

fn skip(why: &str) {
    eprintln!("SKIPPED: {why}: needs root to mount and to change user");
}

/// A socket the shipped ConfigMap names, and the DaemonSet's hostPath
/// mount that holds it.
struct SocketMount {
    /// The path vramd dials, inside the container.
    socket: String,
    /// The hostPath volume's path and its mountPath.
    host: String,
    mount: String,
}

/// Where `deploy/kubernetes` puts the kubelet's and the runtime's sockets.
fn manifest_socket_mounts() -> Vec<SocketMount> {
    let read = |name: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes").join(name);
        yaml_serde::from_str::<yaml_serde::Value>(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let config: toml::Table =
        toml::from_str(read("configmap.yaml")["data"]["vramd.toml"].as_str().unwrap()).unwrap();
    let daemonset = read("daemonset.yaml");
    let spec = &daemonset["spec"]["template"]["spec"];
    let vramd = &spec["containers"][0];
    let str_of = |value: &yaml_serde::Value| value.as_str().unwrap().to_owned();
    ["pod_resources_socket", "runtime_socket"]
        .into_iter()
        .map(|key| {
            let socket = config["kubernetes"][key].as_str().unwrap().to_owned();
            let mount = vramd["volumeMounts"]
                .as_sequence()
                .unwrap()
                .iter()
                .filter(|m| {
                    let at = str_of(&m["mountPath"]);
                    socket == at || socket.starts_with(&format!("{}/", at.trim_end_matches('/')))
                })
                .max_by_key(|m| str_of(&m["mountPath"]).len())
                .unwrap_or_else(|| panic!("nothing mounted where {socket} lies"));
            let volume = spec["volumes"]
                .as_sequence()
                .unwrap()
                .iter()
                .find(|v| v["name"] == mount["name"])
                .unwrap();
            SocketMount {
                socket,
                host: str_of(&volume["hostPath"]["path"]),
                mount: str_of(&mount["mountPath"]),
            }
        })
        .collect()
}

/// Issue 34, item 1: the kubelet and containerd unlink and re-create their
/// sockets when they restart. The daemon runs in a mount namespace of its
/// own with the DaemonSet's mounts (read-only binds of the manifest's host
/// paths, under a temporary root); both fake servers restart as the real
/// ones do, and the answers of the new ones are what the daemon shows.
#[test]
fn a_runtime_restart_is_survived_with_the_manifests_mounts() {
    let unshare = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .status();
    if !unshare.is_ok_and(|status| status.success()) {
        return skip("a_runtime_restart_is_survived_with_the_manifests_mounts");
    }
    let dir = tempfile::tempdir().unwrap();
    let (host, inside) = (dir.path().join("host"), dir.path().join("container"));
    let mounts = manifest_socket_mounts();
    let on_host = |m: &SocketMount| {
        // The socket's path below the mount, on the host side of it.
        let below = m.socket[m.mount.len()..].trim_start_matches('/');
        let at = host.join(m.host.trim_start_matches('/'));
        if below.is_empty() { at } else { at.join(below) }
    };
    let mut script = String::from("set -e\n");
    for m in &mounts {
        let source = host.join(m.host.trim_start_matches('/'));
        let target = inside.join(m.mount.trim_start_matches('/'));
        std::fs::create_dir_all(on_host(m).parent().unwrap()).unwrap();
        if m.socket == m.mount {
            // A file mount: its target is a file, as the runtime makes it.
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(&target, "").unwrap();
        } else {
            std::fs::create_dir_all(&target).unwrap();
        }
        script.push_str(&format!(
            "mount --bind '{0}' '{1}'\nmount -o remount,bind,ro '{1}'\n",
            source.display(),
            target.display()
        ));
    }
    let sockets: Vec<_> = mounts.iter().map(on_host).collect();
    // The servers come up before the daemon's mounts are made, as on a node.
    let serve = || (FakeApi::serve(&sockets[0]), FakeApi::serve(&sockets[1]));
    let (mut kubelet, mut runtime) = serve();
    script.push_str("exec \"$0\" \"$@\"\n");
    let inside_socket = |m: &SocketMount| inside.join(m.socket.trim_start_matches('/'));
    let (kubelet_socket, runtime_socket) = (inside_socket(&mounts[0]), inside_socket(&mounts[1]));
    let mut command = std::process::Command::new("unshare");
    command.args(["--mount", "--propagation", "private", "sh", "-c", &script, support::BIN]);
    command.args(SERVE).args(["--simulate", "multi-tenant", "--gpus", "1"]);
    let env = [
        ("VRAMD_KUBERNETES__ENABLED", "true"),
        ("VRAMD_KUBERNETES__POD_RESOURCES_SOCKET", kubelet_socket.to_str().unwrap()),
        ("VRAMD_KUBERNETES__RUNTIME_SOCKET", runtime_socket.to_str().unwrap()),
        ("VRAMD_KUBERNETES__REFRESH_INTERVAL", "1s"),
        ("VRAMD_KUBERNETES__CALL_TIMEOUT", "500ms"),
        ("VRAMD_SIMULATOR__CONTAINER_IDS", "true"),
    ];
    let mut daemon = Process::spawn_command(&mut command, &env);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    let document = get(addr, "/api/v1/devices/0").json();
    let uuid = document["uuid"].as_str().unwrap().to_owned();
    let (pid, id) = {
        let first = &document["processes"][0];
        (first["pid"].as_u64().unwrap() as u32, first["container_id"].as_str().unwrap().to_owned())
    };
    let answer = |kubelet: &FakeApi, runtime: &FakeApi, pod_name: &str| {
        kubelet.set_pods(vec![pod(pod_name, "ml", "trainer", "nvidia.com/gpu", &[&uuid])]);
        runtime.set_containers(vec![container(&id, pod_name, "ml", "trainer")]);
    };
    let shows = |pod_name: &str| {
        let pod_label = format!("pod=\"{pod_name}\"");
        let deadline = Deadline::after(SHOWS_WITHIN);
        loop {
            let text = get(addr, "/metrics").text();
            let allocated = text.lines().any(|line| {
                line.starts_with("vramd_device_allocation_info{") && line.contains(&pod_label)
            });
            if allocated && process_info(&text, pid).is_some_and(|line| line.contains(&pod_label)) {
                return;
            }
            assert!(!deadline.passed(), "{pod_name} not shown within {SHOWS_WITHIN:?}:\n{text}");
            pause();
        }
    };
    answer(&kubelet, &runtime, "before-restart");
    shows("before-restart");

    // Both restart: each socket is unlinked, then a new one is bound at
    // the same host path. Their new answers name the same containers anew.
    drop((kubelet, runtime));
    for socket in &sockets {
        std::fs::remove_file(socket).unwrap();
    }
    (kubelet, runtime) = serve();
    answer(&kubelet, &runtime, "after-restart");
    shows("after-restart");
    assert!(daemon.exited().is_none());
}

/// The daemon as `identity` (`setpriv` options) on a simulated host,
/// attributing from the two sockets.
fn spawn_as(identity: &[&str], kubelet: &Path, runtime: &Path) -> (Process, SocketAddr) {
    let mut command = std::process::Command::new("setpriv");
    command.args(identity).args(["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]);
    command.arg(support::BIN).args(SERVE).args(["--simulate", "multi-tenant", "--gpus", "1"]);
    let env = [
        ("VRAMD_KUBERNETES__ENABLED", "true"),
        ("VRAMD_KUBERNETES__POD_RESOURCES_SOCKET", kubelet.to_str().unwrap()),
        ("VRAMD_KUBERNETES__RUNTIME_SOCKET", runtime.to_str().unwrap()),
        ("VRAMD_KUBERNETES__REFRESH_INTERVAL", "1s"),
        ("VRAMD_KUBERNETES__CALL_TIMEOUT", "500ms"),
    ];
    let mut daemon = Process::spawn_command(&mut command, &env);
    let addr = daemon.listening();
    daemon.wait_ready(addr);
    (daemon, addr)
}

/// Waits for three refreshes' worth of refusals of `api` and for `up`
/// of each API; returns the scrape.
fn refused(addr: SocketAddr, denied: &[&str], up: &[&str]) -> String {
    let deadline = Deadline::after(SHOWS_WITHIN);
    loop {
        let text = get(addr, "/metrics").text();
        let count = |api: &str| {
            value(&text, &format!("vramd_kubernetes_errors_total{{api=\"{api}\",kind=\"denied\"}}"))
        };
        let is_up = |api: &str| value(&text, &format!("vramd_kubernetes_up{{api=\"{api}\"}}"));
        if denied.iter().all(|api| count(api).is_some_and(|n| n >= 3.0))
            && up.iter().all(|api| is_up(api) == Some(1.0))
        {
            return text;
        }
        assert!(!deadline.passed(), "refusals {denied:?}, up {up:?} not seen:\n{text}");
        pause();
    }
}

/// The warnings and errors the daemon logged about `api`.
fn logged_about(daemon: &Process, api: &str) -> Vec<String> {
    let log = daemon.log();
    log.iter()
        .filter(|line| line["api"] == api && line["level"] != "DEBUG" && line["level"] != "INFO")
        .map(|line| line["error"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Issue 34, item 2: the kubelet's socket is `0755 root:root` on a stock
/// node, the runtime's `0660 root:root`. The former identity (uid 65532 in
/// group 0) reaches only the runtime and says once, for the kubelet, that
/// only uid 0 can connect; without group 0 the runtime's refusal names the
/// group; uid 0 with no capability at all (the DaemonSet's identity now)
/// reaches both.
#[test]
fn socket_permissions_refuse_a_non_root_user_once_with_the_setting_to_change() {
    let root = std::fs::metadata("/proc/self").is_ok_and(|me| {
        use std::os::unix::fs::MetadataExt;
        me.uid() == 0
    });
    let setpriv = std::process::Command::new("setpriv").arg("--version").output();
    if !root || !setpriv.is_ok_and(|out| out.status.success()) {
        eprintln!("SKIPPED: needs root and setpriv to run the daemon as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let kubelet = FakeApi::serve(&dir.path().join("kubelet.sock"));
    let runtime = FakeApi::serve(&dir.path().join("containerd.sock"));
    std::fs::set_permissions(&kubelet.socket, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&runtime.socket, std::fs::Permissions::from_mode(0o660)).unwrap();
    let (kubelet_socket, runtime_socket) = (&kubelet.socket, &runtime.socket);

    let in_group_0 = ["--reuid=65532", "--regid=65532", "--groups=0"];
    let (daemon, addr) = spawn_as(&in_group_0, kubelet_socket, runtime_socket);
    refused(addr, &["pod_resources"], &["runtime"]);
    let said = logged_about(&daemon, "pod_resources");
    assert_eq!(said.len(), 1, "one line, not one per refresh: {said:#?}");
    assert!(said[0].contains("socket mode 0755 owner 0:0"), "{}", said[0]);
    assert!(said[0].contains("only uid 0 may connect"), "{}", said[0]);
    assert!(said[0].contains("runAsUser: 0"), "{}", said[0]);
    daemon.signal("TERM");
    let _ = daemon.finish(SHOWS_WITHIN);

    let no_group = ["--reuid=65532", "--regid=65532", "--clear-groups"];
    let (daemon, addr) = spawn_as(&no_group, kubelet_socket, runtime_socket);
    refused(addr, &["pod_resources", "runtime"], &[]);
    let said = logged_about(&daemon, "runtime");
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(said[0].contains("supplementalGroups: [0]"), "{}", said[0]);
    daemon.signal("TERM");
    let _ = daemon.finish(SHOWS_WITHIN);

    let root_without_capabilities = ["--reuid=0", "--regid=0", "--clear-groups"];
    let (daemon, addr) = spawn_as(&root_without_capabilities, kubelet_socket, runtime_socket);
    let text = refused(addr, &[], &["pod_resources", "runtime"]);
    assert!(!text.contains("kind=\"denied\""), "{text}");
    assert!(logged_about(&daemon, "pod_resources").is_empty());
}
