#!/usr/bin/env bash
# The one command that runs every vramd test:
#   - installs what the tests need when it is missing: promtool and the
#     Prometheus server (Debian package `prometheus`), used by tests/e2e.rs to
#     lint the /metrics output and by tests/prometheus.rs (rule unit tests,
#     and a real Prometheus scraping the daemon and running every dashboard
#     and rule expression), by tests/dcgm.rs (dcgm-exporter's own dashboard
#     against deploy/prometheus/dcgm-compat-rules.yml), and Alertmanager (Debian package `prometheus-alertmanager`, binary
#     /usr/bin/prometheus-alertmanager), which tests/alertmanager.rs delivers
#     alerts to;
#   - installs Chromium (Debian package `chromium`) when missing: tests/ui.rs
#     loads the live page at / in it, headless, and keeps screenshots in
#     target/ui-screenshots/;
#   - cargo test --workspace --all-targets: unit tests, integration tests (including the
#     end-to-end tests that run the real binary), benches and examples built
#     and run once in test mode;
#   - cargo test --doc: documentation examples (cheap when there are none);
#   - pytest -q clients/python/tests: the Python reporter client (no GPU or
#     torch needed), including posting reports to the vramd binary cargo
#     built;
#   - scripts/fuzz-api.sh: schemathesis fuzzes the REST API from its OpenAPI document against that
#     binary on a simulated host: no 5xx, every answer as documented, the
#     daemon alive and its memory bounded afterwards (about 75 s);
#   - scripts/check-deploy.sh: deploy/ (systemd unit, Dockerfile, Kubernetes
#     manifests) against systemd-analyze, strace, hadolint and the Kubernetes
#     schemas (tools installed when missing; about 25 s).
# pytest and schemathesis, pinned in scripts/requirements-test.txt, go into
# a virtual environment, target/test-venv (never the system's Python:
# Debian's is externally managed, PEP 668); the Debian packages are
# installed with apt-get (sudo -n when not root), and the Prometheus and
# Alertmanager services their packages enable are disabled and stopped
# again (scripts/setup-lib.sh). scripts/check-stock-debian.sh shows this on
# a freshly bootstrapped Debian 12.
#
#   scripts/test.sh                run everything
#   scripts/test.sh --setup-only   install what the tests need (above, and
#                                  scripts/check-deploy.sh's tools), run nothing
#
# Works unattended (CI=true, no stdin). Exits non-zero on the first failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/setup-lib.sh
. scripts/setup-lib.sh

SETUP_ONLY=0
case "${1:-}" in
"") ;;
--setup-only) SETUP_ONLY=1 ;;
*) setup_die "unknown argument '$1' (usage: scripts/test.sh [--setup-only])" ;;
esac

die() {
    echo "scripts/test.sh: FAILED: $*" >&2
    exit 1
}

ALERTMANAGER=/usr/bin/prometheus-alertmanager
# The Prometheus server (Debian package `prometheus`, which also provides
# promtool): tests/prometheus.rs scrapes the daemon with it and runs every
# PromQL expression of dashboards/ and deploy/prometheus/ through its API.
PROMETHEUS=/usr/bin/prometheus

# pytest and schemathesis (scripts/fuzz-api.sh makes sure of the same one).
TEST_VENV="${CARGO_TARGET_DIR:-target}/test-venv"

# What the tests need besides Rust. The Debian packages' services are
# disabled again when this installs them (the tests start their own).
setup() {
    command -v promtool >/dev/null 2>&1 || ensure_debian_file /usr/bin/promtool prometheus prometheus
    echo "scripts/test.sh: using $(promtool --version 2>&1 | head -n 1)"
    ensure_debian_file "$PROMETHEUS" prometheus prometheus
    echo "scripts/test.sh: using $("$PROMETHEUS" --version 2>&1 | head -n 1)"
    ensure_debian_file "$ALERTMANAGER" prometheus-alertmanager prometheus-alertmanager
    echo "scripts/test.sh: using $("$ALERTMANAGER" --version 2>&1 | head -n 1)"
    # crates/driver-trace/tests/object.rs rebuilds the committed BPF object
    # from its C source and compares (clang, llvm-strip, libbpf's headers).
    ensure_debian_file /usr/bin/clang clang
    ensure_debian_file /usr/bin/llvm-strip llvm
    [ -f /usr/include/bpf/bpf_helpers.h ] || apt_install libbpf-dev ||
        setup_die "libbpf's headers are required (Debian: libbpf-dev); install them and rerun"
    echo "scripts/test.sh: using $(clang --version 2>&1 | head -n 1)"
    # The browser tests/ui.rs drives over the DevTools Protocol.
    ensure_debian_file /usr/bin/chromium chromium
    echo "scripts/test.sh: using $(/usr/bin/chromium --version 2>/dev/null | head -n 1)"
    ensure_python_venv "$TEST_VENV" scripts/requirements-test.txt
    echo "scripts/test.sh: using $("$TEST_VENV/bin/python" -m pytest --version 2>&1 | head -n 1)," \
        "schemathesis $("$TEST_VENV/bin/st" --version 2>&1 | awk '{print $NF}') on $("$TEST_VENV/bin/python" --version 2>&1) ($TEST_VENV)"
}

if [ "$SETUP_ONLY" = 1 ]; then
    setup
    scripts/check-deploy.sh --setup-only
    echo "scripts/test.sh: set up; cargo (rustup) is the one thing not installed here"
    exit 0
fi
command -v cargo >/dev/null 2>&1 || die "cargo not found; install the Rust toolchain (rustup)"
setup

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
trap 'echo "scripts/test.sh: FAILED (see the output above)" >&2' ERR

# Show cargo's output as it runs and keep a copy for the summary.
cargo test --workspace --all-targets 2>&1 | tee "$log"
cargo test --workspace --doc 2>&1 | tee -a "$log"

# The Python reporter client (clients/python): its own pytest summary; a
# failure fails the script. VRAMD_BIN is the binary cargo just built, which
# its end-to-end tests post real reports to (missing, they fail).
VRAMD_BIN="${CARGO_TARGET_DIR:-target}/debug/vramd" "$TEST_VENV/bin/python" -m pytest -q clients/python/tests

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
