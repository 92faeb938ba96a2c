#!/usr/bin/env bash
# /metrics latency of the release daemon on the NVML code path (the fake
# libnvidia-ml.so from tests/fake-nvml), healthy vs. one device's driver call
# hanging. Two daemons run side by side:
#   healthy: 2 GPUs, 16 compute processes each;
#   hang:    the same, but on GPU 1 nvmlDeviceGetMemoryInfo_v2 sleeps 600 s,
#            so its fast tier times out after sampler.call_timeout (500 ms)
#            and stays stuck for the whole run.
# wrk runs alternate between them (healthy, hang, healthy, hang, ...), so
# load from other processes on a shared machine hits both cases alike.
# Target: /metrics p50 and p99 with the hang within 2x of the healthy case.
# Also records vramd_source_calls_stuck, the source errors and each daemon's
# thread count (/proc/PID/status) before and after the load, and how long
# the hung daemon takes to stop on SIGTERM.
# docs/performance.md ("NVML source") records the figures.
#
# Everything binds 127.0.0.1, every wait is bounded, and the daemons and the
# stand-in workload processes are killed on exit. Tunables (environment):
# PORT (first port tried, 19577), WRK_SECONDS (10), WRK_CONNECTIONS (4),
# WRK_THREADS (1), WRK_REPEATS (5 per case), SETTLE_SECONDS (3),
# SKIP_BUILD=1 to use the existing target/release/{vramd,libnvidia_ml_fake.so}.
# Needs curl and wrk (Debian: apt-get install wrk).

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

PORT=${PORT:-19577}
WRK_SECONDS=${WRK_SECONDS:-10}
WRK_CONNECTIONS=${WRK_CONNECTIONS:-4}
WRK_THREADS=${WRK_THREADS:-1}
WRK_REPEATS=${WRK_REPEATS:-5}
SETTLE_SECONDS=${SETTLE_SECONDS:-3}
GPUS=2
PROCESSES_PER_GPU=16

BIN=target/release/vramd
FAKE=target/release/libnvidia_ml_fake.so
WORK=$(mktemp -d)
declare -A PIDS=() ADDRS=()
declare -a SLEEPERS=()

