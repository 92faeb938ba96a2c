#!/usr/bin/env python3
"""Web soak: the HTTP surface under the load a real node gives it, for as
long as asked (default 10 minutes), with nothing but the standard library.

It starts vramd on a simulated 8-GPU host (loopback only) and keeps, at
once:
  - an allocator reporter posting 10 reports a second over ONE kept-alive
    connection (as the Python client does): every answer that is not 202
    or 429, and every connection reset, is a loss;
  - a Prometheus-like scraper: GET /metrics with gzip every second on a
    kept-alive connection;
  - a liveness probe: GET /healthz on a new connection every second;
  - SSE_CLIENTS readers of /api/v1/alerts/stream that stay connected; a
    reader whose stream ends reconnects with Last-Event-ID, and that is
    counted as a reconnect;
  - an OOM event every 10 s with a 4 MiB snapshot uploaded, read back and
    compared byte for byte (the snapshot budget is small, so eviction runs);
and samples the daemon's RSS, threads and open descriptors every 5 s.

Fails (exit 1) on any loss, any failed probe or scrape, any reconnect, a
snapshot that does not read back equal, RSS after warm-up growing more than
10 %, or a daemon that does not exit 0 within 5 s of SIGTERM.

    scripts/soak_web.py [--binary target/release/vramd] [--seconds 600]
"""

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.values = {}

    def add(self, name, amount=1):
        with self.lock:
            self.values[name] = self.values.get(name, 0) + amount

    def get(self, name):
        with self.lock:
            return self.values.get(name, 0)


def report_body(pid, uuid):
    return json.dumps({
        "version": 1,
        "reporter": {"pid": pid, "hostname": "soak"},
        "at": "2026-01-01T00:00:00Z",
        "devices": [{"uuid": uuid, "index": 0, "memory_stats": {
            "allocated_bytes.all.current": 1 << 30,
            "reserved_bytes.all.current": 2 << 30,
            "active_bytes.all.current": 1 << 30,
            "inactive_split_bytes.all.current": 1 << 20,
            "num_alloc_retries": 0, "num_ooms": 0}}],
    })


