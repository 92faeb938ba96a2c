# What the test scripts install when it is missing, and how (sourced by
# scripts/test.sh, scripts/fuzz-api.sh and scripts/check-deploy.sh, not run):
#
#   - Debian packages, with apt-get (sudo -n when not root). A package whose
#     postinst enables a system service the tests do not want running
#     (Prometheus, Alertmanager: the tests start their own, on ephemeral
#     ports) has that service disabled and stopped again, with a line
#     saying so.
#   - Python tools, into a virtual environment under the target directory,
#     pinned by a requirements file: never into the system's Python, which
#     Debian marks externally managed (PEP 668: pip refuses with
#     "externally-managed-environment"), nor the user's.
#
# Messages go to stderr, prefixed with the calling script's name; a step
# that cannot be done fails the caller (exit 1), never skips.

SETUP_CALLER="scripts/$(basename "$0")"

setup_say() { echo "$SETUP_CALLER: $*" >&2; }
setup_die() {
    echo "$SETUP_CALLER: FAILED: $*" >&2
    exit 1
}

# as_root COMMAND...: runs COMMAND as root (sudo -n when not root).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        setup_say "cannot run '$*': not root and sudo is not installed"
        return 1
    fi
}

# apt_install PACKAGE...: installs Debian packages without their
# recommendations; non-zero when that cannot be done.
apt_install() {
    command -v apt-get >/dev/null 2>&1 || {
        setup_say "apt-get is not available to install: $*"
        return 1
    }
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update </dev/null >&2 &&
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" </dev/null >&2
}

# disable_services PACKAGE SERVICE...: the package was just installed by
# these scripts; its postinst enabled (and, where an init system runs,
# started) SERVICE. Disables and stops each, and says so.
disable_services() {
    local package="$1" service
    shift
    for service in "$@"; do
        if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
            # systemd runs: stop it now and keep it from starting at boot.
            as_root systemctl disable --now --quiet "$service.service" >&2 ||
                setup_die "systemctl disable --now $service failed"
        else
            # No systemd running (a container, a chroot, sysvinit): stop
            # what the init script may have started, then remove the boot
            # links (systemctl works on the unit files offline and, through
            # systemd-sysv-install, on /etc/rc?.d).
            if [ -x "/etc/init.d/$service" ] && command -v invoke-rc.d >/dev/null 2>&1; then
                as_root invoke-rc.d --quiet "$service" stop >/dev/null 2>&1 || true
            fi
            if command -v systemctl >/dev/null 2>&1; then
                as_root systemctl disable --quiet "$service.service" >&2 ||
                    setup_die "systemctl disable $service failed"
            elif [ -x "/etc/init.d/$service" ] && command -v update-rc.d >/dev/null 2>&1; then
                # No systemctl (no systemd package): update-rc.d turns the
                # /etc/rc?.d start links into stop links and removes the
                # unit's multi-user.target.wants link as well.
                as_root update-rc.d "$service" disable >/dev/null 2>&1 ||
                    setup_die "update-rc.d $service disable failed"
            fi
        fi
        setup_say "disabled and stopped the $service service that the Debian package '$package' enabled" \
            "(the tests run their own; 'systemctl enable --now $service' to run it as a service)"
    done
}

# ensure_debian_file PATH PACKAGE [SERVICE...]: installs the Debian package
# that provides PATH when PATH is missing, then disables the package's
# SERVICEs (see disable_services). A PATH already there is left alone, and
# so are its services: they are the machine's owner's.
ensure_debian_file() {
    local path="$1" package="$2"
    shift 2
    [ -x "$path" ] && return
    setup_say "$path not found; installing the Debian package '$package'"
    apt_install "$package" || setup_die "$path is required and the Debian package '$package' cannot be installed; install it and rerun"
    [ -x "$path" ] || setup_die "the '$package' package is installed but $path is missing"
    [ "$#" -eq 0 ] || disable_services "$package" "$@"
}

# ensure_python_venv VENV REQUIREMENTS: a virtual environment at VENV with
# exactly the pinned REQUIREMENTS file installed (PyPI). Kept while the file
# and the python3 it was made with are unchanged; made afresh otherwise.
# Installs python3 and its venv module (Debian: python3-venv) when missing.
ensure_python_venv() {
    local venv="$1" requirements="$2" stamp wanted
    stamp="$venv/.requirements"
    [ -f "$requirements" ] || setup_die "$requirements not found"
    if ! command -v python3 >/dev/null 2>&1; then
        setup_say "python3 not found; installing the Debian package python3-venv (and with it python3)"
        apt_install python3-venv || setup_die "python3 is required; install python3 and python3-venv and rerun"
    fi
    wanted="$({ cat "$requirements"; command -v python3; python3 --version; } 2>&1 | sha256sum | cut -d' ' -f1)"
    if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
        return
    fi
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
        rm -rf "$venv"
        setup_say "python3 -m venv failed; installing the Debian package python3-venv"
        apt_install python3-venv || setup_die "python3 -m venv failed and python3-venv cannot be installed"
        python3 -m venv "$venv" || setup_die "python3 -m venv failed; install the Debian package python3-venv"
    fi
    setup_say "installing the pinned Python tools of $requirements into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" </dev/null >&2 ||
        setup_die "pip install -r $requirements into $venv failed (needs PyPI)"
    echo "$wanted" >"$stamp"
}
