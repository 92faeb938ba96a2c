#!/usr/bin/env bash
# Offline replay (issue 32): `vramd analyze --replay` of 8 GPUs x 6 h
# (fast tier every 250 ms, slow every 1 s: 864,000 samples, allocator
# statistics in every slow reading, a ~275 MB trace), written by
# examples/write-trace.rs through the daemon's own recorder. Prints the
# samples/s (wall clock and CPU, parsing included) and the peak RSS
# (VmHWM, from /usr/bin/time -v) of each run, and the median.
#
# Usage: scripts/bench-replay.sh [RUNS] [SCENARIO]   (default 3, training-fragmentation)
# BIN=path/to/vramd replays with another binary (e.g. an older build, for
# a before/after); KEEP=path keeps (and reuses) the trace there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bench-lib.sh

runs=${1:-3}
scenario=${2:-training-fragmentation}
cargo build --release --quiet --bin vramd --example write-trace
bin=$(realpath "${BIN:-target/release/vramd}")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
trace=$(realpath -m "${KEEP:-$work/trace.ndjson}")
if [[ ! -s "$trace" ]]; then
    target/release/examples/write-trace --out "$trace" --scenario "$scenario" --gpus 8 --hours 6
fi
echo "trace: $(stat -c %s "$trace") bytes, $(($(wc -l <"$trace") - 1)) records ($scenario, 8 GPUs x 6 h)"
echo "binary: $bin; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq "$runs"); do
    # From the scratch directory: the repository's config/vramd.toml would be
    # read, and an older binary (BIN) refuses keys added since.
    (cd "$work" && /usr/bin/time -v "$bin" analyze --replay "$trace" --json >report.json 2>time.txt)
    samples=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples"])' "$work/report.json")
    read -r wall user sys rss < <(awk -F': ' '
        /Elapsed \(wall clock\)/ { n = split($2, p, ":"); w = 0; for (i = 1; i <= n; i++) w = w * 60 + p[i] }
        /User time/ { u = $2 } /System time/ { s = $2 } /Maximum resident/ { r = $2 }
        END { print w, u, s, r }' "$work/time.txt")
    awk -v n="$samples" -v w="$wall" -v u="$user" -v s="$sys" -v r="$rss" -v run="$run" 'BEGIN {
        printf "run %d: %d samples in %.2f s wall (%.2f s CPU): %.0f k samples/s wall, %.0f k/s per CPU second; peak RSS %.1f MiB\n",
            run, n, w, u + s, n / w / 1000, n / (u + s) / 1000, r / 1024 }'
    awk -v n="$samples" -v w="$wall" 'BEGIN { printf "%.0f\n", n / w / 1000 }' >>"$work/rate"
    awk -v r="$rss" 'BEGIN { printf "%.1f\n", r / 1024 }' >>"$work/rss"
done
read -r rate_median rate_min rate_max < <(stats <"$work/rate")
read -r rss_median rss_min rss_max < <(stats <"$work/rss")
echo "median: ${rate_median} k samples/s wall (${rate_min}-${rate_max}); peak RSS ${rss_median} MiB (${rss_min}-${rss_max})"
