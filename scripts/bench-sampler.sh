#!/usr/bin/env bash
# The sampler as the daemon runs it (issue 15): release vramd binaries on the
# NVML code path against the fake libnvidia-ml.so (tests/fake-nvml), 8 GPUs
# with 64 compute processes each, whose PIDs are real `sleep` processes (so
# /proc reads are real reads). For each binary given (default
# target/release/vramd; pass the binary of main first to get a before/after),
# alternating binaries part by part:
#   cost: 100 Hz fast / 1 Hz slow. Over CPU_WINDOWS windows of CPU_SECONDS,
#         each binary's window right after one of the floor (below), both
#         freshly started: the daemon's CPU share (task-clock from `perf
#         stat -p` where perf works, to the microsecond; else utime + stime
#         from /proc/PID/stat, whose 10 ms ticks are 0.05 % of a core over
#         a 20 s window), the floor's, vramd above the floor (the
#         difference, per window pair: what the machine's drift does to
#         both cancels), per-thread wake-ups (voluntary context switches)
#         and CPU from /proc/PID/task/* (ticks), and per-thread CPU from
#         `perf stat --per-thread` where perf works, the mean
#         fast and slow sample duration (vramd_sample_duration_seconds
#         sum / count: the call as the tier loop sees it, hand-off included),
#         and CPU time per stored sample. The fake's own calls cost ~0.3 us
#         (fast) and ~2.7 us (slow, 64 processes) by `cargo bench --bench
#         nvml`, so the duration is almost all vramd's cost above the library.
#         The floor is examples/nvml-floor.rs: the same NVML calls against
#         the same fake for the same devices at the same rates (one fast,
#         one slow and one Xid thread) and nothing else, i.e. what NVML's
#         own cost and a sampler's wake-ups take at the least.
#   fill: VmRSS / VmHWM with every ring full, holding as many points as the
#         defaults keep for 1 h (fast 4 Hz: 14,401; slow 1 Hz, kept 32 min:
#         1,921), filled in 192 s: fast 10 ms and slow 100 ms intervals with
#         history.retention 192 s (fast ring 19,201 points, i.e. ~1.8 MiB
#         more than the 1 h default over 8 GPUs: a conservative figure).
#   moving: `fill` with every process's NVML usage moving on every call
#         (MOVING_STEP_BYTES, 2 MiB pages: the fake's `moving_step_bytes`),
#         as on a training host, where `fill` keeps sizes still; then the
#         scaled-down case: rings of 120 s at 10 ms / 100 ms, and the
#         history's share of it as VmRSS with 120 s rings less VmRSS with
#         2 s rings (the fast ring included).
#   slowmoving: the slow sample's cost at the default intervals with every
#         process moving, in two cases: PROCESSES_PER_GPU processes, and
#         WIDE_PROCESSES_PER_GPU (256) under the default cap of 64 (so 192
#         a device are listed and left out). Over SLOW_WINDOWS windows of
#         SLOW_SECONDS, each case's floor (nvml-floor, same scenario, 1 Hz
#         slow: the mean wall time of its device reads, the same NVML calls)
#         then each binary: the mean slow sample duration
#         (vramd_sample_duration_seconds: the source call, wall clock, the
#         joins included), vramd above NVML (that duration less the floor's
#         read) and the mean slow sample CPU time (vramd_sample_cpu_seconds:
#         the thread's CPU from wake-up to stored, one sample in 16).
#   idle: VmRSS of a daemon with one GPU and no processes, default intervals,
#         after IDLE_SECONDS.
#   allocs (not in the default PARTS): heap allocations (malloc, calloc,
#         realloc) at 100 Hz / 1 Hz, counted by `perf stat --per-thread` on
#         libc uprobes over ALLOC_SECONDS, ALLOC_WINDOWS times: per slow
#         sample on the slow thread (`vramd-slow`, the sample's whole path:
#         NVML lists, identities, report join, history), and per second for
#         the whole process. Needs the uprobes, added once as root:
#         perf probe -x /lib/x86_64-linux-gnu/libc.so.6 --add malloc
#         (likewise calloc, realloc; `perf probe -d 'probe_libc:*'` removes
#         them). A trapped call costs microseconds, so these windows are not
#         CPU figures.
# Figures are medians over windows/readings (min-max alongside); the machine
# is shared, so the load average is printed with them. docs/performance.md
# ("Sampler at the driver's cost") records them.
#
# Everything binds 127.0.0.1, every wait is bounded, and the daemons and the
# sleepers are killed on exit. Tunables (environment): PORT (19677),
# GPUS (8), PROCESSES_PER_GPU (64), CPU_SECONDS (20), CPU_WINDOWS (3),
# SETTLE_SECONDS (5), FLOOR_SETTLE_SECONDS (2), PERF_STAT (1; 0 reads
# the CPU share from /proc ticks even where perf works), IDLE_SECONDS (15),
# RSS_SAMPLES (5), ALLOC_SECONDS (20), ALLOC_WINDOWS (2), SLOW_SECONDS (30),
# SLOW_WINDOWS (2), WIDE_PROCESSES_PER_GPU (256),
# MOVING_STEP_BYTES (2097152), PARTS ("cost fill moving slowmoving idle";
# "allocs" on
# request), FLOOR (the reference binary,
# default target/release/examples/nvml-floor), SKIP_BUILD=1 to use the
# existing target/release/{vramd, libnvidia_ml_fake.so, examples/nvml-floor}.
# Needs curl.
#
# Usage: scripts/bench-sampler.sh [VRAMD_BINARY ...]

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

