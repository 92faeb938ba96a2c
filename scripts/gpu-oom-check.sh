#!/usr/bin/env bash
# On a GPU machine: start vramd on the real driver, trigger one CUDA OOM in a
# PyTorch process with the reporter's OOM capture on, and check the event,
# the allocator_oom alert and the snapshot file (scripts/gpu_oom_check.py).
# Needs: cargo, python3 with torch (CUDA). Prints OK or FAIL and exits 0/1.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${VRAMD_PORT:-19477}
work=$(mktemp -d)
cargo build --release --bin vramd
VRAMD_ANALYSIS__EVALUATION_INTERVAL=1s ./target/release/vramd --listen "127.0.0.1:$port" >"$work/vramd.log" 2>&1 &
vramd=$!
trap 'kill "$vramd" 2>/dev/null || true; wait "$vramd" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break
  sleep 0.2
done
PYTHONPATH=clients/python/src python3 scripts/gpu_oom_check.py "http://127.0.0.1:$port" "$work/snapshots"
