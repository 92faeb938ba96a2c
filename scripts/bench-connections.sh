#!/usr/bin/env bash
# Whether /healthz still answers while clients hold every connection slot
# (issue 35, item 5), on the release daemon with the simulator and the
# default `server.max_connections` (512):
#   (a) 512 idle sockets that send nothing and reconnect as soon as they
#       are closed (by the header timeout or by eviction);
#   (b) 1,000 clients on /api/v1/alerts/stream that reconnect when their
#       stream ends or is refused.
# While each load runs, /healthz is probed PROBES times, once a second, each
# probe a new connection with a 1 s limit; prints answered/PROBES per load.
#
# Everything binds 127.0.0.1, every wait is bounded, the load generator and
# the daemon are stopped on exit. Tunables (environment): PORT (first port
# tried, 19677), PROBES (30), IDLE (512; 600 holds the cap for sure, see
# docs/performance.md), STREAMS (1000), SKIP_BUILD=1 to
# use the existing binary, BIN (target/release/vramd).
# Needs curl and python3 (standard library only).

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

PORT=${PORT:-19677}
PROBES=${PROBES:-30}
IDLE=${IDLE:-512}
STREAMS=${STREAMS:-1000}
BIN=${BIN:-target/release/vramd}
WORK=$(mktemp -d)
PID=""
LOAD=""

log() { printf '[bench-connections] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

stop_load() {
    if [[ -n "$LOAD" ]]; then
        kill -TERM "$LOAD" 2>/dev/null || true
        wait "$LOAD" 2>/dev/null || true
    fi
    LOAD=""
}
cleanup() { stop_load; stop_daemon; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

for tool in curl python3; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "cargo build --release"
    cargo build --release --quiet
fi
[[ -x "$BIN" ]] || die "$BIN not found"
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# The load: COUNT connections to PATH (none: send nothing), each reopened
# as soon as the daemon closes it, until killed.
cat >"$WORK/hold.py" <<'PY'
import asyncio, signal, sys

host, port, count, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

async def hold():
    while True:
        try:
            reader, writer = await asyncio.open_connection(host, port)
            if path != "none":
                writer.write(f"GET {path} HTTP/1.1\r\nhost: {host}\r\n\r\n".encode())
            while await reader.read(4096):
                pass
            writer.close()
        except OSError:
            await asyncio.sleep(0.01)

async def main():
    tasks = [asyncio.create_task(hold()) for _ in range(count)]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for task in tasks:
        task.cancel()

asyncio.run(main())
PY

start_daemon() {
    PORT=$(free_port "$PORT")
    ADDR="127.0.0.1:$PORT"
    env -u VRAMD_SERVER__LISTEN "$BIN" --config config/vramd.toml --log-level warn \
        --listen "$ADDR" --simulate multi-tenant --gpus 8 >"$WORK/daemon.log" 2>&1 &
    PID=$!
    for _ in $(seq 200); do
        curl -sf --max-time 1 "http://$ADDR/readyz" >/dev/null 2>&1 && return 0
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/daemon.log" >&2; die "vramd exited"; }
        sleep 0.1
    done
    die "vramd not ready on $ADDR within 20 s"
}

# probe LABEL COUNT PATH: holds COUNT connections on PATH, waits for them
# to settle, then probes /healthz PROBES times at 1/s.
probe() {
    local label=$1 count=$2 path=$3 answered=0
    start_daemon
    python3 "$WORK/hold.py" 127.0.0.1 "$PORT" "$count" "$path" &
    LOAD=$!
    sleep 5
    for _ in $(seq "$PROBES"); do
        if curl -sf --max-time 1 "http://$ADDR/healthz" >/dev/null 2>&1; then
            answered=$((answered + 1))
        fi
        sleep 1
    done
    stop_load
    stop_daemon
    printf '%-40s /healthz answered %d/%d\n' "$label" "$answered" "$PROBES"
}

probe "$IDLE idle sockets, reconnecting" "$IDLE" none
probe "$STREAMS SSE clients, reconnecting" "$STREAMS" /api/v1/alerts/stream
