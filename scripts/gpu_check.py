"""Driver of scripts/gpu-check.sh: this process is the PyTorch workload.

It starts vramd on loopback, allocates known amounts on GPU 0 in steps, and
at each step reads nvidia-smi and vramd's REST API at (nearly) the same
moment, then compares device totals, used/free memory and this process's
memory. Standard library only, besides torch.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

MIB = 1 << 20
GIB = 1 << 30
# vramd samples memory every 100 ms here and processes every 500 ms; give a
# step time to settle before comparing.
SETTLE_S = 1.5
# Tolerances: nvidia-smi reports whole MiB; the device may change between
# the two reads by a few MiB (driver bookkeeping).
DEVICE_TOLERANCE = 16 * MIB
PROCESS_TOLERANCE = 4 * MIB


def smi_gpu(index):
    fields = "index,uuid,memory.total,memory.reserved,memory.used,memory.free"
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", str(index)],
        check=True, capture_output=True, text=True).stdout.strip()
    idx, uuid, total, reserved, used, free = [part.strip() for part in out.split(",")]
    as_bytes = lambda mib: int(mib) * MIB if mib.isdigit() else None
    return {"uuid": uuid, "total": as_bytes(total), "reserved": as_bytes(reserved),
            "used": as_bytes(used), "free": as_bytes(free)}


def smi_process(pid):
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
        check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3 and parts[0] == str(pid) and parts[2].isdigit():
            return int(parts[2]) * MIB
    return None


def vramd_device(base, index):
    with urllib.request.urlopen(f"{base}/api/v1/devices/{index}", timeout=5) as response:
        return json.load(response)


def start_vramd(binary, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMD_")}
    env.update({"VRAMD_SAMPLER__FAST_INTERVAL": "100ms", "VRAMD_SAMPLER__SLOW_INTERVAL": "500ms"})
    env.update(extra or {})
    daemon = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--log-format", "json"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = daemon.stderr.readline()
        if not line:
            break
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("message") == "listening":
            base = f"http://{event['addr']}"
            while time.time() < deadline:
                try:
                    with urllib.request.urlopen(f"{base}/readyz", timeout=2) as response:
                        if response.status == 200:
                            return daemon, base
                except OSError:
                    time.sleep(0.2)
    daemon.kill()
    sys.exit("gpu-check: vramd did not become ready within 60 s")


def stop_vramd(daemon, wait_s=5):
    """SIGTERM, then SIGKILL after `wait_s`; the exit status, or "killed"."""
    daemon.send_signal(signal.SIGTERM)
    try:
        return daemon.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
        return "killed"


def compare(label, ours, theirs, tolerance, rows, failures):
    if ours is None or theirs is None:
        rows.append((label, ours, theirs, "n/a"))
        return
    delta = ours - theirs
    ok = abs(delta) <= tolerance
    rows.append((label, ours, theirs, f"{delta / MIB:+.1f} MiB {'ok' if ok else 'MISMATCH'}"))
    if not ok:
        failures.append(label)


def show(step, rows):
    print(f"\n== {step}")
    print(f"{'quantity':34} {'vramd (MiB)':>14} {'nvidia-smi (MiB)':>17}  difference")
    for label, ours, theirs, verdict in rows:
        fmt = lambda v: f"{v / MIB:14.1f}" if isinstance(v, int) else f"{'-':>14}"
        print(f"{label:34} {fmt(ours)} {fmt(theirs):>17}  {verdict}")


def probe_check(binary, base, uuid, failures):
    """The CUDA probe: the daemon's own scheduled probe (its first runs right
    after the first sampling cycle), then `vramd probe --headroom` by hand,
    next to torch's cuMemGetInfo and nvidia-smi."""
    import torch

    scheduled = vramd_device(base, 0).get("probe", {})
    print("\n== CUDA probe, scheduled by the daemon ==")
    print(json.dumps(scheduled, indent=1))
    if not scheduled.get("latest"):
        failures.append("daemon probe produced no reading")
    before = smi_gpu(0)
    started = time.monotonic()
    result = subprocess.run(
        [binary, "probe", "--json", "--device", uuid, "--headroom", "--margin", "4GiB", "--time-budget", "5s"],
        capture_output=True, text=True, timeout=120,
    )
    wall = time.monotonic() - started
    torch_free, torch_total = torch.cuda.mem_get_info(0)
    after = smi_gpu(0)
    print("\n== vramd probe --headroom ==")
    print(f"exit status {result.returncode}, {wall:.2f} s wall; stderr: {result.stderr.strip()[-300:]}")
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        failures.append("vramd probe answer not JSON")
        print(result.stdout[-500:])
        return
    reading = answer.get("reading")
    if result.returncode != 0 or not reading:
        failures.append(f"vramd probe failed: {answer.get('failure')}")
        return
    context = reading.get("context_bytes")
    rows = [
        ("CUDA free (probe, own ctx alive)", reading["cuda_free_bytes"], None, "n/a"),
        ("NVML free (probe, same moment)", reading.get("nvml_free_bytes"), None, "n/a"),
        ("torch mem_get_info free (after)", torch_free, None, "n/a"),
        ("nvidia-smi free before / after", before["free"], after["free"], "n/a"),
        ("probe context (NVML)", context, None, "n/a"),
        ("largest allocatable block", (reading.get("headroom") or {}).get("largest_block_bytes"), None, "n/a"),
    ]
    show("probe", rows)
    difference = (reading.get("nvml_free_bytes") or 0) - reading["cuda_free_bytes"]
    print(f"NVML - CUDA free: {difference / MIB:+.1f} MiB; context created in "
          f"{reading['context_create_seconds'] * 1e3:.0f} ms; alloc {reading.get('alloc_latency_seconds', 0) * 1e6:.0f} us, "
          f"free {reading.get('free_latency_seconds', 0) * 1e6:.0f} us (median of {reading['alloc_samples']}); "
          f"probe {reading['duration_seconds']:.2f} s; headroom search {reading.get('headroom')}")
    # With the probe's context gone, torch sees the probe's free plus that context.
    if context is not None:
        compare("torch free - probe free - context", torch_free - reading["cuda_free_bytes"] - context, 0, DEVICE_TOLERANCE, [], failures)
    if abs(difference) > 64 * MIB:
        failures.append("NVML and CUDA free differ by more than 64 MiB")
    if context is not None and not (50 * MIB <= context <= 1024 * MIB):
        failures.append("probe context size outside 50 MiB - 1 GiB")


