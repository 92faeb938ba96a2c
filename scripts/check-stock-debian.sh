#!/usr/bin/env bash
# Does the set-up of scripts/test.sh work on a stock Debian 12, where the
# system Python is externally managed (PEP 668)? CI cannot tell: its Python
# may come from elsewhere (pyenv) and its services may never start. This
# builds a fresh Debian 12 root with debootstrap (the minbase variant: what
# a debian:12 container image has) and, inside it with chroot:
#
#   1. installs python3 and python3-pip, as a user who has pip would;
#   2. runs the command the test script used to run to get pytest,
#      `python3 -m pip install pytest`, and expects it to be refused with
#      "externally-managed-environment";
#   3. runs `scripts/test.sh --setup-only` on a copy of this working tree:
#      the Debian packages (Prometheus, Alertmanager, python3-venv,
#      systemd, strace) and both virtual environments under target/;
#   4. checks that no Prometheus or Alertmanager process runs in the root
#      and that neither service is enabled there (no start link in
#      /etc/rc2.d..rc5.d, no multi-user.target.wants link, and
#      `systemctl is-enabled` says disabled);
#   5. runs the Python reporter's tests with the environment's pytest on
#      Debian's python3 (with the vramd binary of this tree when it has been
#      built, so the end-to-end ones post to a real daemon);
#   6. runs `scripts/test.sh --setup-only` again, which must change nothing.
#
# Each step prints its wall time. Rust is not installed in the root (rustup
# and a cold build take far longer than the rest), so the cargo tests are
# not run there.
#
# Not part of scripts/test.sh or CI: it downloads a whole root (about 100
# MiB of packages, more for the Python wheels) from deb.debian.org and PyPI
# and needs root (debootstrap, mount, chroot). About two minutes.
#
# Usage: sudo scripts/check-stock-debian.sh [--keep]
#   --keep   leave the root (its path is printed) instead of removing it
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian),
#              DEBIAN_SUITE (default bookworm),
#              VRAMD_BIN (default target/debug/vramd: the binary copied in).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/setup-lib.sh
. scripts/setup-lib.sh

KEEP=0
case "${1:-}" in
"") ;;
--keep) KEEP=1 ;;
*) setup_die "unknown argument '$1' (usage: scripts/check-stock-debian.sh [--keep])" ;;
esac
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
VRAMD_BIN="${VRAMD_BIN:-${CARGO_TARGET_DIR:-target}/debug/vramd}"
SUITE="${DEBIAN_SUITE:-bookworm}"

say() { echo "scripts/check-stock-debian.sh: $*"; }
[ "$(id -u)" -eq 0 ] || setup_die "must run as root (debootstrap, mount, chroot)"
command -v debootstrap >/dev/null 2>&1 || {
    say "debootstrap not found; installing it"
    apt_install debootstrap || setup_die "cannot install debootstrap"
}

WORK="$(mktemp -d /var/tmp/vramd-stock-debian.XXXXXX)"
ROOTFS="$WORK/root"
cleanup() {
    local pid
    # Whatever still runs inside the root (a service a package started).
    for pid in $(rooted_pids); do kill "$pid" 2>/dev/null || true; done
    mountpoint -q "$ROOTFS/proc" && umount "$ROOTFS/proc"
    if [ "$KEEP" = 1 ]; then
        say "root kept at $ROOTFS"
    elif mountpoint -q "$ROOTFS/proc"; then
        say "$ROOTFS/proc is still mounted; not removing $WORK"
    else
        rm -rf --one-file-system "$WORK"
    fi
}
trap cleanup EXIT

# PIDs of the processes whose root directory is the chroot.
rooted_pids() {
    local dir
    for dir in /proc/[0-9]*; do
        [ "$(readlink "$dir/root" 2>/dev/null)" = "$ROOTFS" ] && echo "${dir#/proc/}"
    done
    return 0
}

# What reaches the network from here reaches it from the root too: the
# host's proxy and package index settings, and the CA bundle its pip trusts
# (PIP_CERT: behind a TLS-inspecting proxy, PyPI's certificate chain ends in
# a local CA that the root's own bundle lacks). Nothing else of the host's
# environment goes in.
ROOT_ENV=()
carry_network_settings() {
    local name
    for name in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY PIP_INDEX_URL PIP_EXTRA_INDEX_URL; do
        [ -n "${!name:-}" ] && ROOT_ENV+=("$name=${!name}")
    done
    if [ -n "${PIP_CERT:-}" ] && [ -f "$PIP_CERT" ]; then
        mkdir -p "$ROOTFS/etc/ssl"
        cp "$PIP_CERT" "$ROOTFS/etc/ssl/host-pip-ca.pem" || return 1
        ROOT_ENV+=("PIP_CERT=/etc/ssl/host-pip-ca.pem")
        say "   carrying the host's PIP_CERT ($PIP_CERT) into the root"
    fi
    return 0
}

