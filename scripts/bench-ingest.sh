#!/usr/bin/env bash
# Allocator report ingestion on loopback (issue 5 figures):
#   1. throughput: wrk POSTs full reports (122-key memory_stats, from the
#      fixture) to /api/v1/allocator-reports for 10 s from 1000 rotating
#      reporters;
#   2. memory per tracked reporter: RSS growth after 10 000 distinct
#      reporters have posted once.
# Needs wrk (Debian package `wrk`; installed when missing) and python3.
# Everything binds 127.0.0.1; the daemon is killed on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet
work="$(mktemp -d)"
daemon=""
cleanup() { [ -n "$daemon" ] && kill "$daemon" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

port=$((20000 + RANDOM % 20000))
VRAMD_INGEST__RATE_LIMIT=1000 VRAMD_INGEST__MAX_REPORTERS=100000 VRAMD_INGEST__TTL=1h \
    target/release/vramd --simulate idle --gpus 1 --listen "127.0.0.1:$port" --log-level warn &
daemon=$!
for _ in $(seq 1 100); do curl -sf "127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done

python3 - "$work/report.lua" <<'PY'
import datetime, json, sys
NOW = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
stats = json.load(open("tests/fixtures/memory_stats/pytorch-2-documented-keys.json"))["memory_stats"]
body = json.dumps({"version": 1, "reporter": {"pid": 0, "hostname": "bench"}, "at": NOW,
                   "devices": [{"uuid": "GPU-00000000-0000-0000-0000-000000000000", "index": 0, "memory_stats": stats}]})
head, tail = body.split('"pid": 0', 1)
lua = f"""
counter = 0
request = function()
  counter = counter + 1
  local body = [[{head}]] .. '"pid": ' .. (counter % 1000) .. [[{tail}]]
  return wrk.format("POST", "/api/v1/allocator-reports", {{["Content-Type"] = "application/json"}}, body)
end
"""
open(sys.argv[1], "w").write(lua)
PY
echo "== throughput: wrk -t2 -c8 -d10s, full reports, 1000 reporters"
wrk -t2 -c8 -d10s --latency -s "$work/report.lua" "http://127.0.0.1:$port" | grep -E "Requests/sec|Latency|50%|99%|Non-2xx"

rss() { awk '/VmRSS/ {print $2}' "/proc/$daemon/status"; }
before=$(rss)
python3 - "$port" <<'PY'
import datetime, json, sys, urllib.request
port = sys.argv[1]
NOW = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
stats = json.load(open("tests/fixtures/memory_stats/pytorch-2-documented-keys.json"))["memory_stats"]
for pid in range(100000, 110000):
    body = json.dumps({"version": 1, "reporter": {"pid": pid, "hostname": "bench"}, "at": NOW,
                       "devices": [{"uuid": "GPU-00000000-0000-0000-0000-000000000000", "index": 0, "memory_stats": stats}]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/allocator-reports", data=body,
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=5).read()
PY
after=$(rss)
echo "== memory: RSS ${before} KiB -> ${after} KiB after 10000 more reporters: $(( (after - before) * 1024 / 10000 )) bytes per reporter"
