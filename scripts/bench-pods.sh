#!/usr/bin/env bash
# Pod labels in the running daemon (issue 17): VmRSS / VmHWM and the /metrics
# exposition (size, response time) of the release vramd on the NVML code path
# against the fake libnvidia-ml.so (tests/fake-nvml), 8 GPUs x 64 compute
# processes whose PIDs are real `sleep` processes, with every ring full, once
# without reports, once with a report but no pod for every process, and once
# with a pod on every process: the middle run separates the labels' cost
# from the allocator figures the reports also bring.
#
# Pods come from allocator reports (the path used when the container runtime
# cannot be asked): one report per process, POSTed to
# /api/v1/allocator-reports from one curl process per round (--next keeps one
# connection, so the poster costs the shared machine little), repeated every
# REPORT_EVERY seconds with a fresh `at` so none passes `ingest.ttl` (30 s).
# PODS distinct pods (process i is in pod i % PODS). `memory_stats` has the
# six keys vramd reads (a device with an empty dictionary is dropped), so the
# reports also add the vramd_allocator_* series; their bytes are printed apart
# so the labels' own share of the exposition can be read.
# 512 reporters fit the default `ingest.max_reporters` (1024) and one report
# per reporter per round is far below `ingest.rate_limit` (10/s); the script
# fails if any report is refused or if `vramd_process_info` carries no `pod=`.
#
# Rings are filled as bench-sampler.sh's `fill` part does: fast 10 ms and
# slow 100 ms with history.retention FILL_RETENTION s (192: the points the
# defaults keep for 1 h). Then RSS_SAMPLES readings of VmRSS, VmHWM, and
# METRICS_REQUESTS timed GETs of /metrics (curl time_total; median, min-max).
# Mode `moving` is `pods` with every process's NVML usage moving on every
# call (MOVING_STEP_BYTES, 2 MiB pages by default: the fake's
# `moving_step_bytes`), as on a training host, where `pods` keeps it still.
# The machine is shared, so the load average is printed with the figures.
#
# Everything binds 127.0.0.1, every wait is bounded, and the daemon, the
# poster and the sleepers are killed on exit. Tunables (environment): PORT
# (19697), GPUS (8), PROCESSES_PER_GPU (64), PODS (100), REPORT_EVERY (10),
# MODES ("plain stats pods moving": no reports / reports without pod / with
# pod / with pod and moving usage), MOVING_STEP_BYTES (2097152),
# FILL_RETENTION (192), RSS_SAMPLES (5), METRICS_REQUESTS (21), SKIP_BUILD=1
# to use the existing target/release/{vramd,libnvidia_ml_fake.so}. Needs curl.
#
# Usage: scripts/bench-pods.sh [VRAMD_BINARY]

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

PORT=${PORT:-19697}
GPUS=${GPUS:-8}
PROCESSES_PER_GPU=${PROCESSES_PER_GPU:-64}
PODS=${PODS:-100}
REPORT_EVERY=${REPORT_EVERY:-10}
FILL_RETENTION=${FILL_RETENTION:-192}
RSS_SAMPLES=${RSS_SAMPLES:-5}
METRICS_REQUESTS=${METRICS_REQUESTS:-21}
MODES=${MODES:-plain stats pods moving}
MOVING_STEP_BYTES_ARG=${MOVING_STEP_BYTES:-2097152}

WORK=$(mktemp -d)
PID=""
POSTER=""
declare -a SLEEPERS=()

