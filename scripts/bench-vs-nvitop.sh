#!/usr/bin/env bash
# vramd beside nvitop-exporter (issue 37, part 3), on the same fake host:
# the fake libnvidia-ml.so (tests/fake-nvml) with GPUS devices of
# PROCESSES_PER_GPU compute processes each, whose PIDs are real `sleep`
# processes. nvitop-exporter (PyPI, pinned below) runs from a virtual
# environment under target/ and loads the same fake library through
# LD_LIBRARY_PATH; vramd runs its release binary with the default
# configuration, except that its driver trace is off
# (VRAMD_DRIVER_TRACE__MODE=off: nvitop traces nothing, and as root `auto`
# would load the BPF programs and their ring buffer). The two run one after the other, A B A B, REPS times, and
# each run measures:
#   rss_start  VmRSS START_SECONDS after the exporter first answers;
#   idle_cpu   its CPU share (utime + stime from /proc, 10 ms ticks) over
#              IDLE_SECONDS with nobody scraping;
#   p50, p99   latency of SCRAPES sequential GET /metrics (curl's total
#              time), without and with Accept-Encoding: gzip;
#   cpu/scrape CPU time per scrape over both bursts, less the idle share;
#   rss_end    VmRSS after the scrapes.
# Then FILL (unless PARTS leaves it out): each exporter once more for
# FILL_SECONDS, vramd with its rings filled as bench-sampler.sh's `fill`
# does (fast 10 ms, slow 100 ms, history.retention 192 s: the points 1 h of
# defaults keeps), its VmRSS at the end: "RSS with full rings".
# Figures are medians over the runs (min-max alongside), with the ratio
# nvitop / vramd, and the load average of the machine during each run:
# the machine may be shared, and docs/performance.md records both.
#
# Everything binds 127.0.0.1, every wait is bounded, and the exporters
# and the sleepers are stopped on exit. Tunables (environment): PORT
# (19720), GPUS (8), PROCESSES_PER_GPU (64), REPS (3), START_SECONDS (30),
# IDLE_SECONDS (30), SCRAPES (300), FILL_SECONDS (200), PARTS ("runs fill"),
# SKIP_BUILD=1 to use the existing release binaries. Needs curl and Python 3
# with venv (the README's test command installs what the tests need; this
# script installs nvitop-exporter itself, once).
#
# Usage: scripts/bench-vs-nvitop.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

PORT=${PORT:-19720}
GPUS=${GPUS:-8}
PROCESSES_PER_GPU=${PROCESSES_PER_GPU:-64}
REPS=${REPS:-3}
START_SECONDS=${START_SECONDS:-30}
IDLE_SECONDS=${IDLE_SECONDS:-30}
SCRAPES=${SCRAPES:-300}
FILL_SECONDS=${FILL_SECONDS:-200}
PARTS=${PARTS:-runs fill}
NVITOP_EXPORTER=nvitop-exporter==1.7.2
VENV=target/bench-venv-nvitop
TCK=$(getconf CLK_TCK)

log() { printf 'bench-vs-nvitop: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
command -v curl >/dev/null || die "curl is needed"

WORK=$(mktemp -d)
PID=""
SLEEPERS=()
cleanup() {
    stop_daemon
    for pid in "${SLEEPERS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

if [[ ! -x "$VENV/bin/nvitop-exporter" ]]; then
    log "installing $NVITOP_EXPORTER into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet "$NVITOP_EXPORTER"
fi
LIB=$(release_daemon_and_fake_nvml "$WORK")

for _ in $(seq $((GPUS * PROCESSES_PER_GPU))); do
    sleep 3600 &
    SLEEPERS+=("$!")
    disown "$!"
done
fake_nvml_scenario "$GPUS" "$PROCESSES_PER_GPU" 16777216 >"$WORK/host.json"

# start EXPORTER [VAR=VALUE ...]: starts vramd or nvitop on a free port,
# sets PID and ADDR, waits (at most 60 s) until /metrics answers.
start() {
    local which=$1 port
    shift
    port=$(free_port "$PORT")
    ADDR="127.0.0.1:$port"
    case $which in
        vramd)
            env -u VRAMD_SERVER__LISTEN VRAMD_NVML__LIBRARY_PATH="$LIB" \
                VRAMD_DRIVER_TRACE__MODE=off \
                FAKE_NVML_SCENARIO="$WORK/host.json" "$@" target/release/vramd \
                --config config/vramd.toml --log-level warn --listen "$ADDR" \
                >"$WORK/$which.log" 2>&1 &
            ;;
        nvitop)
            env LD_LIBRARY_PATH="$WORK" FAKE_NVML_SCENARIO="$WORK/host.json" "$@" \
                "$VENV/bin/nvitop-exporter" --bind-address 127.0.0.1 --port "$port" \
                >"$WORK/$which.log" 2>&1 &
            ;;
    esac
    PID=$!
    for _ in $(seq 600); do
        curl -sf --max-time 5 -o /dev/null "http://$ADDR/metrics" && return 0
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/$which.log" >&2; die "$which exited"; }
        sleep 0.1
    done
    die "$which did not answer on $ADDR within 60 s"
}

