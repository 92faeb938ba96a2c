#!/usr/bin/env bash
# Soak: runs vramd on a simulated 8-GPU host (60x: an hour of history, the
# default retention, fills in the first minute) for a few minutes while
# scraping, posting allocator reports (good and bad) and injecting faults,
# and checks that the daemon never goes blind:
#   - sampling continues (the newest sample keeps advancing) at every check;
#   - /readyz is 200 at every check (nothing hangs here, so ready is true);
#   - RSS is flat after warm-up (second half within 10 % of the first);
#   - the faults were really injected and counted: the log pipe closes
#     after 64 KiB (vramd_log_lines_dropped_total > 0), the recording hits
#     a 1 MiB file-size limit (vramd_record_errors_total > 0), stray
#     SIGUSR1/SIGUSR2/SIGHUP every few seconds, malformed reports (400);
#   - SIGTERM at the end exits 0.
# Loopback only, bounded in time (DURATION seconds, default 180), and the
# daemon is killed on any exit.
#
#   scripts/soak.sh [BINARY] [DURATION]      (BINARY: target/release/vramd)
#
# Prints one line of figures per check and a summary; exits non-zero on
# the first failed expectation.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/bench-lib.sh

binary=${1:-target/release/vramd}
duration=${2:-180}
[ -x "$binary" ] || { echo "soak: no binary at $binary (cargo build --release)" >&2; exit 2; }
command -v curl >/dev/null || { echo "soak: curl is required" >&2; exit 2; }

work=$(mktemp -d)
pid=""
cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

port=$(free_port 19600)
url="http://127.0.0.1:$port"
# The daemon runs with a 1 MiB file-size limit (the recording fails once it
# reaches it; SIGXFSZ is ignored by vramd, so writes get EFBIG) and its
# stderr through `head -c 65536`, which closes the pipe after 64 KiB.
(
    ulimit -f 1024
    exec "$binary" --simulate multi-tenant --gpus 8 --speed 60 \
        --listen "127.0.0.1:$port" --log-format json --log-level debug \
        --record "$work/trace.ndjson"
) 2>&1 >/dev/null | head -c 65536 >"$work/log" &
sleep 0.5
pid=$(pgrep -n -f -- "--listen 127.0.0.1:$port" || true)
[ -n "$pid" ] || { echo "soak: vramd did not start" >&2; exit 1; }

fail() { echo "soak: FAILED: $*" >&2; exit 1; }
metric() { awk -v name="$1" '$1 == name { print $2 }' "$work/metrics"; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"; }

for _ in $(seq 100); do
    curl -fsS -o /dev/null "$url/readyz" 2>/dev/null && break
    sleep 0.1
done
curl -fsS -o /dev/null "$url/readyz" || fail "not ready within 10 s"

uuid=$(curl -fsS "$url/api/v1/devices" | grep -o '"uuid":"[^"]*"' | head -n 1 | cut -d'"' -f4)
good_report() {
    printf '{"version":1,"reporter":{"pid":%d,"hostname":"soak"},"at":"2026-01-01T00:00:00Z","devices":[{"uuid":"%s","index":0,"memory_stats":{"allocated_bytes.all.current":1024,"reserved_bytes.all.current":2048,"active_bytes.all.current":1024,"inactive_split_bytes.all.current":0,"num_alloc_retries":0,"num_ooms":0}}]}' "$1" "$uuid"
}
bad_report='{"version":1,"reporter":{"pid":1,"hostname":"soak"},"at":"2026-01-01T00:00:00Z","devices":[{"uuid":"'"$uuid"'","index":0,"memory_stats":{"num_ooms":1e300}}]}'

start=$(date +%s)
warmup=$((duration / 3))
checks=0
last_at=""
: >"$work/rss.warm" ; : >"$work/rss.late" ; : >"$work/scrape_ms"
echo "t_s rss_kib scrape_ms newest_sample readyz record_errors log_dropped"
while :; do
    now=$(date +%s)
    elapsed=$((now - start))
    [ "$elapsed" -ge "$duration" ] && break
    kill -0 "$pid" 2>/dev/null || fail "vramd exited at ${elapsed}s"
    scrape_ms=$(curl -fsS -o "$work/metrics" -w '%{time_total}' "$url/metrics" | awk '{ printf "%.1f", $1 * 1000 }')
    echo "$scrape_ms" >>"$work/scrape_ms"
    ready=$(curl -s -o /dev/null -w '%{http_code}' "$url/readyz")
    [ "$ready" = 200 ] || fail "/readyz answered $ready at ${elapsed}s: $(curl -s "$url/readyz")"
    [ "$(metric vramd_nvml_up)" = 1 ] || fail "vramd_nvml_up is not 1 at ${elapsed}s"
    # Device 0's own `at` is the first in the document.
    at=$(curl -fsS "$url/api/v1/devices" | grep -o '"at":"[^"]*"' | head -n 1 | cut -d'"' -f4)
    if [ -n "$last_at" ] && ! [[ "$at" > "$last_at" ]]; then
        fail "sampling stopped at ${elapsed}s: newest sample $at, before $last_at"
    fi
    last_at=$at
    code=$(good_report $((1000 + checks)) | curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @- "$url/api/v1/allocator-reports")
    [ "$code" = 202 ] || [ "$code" = 429 ] || fail "a good report got $code"
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$bad_report" "$url/api/v1/allocator-reports")
    [ "$code" = 400 ] || fail "a bad report got $code"
    case $((checks % 5)) in
        1) kill -USR1 "$pid" ;;
        2) kill -USR2 "$pid" ;;
        4) kill -HUP "$pid" ;;
    esac
    rss=$(rss_kib)
    if [ "$elapsed" -lt "$warmup" ]; then echo "$rss" >>"$work/rss.warm"; else echo "$rss" >>"$work/rss.late"; fi
    echo "$elapsed $rss $scrape_ms $at $ready $(metric vramd_record_errors_total) $(metric vramd_log_lines_dropped_total)"
    checks=$((checks + 1))
    sleep 1
done

record_errors=$(metric vramd_record_errors_total)
log_dropped=$(metric vramd_log_lines_dropped_total)
awk -v v="${record_errors:-0}" 'BEGIN { exit !(v > 0) }' || fail "the recording never failed: the fault was not injected"
awk -v v="${log_dropped:-0}" 'BEGIN { exit !(v > 0) }' || fail "no log line was dropped: the pipe never closed"
read -r warm_med warm_min warm_max < <(stats <"$work/rss.warm")
read -r late_med late_min late_max < <(stats <"$work/rss.late")
read -r scrape_med scrape_min scrape_max < <(stats <"$work/scrape_ms")
awk -v a="$late_max" -v b="$late_min" 'BEGIN { exit !(a <= b * 1.10) }' ||
    fail "RSS grew after warm-up: $late_min -> $late_max KiB"

kill -TERM "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "vramd still running 5 s after SIGTERM"
pid=""

echo "soak: passed: $checks checks over ${duration}s, 8 simulated GPUs at 60x (history rings full after the first minute)"
echo "soak: RSS KiB warm-up median $warm_med (max $warm_max); after warm-up min $late_min median $late_med max $late_max"
echo "soak: /metrics scrape ms median $scrape_med max $scrape_max"
echo "soak: faults counted: record errors $record_errors, log lines dropped $log_dropped; readiness 200 at every check"