PORT=${PORT:-19677}
GPUS=${GPUS:-8}
PROCESSES_PER_GPU=${PROCESSES_PER_GPU:-64}
CPU_SECONDS=${CPU_SECONDS:-20}
CPU_WINDOWS=${CPU_WINDOWS:-3}
SETTLE_SECONDS=${SETTLE_SECONDS:-5}
IDLE_SECONDS=${IDLE_SECONDS:-15}
RSS_SAMPLES=${RSS_SAMPLES:-5}
FLOOR_SETTLE_SECONDS=${FLOOR_SETTLE_SECONDS:-2}
FLOOR=${FLOOR:-target/release/examples/nvml-floor}
PARTS=${PARTS:-cost fill moving slowmoving idle}
SLOW_SECONDS=${SLOW_SECONDS:-30}
SLOW_WINDOWS=${SLOW_WINDOWS:-2}
WIDE_PROCESSES_PER_GPU=${WIDE_PROCESSES_PER_GPU:-256}
MOVING_STEP_BYTES_ARG=${MOVING_STEP_BYTES:-2097152}
FILL_RETENTION=192

WORK=$(mktemp -d)
PID=""
declare -a SLEEPERS=() hwm=()

log() { printf '[bench-sampler] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
part() { [[ " $PARTS " == *" $1 "* ]]; }

cleanup() {
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
# Private copies: a concurrent cargo build cannot replace them mid-run.
declare -a BINS=()
n=0
for bin in "${@:-target/release/vramd}"; do
    [[ -x "$bin" ]] || die "$bin not found"
    n=$((n + 1))
    cp "$bin" "$WORK/vramd-$n"
    BINS+=("$WORK/vramd-$n")
    log "binary $n: $bin"
done
if part cost || part slowmoving; then
    if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
        log "cargo build --release --example nvml-floor"
        cargo build --release --example nvml-floor --quiet >&2
    fi
    [[ -x "$FLOOR" ]] || die "$FLOOR not found (cargo build --release --example nvml-floor)"
    cp "$FLOOR" "$WORK/nvml-floor"
fi

SLEEPERS_PER_GPU=$PROCESSES_PER_GPU
if part slowmoving && ((WIDE_PROCESSES_PER_GPU > SLEEPERS_PER_GPU)); then
    SLEEPERS_PER_GPU=$WIDE_PROCESSES_PER_GPU
fi
for _ in $(seq $((GPUS * SLEEPERS_PER_GPU))); do
    sleep 3600 &
    SLEEPERS+=("$!")
    disown "$!"
done

# scenario GPUS PROCESSES: GPUS devices with PROCESSES compute processes
# each (real PIDs, steady sizes).
scenario() { fake_nvml_scenario "$1" "$2" 16777216; }
MOVING_STEP_BYTES="" scenario "$GPUS" "$PROCESSES_PER_GPU" >"$WORK/full.json"
MOVING_STEP_BYTES=$MOVING_STEP_BYTES_ARG scenario "$GPUS" "$PROCESSES_PER_GPU" >"$WORK/moving.json"
# Only the slowmoving part starts enough sleepers for the wide scenario.
if part slowmoving; then
    MOVING_STEP_BYTES=$MOVING_STEP_BYTES_ARG scenario "$GPUS" "$WIDE_PROCESSES_PER_GPU" >"$WORK/wide.json"
fi
scenario 1 0 >"$WORK/idle.json"

# start_daemon BINARY SCENARIO [VAR=VALUE ...]: waits for /readyz.
start_daemon() {
    local bin=$1 scenario=$2 port
    shift 2
    port=$(free_port "$PORT")
    ADDR="127.0.0.1:$port"
    env -u VRAMD_SERVER__LISTEN VRAMD_NVML__LIBRARY_PATH="$LIB" VRAMD_DRIVER_TRACE__MODE=off \
        FAKE_NVML_SCENARIO="$scenario" "$@" \
        "$bin" --config config/vramd.toml --log-level warn --listen "$ADDR" \
        >"$WORK/daemon.log" 2>&1 &
    PID=$!
    for _ in $(seq 200); do
        curl -sf --max-time 1 "http://$ADDR/readyz" >/dev/null 2>&1 && return 0
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/daemon.log" >&2; die "vramd exited"; }
        sleep 0.1
    done
    die "vramd not ready on $ADDR within 20 s"
}

metrics() { curl -sf --max-time 5 "http://$ADDR/metrics"; }
# histogram_sums METRIC:TIER ...: "sum count" of each histogram's series
# for that tier, in order, from one scrape.
histogram_sums() {
    metrics | awk -v wanted="$*" '
        BEGIN { n = split(wanted, want, " ") }
        /^vramd_sample_[a-z_]*_(sum|count)[{]/ {
            for (i = 1; i <= n; i++) {
                split(want[i], part, ":")
                if (index($1, part[1] "_sum{") == 1 && $1 ~ ("tier=\"" part[2] "\"")) sum[i] = $NF
                if (index($1, part[1] "_count{") == 1 && $1 ~ ("tier=\"" part[2] "\"")) count[i] = $NF
            }
        }
        END { for (i = 1; i <= n; i++) printf "%s%s %s", (i > 1) ? " " : "", sum[i] + 0, count[i] + 0
              printf "\n" }'
}
# duration_sums: "fast_sum fast_count slow_sum slow_count"
duration_sums() {
    histogram_sums vramd_sample_duration_seconds:fast vramd_sample_duration_seconds:slow
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; }
# threads: per thread name (tokio's workers share one), "name voluntary
# involuntary ticks", summed over PID's threads.
threads() {
    local task
    for task in /proc/"$PID"/task/*; do
        # The name may hold spaces; stat's fields after it do not.
        { tr ' ' '_' <"$task/comm"
          awk '$1 == "voluntary_ctxt_switches:" { v = $2 }
               $1 == "nonvoluntary_ctxt_switches:" { i = $2 }
               END { print v + 0, i + 0 }' "$task/status"
          sed 's/.*) //' "$task/stat" | awk '{ print $12 + $13 }'
        } 2>/dev/null | paste -sd' '
    done | awk 'NF == 4 { v[$1] += $2; i[$1] += $3; c[$1] += $4 }
        END { for (k in v) print k, v[k], i[k], c[k] }'
}
# thread_delta BEFORE AFTER SECONDS: "name voluntary involuntary ticks
# seconds" for each thread name in AFTER (counts over the window).
thread_delta() {
    awk -v s="$3" 'NR == FNR { v[$1] = $2; i[$1] = $3; c[$1] = $4; next }
        { print $1, $2 - v[$1], $3 - i[$1], $4 - c[$1], s }' "$1" "$2"
}
# thread_table FILE: per thread name over all windows in FILE (lines of
# thread_delta), by CPU: "name wake-ups/s (involuntary/s) CPU %".
thread_table() {
    awk -v hz="$TCK" '{ v[$1] += $2; i[$1] += $3; c[$1] += $4; s[$1] += $5 }
        END { for (k in v) printf "%s %.1f %.1f %.3f\n", k, v[k] / s[k], i[k] / s[k], 100 * c[k] / hz / s[k] }' \
        "$1" | sort -k4,4gr -k2,2gr
}
# measure_window PREFIX: CPU share over CPU_SECONDS into PREFIX.cpu (and
# WINDOW_CPU_US, the window's CPU time), per-thread counts into
# PREFIX.threads.
measure_window() {
    local prefix=$1 t0 t1
    WINDOW_CPU_US=""
    threads >"$WORK/threads.0"
    t0=$(cpu_ticks)
    if [[ -n "$PERF" ]]; then
        # Per thread ("name-tid,msec,unit,event"): the process is the sum.
        perf stat --per-thread -x, -e task-clock -p "$PID" -o "$WORK/perf.out" \
            -- sleep "$CPU_SECONDS"
        WINDOW_CPU_US=$(awk -F, '$4 == "task-clock" && $2 ~ /^[0-9.]+$/ { us += $2 * 1000 }
            END { if (us > 0) printf "%d", us }' "$WORK/perf.out")
        awk -F, -v s="$CPU_SECONDS" '$4 == "task-clock" && $2 ~ /^[0-9.]+$/ {
                name = $1; sub(/-[0-9]+$/, "", name); gsub(/[^A-Za-z0-9_.-]/, "_", name)
                ms[name] += $2 }
            END { for (k in ms) printf "%s %.4f\n", k, ms[k] / 10 / s }' \
            "$WORK/perf.out" >>"$prefix.perf-threads"
    else
        sleep "$CPU_SECONDS"
    fi
    t1=$(cpu_ticks)
    threads >"$WORK/threads.1"
    thread_delta "$WORK/threads.0" "$WORK/threads.1" "$CPU_SECONDS" >>"$prefix.threads"
    [[ -n "$WINDOW_CPU_US" ]] || WINDOW_CPU_US=$(((t1 - t0) * 1000000 / TCK))
    awk -v us="$WINDOW_CPU_US" -v s="$CPU_SECONDS" \
        'BEGIN { printf "%.3f\n", us / 1e4 / s }' >>"$prefix.cpu"
}
# start_floor SCENARIO: the reference sampler on the same fake and scenario.
start_floor() {
    FAKE_NVML_SCENARIO="$1" "$WORK/nvml-floor" --library "$LIB" \
        --fast-ms 10 --slow-ms 1000 >"$WORK/floor.log" 2>&1 &
    PID=$!
}
status_kib() { awk -v key="$1:" '$1 == key { print $2 }' "/proc/$PID/status"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
TCK=$(getconf CLK_TCK)
# perf stat's task-clock where it works here (PERF_STAT=0 turns it off).
PERF=""
if [[ "${PERF_STAT:-1}" == 1 ]] && command -v perf >/dev/null &&
    perf stat -x, -e task-clock -o /dev/null -- true 2>/dev/null; then
    PERF=perf
fi

for n in $(seq ${#BINS[@]}); do
    : >"$WORK/$n.cpu" ; : >"$WORK/$n.fast" ; : >"$WORK/$n.slow" ; : >"$WORK/$n.per"
    : >"$WORK/$n.rss" ; : >"$WORK/$n.idle" ; : >"$WORK/$n.allocs"
    : >"$WORK/$n.moving" ; : >"$WORK/$n.moving120" ; : >"$WORK/$n.moving2"
    : >"$WORK/$n.threads" ; : >"$WORK/$n.floor.cpu" ; : >"$WORK/$n.floor.threads"
    : >"$WORK/$n.above" ; : >"$WORK/$n.perf-threads" ; : >"$WORK/$n.floor.perf-threads"
    for case in moving wide; do
        : >"$WORK/$n.slow-$case" ; : >"$WORK/$n.slow-$case.above" ; : >"$WORK/$n.slow-$case.cpu"
    done
done
: >"$WORK/floor.slow-moving" ; : >"$WORK/floor.slow-wide"


if part cost; then
    # Window by window, each binary after a floor window of its own: the
    # pair sees the same machine, so their difference is what vramd adds.
    for window in $(seq "$CPU_WINDOWS"); do
        for n in $(seq ${#BINS[@]}); do
            log "cost, window $window, floor then binary $n: $GPUS GPUs x $PROCESSES_PER_GPU processes, 100 Hz / 1 Hz"
            start_floor "$WORK/full.json"
            sleep "$FLOOR_SETTLE_SECONDS"
            kill -0 "$PID" 2>/dev/null || { cat "$WORK/floor.log" >&2; die "nvml-floor exited"; }
            measure_window "$WORK/$n.floor"
            stop_daemon
            if ((window == 1 && n == 1)); then
                sed 's/^/  /' "$WORK/floor.log" >&2
            fi
            start_daemon "${BINS[$((n - 1))]}" "$WORK/full.json" \
                VRAMD_SAMPLER__FAST_INTERVAL=10ms VRAMD_SAMPLER__SLOW_INTERVAL=1s
            sleep "$SETTLE_SECONDS"
            read -r fs0 fc0 ss0 sc0 < <(duration_sums)
            measure_window "$WORK/$n"
            read -r fs1 fc1 ss1 sc1 < <(duration_sums)
            stop_daemon
            awk -v a="$fs0" -v b="$fs1" -v c="$fc0" -v d="$fc1" \
                'BEGIN { printf "%.2f\n", (d > c) ? 1e6 * (b - a) / (d - c) : 0 }' >>"$WORK/$n.fast"
            awk -v a="$ss0" -v b="$ss1" -v c="$sc0" -v d="$sc1" \
                'BEGIN { printf "%.1f\n", (d > c) ? 1e6 * (b - a) / (d - c) : 0 }' >>"$WORK/$n.slow"
            awk -v us="$WINDOW_CPU_US" -v n="$((fc1 - fc0 + sc1 - sc0))" \
                'BEGIN { printf "%.2f\n", (n > 0) ? us / n : 0 }' >>"$WORK/$n.per"
            vramd=$(tail -1 "$WORK/$n.cpu") floor=$(tail -1 "$WORK/$n.floor.cpu")
            awk -v a="$vramd" -v b="$floor" 'BEGIN { printf "%.3f\n", a - b }' >>"$WORK/$n.above"
            log "  binary $n, window $window: vramd $vramd %, floor $floor %," \
                "vramd above the floor $(tail -1 "$WORK/$n.above") %; fast $(tail -1 "$WORK/$n.fast") us," \
                "slow $(tail -1 "$WORK/$n.slow") us, $((fc1 - fc0)) fast samples;" \
                "load $(cut -d' ' -f1 /proc/loadavg)"
        done
    done
fi

if part fill; then
    for n in $(seq ${#BINS[@]}); do
        log "fill, binary $n: rings of 1 h at the defaults' sizes, filled in ${FILL_RETENTION} s"
        start_daemon "${BINS[$((n - 1))]}" "$WORK/full.json" \
            VRAMD_SAMPLER__FAST_INTERVAL=10ms VRAMD_SAMPLER__SLOW_INTERVAL=100ms \
            VRAMD_HISTORY__RETENTION="${FILL_RETENTION}s"
        sleep $((FILL_RETENTION + 10))
        for _ in $(seq "$RSS_SAMPLES"); do
            status_kib VmRSS >>"$WORK/$n.rss"
            sleep 2
        done
        hwm[n]=$(status_kib VmHWM)
        stop_daemon
    done
fi

# rss_after BINARY RETENTION_S OUT: VmRSS readings into OUT once rings of
# RETENTION_S at 10 ms / 100 ms are full of moving processes. The peak
# window (1 min by default) may not exceed the retention.
rss_after() {
    local peak=()
    (($2 >= 60)) || peak=(VRAMD_METRICS__PEAK_WINDOW="$2s")
    start_daemon "$1" "$WORK/moving.json" \
        VRAMD_SAMPLER__FAST_INTERVAL=10ms VRAMD_SAMPLER__SLOW_INTERVAL=100ms \
        VRAMD_HISTORY__RETENTION="$2s" "${peak[@]}"
    sleep $(($2 + 10))
    for _ in $(seq "$RSS_SAMPLES"); do
        status_kib VmRSS >>"$3"
        sleep 2
    done
    stop_daemon
}

if part moving; then
    for n in $(seq ${#BINS[@]}); do
        log "moving, binary $n: rings of 1 h at the defaults' sizes, every process moving"
        rss_after "${BINS[$((n - 1))]}" "$FILL_RETENTION" "$WORK/$n.moving"
        log "moving, binary $n: rings of 120 s, then of 2 s"
        rss_after "${BINS[$((n - 1))]}" 120 "$WORK/$n.moving120"
        rss_after "${BINS[$((n - 1))]}" 2 "$WORK/$n.moving2"
    done
fi

# slow_sums: "duration_sum duration_count cpu_sum cpu_count" of the slow tier.
slow_sums() {
    histogram_sums vramd_sample_duration_seconds:slow vramd_sample_cpu_seconds:slow
}
# mean_us SUM0 SUM1 COUNT0 COUNT1: the mean in microseconds over a window.
mean_us() {
    awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" \
        'BEGIN { printf "%.1f\n", (d > c) ? 1e6 * (b - a) / (d - c) : 0 }'
}

if part slowmoving; then
    for window in $(seq "$SLOW_WINDOWS"); do
        for case in moving wide; do
            per_gpu=$PROCESSES_PER_GPU
            [[ $case == wide ]] && per_gpu=$WIDE_PROCESSES_PER_GPU
            log "slowmoving, window $window, $GPUS GPUs x $per_gpu moving processes (cap 64): floor"
            FAKE_NVML_SCENARIO="$WORK/$case.json" "$WORK/nvml-floor" --library "$LIB" \
                --fast-ms 250 --slow-ms 1000 --seconds "$SLOW_SECONDS" >"$WORK/floor.log" 2>&1 ||
                { cat "$WORK/floor.log" >&2; die "nvml-floor failed"; }
            awk '/slow device read mean/ { print $6 }' "$WORK/floor.log" >>"$WORK/floor.slow-$case"
            floor=$(tail -1 "$WORK/floor.slow-$case")
            for n in $(seq ${#BINS[@]}); do
                start_daemon "${BINS[$((n - 1))]}" "$WORK/$case.json"
                sleep "$SETTLE_SECONDS"
                read -r ds0 dc0 cs0 cc0 < <(slow_sums)
                sleep "$SLOW_SECONDS"
                read -r ds1 dc1 cs1 cc1 < <(slow_sums)
                stop_daemon
                mean_us "$ds0" "$ds1" "$dc0" "$dc1" >>"$WORK/$n.slow-$case"
                mean_us "$cs0" "$cs1" "$cc0" "$cc1" >>"$WORK/$n.slow-$case.cpu"
                awk -v a="$(tail -1 "$WORK/$n.slow-$case")" -v b="$floor" \
                    'BEGIN { printf "%.1f\n", a - b }' >>"$WORK/$n.slow-$case.above"
                log "  binary $n: slow sample $(tail -1 "$WORK/$n.slow-$case") us" \
                    "(floor's read $floor us, above $(tail -1 "$WORK/$n.slow-$case.above") us)," \
                    "CPU $(tail -1 "$WORK/$n.slow-$case.cpu") us over $((cc1 - cc0)) samples;" \
                    "load $(cut -d' ' -f1 /proc/loadavg)"
            done
        done
    done
fi

if part allocs; then
    ALLOC_SECONDS=${ALLOC_SECONDS:-20}
    perf probe -l 2>/dev/null | grep -q 'probe_libc:malloc' ||
        die "no probe_libc:malloc uprobe (perf probe -x /lib/x86_64-linux-gnu/libc.so.6 --add malloc)"
    events=$(perf probe -l 2>/dev/null | awk '$1 ~ /^probe_libc:(malloc|calloc|realloc)$/ { print $1 }' | paste -sd,)
    for window in $(seq "${ALLOC_WINDOWS:-2}"); do
        for n in $(seq ${#BINS[@]}); do
            log "allocs, window $window, binary $n: $events over ${ALLOC_SECONDS} s"
            start_daemon "${BINS[$((n - 1))]}" "$WORK/full.json" \
                VRAMD_SAMPLER__FAST_INTERVAL=10ms VRAMD_SAMPLER__SLOW_INTERVAL=1s
            sleep "$SETTLE_SECONDS"
            read -r _ _ _ sc0 < <(duration_sums)
            perf stat --per-thread -x, -e "$events" -p "$PID" -o "$WORK/allocs.out" \
                -- sleep "$ALLOC_SECONDS"
            read -r _ _ _ sc1 < <(duration_sums)
            stop_daemon
            awk -F, -v samples="$((sc1 - sc0))" -v s="$ALLOC_SECONDS" '
                $4 ~ /^probe_libc:/ && $2 ~ /^[0-9]+$/ {
                    all += $2; if ($1 ~ /^vramd-slow-/) slow += $2 }
                END { printf "%.1f %.0f\n", (samples > 0) ? slow / samples : 0, all / s }' \
                "$WORK/allocs.out" >>"$WORK/$n.allocs"
            log "  binary $n, window $window: allocations per slow sample (slow threads)," \
                "per second (process): $(tail -1 "$WORK/$n.allocs"); $((sc1 - sc0)) slow samples"
        done
    done
fi

if part idle; then
    for n in $(seq ${#BINS[@]}); do
        log "idle, binary $n: one GPU, no processes, default intervals"
        start_daemon "${BINS[$((n - 1))]}" "$WORK/idle.json"
        sleep "$IDLE_SECONDS"
        for _ in $(seq "$RSS_SAMPLES"); do
            status_kib VmRSS >>"$WORK/$n.idle"
            sleep 1
        done
        stop_daemon
    done
fi

printf '\nmachine: %s cores, %s; load average at end: %s\n' "$(nproc)" \
    "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s GPUs x %s processes; medians (min-max); CPU from %s\n' "$GPUS" \
    "$PROCESSES_PER_GPU" "$([[ -n "$PERF" ]] && echo "perf stat task-clock" || echo "/proc ticks")"
for n in $(seq ${#BINS[@]}); do
    printf '\nbinary %s\n' "$n"
    if part cost; then
        read -r m lo hi < <(stats <"$WORK/$n.cpu")
        printf '  CPU share, 100 Hz / 1 Hz:          %s %% of a core (%s-%s)\n' "$m" "$lo" "$hi"
        read -r m lo hi < <(stats <"$WORK/$n.floor.cpu")
        printf '  floor (nvml-floor), same windows:  %s %% of a core (%s-%s)\n' "$m" "$lo" "$hi"
        read -r m lo hi < <(stats <"$WORK/$n.above")
        printf '  vramd above the floor, per pair:   %s %% of a core (%s-%s)\n' "$m" "$lo" "$hi"
        printf '  threads (wake-ups/s, involuntary/s, CPU %%), vramd:\n'
        thread_table "$WORK/$n.threads" | awk '{ printf "    %-18s %7s %6s %7s\n", $1, $2, $3, $4 }'
        printf '  threads, floor:\n'
        thread_table "$WORK/$n.floor.threads" | awk '{ printf "    %-18s %7s %6s %7s\n", $1, $2, $3, $4 }'
        if [[ -n "$PERF" ]]; then
            # Mean over windows of each thread name's task-clock (threads
            # of one name, such as tokio's workers, summed).
            for side in "$n" "$n.floor"; do
                printf '  threads, CPU %% of a core by perf task-clock, %s:\n' \
                    "$([[ $side == "$n" ]] && echo vramd || echo floor)"
                awk '{ c[$1] += $2; w[$1]++ }
                    END { for (k in c) printf "    %-18s %7.3f\n", k, c[k] / w[k] }' \
                    "$WORK/$side.perf-threads" | sort -k2,2gr
            done
        fi
        read -r m lo hi < <(stats <"$WORK/$n.fast")
        printf '  fast sample duration (mean):       %s us (%s-%s)\n' "$m" "$lo" "$hi"
        read -r m lo hi < <(stats <"$WORK/$n.slow")
        printf '  slow sample duration (mean):       %s us (%s-%s)\n' "$m" "$lo" "$hi"
        read -r m lo hi < <(stats <"$WORK/$n.per")
        printf '  CPU time per stored sample:        %s us (%s-%s)\n' "$m" "$lo" "$hi"
    fi
    if part fill; then
        read -r m lo hi < <(stats <"$WORK/$n.rss")
        printf '  VmRSS, rings full:                 %s MiB (%s-%s); VmHWM %s MiB\n' \
            "$(mib "$m")" "$(mib "$lo")" "$(mib "$hi")" "$(mib "${hwm[n]}")"
    fi
    if part moving; then
        read -r m lo hi < <(stats <"$WORK/$n.moving")
        printf '  VmRSS, rings full, moving:         %s MiB (%s-%s)\n' \
            "$(mib "$m")" "$(mib "$lo")" "$(mib "$hi")"
        read -r full _ _ < <(stats <"$WORK/$n.moving120")
        read -r short _ _ < <(stats <"$WORK/$n.moving2")
        printf '  VmRSS, 120 s / 2 s rings, moving:  %s / %s MiB; history %s MiB\n' \
            "$(mib "$full")" "$(mib "$short")" "$(mib $((full - short)))"
    fi
    if part allocs; then
        read -r m lo hi < <(cut -d' ' -f1 "$WORK/$n.allocs" | stats)
        printf '  allocations per slow sample:       %s (%s-%s), slow threads\n' "$m" "$lo" "$hi"
        read -r m lo hi < <(cut -d' ' -f2 "$WORK/$n.allocs" | stats)
        printf '  allocations per second, process:   %s (%s-%s)\n' "$m" "$lo" "$hi"
    fi
    if part slowmoving; then
        for case in moving wide; do
            label="$PROCESSES_PER_GPU moving"
            [[ $case == wide ]] && label="$WIDE_PROCESSES_PER_GPU moving, cap 64"
            read -r m lo hi < <(stats <"$WORK/$n.slow-$case")
            read -r fm _ _ < <(stats <"$WORK/floor.slow-$case")
            printf '  slow sample, %s/GPU: %s us (%s-%s); floor read %s us\n' \
                "$label" "$m" "$lo" "$hi" "$fm"
            read -r m lo hi < <(stats <"$WORK/$n.slow-$case.above")
            printf '    above NVML: %s us (%s-%s)' "$m" "$lo" "$hi"
            read -r m lo hi < <(stats <"$WORK/$n.slow-$case.cpu")
            printf '; CPU per slow sample %s us (%s-%s)\n' "$m" "$lo" "$hi"
        done
    fi
    if part idle; then
        read -r m lo hi < <(stats <"$WORK/$n.idle")
        printf '  VmRSS, idle, one GPU:              %s MiB (%s-%s)\n' \
            "$(mib "$m")" "$(mib "$lo")" "$(mib "$hi")"
    fi
done
