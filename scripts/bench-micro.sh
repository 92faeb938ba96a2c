#!/usr/bin/env bash
# Runs the criterion benchmarks (benches/history.rs, benches/metrics.rs) and
# prints one table row per benchmark: the median time per iteration over
# criterion's samples, and the 10th-90th percentile of those samples as the
# spread. Groups named *_cpu/ time the same code by the benchmark thread's
# CPU time (benches/support/cpu_time.rs) instead of wall time, so other
# processes on the machine inflate them less. docs/performance.md records
# the figures.
#
# Usage: scripts/bench-micro.sh [criterion filter]
# Each benchmark warms up 1 s and measures 3 s (set in the bench files), so a
# full run takes about a minute plus the build. Needs python3 for the table.

set -euo pipefail
cd "$(dirname "$0")/.."

filter=("$@")
cargo bench --bench history --bench metrics -- "${filter[@]}" >&2

command -v python3 >/dev/null || { echo "python3 not found; see target/criterion/" >&2; exit 0; }

printf '\nmachine: %s cores, %s; load average %s\n\n' "$(nproc)" \
    "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "${filter[@]}" <<'PY'
import json, pathlib, sys

def human(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"

def pct(values, q):
    values = sorted(values)
    at = (len(values) - 1) * q
    low = int(at)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (at - low)

filters = sys.argv[1:]
rows = []
for bench in sorted(pathlib.Path("target/criterion").glob("*/*/new/benchmark.json")):
    meta = json.loads(bench.read_text())
    name = meta.get("full_id") or f"{meta['group_id']}/{meta['function_id']}"
    if filters and not any(f in name for f in filters):
        continue
    if not name.startswith(("history/", "metrics/", "history_cpu/", "metrics_cpu/")):
        continue
    sample = json.loads((bench.parent / "sample.json").read_text())
    per_iter = [t / n for t, n in zip(sample["times"], sample["iters"])]
    rows.append((name, pct(per_iter, 0.5), pct(per_iter, 0.1), pct(per_iter, 0.9), len(per_iter)))

width = max((len(r[0]) for r in rows), default=10)
print(f"{'benchmark':<{width}}  {'median':>10}  {'p10':>10}  {'p90':>10}  samples")
for name, med, p10, p90, n in rows:
    print(f"{name:<{width}}  {human(med):>10}  {human(p10):>10}  {human(p90):>10}  {n}")
PY
