#!/usr/bin/env bash
# The driver trace's own thread as the daemon runs it (found on an H200,
# docs/performance.md "On a real H200"): PROCESSES listed processes, each
# mapping the fake libcuda and MAPPINGS other regions (a PyTorch process
# maps thousands), vramd at its default intervals on the fake NVML with
# driver_trace.mode = "on", and the CPU of its `vramd-driver-tr` thread
# (and the whole daemon) over WINDOW seconds, from /proc/PID/task/*/schedstat.
# Each binary given is run ROUNDS times, alternately (pass main's first for
# a before/after). Needs root (the trace), python3, cargo.
#   scripts/bench-trace-discovery.sh [VRAMD ...]   (default target/release/vramd)
#   env: PROCESSES (8), MAPPINGS (3000), WINDOW (20), ROUNDS (3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
processes=${PROCESSES:-8} mappings=${MAPPINGS:-3000} seconds=${WINDOW:-20} rounds=${ROUNDS:-3}
[ "$(id -u)" -eq 0 ] || { echo "bench-trace-discovery: needs root (the driver trace)" >&2; exit 2; }
binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || binaries=(target/release/vramd)
work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

cargo build --quiet --release -p fake-cuda -p fake-nvml --lib
cp target/release/libcuda_fake.so "$work/libcuda.so.1"
cp target/release/libnvidia_ml_fake.so "$work/libnvidia-ml.so.1"
echo '{"devices": [{}]}' >"$work/cuda.json"

# A process mapping the fake libcuda and $mappings anonymous regions that
# cannot merge (every other one read-only).
cat >"$work/mapper.py" <<'EOF'
import ctypes, mmap, sys, time
ctypes.CDLL(sys.argv[1])
regions = [mmap.mmap(-1, 8192) for _ in range(int(sys.argv[2]))]
libc = ctypes.CDLL(None)
for i, region in enumerate(regions):
    if i % 2:
        libc.mprotect(ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(region))), 4096, 1)
print("ready", flush=True)
time.sleep(3600)
EOF
compute=""
for ((i = 0; i < processes; i++)); do
    FAKE_CUDA_SCENARIO="$work/cuda.json" python3 "$work/mapper.py" "$work/libcuda.so.1" "$mappings" >"$work/mapper$i.out" &
    pids+=($!)
    compute+="${compute:+,}{\"pid\": $!, \"used_bytes\": 1073741824}"
done
for ((i = 0; i < processes; i++)); do
    for _ in $(seq 100); do grep -q ready "$work/mapper$i.out" && break; sleep 0.1; done
done
echo "{\"devices\": [{\"uuid\": \"GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f20\", \"processes\": {\"compute\": [$compute], \"graphics\": [], \"mps\": []}}]}" >"$work/nvml.json"
echo "bench-trace-discovery: $processes processes, $(wc -l <"/proc/${pids[0]}/maps") lines of maps each, ${seconds} s windows, load $(cut -d' ' -f1-3 /proc/loadavg)"

thread_ns() { # PID NAME-PREFIX: CPU ns of its threads whose name starts so
    local total=0 task name
    for task in /proc/"$1"/task/*; do
        name=$(cat "$task/comm" 2>/dev/null) || continue
        [[ "$name" == "$2"* ]] || continue
        total=$((total + $(cut -d' ' -f1 "$task/schedstat" 2>/dev/null || echo 0)))
    done
    echo "$total"
}

for ((round = 1; round <= rounds; round++)); do
    for binary in "${binaries[@]}"; do
        VRAMD_NVML__LIBRARY_PATH="$work/libnvidia-ml.so.1" FAKE_NVML_SCENARIO="$work/nvml.json" \
            VRAMD_DRIVER_TRACE__MODE=on "$binary" --listen 127.0.0.1:0 >/dev/null 2>"$work/vramd.err" &
        daemon=$!
        sleep 5
        trace0=$(thread_ns "$daemon" vramd-driver-tr) all0=$(thread_ns "$daemon" "")
        sleep "$seconds"
        trace1=$(thread_ns "$daemon" vramd-driver-tr) all1=$(thread_ns "$daemon" "")
        kill "$daemon"; wait "$daemon" 2>/dev/null || true
        awk -v b="$binary" -v r="$round" -v t=$((trace1 - trace0)) -v a=$((all1 - all0)) -v s="$seconds" \
            'BEGIN { printf "round %d %-28s driver-trace thread %.3f %% of a core, daemon %.3f %%\n", r, b, t / s / 1e7, a / s / 1e7 }'
    done
done