log() { printf '[bench-pods] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

stop_poster() {
    if [[ -n "$POSTER" ]]; then
        kill -TERM "$POSTER" 2>/dev/null || true
        wait "$POSTER" 2>/dev/null || true
    fi
    POSTER=""
}
cleanup() {
    stop_poster
    stop_daemon
    for pid in "${SLEEPERS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v curl >/dev/null || die "curl is required"
LIB=$(release_daemon_and_fake_nvml "$WORK")
BIN_SRC=${1:-target/release/vramd}
[[ -x "$BIN_SRC" ]] || die "$BIN_SRC not found"
# A private copy: a concurrent cargo build cannot replace it mid-run.
BIN="$WORK/vramd"
cp "$BIN_SRC" "$BIN"
log "binary: $BIN_SRC"

TOTAL=$((GPUS * PROCESSES_PER_GPU))
for _ in $(seq "$TOTAL"); do
    sleep 3600 &
    SLEEPERS+=("$!")
    disown "$!"
done
MOVING_STEP_BYTES="" fake_nvml_scenario "$GPUS" "$PROCESSES_PER_GPU" 16777216 >"$WORK/full.json"
MOVING_STEP_BYTES=$MOVING_STEP_BYTES_ARG fake_nvml_scenario "$GPUS" "$PROCESSES_PER_GPU" 16777216 \
    >"$WORK/moving.json"
SCENARIO_FILE="$WORK/full.json"

# start_daemon: fill-part intervals; waits for /readyz.
start_daemon() {
    local port
    port=$(free_port "$PORT")
    ADDR="127.0.0.1:$port"
    env -u VRAMD_SERVER__LISTEN VRAMD_NVML__LIBRARY_PATH="$LIB" VRAMD_DRIVER_TRACE__MODE=off \
        FAKE_NVML_SCENARIO="$SCENARIO_FILE" \
        VRAMD_SAMPLER__FAST_INTERVAL=10ms VRAMD_SAMPLER__SLOW_INTERVAL=100ms \
        VRAMD_HISTORY__RETENTION="${FILL_RETENTION}s" \
        "$BIN" --config config/vramd.toml --log-level warn --listen "$ADDR" \
        >"$WORK/daemon.log" 2>&1 &
    PID=$!
    for _ in $(seq 200); do
        curl -sf --max-time 1 "http://$ADDR/readyz" >/dev/null 2>&1 && return 0
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/daemon.log" >&2; die "vramd exited"; }
        sleep 0.1
    done
    die "vramd not ready on $ADDR within 20 s"
}

# The six keys vramd reads; an empty dictionary would drop the device.
STATS='\"allocated_bytes.all.current\": 8388608, \"reserved_bytes.all.current\": 16777216, \"active_bytes.all.current\": 8388608, \"inactive_split_bytes.all.current\": 1048576, \"num_alloc_retries\": 0, \"num_ooms\": 0'

# report_config: a curl config POSTing one report per process, each naming
# its pod (none with WITH_POD=0), with `at` now.
report_config() {
    local at gpu slot i pid uuid who
    at=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
    for ((gpu = 0; gpu < GPUS; gpu++)); do
        uuid="GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f2$gpu"
        for ((slot = 0; slot < PROCESSES_PER_GPU; slot++)); do
            i=$((gpu * PROCESSES_PER_GPU + slot))
            pid=${SLEEPERS[$i]}
            ((i == 0)) || echo "next"
            printf 'url = "http://%s/api/v1/allocator-reports"\n' "$ADDR"
            echo 'header = "Content-Type: application/json"'
            echo 'silent'
            echo 'write-out = " %{http_code}\n"'
            who=""
            if [[ $WITH_POD == 1 ]]; then
                who=", \\\"pod\\\": \\\"train-job-$((i % PODS))\\\", \\\"namespace\\\": \\\"ml-training\\\", \\\"container\\\": \\\"trainer\\\""
            fi
            printf 'data = "{\\"version\\": 1, \\"reporter\\": {\\"pid\\": %s, \\"hostname\\": \\"node-1\\"%s}, \\"at\\": \\"%s\\", \\"devices\\": [{\\"uuid\\": \\"%s\\", \\"index\\": %s, \\"memory_stats\\": {%s}}]}"\n' \
                "$pid" "$who" "$at" "$uuid" "$gpu" "$STATS"
        done
    done
}

# post_round: one round of reports; fails unless every one got 202 with its
# device taken.
post_round() {
    report_config >"$WORK/reports.curl"
    curl --max-time 30 -K "$WORK/reports.curl" >"$WORK/codes" 2>"$WORK/curl.err" || true
    local accepted
    accepted=$(grep -c '"devices":1} 202$' "$WORK/codes" || true)
    if ((accepted != TOTAL)); then
        sort "$WORK/codes" | uniq -c | head -5 >&2
        cat "$WORK/curl.err" >&2
        return 1
    fi
}

# poster: rounds every REPORT_EVERY s until killed; a refused round is
# recorded so the run fails rather than measure stale pods.
poster() {
    local nap=""
    trap '[[ -z "$nap" ]] || kill "$nap" 2>/dev/null; exit 0' TERM
    while true; do
        post_round || echo "round failed at $(date -u +%T)" >>"$WORK/poster.failed"
        sleep "$REPORT_EVERY" &
        nap=$!
        wait "$nap" || true
        nap=""
    done
}

metrics() { curl -sf --max-time 5 "http://$ADDR/metrics"; }
status_kib() { awk -v key="$1:" '$1 == key { print $2 }' "/proc/$PID/status"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

declare -A HWM=() BYTES=() ALLOC_BYTES=() LINES=() POD_LINES=()
for mode in $MODES; do
    [[ $mode == plain || $mode == stats || $mode == pods || $mode == moving ]] ||
        die "unknown mode $mode"
    WITH_POD=0
    [[ $mode != pods && $mode != moving ]] || WITH_POD=1
    SCENARIO_FILE="$WORK/full.json"
    [[ $mode != moving ]] || SCENARIO_FILE="$WORK/moving.json"
    : >"$WORK/$mode.rss"
    : >"$WORK/$mode.time"
    log "$mode: $GPUS GPUs x $PROCESSES_PER_GPU processes, rings filled in ${FILL_RETENTION} s"
    start_daemon
    if [[ $mode != plain ]]; then
        post_round || die "the first round of $TOTAL reports was not all accepted"
        poster &
        POSTER=$!
    fi
    sleep $((FILL_RETENTION + 10))
    [[ ! -s "$WORK/poster.failed" ]] || { cat "$WORK/poster.failed" >&2; die "a report round failed"; }
    for _ in $(seq "$RSS_SAMPLES"); do
        status_kib VmRSS >>"$WORK/$mode.rss"
        sleep 2
    done
    HWM[$mode]=$(status_kib VmHWM)
    metrics >"$WORK/$mode.metrics" || die "GET /metrics failed"
    BYTES[$mode]=$(wc -c <"$WORK/$mode.metrics")
    LINES[$mode]=$(wc -l <"$WORK/$mode.metrics")
    POD_LINES[$mode]=$(grep -c '^vramd_process_info{.*pod="' "$WORK/$mode.metrics" || true)
    ALLOC_BYTES[$mode]=$(grep '^vramd_allocator_' "$WORK/$mode.metrics" | wc -c)
    for _ in $(seq "$METRICS_REQUESTS"); do
        curl -sf --max-time 5 -o /dev/null -w '%{time_total}\n' "http://$ADDR/metrics" >>"$WORK/$mode.time" \
            || die "GET /metrics failed"
    done
    stop_poster
    stop_daemon
done

for mode in $MODES; do
    want=0
    [[ $mode != pods && $mode != moving ]] || want=$TOTAL
    ((POD_LINES[$mode] == want)) \
        || die "$mode: vramd_process_info carries pod= on ${POD_LINES[$mode]} of $TOTAL processes, expected $want"
done

printf '\nmachine: %s cores, %s; load average at end: %s\n' "$(nproc)" \
    "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s GPUs x %s processes, %s pods; medians (min-max)\n' "$GPUS" "$PROCESSES_PER_GPU" "$PODS"
for mode in $MODES; do
    case $mode in
        plain) printf '\nno reports\n' ;;
        stats) printf '\nreports without pod (allocator series, no pod labels)\n' ;;
        pods) printf '\nreports with pod (vramd_process_info with pod=: %s)\n' "${POD_LINES[pods]}" ;;
        moving) printf '\nreports with pod, every process moving (pod=: %s)\n' "${POD_LINES[moving]}" ;;
    esac
    read -r m lo hi < <(stats <"$WORK/$mode.rss")
    printf '  VmRSS, rings full:       %s MiB (%s-%s); VmHWM %s MiB\n' \
        "$(mib "$m")" "$(mib "$lo")" "$(mib "$hi")" "$(mib "${HWM[$mode]}")"
    printf '  /metrics:                %s bytes, %s lines (vramd_allocator_* samples: %s bytes)\n' \
        "${BYTES[$mode]}" "${LINES[$mode]}" "${ALLOC_BYTES[$mode]}"
    read -r m lo hi < <(awk '{ printf "%.2f\n", $1 * 1000 }' "$WORK/$mode.time" | stats)
    printf '  GET /metrics (curl):     %s ms (%s-%s), %s requests\n' "$m" "$lo" "$hi" "$METRICS_REQUESTS"
done
