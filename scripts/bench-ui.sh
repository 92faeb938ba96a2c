#!/usr/bin/env bash
# The live page's figures with 8 GPUs x 64 processes: starts the debug
# daemon on the fake libnvidia-ml.so (tests/fake-nvml) with 512 real
# sleeping PIDs, then runs the ignored test `page_figures` (tests/ui.rs) in
# headless Chromium against it: first paint, data drawn, bytes, and the
# renderer's CPU over one minute of live updates.
#   scripts/bench-ui.sh            # GPUS=8 PROCESSES_PER_GPU=64
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

GPUS=${GPUS:-8}
PROCESSES_PER_GPU=${PROCESSES_PER_GPU:-64}
WORK=$(mktemp -d)
PID=""
declare -a SLEEPERS=()
cleanup() {
    stop_daemon
    for sleeper in "${SLEEPERS[@]}"; do kill "$sleeper" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --bin vramd --quiet
cargo build -p fake-nvml --lib --quiet
cp target/debug/libnvidia_ml_fake.so "$WORK/libnvidia-ml.so.1"
for _ in $(seq $((GPUS * PROCESSES_PER_GPU))); do
    sleep 3600 &
    SLEEPERS+=("$!")
done
fake_nvml_scenario "$GPUS" "$PROCESSES_PER_GPU" 16777216 >"$WORK/scenario.json"
port=$(free_port 19480)
env -u VRAMD_SERVER__LISTEN VRAMD_NVML__LIBRARY_PATH="$WORK/libnvidia-ml.so.1" \
    FAKE_NVML_SCENARIO="$WORK/scenario.json" \
    target/debug/vramd --config config/vramd.toml --log-level warn --listen "127.0.0.1:$port" \
    >"$WORK/daemon.log" 2>&1 &
PID=$!
for _ in $(seq 200); do
    curl -sf --max-time 1 "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/daemon.log" >&2; exit 1; }
    sleep 0.1
done
UI_PAGE_ADDR="127.0.0.1:$port" cargo test --test ui -- --ignored --nocapture page_figures
