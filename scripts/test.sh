#!/usr/bin/env bash
# The one command that runs every vramd test:
#   - installs what the tests need when it is missing: promtool and the
#     Prometheus server (Debian package `prometheus`), used by tests/e2e.rs to
#     lint the /metrics output and by tests/prometheus.rs (rule unit tests,
#     and a real Prometheus scraping the daemon and running every dashboard
#     and rule expression), and Alertmanager (Debian package `prometheus-alertmanager`, binary
#     /usr/bin/prometheus-alertmanager), which tests/alertmanager.rs delivers
#     alerts to;
#   - installs Chromium (Debian package `chromium`) when missing: tests/ui.rs
#     loads the live page at / in it, headless, and keeps screenshots in
#     target/ui-screenshots/;
#   - cargo test --workspace --all-targets: unit tests, integration tests (including the
#     end-to-end tests that run the real binary), benches and examples built
#     and run once in test mode;
#   - cargo test --doc: documentation examples (cheap when there are none);
#   - python3 -m pytest -q clients/python/tests: the Python reporter client
#     (no GPU or torch needed; pytest is installed with pip when missing),
#     including posting reports to the vramd binary cargo built;
#   - scripts/fuzz-api.sh: schemathesis (pinned; installed with pip when
#     missing) fuzzes the REST API from its OpenAPI document against that
#     binary on a simulated host: no 5xx, every answer as documented, the
#     daemon alive and its memory bounded afterwards (about 75 s);
#   - scripts/check-deploy.sh: deploy/ (systemd unit, Dockerfile, Kubernetes
#     manifests) against systemd-analyze, strace, hadolint and the Kubernetes
#     schemas (tools installed when missing; about 25 s).
# Works unattended (CI=true, no stdin). Exits non-zero on the first failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() {
    echo "scripts/test.sh: FAILED: $*" >&2
    exit 1
}

# ensure_debian_file PATH PACKAGE: installs the Debian package that provides
# PATH when PATH is missing; fails (never skips) when that cannot be done.
ensure_debian_file() {
    local path="$1" package="$2"
    if [ -x "$path" ]; then
        return
    fi
    echo "scripts/test.sh: $path not found; installing the Debian package '$package'" >&2
    command -v apt-get >/dev/null 2>&1 ||
        die "$path is required and apt-get is not available; install the '$package' package and rerun"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 ||
            die "$path is required; run as root or install sudo, or install the '$package' package yourself"
        sudo="sudo -n"
    fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update </dev/null ||
        die "apt-get update failed; cannot install $package"
    $sudo apt-get install -y --no-install-recommends "$package" </dev/null ||
        die "apt-get install $package failed"
    [ -x "$path" ] ||
        die "the '$package' package is installed but $path is missing"
}

ALERTMANAGER=/usr/bin/prometheus-alertmanager
# The Prometheus server (Debian package `prometheus`, which also provides
# promtool): tests/prometheus.rs scrapes the daemon with it and runs every
# PromQL expression of dashboards/ and deploy/prometheus/ through its API.
PROMETHEUS=/usr/bin/prometheus

ensure_promtool() {
    command -v promtool >/dev/null 2>&1 || ensure_debian_file /usr/bin/promtool prometheus
}

ensure_prometheus() {
    ensure_debian_file "$PROMETHEUS" prometheus
}

ensure_alertmanager() {
    ensure_debian_file "$ALERTMANAGER" prometheus-alertmanager
}

# The browser tests/ui.rs drives over the DevTools Protocol.
ensure_chromium() {
    ensure_debian_file /usr/bin/chromium chromium
}

ensure_pytest() {
    command -v python3 >/dev/null 2>&1 ||
        die "python3 not found; it runs the Python client's tests (clients/python)"
    if python3 -c 'import pytest' >/dev/null 2>&1; then
        return
    fi
    echo "scripts/test.sh: pytest not found; installing it with pip" >&2
    python3 -m pip install --quiet pytest </dev/null ||
        die "python3 -m pip install pytest failed; install pytest for python3 (or the Debian package 'python3-pytest') and rerun"
    python3 -c 'import pytest' >/dev/null 2>&1 ||
        die "pytest was installed but python3 cannot import it"
}

command -v cargo >/dev/null 2>&1 || die "cargo not found; install the Rust toolchain (rustup)"
ensure_promtool
echo "scripts/test.sh: using $(promtool --version 2>&1 | head -n 1)"
ensure_prometheus
echo "scripts/test.sh: using $("$PROMETHEUS" --version 2>&1 | head -n 1)"
ensure_alertmanager
echo "scripts/test.sh: using $("$ALERTMANAGER" --version 2>&1 | head -n 1)"
ensure_chromium
echo "scripts/test.sh: using $(/usr/bin/chromium --version 2>&1 | head -n 1)"
ensure_pytest
echo "scripts/test.sh: using $(python3 -m pytest --version 2>&1 | head -n 1) on $(python3 --version 2>&1)"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
trap 'echo "scripts/test.sh: FAILED (see the output above)" >&2' ERR

# Show cargo's output as it runs and keep a copy for the summary.
cargo test --workspace --all-targets 2>&1 | tee "$log"
cargo test --workspace --doc 2>&1 | tee -a "$log"

# The Python reporter client (clients/python): its own pytest summary; a
# failure fails the script. VRAMD_BIN is the binary cargo just built, which
# its end-to-end tests post real reports to (missing, they fail).
VRAMD_BIN="${CARGO_TARGET_DIR:-target}/debug/vramd" python3 -m pytest -q clients/python/tests

# Schema-driven fuzzing of the REST API against the binary cargo built; a
# failure (or schemathesis that cannot be installed) fails the script.
scripts/fuzz-api.sh "${CARGO_TARGET_DIR:-target}/debug/vramd"

# The deployment artefacts against real tools (systemd-analyze verify and
# security, systemd-sysusers, strace against SystemCallFilter=, hadolint,
# kubernetes-validate and the CRD schemas, promtool); installs what it needs.
scripts/check-deploy.sh "${CARGO_TARGET_DIR:-target}/debug/vramd"

# One closing line summing every "test result:" line cargo printed.
awk '/^test result: ok\./ {
        binaries++; passed += $4; ignored += $8
     }
     END {
        printf "scripts/test.sh: all tests passed (%d passed, %d ignored, %d test binaries)\n",
               passed, ignored, binaries
     }' "$log"