# in_root COMMAND...: runs COMMAND in the root, as root, with a clean
# environment (and the network settings above) and the repository copy as
# its working directory.
in_root() {
    chroot "$ROOTFS" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 CI=true "${ROOT_ENV[@]}" /bin/sh -c 'cd /src/vramd && exec "$@"' sh "$@"
}

# step NAME COMMAND...: runs COMMAND, prints its wall time; fails the script when it fails.
step() {
    local name="$1" started status=0
    shift
    say "== $name"
    started="$(date +%s.%N)"
    "$@" || status=$?
    say "   $name: $(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s, exit status $status"
    [ "$status" -eq 0 ] || setup_die "$name failed"
}

bootstrap() {
    debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
        { tail -n 20 "$WORK/debootstrap.log"; return 1; }
    mount -t proc proc "$ROOTFS/proc"
    cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
    carry_network_settings || return 1
    # This working tree (tracked and untracked files, not what git ignores).
    mkdir -p "$ROOTFS/src/vramd"
    git ls-files -z --cached --others --exclude-standard |
        tar --null --files-from=- --ignore-failed-read -cf - | tar -C "$ROOTFS/src/vramd" -xf -
    if [ -x "$VRAMD_BIN" ]; then
        mkdir -p "$ROOTFS/src/vramd/target/debug"
        cp "$VRAMD_BIN" "$ROOTFS/src/vramd/target/debug/vramd"
    else
        say "   no vramd binary at $VRAMD_BIN: the reporter's end-to-end tests will be skipped"
    fi
    say "   $(cat "$ROOTFS/etc/debian_version"), $(du -sh --exclude=proc "$ROOTFS" | cut -f1) at $ROOTFS"
}

stock_python() {
    in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-pip >"$WORK/python.log" 2>&1 || { tail -n 20 "$WORK/python.log"; return 1; }
    in_root python3 --version
    in_root sh -c 'ls /usr/lib/python3*/EXTERNALLY-MANAGED'
}

old_pip_install_is_refused() {
    local status=0
    in_root python3 -m pip install --quiet pytest >"$WORK/old.log" 2>&1 </dev/null || status=$?
    sed 's/^/   | /' "$WORK/old.log" | head -n 8
    [ "$status" -ne 0 ] || { say "pip installed pytest into the system Python: not a stock Debian?"; return 1; }
    grep -q 'externally-managed-environment' "$WORK/old.log"
}

# The test script's own lines (apt's and pip's output in setup.log, shown on failure).
setup_only() {
    local status=0
    in_root scripts/test.sh --setup-only >"$WORK/setup.log" 2>&1 || status=$?
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$WORK/setup.log" | sed 's/^/   | /'
    else
        grep -a '^scripts/' "$WORK/setup.log" | sed 's/^/   | /'
    fi
    return "$status"
}

services_off() {
    local problems=0 pid service
    for pid in $(rooted_pids); do
        say "   still running in the root: pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null))"
        problems=1
    done
    for service in prometheus prometheus-alertmanager; do
        if ls "$ROOTFS"/etc/rc[2-5].d/S*"$service" >/dev/null 2>&1 ||
            [ -e "$ROOTFS/etc/systemd/system/multi-user.target.wants/$service.service" ]; then
            say "   $service is still enabled: $(ls "$ROOTFS"/etc/rc[2-5].d/S*"$service" \
                "$ROOTFS/etc/systemd/system/multi-user.target.wants/$service.service" 2>/dev/null | tr '\n' ' ')"
            problems=1
        fi
        say "   systemctl is-enabled $service: $(in_root systemctl is-enabled "$service.service" 2>&1 || true)"
    done
    return "$problems"
}

client_tests() {
    in_root env VRAMD_BIN=target/debug/vramd target/test-venv/bin/python -m pytest -q clients/python/tests 2>&1 |
        tail -n 3 | sed 's/^/   | /'
    return "${PIPESTATUS[0]}"
}

setup_again_changes_nothing() {
    in_root scripts/test.sh --setup-only >"$WORK/again.log" 2>&1 || { cat "$WORK/again.log"; return 1; }
    if grep -E 'installing|disabled' "$WORK/again.log"; then
        return 1
    fi
}

say "Debian $SUITE from $MIRROR into $WORK"
step "debootstrap --variant=minbase $SUITE" bootstrap
step "apt-get install python3 python3-pip (the stock Python, with pip)" stock_python
step "old set-up: python3 -m pip install pytest is refused (externally-managed-environment)" old_pip_install_is_refused
step "new set-up: scripts/test.sh --setup-only from empty" setup_only
step "no Prometheus or Alertmanager service running or enabled" services_off
step "Python reporter tests with target/test-venv's pytest on Debian's python3" client_tests
step "scripts/test.sh --setup-only again: nothing to install" setup_again_changes_nothing
say "stock Debian $(cat "$ROOTFS/etc/debian_version"): the set-up of scripts/test.sh works"
