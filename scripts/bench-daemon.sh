#!/usr/bin/env bash
# Measures the release daemon as a whole, on the simulator:
#   (a) resident memory once every history ring is full
#       (multi-tenant, 8 GPUs, --speed 120, default 1 h retention at 4 Hz / 1 Hz);
#   (b) scrape throughput of /metrics and /api/v1/devices with wrk
#       (multi-tenant, 8 GPUs, speed 1.0);
#   (c) the daemon's own CPU share with nobody scraping, 2 (default) and 8 GPUs.
# Prints a summary table; docs/performance.md records the figures.
#
# Everything binds 127.0.0.1, every wait is bounded, and the daemon is killed
# on exit. Tunables (environment): PORT (first port tried, 19477),
# FILL_TIMEOUT (s, 240), RSS_SAMPLES (5), WRK_SECONDS (10), WRK_CONNECTIONS (2),
# WRK_THREADS (1), WRK_REPEATS (3), CPU_SECONDS (30), CPU_WINDOWS (3),
# PARTS (which of "memory scrape cpu" to run; all by default),
# SKIP_BUILD=1 to use the existing target/release/vramd. The daemon inherits
# the environment, so e.g. MALLOC_ARENA_MAX=2 applies to it.
# Needs curl and wrk (Debian: apt-get install wrk).

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

PORT=${PORT:-19477}
FILL_TIMEOUT=${FILL_TIMEOUT:-240}
RSS_SAMPLES=${RSS_SAMPLES:-5}
WRK_SECONDS=${WRK_SECONDS:-10}
WRK_CONNECTIONS=${WRK_CONNECTIONS:-2}
WRK_THREADS=${WRK_THREADS:-1}
WRK_REPEATS=${WRK_REPEATS:-3}
CPU_SECONDS=${CPU_SECONDS:-30}
CPU_WINDOWS=${CPU_WINDOWS:-3}
PARTS=${PARTS:-memory scrape cpu}
# Default sizing: 1 h / 250 ms + 1 for the fast tier; the slow tier (process
# lists) covers what the alert rules read, the 30 min leak window plus a
# minute: 32 min / 1 s + 1.
FAST_CAPACITY=14401
SLOW_CAPACITY=1921

BIN=target/release/vramd
WORK=$(mktemp -d)
PID=""

