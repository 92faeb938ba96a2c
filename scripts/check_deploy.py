"""Structural and policy checks of scripts/check-deploy.sh; one subcommand
per check, exit status 1 with the reasons on stdout when it fails."""
import json
import os
import pathlib
import re
import subprocess
import sys

import yaml

ROOT = pathlib.Path(os.environ["ROOT"])
BIN = os.environ["BIN"]
K8S = ROOT / "deploy" / "kubernetes"
problems = []


def problem(text):
    problems.append(text)


def done():
    for text in problems:
        print(text)
    sys.exit(1 if problems else 0)


def unit_settings(path):
    """(section, key) -> [values] of a systemd unit file, in order."""
    settings, section = {}, None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.setdefault((section, key.strip()), []).append(value.strip())
    return settings


def duration_seconds(text):
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    total = 0.0
    for number, unit in re.findall(r"([0-9.]+)\s*([a-z]*)", text):
        total += float(number) * units[unit or "s"]
    return total


def run_check_config(args, env=None, cwd=None):
    """Runs `vramd ARGS check-config` in an empty environment; returns the
    effective configuration or records a problem."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    base.update(env or {})
    result = subprocess.run([BIN, *args, "check-config"], capture_output=True, text=True,
                            env=base, cwd=cwd or os.environ["WORK"])
    if result.returncode != 0:
        problem(f"`vramd {' '.join(args)} check-config` exited {result.returncode}: "
                f"{result.stderr.strip()[:600]}")
        return None
    return result.stdout


# ------------------------------------------------------------- systemd ---
def cmd_unit_policy():
    unit = ROOT / "deploy" / "systemd" / "vramd.service"
    s = unit_settings(unit)

    def one(key, section="Service"):
        values = s.get((section, key), [])
        return values[-1] if values else None

    expect = {
        "Type": "notify", "NotifyAccess": "main", "WatchdogSignal": "SIGTERM",
        "User": "vramd", "Group": "vramd", "Restart": "on-failure",
        "DevicePolicy": "closed", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "NoNewPrivileges": "yes", "CapabilityBoundingSet": "",
        "AmbientCapabilities": "", "LockPersonality": "yes", "RestrictNamespaces": "yes",
        "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes", "ProtectClock": "yes",
        "ProtectHostname": "yes", "RestrictSUIDSGID": "yes",
        "SystemCallArchitectures": "native",
        # Off on purpose (comment in the unit): the CUDA driver.
        "MemoryDenyWriteExecute": "no",
    }
    for key, value in expect.items():
        if one(key) != value:
            problem(f"{key}= is {one(key)!r}, expected {value!r}")
    if one("WatchdogSec") in (None, "0", "infinity"):
        problem("WatchdogSec= is not set: a wedged sampler would never be restarted")
    if one("ExecStart") != "/usr/local/bin/vramd --config /etc/vramd/vramd.toml":
        problem(f"ExecStart= is {one('ExecStart')!r}")
    if one("PrivateDevices") not in (None, "no"):
        problem("PrivateDevices= would hide /dev/nvidia*")
    if one("ProtectProc") not in (None, "default"):
        problem("ProtectProc= other than default hides other users' GPU processes in /proc")
    if one("ProcSubset") not in (None, "all"):
        problem("ProcSubset=pid hides /proc/driver/nvidia, which NVML reads")
    allowed = s.get(("Service", "DeviceAllow"), [])
    for group in ("char-nvidia-frontend", "char-nvidia-uvm"):
        if not any(entry.split()[0] == group and "rw" in entry.split()[1:2] for entry in allowed):
            problem(f"DeviceAllow= lacks '{group} rw'")
    if any("m" in (entry.split() + [""])[1] for entry in allowed):
        problem("DeviceAllow= grants mknod (m)")
    families = (one("RestrictAddressFamilies") or "").split()
    if sorted(families) != ["AF_INET", "AF_INET6", "AF_UNIX"]:
        problem(f"RestrictAddressFamilies= is {families}")
    filters = s.get(("Service", "SystemCallFilter"), [])
    if not filters or filters[0] != "@system-service":
        problem("SystemCallFilter= does not start from @system-service")
    if not one("MemoryMax"):
        problem("no MemoryMax= safety net")
    # server.shutdown_timeout is at most 10 s (docs/configuration.md).
    stop = duration_seconds(one("TimeoutStopSec") or "0")
    if stop <= 10:
        problem(f"TimeoutStopSec= {stop}s does not exceed the largest server.shutdown_timeout (10s)")
    if "2" not in (one("RestartPreventExitStatus") or "").split():
        problem("RestartPreventExitStatus= lacks 2 (invalid configuration: restarting cannot help)")
    if not one("RestartSec"):
        problem("no RestartSec=")
    if not (one("StartLimitIntervalSec", "Unit") and one("StartLimitBurst", "Unit")):
        problem("no StartLimitIntervalSec=/StartLimitBurst= in [Unit]")
    # The ExecStart command line, with the repository's configuration file.
    args = one("ExecStart").split()[1:]
    args = [str(ROOT / "config" / "vramd.toml") if a == "/etc/vramd/vramd.toml" else a
            for a in args]
    run_check_config(args)
    done()


def syscall_group(name, cache={}):
    if name not in cache:
        out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager", name],
                             capture_output=True, text=True, check=True).stdout
        members = set()
        for line in out.splitlines()[1:]:
            item = line.strip()
            if not item or item.startswith("#"):
                continue
            members |= syscall_group(item) if item.startswith("@") else {item}
        cache[name] = members
    return cache[name]


def cmd_syscalls(trace_dir):
    """Every system call in the strace -ff output under trace_dir is allowed
    by the unit's SystemCallFilter= lines."""
    s = unit_settings(ROOT / "deploy" / "systemd" / "vramd.service")
    allowed = None
    for entry in s.get(("Service", "SystemCallFilter"), []):
        deny = entry.startswith("~")
        names = set()
        for item in entry.lstrip("~").split():
            names |= syscall_group(item) if item.startswith("@") else {item}
        if deny:
            allowed = (allowed if allowed is not None else set()) - names
        else:
            allowed = (allowed or set()) | names
    seen = {}
    for path in pathlib.Path(trace_dir).glob("trace.*"):
        for line in path.read_text(errors="replace").splitlines():
            match = re.match(r"^([a-z_0-9]+)\(", line)
            if match:
                seen[match.group(1)] = seen.get(match.group(1), 0) + 1
    if len(seen) < 20:
        problem(f"only {len(seen)} distinct system calls traced: the trace did not work")
    for name in sorted(set(seen) - allowed):
        problem(f"system call {name} ({seen[name]} calls) is not allowed by SystemCallFilter=")
    print(f"{len(seen)} distinct system calls, all allowed")
    done()