def main():
    import torch

    binary = sys.argv[1]
    daemon, base = start_vramd(binary)
    failures = []
    held = []
    try:
        torch.cuda.init()
        steps = [("CUDA context only", 0), ("+ 2 GiB tensor", 2 * GIB), ("+ 8 GiB tensor", 8 * GIB)]
        for step, size in steps:
            if size:
                held.append(torch.empty(size, dtype=torch.uint8, device="cuda:0"))
            torch.cuda.synchronize()
            time.sleep(SETTLE_S)
            gpu = smi_gpu(0)
            smi_used_by_us = smi_process(os.getpid())
            ours = vramd_device(base, 0)
            memory = ours.get("memory", {})
            mine = next((p for p in ours.get("processes", []) if p["pid"] == os.getpid()), {})
            rows = []
            compare("device total", memory.get("total_bytes"), gpu["total"], MIB, rows, failures)
            compare("device reserved (driver)", memory.get("reserved_bytes"), gpu["reserved"], DEVICE_TOLERANCE, rows, failures)
            compare("device used", memory.get("used_bytes"), gpu["used"], DEVICE_TOLERANCE, rows, failures)
            compare("device free", memory.get("free_bytes"), gpu["free"], DEVICE_TOLERANCE, rows, failures)
            compare("this process (NVML)", mine.get("used_bytes"), smi_used_by_us, PROCESS_TOLERANCE, rows, failures)
            rows.append(("torch reserved (reference)", torch.cuda.memory_reserved(0), None, "n/a"))
            rows.append(("torch allocated (reference)", torch.cuda.memory_allocated(0), None, "n/a"))
            if mine.get("used_bytes") is not None:
                outside = mine["used_bytes"] - torch.cuda.memory_reserved(0)
                rows.append(("outside the allocator (context…)", outside, None, "n/a"))
            show(step, rows)
        probe_check(binary, base, vramd_device(base, 0)["uuid"], failures)
    finally:
        held.clear()
        code = stop_vramd(daemon)
        print(f"\nvramd exit status after SIGTERM: {code}")
        if code != 0:
            failures.append("clean exit on SIGTERM")
    verdict = "PASS" if not failures else "FAIL (" + ", ".join(sorted(set(failures))) + ")"
    print(f"gpu-check verdict: {verdict}")
    sys.exit(0 if not failures else 1)


if __name__ == "__main__":
    main()
