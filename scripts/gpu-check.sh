#!/usr/bin/env bash
# Checks vramd's numbers against nvidia-smi on a machine with a real NVIDIA
# GPU, under a PyTorch workload that allocates known amounts. Then, as
# root, the driver trace (scripts/gpu_driver_trace_check.py): under a
# PyTorch job without the reporter, vramd_process_driver_allocated_bytes
# must equal torch.cuda.memory_reserved() at each step, and a real OOM in a
# process with no reporter must become a driver-trace OOM event and fire
# allocator_oom (not root: that part prints SKIP).
#
#   scripts/gpu-check.sh [path/to/vramd]      (default: target/release/vramd)
#
# Needs: an NVIDIA driver with nvidia-smi, python3 with torch (CUDA build).
# Prints one table per step and a final verdict line (PASS or FAIL); exits 0
# on PASS, 1 on FAIL, 2 when the machine lacks what the check needs.
# Never run in CI: CI has no GPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

binary="${1:-target/release/vramd}"
[ -x "$binary" ] || { echo "gpu-check: $binary not found; build it with: cargo build --release" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "gpu-check: nvidia-smi not found: this check needs a real NVIDIA GPU" >&2; exit 2; }
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
    { echo "gpu-check: python3 with a CUDA build of torch is required" >&2; exit 2; }

status=0
python3 scripts/gpu_check.py "$binary" || status=$?
python3 scripts/gpu_driver_trace_check.py "$binary" || status=$((status > 0 ? status : $?))
exit "$status"