def cmd_exposure(text, docs):
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)", text)
    if not match:
        problem("no overall exposure level in systemd-analyze security's output")
        done()
    score, verdict = float(match.group(1)), match.group(2)
    print(f"{score} {verdict}")
    limit = float(os.environ["MAX_EXPOSURE"])
    if score > limit:
        problem(f"exposure {score} exceeds {limit}")
    recorded = re.search(r"rates the unit \*\*([0-9.]+) (\w+)\*\* \(systemd ([0-9]+)\)",
                         pathlib.Path(docs).read_text())
    version = os.environ["SYSTEMD_VERSION"]
    if not recorded:
        problem(f"{docs} does not record the exposure level "
                "('rates the unit **X.Y VERDICT** (systemd NNN)')")
    elif recorded.group(3) == version and float(recorded.group(1)) != score:
        problem(f"{docs} records {recorded.group(1)} for systemd {version}, "
                f"systemd-analyze says {score}: update the document")
    done()


# -------------------------------------------------------------- docker ---
def cmd_dockerfile():
    from dockerfile_parse import DockerfileParser

    path = ROOT / "deploy" / "docker" / "Dockerfile"
    parser = DockerfileParser(path=str(path))
    instructions = parser.structure
    froms = [i for i in instructions if i["instruction"] == "FROM"]
    if len(froms) < 2:
        problem("not a multi-stage build")
    builder = froms[0]["value"].split() if froms else []
    if not builder or builder[0] != "rust:1-bookworm":
        problem(f"builder stage is {builder}, expected rust:1-bookworm")
    final_start = instructions.index(froms[-1]) if froms else 0
    final = instructions[final_start:]
    base = froms[-1]["value"].split()[0] if froms else ""
    if not (base.startswith("gcr.io/distroless/cc-debian12") or base.startswith("debian:bookworm-slim")):
        problem(f"runtime base {base} is neither distroless cc-debian12 nor debian:bookworm-slim")
    runs = " ".join(i["value"] for i in instructions[:final_start] if i["instruction"] == "RUN")
    if not re.search(r"cargo build --release --locked", runs):
        problem("the builder does not run `cargo build --release --locked`")
    if runs.count("cargo build") < 2:
        problem("no separate, cached dependency build before the sources are copied")
    for i in instructions:
        if i["instruction"] == "ADD":
            problem(f"line {i['startline'] + 1}: ADD (use COPY; never fetch URLs in the build)")
    users = [i["value"].strip() for i in final if i["instruction"] == "USER"]
    if not users:
        problem("the final stage sets no USER")
    else:
        uid = users[-1].split(":")[0]
        if not uid.isdigit() or int(uid) == 0:
            problem(f"final USER {users[-1]!r} is not a numeric non-root UID "
                    "(Kubernetes runAsNonRoot cannot verify a name)")
    if not any(i["instruction"] == "EXPOSE" and "9477" in i["value"].split() for i in final):
        problem("EXPOSE 9477 missing from the final stage")
    env = {}
    for i in final:
        if i["instruction"] == "ENV":
            for key, value in re.findall(r"(\w+)=(\S+)", i["value"]):
                env[key] = value
    if env.get("NVIDIA_VISIBLE_DEVICES") != "all":
        problem("NVIDIA_VISIBLE_DEVICES=all missing")
    caps = set(env.get("NVIDIA_DRIVER_CAPABILITIES", "").split(","))
    if not {"utility", "compute"} <= caps:
        problem(f"NVIDIA_DRIVER_CAPABILITIES {sorted(caps)} lacks utility and compute")
    if any(i["instruction"] == "COPY" and re.search(r"libnvidia|libcuda", i["value"]) for i in instructions):
        problem("driver libraries copied into the image")

    def exec_form(name):
        found = [i["value"] for i in final if i["instruction"] == name]
        if not found:
            return []
        try:
            return json.loads(found[-1])
        except ValueError:
            problem(f"{name} is not in exec (JSON) form")
            return []

    entrypoint, cmd = exec_form("ENTRYPOINT"), exec_form("CMD")
    if entrypoint != ["/usr/local/bin/vramd"]:
        problem(f"ENTRYPOINT is {entrypoint}")
    command = entrypoint + cmd
    if "--listen" not in command or command[command.index("--listen") + 1] != "0.0.0.0:9477":
        problem(f"default command {command} does not listen on 0.0.0.0:9477")
    else:
        run_check_config(cmd)

    # Every workspace member's manifest is copied before the dependency build.
    manifest = (ROOT / "Cargo.toml").read_text()
    members = re.search(r"^\s*members\s*=\s*\[(.*?)\]", manifest, re.S | re.M)
    copies = [i["value"].split() for i in instructions if i["instruction"] == "COPY"]
    sources = [part for parts in copies for part in parts[:-1] if not part.startswith("--")]
    for member in re.findall(r'"([^"]+)"', members.group(1) if members else ""):
        if member == ".":
            continue
        if f"{member}/Cargo.toml" not in sources:
            problem(f"workspace member {member}: {member}/Cargo.toml is not copied into the "
                    "dependency layer (keep the Dockerfile in step with Cargo.toml)")

    # /.dockerignore lets every COPY source (from the build context) through.
    ignore = ROOT / ".dockerignore"
    if not ignore.exists():
        problem(".dockerignore missing at the repository root: the whole target/ would be sent")
        done()
    patterns = []
    for line in ignore.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            patterns.append((line.startswith("!"), line.lstrip("!").rstrip("/")))

    def to_regex(pattern):
        # Docker's matching: `*` and `?` stay within one path element, `**`
        # spans any number; a pattern that matches a directory covers all
        # that is under it; the last matching line wins.
        out, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                out, i = out + ".*", i + 2
            elif pattern[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif pattern[i] == "?":
                out, i = out + "[^/]", i + 1
            else:
                out, i = out + re.escape(pattern[i]), i + 1
        return re.compile(out + r"\Z")

    compiled = [(negate, to_regex(pattern)) for negate, pattern in patterns]

    def excluded(rel):
        parts = rel.split("/")
        prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        verdict = False
        for negate, regex in compiled:
            if any(regex.match(prefix) for prefix in prefixes):
                verdict = not negate
        return verdict

    for parts in copies:
        if any(p.startswith("--from") for p in parts):
            continue
        for source in parts[:-1]:
            rel = source.rstrip("/")
            files = [p for p in (ROOT / rel).rglob("*") if p.is_file()] if (ROOT / rel).is_dir() else [ROOT / rel]
            if not files or not files[0].exists():
                problem(f"COPY source {source} does not exist")
                continue
            for file in files:
                relpath = str(file.relative_to(ROOT))
                if "/target/" in f"/{relpath}" or "__pycache__" in relpath:
                    continue
                if excluded(relpath):
                    problem(f"COPY source {relpath} is excluded by .dockerignore")
                    break
    for big in ("target/debug/vramd", ".git/HEAD"):
        if (ROOT / big).exists() and not excluded(big):
            problem(f".dockerignore lets {big} into the build context")
    done()


# ---------------------------------------------------------- kubernetes ---
def manifests():
    for path in sorted(K8S.rglob("*.y*ml")):
        if "schemas" in path.relative_to(K8S).parts:
            continue
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                yield path.relative_to(ROOT), index, doc


def cmd_k8s_schemas():
    import jsonschema
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError, ValidationError

    crd_schemas = {}
    for schema_path in sorted((K8S / "schemas").glob("*.json")):
        schema = json.loads(schema_path.read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        kind = schema["properties"]["kind"]["const"]
        crd_schemas[(schema["properties"]["apiVersion"]["const"], kind)] = (schema_path.name, schema)
    versions = os.environ.get("K8S_VERSIONS", "1.37.0 1.29.0").split()
    count = 0
    for path, index, doc in manifests():
        count += 1
        where = f"{path} document {index + 1} ({doc.get('kind')}/{doc.get('metadata', {}).get('name')})"
        if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
            problem(f"{where}: not a Kubernetes object")
            continue
        key = (doc["apiVersion"], doc["kind"])
        if key in crd_schemas:
            name, schema = crd_schemas[key]
            validator = jsonschema.Draft202012Validator(
                schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
                location = ".".join(str(p) for p in error.absolute_path) or "(root)"
                problem(f"{where}: {location}: {error.message[:300]} (schema {name})")
            if doc["kind"] == "PrometheusRule":
                names = [g.get("name") for g in doc["spec"].get("groups", [])]
                for duplicate in sorted({n for n in names if names.count(n) > 1}):
                    problem(f"{where}: rule group {duplicate!r} defined twice")
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except ValidationError as error:
                location = ".".join(str(p) for p in error.path) or "(root)"
                problem(f"{where}: Kubernetes {version}: {location}: {error.message[:300]}")
            except SchemaNotFoundError as error:
                problem(f"{where}: {error.message}; a kind without a schema is an error here "
                        "(add a JSON schema under deploy/kubernetes/schemas/)")
    print(f"{count} objects validated against Kubernetes {', '.join(versions)} "
          f"and {len(crd_schemas)} CRD schemas")
    done()


def containers_of(pod_spec):
    for field in ("initContainers", "containers"):
        for container in pod_spec.get(field, []) or []:
            yield field, container


def probe_port(container, probe):
    port = probe.get("httpGet", {}).get("port")
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    return ports.get(port, port)


def is_vramd(container):
    return "vramd" in container.get("image", "").rsplit("/", 1)[-1].split(":")[0]


def check_vramd_container(where, container, pod_spec, init_timeout):
    sc = container.get("securityContext", {})
    pod_sc = pod_spec.get("securityContext", {})
    merged = dict(pod_sc, **sc)
    sockets = any("hostPath" in v for v in pod_spec.get("volumes", []))
    if sockets:
        # Kubernetes attribution: the kubelet's socket is 0755 root:root, so
        # uid 0, made harmless below (every capability dropped, no
        # escalation, read-only root).
        if merged.get("runAsUser") != 0 or merged.get("runAsNonRoot") is not False:
            problem(f"{where}: mounts the sockets but is not runAsUser 0 / runAsNonRoot false "
                    "(a 0755 root:root kubelet socket refuses any other user without capabilities)")
        if pod_sc.get("supplementalGroups"):
            problem(f"{where}: supplementalGroups with uid 0 grants nothing needed")
    else:
        if merged.get("runAsNonRoot") is not True:
            problem(f"{where}: runAsNonRoot is not true")
        if merged.get("runAsUser") != 65532:
            problem(f"{where}: runAsUser is {merged.get('runAsUser')}, expected 65532 (the image's nonroot)")
    if sc.get("allowPrivilegeEscalation") is not False:
        problem(f"{where}: allowPrivilegeEscalation is not false")
    if sc.get("readOnlyRootFilesystem") is not True:
        problem(f"{where}: readOnlyRootFilesystem is not true")
    if sc.get("privileged"):
        problem(f"{where}: privileged")
    if sc.get("capabilities", {}).get("drop") != ["ALL"] or sc.get("capabilities", {}).get("add"):
        problem(f"{where}: capabilities are not exactly drop [ALL]")
    seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}
    if seccomp.get("type") != "RuntimeDefault":
        problem(f"{where}: seccompProfile is not RuntimeDefault")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    if env.get("NVIDIA_VISIBLE_DEVICES") != "all":
        problem(f"{where}: NVIDIA_VISIBLE_DEVICES is not 'all'")
    if not {"utility", "compute"} <= set((env.get("NVIDIA_DRIVER_CAPABILITIES") or "").split(",")):
        problem(f"{where}: NVIDIA_DRIVER_CAPABILITIES lacks utility,compute")
    if pod_spec.get("runtimeClassName") != "nvidia":
        problem(f"{where}: runtimeClassName is not nvidia")
    resources = container.get("resources", {})
    for part in ("requests", "limits"):
        if "nvidia.com/gpu" in resources.get(part, {}):
            problem(f"{where}: requests nvidia.com/gpu: the monitor would reserve a GPU")
        for what in ("cpu", "memory"):
            if what not in resources.get(part, {}):
                problem(f"{where}: no {part}.{what}")
    ports = [p["containerPort"] for p in container.get("ports", [])]
    if ports != [9477]:
        problem(f"{where}: container ports {ports}, expected [9477]")
    for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                       ("startupProbe", "/readyz")):
        probe = container.get(kind)
        if not probe:
            problem(f"{where}: no {kind}")
            continue
        if probe.get("httpGet", {}).get("path") != path:
            problem(f"{where}: {kind} is not an HTTP GET of {path}")
        if probe_port(container, probe) != 9477:
            problem(f"{where}: {kind} does not target port 9477")
        if probe.get("timeoutSeconds", 1) < 5:
            problem(f"{where}: {kind}.timeoutSeconds < 5 (a slow driver must not fail it)")
        if kind == "livenessProbe" and probe.get("failureThreshold", 3) < 3:
            problem(f"{where}: livenessProbe.failureThreshold < 3")
    startup = container.get("startupProbe")
    if startup:
        budget = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
        if budget < 2 * init_timeout:
            problem(f"{where}: startupProbe allows {budget}s, less than twice "
                    f"nvml.init_timeout ({init_timeout}s)")
    grace = pod_spec.get("terminationGracePeriodSeconds", 30)
    if grace <= 10:
        problem(f"{where}: terminationGracePeriodSeconds {grace} does not exceed the "
                "largest server.shutdown_timeout (10s)")


def config_toml(docs):
    for _, _, doc in docs:
        if doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] == "vramd":
            return doc["data"]["vramd.toml"]
    return None