def reporter(port, uuid, stop, counts):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    sent = 0
    while not stop.is_set():
        # Eight reporters, each under ingest.rate_limit.
        body = report_body(5000 + sent % 8, uuid)
        try:
            connection.request("POST", "/api/v1/allocator-reports", body,
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            if response.status == 202:
                counts.add("reports_accepted")
            elif response.status == 429:
                counts.add("reports_rate_limited")
            else:
                counts.add("report_losses")
                print(f"soak: report answered {response.status}", file=sys.stderr)
        except (OSError, http.client.HTTPException) as error:
            counts.add("report_losses")
            counts.add("report_reconnects")
            print(f"soak: report connection lost: {error!r}", file=sys.stderr)
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        sent += 1
        stop.wait(0.1)
    connection.close()


def scraper(port, stop, counts):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
        started = time.monotonic()
        try:
            connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            response = connection.getresponse()
            response.read()
            if response.status == 200:
                counts.add("scrapes_ok")
                counts.add("scrape_ms_total", int((time.monotonic() - started) * 1000))
            else:
                counts.add("scrape_failures")
        except (OSError, http.client.HTTPException) as error:
            counts.add("scrape_failures")
            print(f"soak: scrape connection lost: {error!r}", file=sys.stderr)
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        stop.wait(1.0)
    connection.close()


def prober(port, stop, counts):
    while not stop.is_set():
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            response.read()
            connection.close()
            counts.add("healthz_ok" if response.status == 200 else "healthz_failures")
        except (OSError, http.client.HTTPException):
            counts.add("healthz_failures")
        stop.wait(1.0)


def stream_reader(port, stop, counts):
    last_id = None
    first = True
    while not stop.is_set():
        if not first:
            counts.add("sse_reconnects")
        first = False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                request = "GET /api/v1/alerts/stream HTTP/1.1\r\nHost: soak\r\n"
                if last_id:
                    request += f"Last-Event-ID: {last_id}\r\n"
                sock.sendall((request + "\r\n").encode())
                # Keep-alive comments come every 15 s; wake up to see `stop`.
                sock.settimeout(1.0)
                pending = b""
                while not stop.is_set():
                    try:
                        chunk = sock.recv(65536)
                    except socket.timeout:
                        continue
                    if not chunk:
                        break
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        text = line.decode("utf-8", "replace").rstrip("\r")
                        if text.startswith("id: "):
                            last_id = text[4:]
                            counts.add("sse_events")
                        elif text in ("event: lagged", "event: reset"):
                            counts.add("sse_" + text[7:])
        except OSError as error:
            print(f"soak: stream ended: {error!r}", file=sys.stderr)
            stop.wait(0.5)


def oom_uploader(port, uuid, stop, counts):
    sequence = 0
    while not stop.wait(10.0):
        sequence += 1
        snapshot = os.urandom(4 << 20)
        event = json.dumps({
            "version": 1, "reporter": {"pid": 7000 + sequence, "hostname": "soak"},
            "at": "2026-01-01T00:00:00Z", "uuid": uuid, "index": 0,
            "requested_bytes": 1 << 30, "device_free_bytes": 100 << 20,
            "snapshot_path": f"/tmp/oom-{sequence}.pickle",
        })
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("POST", "/api/v1/oom-events", event,
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = json.loads(response.read() or b"{}")
            if response.status != 202:
                counts.add("oom_failures")
                print(f"soak: OOM event answered {response.status}: {answer}", file=sys.stderr)
                continue
            event_id = answer["id"]
            connection.request("PUT", f"/api/v1/oom-events/{event_id}/snapshot", snapshot,
                               {"Content-Type": "application/octet-stream"})
            response = connection.getresponse()
            response.read()
            if response.status != 201:
                counts.add("oom_failures")
                print(f"soak: snapshot upload answered {response.status}", file=sys.stderr)
                continue
            connection.request("GET", f"/api/v1/oom-events/{event_id}/snapshot")
            response = connection.getresponse()
            served = response.read()
            connection.close()
            if response.status == 200 and served == snapshot:
                counts.add("snapshots_round_tripped")
            else:
                counts.add("oom_failures")
                print(f"soak: snapshot {event_id} read back {response.status}, "
                      f"{len(served)} bytes", file=sys.stderr)
        except (OSError, http.client.HTTPException, ValueError, KeyError) as error:
            counts.add("oom_failures")
            print(f"soak: OOM round trip failed: {error!r}", file=sys.stderr)


def process_figures(pid):
    figures = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                figures[name] = int(value.split()[0])
            elif name == "Threads":
                figures[name] = int(value)
    figures["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default="target/release/vramd")
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--sse-clients", type=int, default=32)
    args = parser.parse_args()
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"soak: no binary at {args.binary} (cargo build --release)")

    port = free_port()
    work = tempfile.mkdtemp(prefix="vramd-soak-")
    snapshots = os.path.join(work, "snapshots")
    os.mkdir(snapshots, 0o700)
    env = dict(os.environ,
               VRAMD_INGEST__SNAPSHOT_DIR=snapshots,
               VRAMD_INGEST__MAX_SNAPSHOT_BYTES="32MiB",
               VRAMD_API__MAX_EVENT_STREAMS=str(args.sse_clients + 4),
               VRAMD_ANALYSIS__EVALUATION_INTERVAL="1s")
    log = open(os.path.join(work, "vramd.log"), "wb")
    daemon = subprocess.Popen(
        [args.binary, "--simulate", "multi-tenant", "--gpus", "8", "--speed", "60",
         "--listen", f"127.0.0.1:{port}"], env=env, stdout=log, stderr=log)
    try:
        return soak(args, port, daemon, work)
    finally:
        if daemon.poll() is None:
            daemon.kill()


def soak(args, port, daemon, work):
    for _ in range(100):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                break
        except OSError:
            pass
        time.sleep(0.1)
    else:
        sys.exit("soak: vramd not ready within 10 s")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.request("GET", "/api/v1/devices")
    uuid = json.loads(connection.getresponse().read())["devices"][0]["uuid"]

    stop = threading.Event()
    counts = Counts()
    workers = [
        threading.Thread(target=reporter, args=(port, uuid, stop, counts)),
        threading.Thread(target=scraper, args=(port, stop, counts)),
        threading.Thread(target=prober, args=(port, stop, counts)),
        threading.Thread(target=oom_uploader, args=(port, uuid, stop, counts)),
    ] + [threading.Thread(target=stream_reader, args=(port, stop, counts))
         for _ in range(args.sse_clients)]
    for worker in workers:
        worker.start()

    warm_up = args.seconds / 3
    started = time.monotonic()
    warm, late = [], []
    print("t_s rss_kib threads fds reports scrapes sse_events snapshots")
    while (elapsed := time.monotonic() - started) < args.seconds:
        if daemon.poll() is not None:
            stop.set()
            sys.exit(f"soak: vramd exited ({daemon.returncode}) at {elapsed:.0f} s")
        figures = process_figures(daemon.pid)
        (warm if elapsed < warm_up else late).append(figures["VmRSS"])
        print(f"{elapsed:.0f} {figures['VmRSS']} {figures['Threads']} {figures['fds']} "
              f"{counts.get('reports_accepted')} {counts.get('scrapes_ok')} "
              f"{counts.get('sse_events')} {counts.get('snapshots_round_tripped')}", flush=True)
        time.sleep(5)
    hwm = process_figures(daemon.pid)["VmHWM"]
    stop.set()
    for worker in workers:
        worker.join(timeout=15)

    daemon.send_signal(signal.SIGTERM)
    try:
        code = daemon.wait(timeout=5)
    except subprocess.TimeoutExpired:
        code = None

    summary = dict(counts.values)
    summary.update(seconds=args.seconds, sse_clients=args.sse_clients,
                   rss_kib_warm_up_max=max(warm), rss_kib_after_min=min(late),
                   rss_kib_after_max=max(late), vm_hwm_kib=hwm, exit_code=code)
    print("soak: " + json.dumps(summary, sort_keys=True))
    problems = [name for name in ("report_losses", "report_reconnects", "scrape_failures",
                                  "healthz_failures", "sse_reconnects", "oom_failures")
                if counts.get(name)]
    if max(late) > min(late) * 1.10:
        problems.append(f"RSS grew after warm-up: {min(late)} -> {max(late)} KiB")
    if counts.get("snapshots_round_tripped") == 0:
        problems.append("no snapshot round trip")
    if code != 0:
        problems.append(f"exit code after SIGTERM: {code}")
    if problems:
        print("soak: FAILED: " + ", ".join(problems), file=sys.stderr)
        print(f"soak: the daemon's log is in {work}/vramd.log", file=sys.stderr)
        return 1
    print("soak: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
