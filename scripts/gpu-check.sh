#!/usr/bin/env bash
# Checks vramd's numbers against nvidia-smi on a machine with a real NVIDIA
# GPU, under a PyTorch workload that allocates known amounts. Then, as
# root, the driver trace (scripts/gpu_driver_trace_check.py): under a
# PyTorch job without the reporter, vramd_process_driver_allocated_bytes
# must equal torch.cuda.memory_reserved() at each step, and a real OOM in a
# process with no reporter must become a driver-trace OOM event and fire
# allocator_oom (not root: that part prints SKIP). Then the reporter's OOM
# capture (scripts/gpu_oom_check.py: event, alert within 1 s, snapshot), and
# the sampler's cost next to examples/nvml-floor under moving PyTorch
# processes (scripts/gpu_cost_check.py; skipped without the floor binary),
# and what each NVML call of the two tiers costs on this GPU
# (scripts/gpu_nvml_costs.py, with pynvml).
#
#   scripts/gpu-check.sh [path/to/vramd] [path/to/nvml-floor]
#       defaults: target/release/vramd, target/release/examples/nvml-floor
#   With $OUT set, each part's output and the cost figures (JSON) go there too.
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

floor="${2:-target/release/examples/nvml-floor}"
out="${OUT:-$(mktemp -d)}"
status=0
# Each part has a deadline, so one that hangs on the driver cannot take the
# others' time; a part's failure fails the check but the others still run.
part() {
    local name=$1 limit=$2
    shift 2
    echo "== gpu-check part: $name" | tee -a "$out/summary.txt"
    local rc=0
    timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$out/$name.txt" || rc=${PIPESTATUS[0]}
    echo "== gpu-check part $name: exit $rc" | tee -a "$out/summary.txt"
    [ "$rc" -eq 0 ] || status=1
}
part numbers 120 python3 scripts/gpu_check.py "$binary"
part driver-trace 150 python3 scripts/gpu_driver_trace_check.py "$binary"
part reporter-oom 90 env PYTHONPATH=clients/python/src python3 scripts/gpu_oom_check.py "$binary" "$out/snapshots"
part cost 240 python3 scripts/gpu_cost_check.py "$binary" "$floor" "$out/cost.json"
if python3 -c 'import pynvml' 2>/dev/null; then
    part nvml-costs 90 python3 scripts/gpu_nvml_costs.py "$out/nvml-costs.json"
else
    echo "== gpu-check part nvml-costs: SKIP (no pynvml)" | tee -a "$out/summary.txt"
fi
echo "gpu-check: $([ "$status" -eq 0 ] && echo PASS || echo FAIL); parts in $out/summary.txt" | tee -a "$out/summary.txt"
exit "$status"