rss_kib() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$PID/status"; }
cpu_ticks() { sed 's/.*) //' "/proc/$PID/stat" | awk '{ print $12 + $13 }'; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# scrapes [CURL_ARGS ...]: SCRAPES sequential scrapes; prints each one's
# seconds.
scrapes() {
    for _ in $(seq "$SCRAPES"); do
        curl -s --max-time 10 -o /dev/null -w '%{time_total}\n' "$@" "http://$ADDR/metrics"
    done
}

# run EXPORTER REP: one measured run; appends "figure value" lines to
# $WORK/EXPORTER.figures.
run() {
    local which=$1 rep=$2 out="$WORK/$1.figures" t0 t1 c0 c1 c2 idle_rate
    start "$which"
    sleep "$START_SECONDS"
    echo "rss_start_mib $(awk -v k="$(rss_kib)" 'BEGIN { print k / 1024 }')" >>"$out"
    c0=$(cpu_ticks)
    sleep "$IDLE_SECONDS"
    c1=$(cpu_ticks)
    idle_rate=$(awk -v a="$c0" -v b="$c1" -v s="$IDLE_SECONDS" 'BEGIN { print (b - a) / s }')
    echo "idle_cpu_percent $(awk -v r="$idle_rate" -v hz="$TCK" 'BEGIN { print 100 * r / hz }')" >>"$out"
    t0=$(date +%s.%N)
    scrapes >"$WORK/plain"
    scrapes -H 'Accept-Encoding: gzip' >"$WORK/gzip"
    t1=$(date +%s.%N)
    c2=$(cpu_ticks)
    for kind in plain gzip; do
        read -r p50 p99 < <(sort -g "$WORK/$kind" | awk '{ v[NR] = $1 } END {
            printf "%s %s\n", 1000 * v[int((NR + 1) / 2)], 1000 * v[int(NR * 0.99 + 0.5)] }')
        echo "p50_ms_$kind $p50" >>"$out"
        echo "p99_ms_$kind $p99" >>"$out"
    done
    awk -v a="$c1" -v b="$c2" -v r="$idle_rate" -v t0="$t0" -v t1="$t1" -v n="$SCRAPES" \
        -v hz="$TCK" 'BEGIN { busy = (b - a) - r * (t1 - t0); if (busy < 0) busy = 0
            printf "cpu_ms_per_scrape %s\n", 1000 * busy / hz / (2 * n) }' >>"$out"
    echo "rss_end_mib $(awk -v k="$(rss_kib)" 'BEGIN { print k / 1024 }')" >>"$out"
    echo "load1 $(load1)" >>"$out"
    stop_daemon
    log "$which run $rep done"
}

# fill EXPORTER: RSS after FILL_SECONDS, vramd with its rings filled.
fill() {
    local which=$1
    if [[ $which == vramd ]]; then
        start vramd VRAMD_SAMPLER__FAST_INTERVAL=10ms VRAMD_SAMPLER__SLOW_INTERVAL=100ms \
            VRAMD_HISTORY__RETENTION=192s
    else
        start nvitop
    fi
    sleep "$FILL_SECONDS"
    echo "rss_full_mib $(awk -v k="$(rss_kib)" 'BEGIN { print k / 1024 }')" >>"$WORK/$which.figures"
    echo "load1_fill $(load1)" >>"$WORK/$which.figures"
    stop_daemon
    log "$which fill done"
}

if [[ " $PARTS " == *" runs "* ]]; then
    for rep in $(seq "$REPS"); do
        run vramd "$rep"
        run nvitop "$rep"
    done
fi
if [[ " $PARTS " == *" fill "* ]]; then
    fill vramd
    fill nvitop
fi

# median FILE FIGURE: "median (min-max)" of FIGURE's values in FILE.
median() { awk -v f="$2" '$1 == f { print $2 }' "$1" | stats; }
printf '%s GPUs x %s processes, %s runs each (A B A B), %s scrapes per burst\n' \
    "$GPUS" "$PROCESSES_PER_GPU" "$REPS" "$SCRAPES"
printf '%-20s %-28s %-28s %s\n' figure vramd nvitop-exporter "nvitop / vramd"
for figure in rss_start_mib idle_cpu_percent p50_ms_plain p99_ms_plain p50_ms_gzip \
    p99_ms_gzip cpu_ms_per_scrape rss_end_mib rss_full_mib load1 load1_fill; do
    read -r vm vlo vhi < <(median "$WORK/vramd.figures" "$figure")
    read -r nm nlo nhi < <(median "$WORK/nvitop.figures" "$figure")
    [[ $vm == n/a && $nm == n/a ]] && continue
    ratio=$(awk -v a="$nm" -v b="$vm" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.1fx", a / b; else print "n/a" }')
    printf '%-20s %-28s %-28s %s\n' "$figure" "$vm ($vlo-$vhi)" "$nm ($nlo-$nhi)" "$ratio"
done
