#!/usr/bin/env python3
"""Time from an OOM event POST to allocator_oom firing (issue 32, item 1).

Usage: scripts/bench-oom-latency.py VRAMD_BINARY EVENTS

Starts vramd simulating one GPU of steady inference with a 30 s
analysis.evaluation_interval on 127.0.0.1:19477, posts EVENTS OOM events
0.2 s apart and polls GET /api/v1/alerts?rule=allocator_oom every 5 ms until
the alert names the event; prints p50 and max. A speed figure, measured,
not asserted (tests/oom.rs asserts only that the tick is not waited for).
"""
import json, subprocess, sys, time, urllib.request, os
binary = sys.argv[1]
env = dict(os.environ, VRAMD_ANALYSIS__EVALUATION_INTERVAL="30s")
port = "19477"
proc = subprocess.Popen([binary, "--simulate", "steady-inference", "--gpus", "1", "--listen", f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
base = f"http://127.0.0.1:{port}"
def get(path):
    return json.load(urllib.request.urlopen(base + path))
try:
    for _ in range(200):
        try:
            if urllib.request.urlopen(base + "/readyz").status == 200: break
        except Exception: pass
        time.sleep(0.05)
    dev = get("/api/v1/devices/0")
    uuid, pid = dev["uuid"], dev["processes"][0]["pid"]
    latencies = []
    for n in range(int(sys.argv[2])):
        host = f"bench-{n}"
        body = json.dumps({"version": 1, "reporter": {"pid": pid, "hostname": host}, "at": "2026-01-01T00:00:00.000Z",
            "uuid": uuid, "index": 0, "requested_bytes": 1 << 30, "device_free_bytes": 100 << 20}).encode()
        before = len(get("/api/v1/oom-events")["events"])
        req = urllib.request.Request(base + "/api/v1/oom-events", data=body, headers={"Content-Type": "application/json"})
        start = time.monotonic()
        urllib.request.urlopen(req)
        while True:
            alerts = get("/api/v1/alerts?rule=allocator_oom")["alerts"]
            firing = [a for a in alerts if a["state"] == "firing" and f"OOM event {n + 1}" in a["description"]]
            if firing: break
            if time.monotonic() - start > 40: break
            time.sleep(0.005)
        latencies.append(time.monotonic() - start)
        time.sleep(0.2)
    latencies.sort()
    print("events", len(latencies), "p50 %.3f s" % latencies[len(latencies)//2], "max %.3f s" % latencies[-1])
finally:
    proc.terminate(); proc.wait()