def effective(config_text, key):
    section, name = key.split(".")
    current = None
    for line in config_text.splitlines():
        line = line.strip()
        if line.startswith("["):
            current = line.strip("[]")
        elif current == section and line.startswith(f"{name} ="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def reporter_env_fields():
    """(JSON key, environment variable) the Python reporter reads, from its own source."""
    sys.path.insert(0, str(ROOT / "clients" / "python" / "src"))
    try:
        from vramd_reporter._report import ENV_FIELDS
    finally:
        sys.path.pop(0)
    return ENV_FIELDS


# Where each reporter field's value comes from in a pod spec: a downward API
# field, or (the container's own name, which the downward API lacks) a literal.
REPORTER_FIELD_SOURCES = {"pod": "metadata.name", "namespace": "metadata.namespace", "container": None}


def check_reporter_identity(path, container):
    """The trainer sets every variable the reporter reads, each from the right source."""
    env = {e["name"]: e for e in container.get("env", [])}
    for key, variable in reporter_env_fields():
        if key not in REPORTER_FIELD_SOURCES:
            problem(f"scripts/check_deploy.py does not know where the reporter's {key!r} comes from")
            continue
        entry = env.get(variable)
        field = REPORTER_FIELD_SOURCES[key]
        if entry is None:
            problem(f"{path}: container {container['name']} does not set {variable}, "
                    f"which the reporter sends as reporter.{key}")
        elif field is not None and entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != field:
            problem(f"{path}: container {container['name']}: {variable} is not the downward API's {field}")
        elif field is None and entry.get("value") != container["name"]:
            problem(f"{path}: container {container['name']}: {variable} is {entry.get('value')!r}, "
                    "not the container's name")


# hostPath types that mount a directory ("" is unchecked: a directory the
# runtime creates where it is missing).
DIRECTORY_TYPES = {"", "Directory", "DirectoryOrCreate"}


def check_socket_mounts(path, daemonset, config_text):
    """Each socket the ConfigMap names lies inside a mounted hostPath directory.

    The kubelet and containerd unlink and re-create their sockets when they
    restart: a mount of the socket file keeps the dead inode (issue 34), a
    mount of the directory shows the new socket.
    """
    spec = daemonset["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    vramd = [c for _, c in containers_of(spec) if is_vramd(c)]
    mounts = [m for c in vramd for m in c.get("volumeMounts", [])]
    for key in ("kubernetes.pod_resources_socket", "kubernetes.runtime_socket"):
        socket = effective(config_text, key)
        if not socket:
            problem(f"configmap.yaml: {key} is not set")
            continue
        holders = [m for m in mounts
                   if socket == m["mountPath"] or socket.startswith(m["mountPath"].rstrip("/") + "/")]
        if not holders:
            problem(f"{path}: nothing is mounted where {key} ({socket}) lies")
            continue
        mount = max(holders, key=lambda m: len(m["mountPath"]))
        host = volumes.get(mount["name"], {}).get("hostPath")
        if host is None:
            problem(f"{path}: {socket} ({key}) is in volume {mount['name']}, not a hostPath")
        elif mount["mountPath"] == socket or host.get("type", "") not in DIRECTORY_TYPES:
            problem(f"{path}: {key} ({socket}) is mounted as a file (hostPath type "
                    f"{host.get('type', '')!r}); mount its directory, so a restart that "
                    "re-creates the socket is seen")
        elif not mount.get("readOnly"):
            problem(f"{path}: the mount of {mount['mountPath']} is not read-only")


def cmd_k8s_policy():
    docs = list(manifests())
    work = pathlib.Path(os.environ["WORK"])
    toml = config_toml(docs)
    if toml is None:
        problem("no ConfigMap vramd with a vramd.toml key")
        done()
    config_file = work / "configmap-vramd.toml"
    config_file.write_text(toml)
    checked = run_check_config(["--config", str(config_file)])
    if checked is not None and effective(checked, "server.listen") != "0.0.0.0:9477":
        problem("the ConfigMap's effective server.listen is not 0.0.0.0:9477")
    init_timeout = duration_seconds(effective(checked or "", "nvml.init_timeout") or "30s")

    daemonsets = {}
    for path, index, doc in docs:
        kind = doc.get("kind")
        if kind not in ("DaemonSet", "Pod", "Deployment"):
            continue
        pod_spec = doc["spec"]["template"]["spec"] if kind != "Pod" else doc["spec"]
        if kind == "DaemonSet":
            daemonsets[str(path)] = doc
            if doc["metadata"].get("namespace") != "vramd":
                problem(f"{path}: DaemonSet not in namespace vramd")
            if pod_spec.get("serviceAccountName") != "vramd":
                problem(f"{path}: serviceAccountName is not vramd")
            if pod_spec.get("automountServiceAccountToken") is not False:
                problem(f"{path}: the API token is mounted (vramd never calls the API)")
        for field, container in containers_of(pod_spec):
            if not is_vramd(container):
                continue
            where = f"{path} {kind} {doc['metadata']['name']} {field}/{container['name']}"
            check_vramd_container(where, container, pod_spec, init_timeout)
            # The container's command line, as the image would run it.
            args = list(container.get("args", []))
            env = {e["name"]: e["value"] for e in container.get("env", [])
                   if e["name"].startswith("VRAMD_") and "value" in e}
            mounted = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            args = [str(config_file) if a == "/etc/vramd/vramd.toml" else a for a in args]
            if "--config" in container.get("args", []) and "/etc/vramd" not in mounted:
                problem(f"{where}: --config /etc/vramd/vramd.toml but nothing is mounted at /etc/vramd")
            out = run_check_config(args, env=env)
            if out is not None and effective(out, "server.listen") != "0.0.0.0:9477":
                problem(f"{where}: effective server.listen is {effective(out, 'server.listen')}, "
                        "unreachable for probes and Prometheus")
        if kind == "Pod":
            # The sidecar example: the trainer reports to the sidecar on loopback.
            for _, container in containers_of(pod_spec):
                if is_vramd(container):
                    continue
                env = {e["name"]: e.get("value") for e in container.get("env", [])}
                if env.get("VRAMD_URL") != "http://127.0.0.1:9477":
                    problem(f"{path}: container {container['name']} does not point the reporter "
                            "at http://127.0.0.1:9477")
                check_reporter_identity(path, container)
            sidecars = [c for c in pod_spec.get("initContainers", []) if is_vramd(c)]
            if not sidecars or sidecars[0].get("restartPolicy") != "Always":
                problem(f"{path}: vramd is not a native sidecar (init container, restartPolicy Always)")

    # The two DaemonSet variants: the same object except hostPID and what
    # Kubernetes attribution needs (the socket mounts, uid 0 to connect,
    # and the switch that turns it off where they are missing).
    with_pid = daemonsets.get("deploy/kubernetes/daemonset.yaml")
    without = daemonsets.get("deploy/kubernetes/daemonset-no-hostpid.yaml")
    if not with_pid or not without:
        problem("daemonset.yaml and daemonset-no-hostpid.yaml must both define the DaemonSet")
    else:
        if with_pid["spec"]["template"]["spec"].get("hostPID") is not True:
            problem("daemonset.yaml: hostPID is not true")
        if without["spec"]["template"]["spec"].get("hostPID"):
            problem("daemonset-no-hostpid.yaml: hostPID is set")
        a = json.loads(json.dumps(with_pid))
        b = json.loads(json.dumps(without))
        attribution_volumes = {"pod-resources", "runtime-socket-dir"}
        for spec in (a["spec"]["template"]["spec"], b["spec"]["template"]["spec"]):
            spec.pop("hostPID", None)
            for key in ("supplementalGroups", "runAsUser", "runAsGroup", "runAsNonRoot"):
                spec.get("securityContext", {}).pop(key, None)
            spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] not in attribution_volumes]
            for container in spec.get("containers", []):
                container["volumeMounts"] = [m for m in container.get("volumeMounts", [])
                                             if m["name"] not in attribution_volumes]
                container["env"] = [e for e in container.get("env", [])
                                    if e["name"] != "VRAMD_KUBERNETES__ENABLED"]
        if a != b:
            problem("the two DaemonSet variants differ in more than hostPID and Kubernetes attribution")
        restricted = without["spec"]["template"]["spec"]
        if any("hostPath" in v for v in restricted.get("volumes", [])):
            problem("daemonset-no-hostpid.yaml: a hostPath volume breaks Pod Security restricted")
        if restricted.get("securityContext", {}).get("supplementalGroups"):
            problem("daemonset-no-hostpid.yaml: supplementalGroups is only for the socket mounts")
        envs = [e for _, c in containers_of(restricted) for e in c.get("env", [])]
        if {"name": "VRAMD_KUBERNETES__ENABLED", "value": "false"} not in envs:
            problem("daemonset-no-hostpid.yaml: Kubernetes attribution is not turned off")

    if with_pid and toml is not None:
        check_socket_mounts("deploy/kubernetes/daemonset.yaml", with_pid, toml)

    # Wiring: ServiceMonitor -> Service -> DaemonSet pods.
    services = [d for _, _, d in docs if d.get("kind") == "Service"]
    monitors = [d for _, _, d in docs if d.get("kind") == "ServiceMonitor"]
    pod_labels = (with_pid or {}).get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
    container_ports = {p["name"] for _, c in containers_of((with_pid or {}).get("spec", {}).get("template", {}).get("spec", {}))
                       for p in c.get("ports", [])}
    for service in services:
        selector = service["spec"].get("selector", {})
        if not selector or any(pod_labels.get(k) != v for k, v in selector.items()):
            problem(f"Service {service['metadata']['name']}: selector {selector} does not match "
                    f"the DaemonSet's pod labels {pod_labels}")
        for port in service["spec"]["ports"]:
            if port.get("targetPort") not in container_ports | {9477}:
                problem(f"Service port {port.get('name')}: targetPort {port.get('targetPort')} "
                        "is not a vramd container port")
    for monitor in monitors:
        match = monitor["spec"]["selector"].get("matchLabels", {})
        namespaces = monitor["spec"].get("namespaceSelector", {}).get("matchNames",
                                                                      [monitor["metadata"].get("namespace")])
        chosen = [s for s in services
                  if s["metadata"].get("namespace") in namespaces
                  and all(s["metadata"].get("labels", {}).get(k) == v for k, v in match.items())]
        if not chosen:
            problem(f"ServiceMonitor {monitor['metadata']['name']}: selects no Service")
        for endpoint in monitor["spec"]["endpoints"]:
            names = {p.get("name") for s in chosen for p in s["spec"]["ports"]}
            if endpoint.get("port") not in names:
                problem(f"ServiceMonitor endpoint port {endpoint.get('port')!r} is not a port "
                        f"name of the selected Service(s) {sorted(n for n in names if n)}")
            if endpoint.get("path", "/metrics") != "/metrics":
                problem(f"ServiceMonitor endpoint path {endpoint.get('path')} is not /metrics")
    if not monitors:
        print("no ServiceMonitor yet: wiring checked up to the Service")
    done()


