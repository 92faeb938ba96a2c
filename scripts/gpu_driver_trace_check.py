"""Driver trace step of scripts/gpu-check.sh (issue 33): this process is a
PyTorch workload that runs no reporter. vramd traces its libcuda calls, and
`vramd_process_driver_allocated_bytes` for this PID must equal
torch.cuda.memory_reserved() at every step (exactly: without
expandable_segments every reserved segment is one cuMemAlloc). Then a child
process, again without a reporter, asks for more than the GPU has: vramd
must store an OOM event for it (`hostname` "driver-trace", with the driver
evidence) within a few seconds, and allocator_oom must fire for it.

Needs root (or CAP_SYS_ADMIN and CAP_SYS_PTRACE); otherwise prints SKIP and
exits 0. Standard library only, besides torch.
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

# Before torch loads: one cuMemAlloc per segment, as the check assumes.
os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)

MIB = 1 << 20
GIB = 1 << 30
WAIT_S = 15

CHILD = r"""
import sys, time, torch
torch.cuda.init()
held = torch.empty(256 << 20, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()
total = torch.cuda.get_device_properties(0).total_memory
try:
    torch.empty(2 * total, dtype=torch.uint8, device="cuda:0")
    print("allocated?", flush=True)
except torch.cuda.OutOfMemoryError:
    print("oom", flush=True)
time.sleep(10)
"""


def get(base, path, as_json=True):
    with urllib.request.urlopen(f"{base}{path}", timeout=5) as response:
        body = response.read().decode()
    return json.loads(body) if as_json else body


def metric(base, name, pid=None):
    """The value of `name` (for `pid`, when given) on /metrics, or None."""
    for line in get(base, "/metrics", as_json=False).splitlines():
        if not line.startswith(name):
            continue
        labels = re.match(rf'{name}(\{{.*\}})? (\S+)$', line)
        if not labels:
            continue
        if pid is not None and f'pid="{pid}"' not in (labels.group(1) or ""):
            continue
        return float(labels.group(2))
    return None


def until(what, probe):
    deadline = time.time() + WAIT_S
    value = probe()
    while not what(value) and time.time() < deadline:
        time.sleep(0.05)
        value = probe()
    return value


def main():
    if os.geteuid() != 0:
        print("\n== driver trace: SKIP (needs root, or CAP_SYS_ADMIN and CAP_SYS_PTRACE)")
        return 0
    import torch
    sys.path.insert(0, os.path.dirname(__file__))
    from gpu_check import start_vramd, stop_vramd

    settings = {"VRAMD_DRIVER_TRACE__MODE": "on",
                "VRAMD_DRIVER_TRACE__DISCOVERY_INTERVAL": "200ms",
                "VRAMD_ANALYSIS__EVALUATION_INTERVAL": "1s"}
    failures = []
    pid = os.getpid()
    # A context first, so NVML lists this process and vramd probes its
    # libcuda; what was allocated before the probe is then given back.
    torch.cuda.init()
    first = torch.zeros(1, device="cuda:0")
    torch.cuda.synchronize()
    daemon, base = start_vramd(sys.argv[1], settings)
    try:
        libraries = until(lambda n: (n or 0) >= 1, lambda: metric(base, "vramd_driver_trace_libraries"))
        print(f"\n== driver trace: libcuda files probed: {libraries}")
        if not libraries:
            failures.append("libcuda probed")
            raise RuntimeError("vramd probed no libcuda")
        del first
        torch.cuda.empty_cache()
        held = []
        print(f"{'step':28} {'torch reserved (MiB)':>21} {'driver-held (MiB)':>18}  verdict")
        for step, action in [("+ 1 GiB", lambda: held.append(torch.empty(GIB, dtype=torch.uint8, device="cuda:0"))),
                             ("+ 3 GiB", lambda: held.append(torch.empty(3 * GIB, dtype=torch.uint8, device="cuda:0"))),
                             ("+ 1000 small tensors", lambda: held.extend(torch.empty(1000, device="cuda:0") for _ in range(1000))),
                             ("free the 1 GiB (cached)", lambda: held.pop(0)),
                             ("empty_cache()", torch.cuda.empty_cache)]:
            action()
            torch.cuda.synchronize()
            reserved = torch.cuda.memory_reserved(0)
            traced = until(lambda v: v == reserved,
                           lambda: metric(base, "vramd_process_driver_allocated_bytes", pid))
            ok = traced == reserved
            print(f"{step:28} {reserved / MIB:21.1f} {(traced or 0) / MIB:18.1f}  {'ok' if ok else 'MISMATCH'}")
            if not ok:
                failures.append(f"driver-held = reserved ({step})")
        held.clear()
        torch.cuda.empty_cache()

        child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            if child.stdout.readline().strip() != "ready":
                failures.append("OOM child started")
                raise RuntimeError("the OOM child did not start")
            # Listed by NVML (a context and 256 MiB) before it fails.
            until(lambda v: v is not None, lambda: metric(base, "vramd_process_driver_allocated_bytes", child.pid))
            child.stdin.write("go\n")
            child.stdin.flush()
            said = child.stdout.readline().strip()
            raised = time.monotonic()
            events = until(lambda found: found,
                           lambda: [e for e in get(base, "/api/v1/oom-events")["events"]
                                    if e.get("pid") == child.pid and e.get("hostname") == "driver-trace"])
            print(f"\n== driver trace: a real OOM in a process with no reporter (it said {said!r})")
            if not events:
                failures.append("OOM event from the driver trace")
            else:
                event = events[0]
                print(json.dumps({k: event.get(k) for k in ("requested_bytes", "device_free_bytes", "driver")}, indent=2))
                if not event.get("driver") or event.get("device_free_bytes") is None:
                    failures.append("OOM evidence")
            firing = until(lambda found: found,
                           lambda: [a for a in get(base, "/api/v1/alerts")["alerts"]
                                    if a["rule"] == "allocator_oom" and a.get("pid") == child.pid])
            print(f"allocator_oom for the child: {'firing' if firing else 'NOT FIRING'}, "
                  f"{time.monotonic() - raised:.2f} s after the child said {said!r} (polled every 50 ms)")
            if not firing:
                failures.append("allocator_oom for the OOM child")
        finally:
            child.kill()
            child.wait()
    except RuntimeError as error:
        print(f"driver trace: {error}")
    finally:
        stop_vramd(daemon)
    verdict = "PASS" if not failures else "FAIL (" + ", ".join(failures) + ")"
    print(f"driver trace verdict: {verdict}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
