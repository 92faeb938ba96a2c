#!/usr/bin/env bash
# Measures what concurrent full-window history queries cost the daemon in
# memory (issue 35, item 4), on the release daemon:
#   1. starts vramd on a simulated host (steady-inference, GPUS GPUs) with a
#      10 ms fast interval, a 10 min retention and a simulated speed of
#      SPEED, so the fast tier holds a full window of `api.max_history_points`
#      (50,000) samples within about 500 / SPEED seconds;
#   2. once `vramd_history_samples{tier="fast"}` shows the window is full,
#      waits SETTLE seconds and reads the idle RSS, then resets the peak
#      (VmHWM, through /proc/PID/clear_refs) so it reflects only the load;
#   3. fires CLIENTS concurrent curls, each asking once for the full window
#      (window = (max points - 1) x 10 ms, no step: every sample), retrying
#      on 503 as curl does, honouring `Retry-After`; with STEP set, asks for
#      buckets of that width instead (e.g. STEP=20ms: ~25,000 buckets);
#   4. samples VmRSS every 0.5 s during the load and for AFTER seconds after
#      the last client finished.
# Prints idle RSS, peak RSS (VmHWM during the load) and the RSS AFTER seconds
# after, plus how many clients got their answer (and its size); docs/performance.md
# records the figures. The RSS samples are left in $KEEP/rss.tsv when KEEP
# names a directory.
#
# Everything binds 127.0.0.1, every wait is bounded, and the daemon is
# killed on exit. Tunables (environment): PORT (first port tried, 19677),
# CLIENTS (64), STEP (none), GPUS (1), SPEED (20), SETTLE (5), AFTER (60), KEEP,
# BIN (target/release/vramd; naming another skips the build), SKIP_BUILD=1
# to use the existing target/release/vramd, EXTRA_ENV (extra
# VAR=value words for the daemon's environment, e.g. a configuration key).
# Needs curl.

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

PORT=${PORT:-19677}
CLIENTS=${CLIENTS:-64}
GPUS=${GPUS:-1}
SPEED=${SPEED:-20}
SETTLE=${SETTLE:-5}
AFTER=${AFTER:-60}
MAX_POINTS=50000
INTERVAL_MS=10
BIN=${BIN:-target/release/vramd}
WORK=$(mktemp -d)
PID=""
SAMPLER=""

log() { printf '[bench-history] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

cleanup() {
    [[ -n "$SAMPLER" ]] && kill "$SAMPLER" 2>/dev/null
    stop_daemon
    if [[ -n "${KEEP:-}" ]]; then
        mkdir -p "$KEEP" && cp "$WORK"/rss.tsv "$KEEP"/ 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v curl >/dev/null || die "curl is required"
if [[ "${SKIP_BUILD:-0}" != 1 && "$BIN" == target/release/vramd ]]; then
    log "cargo build --release"
    cargo build --release --quiet --bin vramd
fi
[[ -x "$BIN" ]] || die "$BIN not found"

# kib FIELD: the daemon's /proc status field (VmRSS, VmHWM) in KiB.
kib() { awk -v f="$1:" '$1 == f { print $2 }' "/proc/$PID/status"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.0f MiB", k / 1024 }'; }

PORT=$(free_port "$PORT")
URL="http://127.0.0.1:$PORT"
# shellcheck disable=SC2086 # EXTRA_ENV is a list of words on purpose
env -u VRAMD_SERVER__LISTEN VRAMD_SAMPLER__FAST_INTERVAL=${INTERVAL_MS}ms \
    VRAMD_HISTORY__RETENTION=10m VRAMD_API__MAX_HISTORY_POINTS=$MAX_POINTS ${EXTRA_ENV:-} \
    "$BIN" --config config/vramd.toml --log-level warn --listen "127.0.0.1:$PORT" \
    --simulate steady-inference --gpus "$GPUS" --speed "$SPEED" >"$WORK/daemon.log" 2>&1 &
PID=$!

fast_samples() {
    curl -sf --max-time 2 "$URL/metrics" |
        awk '/^vramd_history_samples\{/ && /tier="fast"/ { print int($2); exit }'
}
log "filling the fast tier to $MAX_POINTS samples per GPU (speed $SPEED)"
for _ in $(seq 1200); do
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/daemon.log" >&2; die "vramd exited"; }
    samples=$(fast_samples || true)
    [[ -n "$samples" ]] && ((samples >= MAX_POINTS)) && break
    sleep 0.5
done
[[ -n "${samples:-}" ]] && ((samples >= MAX_POINTS)) || die "fast tier not full within 10 min"
# The window ends at the newest sample and includes both ends.
window_ms=$(((MAX_POINTS - 1) * INTERVAL_MS))
query="$URL/api/v1/devices/0/history?window=${window_ms}ms${STEP:+&step=$STEP}"
if curl -sf --max-time 30 -D - -o /dev/null "$query" | grep -qi '^content-length:'; then
    framing="written whole (Content-Length)"
else
    framing="streamed (chunked)"
fi
sleep "$SETTLE"
idle=$(kib VmRSS)
echo 5 >"/proc/$PID/clear_refs" # resets VmHWM to the current RSS

start=$(date +%s.%N)
(
    while kill -0 "$PID" 2>/dev/null; do
        printf '%s\t%s\n' "$(date +%s.%N)" "$(kib VmRSS)"
        sleep 0.5
    done
) >"$WORK/rss.tsv" &
SAMPLER=$!

asked=${STEP:+buckets of $STEP}
log "$CLIENTS concurrent clients ask for $window_ms ms, ${asked:-every sample}"
clients=()
for client in $(seq "$CLIENTS"); do
    curl -s --max-time 120 --retry 30 --retry-max-time 110 -o "$WORK/body.$client" \
        -w '%{http_code} %{size_download}\n' "$query" >"$WORK/status.$client" &
    clients+=($!)
done
wait "${clients[@]}" || true
done_at=$(date +%s.%N)
peak=$(kib VmHWM)
ok=0
for client in $(seq "$CLIENTS"); do
    read -r code _ <"$WORK/status.$client" || code=000
    [[ "$code" == 200 ]] && ok=$((ok + 1))
done
response_bytes=$(stat -c %s "$WORK/body.1" 2>/dev/null || echo 0)
response_points=$(grep -oE '"(at|start)":' "$WORK/body.1" 2>/dev/null | wc -l)
rm -f "$WORK"/body.*

log "sampling RSS for $AFTER s after the load"
sleep "$AFTER"
after=$(kib VmRSS)

awk -v s="$start" -v d="$done_at" 'BEGIN { printf "load took            %.1f s\n", d - s }'
printf 'answer               %s\n' "$framing"
printf 'answers 200          %d of %d (the first: %d entries, %d bytes)\n' "$ok" "$CLIENTS" \
    "$response_points" "$response_bytes"
printf 'idle RSS             %s\n' "$(mib "$idle")"
printf 'peak RSS (VmHWM)     %s\n' "$(mib "$peak")"
printf 'RSS %3d s after      %s\n' "$AFTER" "$(mib "$after")"