def cmd_stub_stage(out_dir):
    """Copies the builder stage's COPY sources up to its first RUN into
    out_dir and prints that RUN with cargo build replaced by cargo fetch --offline."""
    import shutil
    from dockerfile_parse import DockerfileParser

    parser = DockerfileParser(path=str(ROOT / "deploy" / "docker" / "Dockerfile"))
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    structure = parser.structure
    first = next(n for n, i in enumerate(structure) if i["instruction"] == "FROM")
    for instruction in structure[first + 1:]:
        if instruction["instruction"] == "FROM":
            break
        if instruction["instruction"] == "COPY":
            parts = instruction["value"].split()
            destination = out / parts[-1]
            for source in parts[:-1]:
                # Docker: a directory's contents go into the destination; a
                # file goes into it when it ends with "/", else becomes it.
                path = ROOT / source
                if path.is_dir():
                    shutil.copytree(path, destination, dirs_exist_ok=True)
                else:
                    target = destination / path.name if parts[-1].endswith("/") else destination
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)
        if instruction["instruction"] == "RUN":
            command = instruction["value"]
            if "cargo build" not in command:
                print(f"echo 'first RUN does not build the dependencies: {command[:80]}'; exit 1")
                return
            print(re.sub(r"cargo build [^&;]*",
                         "cargo fetch --locked --offline ", command))
            return
    print("echo 'no RUN in the builder stage'; exit 1")


def cmd_promrules(out_dir):
    count = 0
    for path, index, doc in manifests():
        if doc.get("kind") != "PrometheusRule":
            continue
        target = pathlib.Path(out_dir) / f"{path.stem}-{index}.rules.yml"
        target.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}, sort_keys=False))
        print(target)
        count += 1
    if count == 0:
        print("none")


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    {
        "unit-policy": cmd_unit_policy,
        "syscalls": cmd_syscalls,
        "exposure": cmd_exposure,
        "dockerfile": cmd_dockerfile,
        "k8s-schemas": cmd_k8s_schemas,
        "k8s-policy": cmd_k8s_policy,
        "promrules": cmd_promrules,
        "stub-stage": cmd_stub_stage,
    }[command](*rest)
