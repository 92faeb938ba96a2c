"""Cost step of scripts/gpu-check.sh (issue 37 on real hardware): what vramd's
sampler costs on a real GPU, next to the floor (examples/nvml-floor: the same
NVML calls at the same rates and nothing else), while WORKERS PyTorch
processes change their memory several times a second, as on a training host.

For each cadence (the defaults, 4 Hz / 1 Hz, then 100 Hz / 1 Hz) the floor
runs for SECONDS, then vramd does; each is measured after WARMUP seconds:
- CPU share of one core, summed over threads from /proc/PID/task/*/schedstat
  (nanoseconds; /proc/PID/task/*/stat ticks where schedstat is missing);
- vramd per thread (fast, slow, Xid watcher, tokio workers...);
- vramd's own vramd_sample_duration_seconds and vramd_sample_cpu_seconds
  means per tier, over the window (from /metrics, before and after);
- the floor's mean slow device read, which it prints at exit.
Then, with the workers gone, vramd idle at the defaults: CPU share and VmRSS.

Prints tables and writes the figures as JSON to argv[3] when given.
Usage: python3 scripts/gpu_cost_check.py VRAMD NVML_FLOOR [OUT_JSON]
Standard library only, besides torch in the worker processes.
"""

import glob
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

WORKERS = int(os.environ.get("GPU_COST_WORKERS", "8"))
SECONDS = float(os.environ.get("GPU_COST_SECONDS", "20"))
WARMUP = 3.0

# A training-like process: tensors of 64-576 MiB come and go every 100 ms,
# so its NVML usage moves (the caching allocator is emptied every step).
WORKER = r"""
import random, sys, time, torch
torch.cuda.init()
held = []
print("ready", flush=True)
while True:
    held.append(torch.empty(random.randint(64, 576) << 20, dtype=torch.uint8, device="cuda:0"))
    if len(held) > 3:
        held.pop(0)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    time.sleep(0.1)
"""


def thread_cpu_ns(pid):
    """CPU time per thread name, in ns, summed over threads of one name."""
    out = {}
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            with open(f"{task}/comm") as f:
                name = f.read().strip()
            try:
                with open(f"{task}/schedstat") as f:
                    ns = int(f.read().split()[0])
            except OSError:
                with open(f"{task}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ns = (int(fields[11]) + int(fields[12])) * 10_000_000
        except (OSError, ValueError, IndexError):
            continue
        out[name] = out.get(name, 0) + ns
    return out


def vm_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def histograms(base):
    """{(metric, tier): (sum, count)} for the sampler's two histograms."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = {}
    for metric in ("vramd_sample_duration_seconds", "vramd_sample_cpu_seconds"):
        for part in ("sum", "count"):
            for tier, value in re.findall(rf'^{metric}_{part}{{tier="([^"]+)"}} (\S+)$', text, re.M):
                found.setdefault((metric, tier), [0.0, 0.0])[0 if part == "sum" else 1] = float(value)
    return found


def window(pid, seconds):
    """Each thread name's share of a core over `seconds`."""
    before = thread_cpu_ns(pid)
    started = time.monotonic()
    time.sleep(seconds)
    after = thread_cpu_ns(pid)
    elapsed = time.monotonic() - started
    return {name: (after[name] - before.get(name, 0)) / 1e9 / elapsed for name in after}


def run_floor(floor, fast_ms, slow_ms):
    proc = subprocess.Popen([floor, "--fast-ms", str(fast_ms), "--slow-ms", str(slow_ms),
                             "--seconds", str(int(WARMUP + SECONDS + 2))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(WARMUP)
    per_thread = window(proc.pid, SECONDS)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    read = re.search(r"slow device read mean ([0-9.]+) us", err or "")
    failed = re.search(r"done, (\d+) failed calls", err or "")
    return {"cpu_share": sum(per_thread.values()), "threads": per_thread,
            "slow_read_us": float(read.group(1)) if read else None,
            "failed_calls": int(failed.group(1)) if failed else None,
            "stderr_tail": (err or "")[-400:]}


def run_vramd(binary, fast, slow):
    sys.path.insert(0, os.path.dirname(__file__))
    from gpu_check import start_vramd, stop_vramd
    daemon, base = start_vramd(binary, {"VRAMD_SAMPLER__FAST_INTERVAL": fast,
                                        "VRAMD_SAMPLER__SLOW_INTERVAL": slow})
    try:
        time.sleep(WARMUP)
        first = histograms(base)
        per_thread = window(daemon.pid, SECONDS)
        last = histograms(base)
        means = {}
        for key, (total, count) in last.items():
            prior_total, prior_count = first.get(key, (0.0, 0.0))
            if count > prior_count:
                means[f"{key[0]}{{tier={key[1]}}}"] = {
                    "mean_us": (total - prior_total) / (count - prior_count) * 1e6,
                    "samples": int(count - prior_count)}
        with urllib.request.urlopen(f"{base}/api/v1/devices/0", timeout=5) as response:
            listed = len(json.load(response).get("processes", []))
        return {"cpu_share": sum(per_thread.values()), "threads": per_thread, "histograms": means,
                "vm_rss_mib": vm_rss_mib(daemon.pid), "processes_listed": listed}
    finally:
        stop_vramd(daemon)


def show(label, floor, ours):
    print(f"\n== cost: {label}")
    if floor:
        print(f"floor (nvml-floor): {floor['cpu_share'] * 100:.3f} % of a core; slow device read "
              f"{floor['slow_read_us']} us; failed calls {floor['failed_calls']}")
    print(f"vramd: {ours['cpu_share'] * 100:.3f} % of a core; VmRSS {ours['vm_rss_mib']:.1f} MiB; "
          f"{ours['processes_listed']} processes listed on GPU 0")
    if floor:
        print(f"vramd above the floor: {(ours['cpu_share'] - floor['cpu_share']) * 100:+.3f} % of a core")
    for name, share in sorted(ours["threads"].items(), key=lambda item: -item[1]):
        if share > 0:
            print(f"  thread {name:20} {share * 100:8.4f} %")
    for name, figure in sorted(ours["histograms"].items()):
        print(f"  {name:48} mean {figure['mean_us']:9.1f} us over {figure['samples']} samples")


def main():
    binary, floor = sys.argv[1], sys.argv[2]
    report = {"workers": WORKERS, "seconds": SECONDS}
    workers = [subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True)
               for _ in range(WORKERS)]
    try:
        for worker in workers:
            if worker.stdout.readline().strip() != "ready":
                sys.exit("gpu-cost: a worker did not start")
        time.sleep(2)
        for label, fast_ms, slow_ms in (("defaults, 4 Hz / 1 Hz", 250, 1000), ("100 Hz / 1 Hz", 10, 1000)):
            floor_figures = run_floor(floor, fast_ms, slow_ms) if os.access(floor, os.X_OK) else None
            ours = run_vramd(binary, f"{fast_ms}ms", f"{slow_ms}ms")
            report[label] = {"floor": floor_figures, "vramd": ours}
            show(label + f", {WORKERS} moving processes", floor_figures, ours)
    finally:
        for worker in workers:
            worker.kill()
        for worker in workers:
            worker.wait()
    time.sleep(2)
    idle = run_vramd(binary, "250ms", "1s")
    report["idle, defaults"] = {"vramd": idle}
    show("idle, defaults, no GPU processes", None, idle)
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