log() { printf '[bench-daemon] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

cleanup() { stop_daemon; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v curl >/dev/null || die "curl is required"
command -v wrk >/dev/null || die "wrk is required (Debian: apt-get install wrk)"

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "cargo build --release"
    cargo build --release --quiet
fi
[[ -x "$BIN" ]] || die "$BIN not found"

# start_daemon ARGS...: starts vramd with the built-in defaults (the shipped
# config/vramd.toml, which equals them) plus ARGS; waits for /readyz.
start_daemon() {
    PORT=$(free_port "$PORT")
    ADDR="127.0.0.1:$PORT"
    env -u VRAMD_SERVER__LISTEN "$BIN" --config config/vramd.toml --log-level warn \
        --listen "$ADDR" "$@" >"$WORK/daemon.log" 2>&1 &
    PID=$!
    for _ in $(seq 200); do
        if curl -sf --max-time 1 "http://$ADDR/readyz" >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/daemon.log" >&2; die "vramd exited"; }
        sleep 0.1
    done
    die "vramd not ready on $ADDR within 20 s"
}

metrics() { curl -sf --max-time 5 "http://$ADDR/metrics"; }

# Smallest value of a series over all GPUs, from a /metrics text on stdin.
min_series() {
    awk -v pat="$1" '$0 ~ pat { v = $NF + 0; if (!seen || v < m) m = v; seen = 1 }
        END { print seen ? m : 0 }'
}

status_kib() { awk -v key="$1:" '$1 == key { print $2 }' "/proc/$PID/status"; }

# utime + stime of the daemon, in clock ticks (fields after the comm).
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$PID/stat"; }

now() { date +%s.%N; }

TCK=$(getconf CLK_TCK)
declare -a SUMMARY

part() { [[ " $PARTS " == *" $1 "* ]]; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# ---------------------------------------------------------------- (a) memory
if part memory; then
log "(a) resident memory: multi-tenant, 8 GPUs, speed 120, until rings are full"
start_daemon --simulate multi-tenant --gpus 8 --speed 120
ticks0=$(cpu_ticks)
t0=$(now)
fast=0
slow=0
deadline=$((SECONDS + FILL_TIMEOUT))
while ((SECONDS < deadline)); do
    text=$(metrics) || text=""
    fast=$(min_series '^vramd_history_samples[{].*tier="fast"' <<<"$text")
    slow=$(min_series '^vramd_history_samples[{].*tier="slow"' <<<"$text")
    if ((fast >= FAST_CAPACITY && slow >= SLOW_CAPACITY)); then
        break
    fi
    sleep 2
done
fill_s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }')
fill_ticks=$(($(cpu_ticks) - ticks0))
((fast >= FAST_CAPACITY)) || die "fast rings reached only $fast of $FAST_CAPACITY samples in ${FILL_TIMEOUT}s"
log "rings full after ${fill_s}s (fast $fast, slow $slow per GPU)"
text=$(metrics)
processes=$(awk '/^vramd_processes\{/ { n += $NF; g++ } END { printf "%d over %d GPUs", n, g }' <<<"$text")
samples_total=$(awk '/^vramd_history_samples\{/ { n += $NF } END { print n }' <<<"$text")
: >"$WORK/rss"
: >"$WORK/hwm"
for _ in $(seq "$RSS_SAMPLES"); do
    status_kib VmRSS >>"$WORK/rss"
    status_kib VmHWM >>"$WORK/hwm"
    sleep 2
done
read -r rss_med rss_min rss_max < <(stats <"$WORK/rss")
hwm_max=$(sort -g "$WORK/hwm" | tail -1)
anon=$(status_kib RssAnon)
# CPU per stored sample while filling at 120x: 8 GPUs x (4 + 1) samples/s x 120.
cpu_per_sample_us=$(awk -v t="$fill_ticks" -v hz="$TCK" -v s="$samples_total" \
    'BEGIN { printf "%.1f", t / hz / s * 1e6 }')
stop_daemon
SUMMARY+=("memory  | VmRSS, rings full (8 GPUs, $processes)  | $(mib "$rss_med") MiB (min $(mib "$rss_min"), max $(mib "$rss_max"), n=$RSS_SAMPLES) | <= 40 MiB")
SUMMARY+=("memory  | VmHWM (peak RSS)                       | $(mib "$hwm_max") MiB | <= 40 MiB")
SUMMARY+=("memory  | RssAnon                                | $(mib "$anon") MiB |")
SUMMARY+=("cpu     | while filling at 120x, per stored sample | ${cpu_per_sample_us} us ($samples_total samples, ${fill_s} s) |")
fi

# ------------------------------------------------------------- (b) scraping
if part scrape; then
log "(b) scrape throughput: multi-tenant, 8 GPUs, speed 1.0"
start_daemon --simulate multi-tenant --gpus 8
sleep 3
body=$(metrics | wc -c)
devices_body=$(curl -sf --max-time 5 "http://$ADDR/api/v1/devices" | wc -c)
for endpoint in /metrics /api/v1/devices; do
    : >"$WORK/scrape.rps"
    : >"$WORK/scrape.p99"
    : >"$WORK/scrape.p50"
    for run in $(seq "$WRK_REPEATS"); do
        timeout $((WRK_SECONDS + 20)) wrk -t"$WRK_THREADS" -c"$WRK_CONNECTIONS" \
            -d"${WRK_SECONDS}s" --timeout 5s --latency "http://$ADDR$endpoint" >"$WORK/wrk.out"
        if grep -q 'Non-2xx' "$WORK/wrk.out"; then
            cat "$WORK/wrk.out" >&2
            die "$endpoint answered non-2xx"
        fi
        wrk_figures "$WORK/wrk.out" "$WORK/scrape"
        log "$endpoint run $run: $(awk '/^Requests\/sec:/ { print $2 }' "$WORK/wrk.out") req/s"
    done
    read -r rps_med rps_min rps_max < <(stats <"$WORK/scrape.rps")
    read -r p50_med _ _ < <(stats <"$WORK/scrape.p50")
    read -r p99_med _ p99_max < <(stats <"$WORK/scrape.p99")
    size=$body
    [[ "$endpoint" == /metrics ]] || size=$devices_body
    SUMMARY+=("scrape  | $endpoint ($size B), wrk -t$WRK_THREADS -c$WRK_CONNECTIONS ${WRK_SECONDS}s x$WRK_REPEATS | $rps_med req/s (min $rps_min, max $rps_max); p50 ${p50_med} ms, p99 ${p99_med} ms (max ${p99_max}) |")
done
stop_daemon
fi

# ------------------------------------------------------------------ (c) CPU
cpu_share() { # label, daemon args...
    local label=$1
    shift
    log "(c) CPU share, no scraping: $label, ${CPU_SECONDS}s"
    start_daemon "$@"
    sleep 5
    local window=$((CPU_SECONDS / CPU_WINDOWS))
    local first_ticks first_t ticks t prev_ticks prev_t
    first_ticks=$(cpu_ticks)
    first_t=$(now)
    prev_ticks=$first_ticks
    prev_t=$first_t
    : >"$WORK/cpu"
    for _ in $(seq "$CPU_WINDOWS"); do
        sleep "$window"
        ticks=$(cpu_ticks)
        t=$(now)
        awk -v d=$((ticks - prev_ticks)) -v hz="$TCK" -v a="$prev_t" -v b="$t" \
            'BEGIN { printf "%.2f\n", d / hz / (b - a) * 100 }' >>"$WORK/cpu"
        prev_ticks=$ticks
        prev_t=$t
    done
    local total
    total=$(awk -v d=$((ticks - first_ticks)) -v hz="$TCK" -v a="$first_t" -v b="$t" \
        'BEGIN { printf "%.2f", d / hz / (b - a) * 100 }')
    read -r _ cmin cmax < <(stats <"$WORK/cpu")
    local rss
    rss=$(mib "$(status_kib VmRSS)")
    stop_daemon
    SUMMARY+=("cpu     | $label, ${CPU_SECONDS}s idle of scrapes | ${total} % of one core (${window}s windows: min $cmin, max $cmax); VmRSS $rss MiB |")
}
if part cpu; then
    cpu_share "multi-tenant, 2 GPUs (default), speed 1" --simulate multi-tenant
    cpu_share "multi-tenant, 8 GPUs, speed 1" --simulate multi-tenant --gpus 8
fi

# ---------------------------------------------------------------- summary
printf '\nmachine: %s cores, %s\n' "$(nproc)" \
    "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
printf 'load average at end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
[[ -z "${MALLOC_ARENA_MAX:-}" ]] || printf 'MALLOC_ARENA_MAX=%s\n' "$MALLOC_ARENA_MAX"
echo
printf '%-7s | %-40s | %s | %s\n' what measurement result target
trim() { sed -e 's/^ *//' -e 's/ *$//' <<<"$1"; }
for row in "${SUMMARY[@]}"; do
    IFS='|' read -r what measurement result target <<<"$row"
    printf '%-7s | %-40s | %s | %s\n' "$(trim "$what")" "$(trim "$measurement")" \
        "$(trim "$result")" "$(trim "$target")"
done