log() { printf '[bench-nvml] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# stop_daemon CASE: SIGTERM, up to 5 s, then SIGKILL.
stop_daemon() {
    local pid=${PIDS[$1]:-}
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "vramd ($1, pid $pid) still running 5 s after SIGTERM: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    fi
    unset "PIDS[$1]"
}
cleanup() {
    local case
    for case in "${!PIDS[@]}"; do
        stop_daemon "$case"
    done
    for pid in "${SLEEPERS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    SLEEPERS=()
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v curl >/dev/null || die "curl is required"
command -v wrk >/dev/null || die "wrk is required (Debian: apt-get install wrk)"

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "cargo build --release; cargo build -p fake-nvml --release --lib"
    cargo build --release --quiet
    cargo build -p fake-nvml --release --lib --quiet
fi
[[ -x "$BIN" ]] || die "$BIN not found"
[[ -f "$FAKE" ]] || die "$FAKE not found"
# Private copies: a concurrent cargo build cannot replace them mid-run.
LIB="$WORK/libnvidia-ml.so.1"
cp "$FAKE" "$LIB"
cp "$BIN" "$WORK/vramd"
BIN="$WORK/vramd"

# Real PIDs for the process lists, so the daemon's /proc reads find
# something: bounded sleeps, killed on exit.
for _ in $(seq $((GPUS * PROCESSES_PER_GPU))); do
    sleep 900 &
    SLEEPERS+=("$!")
    disown "$!"
done

# scenario HANG_GPU: 2 GPUs, 16 processes each; HANG_GPU (or none, -1) has
# its memory-info call sleep 600 s.
scenario() { fake_nvml_scenario "$GPUS" "$PROCESSES_PER_GPU" 1073741824 "$1"; }
scenario -1 >"$WORK/healthy.json"
scenario 1 >"$WORK/hang.json"

# start_daemon CASE: vramd on the fake driver with $WORK/CASE.json; waits
# for /readyz.
start_daemon() {
    local case=$1 port pid
    port=$(free_port "$PORT")
    PORT=$((port + 1))
    ADDRS[$case]="127.0.0.1:$port"
    env -u VRAMD_SERVER__LISTEN \
        VRAMD_NVML__LIBRARY_PATH="$LIB" \
        FAKE_NVML_SCENARIO="$WORK/$case.json" \
        VRAMD_SAMPLER__CALL_TIMEOUT=500ms \
        "$BIN" --config config/vramd.toml --log-level warn --listen "${ADDRS[$case]}" \
        >"$WORK/$case.log" 2>&1 &
    pid=$!
    PIDS[$case]=$pid
    for _ in $(seq 200); do
        if curl -sf --max-time 1 "http://${ADDRS[$case]}/readyz" >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || { cat "$WORK/$case.log" >&2; die "vramd ($case) exited"; }
        sleep 0.1
    done
    die "vramd ($case) not ready on ${ADDRS[$case]} within 20 s"
}

# metrics CASE
metrics() { curl -sf --max-time 5 "http://${ADDRS[$1]}/metrics"; }

# series CASE REGEX: the value of the first series matching an awk regex.
series() { metrics "$1" | awk -v pat="$2" '$0 ~ pat { print $NF; exit }'; }

# wait_series CASE REGEX VALUE SECONDS
wait_series() {
    local deadline=$((SECONDS + $4)) value=""
    while ((SECONDS < deadline)); do
        value=$(series "$1" "$2") || value=""
        [[ "$value" == "$3" ]] && return 0
        sleep 0.2
    done
    die "$1: $2 is '${value}', not $3, after $4 s"
}

# threads CASE: the daemon's thread count.
threads() { awk '$1 == "Threads:" { print $2 }' "/proc/${PIDS[$1]}/status"; }

# run_wrk CASE RUN: one wrk run against CASE's /metrics; appends req/s, p50
# and p99 (ms) to $WORK/CASE.{rps,p50,p99}.
run_wrk() {
    local case=$1 run=$2 out="$WORK/wrk.out"
    timeout $((WRK_SECONDS + 20)) wrk -t"$WRK_THREADS" -c"$WRK_CONNECTIONS" \
        -d"${WRK_SECONDS}s" --timeout 5s --latency "http://${ADDRS[$case]}/metrics" >"$out"
    if grep -qE 'Non-2xx|Socket errors' "$out"; then
        cat "$out" >&2
        die "$case: errors during the run"
    fi
    wrk_figures "$out" "$WORK/$case"
    log "$case run $run: $(tail -1 "$WORK/$case.rps") req/s, p50 $(tail -1 "$WORK/$case.p50") ms," \
        "p99 $(tail -1 "$WORK/$case.p99") ms; load $(cut -d' ' -f1 /proc/loadavg)"
    sed -n '/Latency Distribution/,/requests in/p' "$out" >&2
}

# ------------------------------------------------------------------ start
log "starting both daemons: $GPUS GPUs x $PROCESSES_PER_GPU processes;" \
    "hang: GPU 1 nvmlDeviceGetMemoryInfo_v2 sleeps 600 s, call_timeout 500ms"
start_daemon healthy
start_daemon hang
wait_series healthy '^vramd_device_up[{].*gpu="1"' 1 20
wait_series hang '^vramd_device_up[{].*gpu="1"' 0 20
sleep "$SETTLE_SECONDS"
declare -A BODY THREADS_BEFORE
for case in healthy hang; do
    BODY[$case]=$(metrics "$case" | wc -c)
    THREADS_BEFORE[$case]=$(threads "$case")
    : >"$WORK/$case.rps"
    : >"$WORK/$case.p50"
    : >"$WORK/$case.p99"
done
gpu0_up=$(series hang '^vramd_device_up[{].*gpu="0"')
stuck_before=$(series hang '^vramd_source_calls_stuck')

# ------------------------------------------------------------ measurement
for run in $(seq "$WRK_REPEATS"); do
    run_wrk healthy "$run"
    run_wrk hang "$run"
done

stuck_after=$(series hang '^vramd_source_calls_stuck')
healthy_stuck=$(series healthy '^vramd_source_calls_stuck')
errors=$(metrics hang | awk '/^vramd_source_errors_total[{]/ && $NF > 0 {
    printf "%s%s %s", sep, $1, $NF; sep = "; " }')
healthy_threads="${THREADS_BEFORE[healthy]} -> $(threads healthy)"
hang_threads="${THREADS_BEFORE[hang]} -> $(threads hang)"
stop_daemon healthy
log "stopping the hung daemon (a call is still inside the driver)"
stop_started=$SECONDS
stop_daemon hang
stop_seconds=$((SECONDS - stop_started))

# ---------------------------------------------------------------- summary
declare -A P50 P99 RPS
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }
printf '\nmachine: %s cores, %s\n' "$(nproc)" \
    "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
printf 'load average at end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'wrk -t%s -c%s -d%ss --latency /metrics, %s runs per case, alternating;' \
    "$WRK_THREADS" "$WRK_CONNECTIONS" "$WRK_SECONDS" "$WRK_REPEATS"
printf ' median (min-max)\n\n'
for case in healthy hang; do
    read -r P50[$case] p50_min p50_max < <(stats <"$WORK/$case.p50")
    read -r P99[$case] p99_min p99_max < <(stats <"$WORK/$case.p99")
    read -r RPS[$case] rps_min rps_max < <(stats <"$WORK/$case.rps")
    printf '%-7s | p50 %s ms (%s-%s) | p99 %s ms (%s-%s) | %s req/s (%s-%s) | body %s B\n' \
        "$case" "${P50[$case]}" "$p50_min" "$p50_max" "${P99[$case]}" "$p99_min" "$p99_max" \
        "${RPS[$case]}" "$rps_min" "$rps_max" "${BODY[$case]}"
done
printf '\nratio hang/healthy: p50 %sx, p99 %sx, req/s %sx (target: latency within 2x)\n' \
    "$(ratio "${P50[hang]}" "${P50[healthy]}")" "$(ratio "${P99[hang]}" "${P99[healthy]}")" \
    "$(ratio "${RPS[hang]}" "${RPS[healthy]}")"
printf 'healthy: vramd_source_calls_stuck %s, threads %s\n' "$healthy_stuck" "$healthy_threads"
printf 'hang: vramd_device_up gpu 0 = %s; vramd_source_calls_stuck %s -> %s; threads %s\n' \
    "$gpu0_up" "$stuck_before" "$stuck_after" "$hang_threads"
printf 'hang: source errors: %s\n' "${errors:-none}"
printf 'hang: daemon gone %s s after SIGTERM (5 s = needed SIGKILL)\n' "$stop_seconds"
