#!/usr/bin/env bash
# Measures what the secure HTTP surface costs, on the release daemon:
#   (a) /metrics scrape latency p50/p99 and req/s with wrk, plain HTTP
#       against TLS 1.3 with basic auth (the credential cache warm), on the
#       same simulated host (multi-tenant, 8 GPUs), gzip asked for as
#       Prometheus does;
#   (b) the daemon's CPU per full TLS handshake: wrk with `Connection:
#       close` on /healthz, so every request is a new connection, TLS
#       against plain; the difference of the daemon's CPU time per request
#       is the handshake (ECDSA P-256 certificate, TLS 1.3).
# Prints a summary; docs/performance.md records the figures.
#
# Everything binds 127.0.0.1, every wait is bounded, and the daemon is
# killed on exit. Tunables (environment): PORT (first port tried, 19577),
# WRK_SECONDS (10), WRK_CONNECTIONS (2), WRK_REPEATS (3), BCRYPT_COST (10),
# SKIP_BUILD=1 to use the existing target/release/vramd.
# Needs curl, wrk and openssl; python3 with the `bcrypt` module, or
# htpasswd, for the password hash (installs neither).

set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

PORT=${PORT:-19577}
WRK_SECONDS=${WRK_SECONDS:-10}
WRK_CONNECTIONS=${WRK_CONNECTIONS:-2}
WRK_REPEATS=${WRK_REPEATS:-3}
BCRYPT_COST=${BCRYPT_COST:-10}
BIN=target/release/vramd
WORK=$(mktemp -d)
PID=""
PASSWORD="bench secret"

log() { printf '[bench-web] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

cleanup() { stop_daemon; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

for tool in curl wrk openssl; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "cargo build --release"
    cargo build --release --quiet
fi
[[ -x "$BIN" ]] || die "$BIN not found"

bcrypt_hash() {
    if python3 -c 'import bcrypt' 2>/dev/null; then
        python3 -c 'import bcrypt, sys
print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(int(sys.argv[2]))).decode())' \
            "$PASSWORD" "$BCRYPT_COST"
    elif command -v htpasswd >/dev/null; then
        htpasswd -nbBC "$BCRYPT_COST" bench "$PASSWORD" | cut -d: -f2
    else
        die "need python3's bcrypt module or htpasswd for the password hash"
    fi
}

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj /CN=localhost -addext 'subjectAltName=DNS:localhost,IP:127.0.0.1' \
    -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
cat >"$WORK/web.yml" <<EOF
tls_server_config:
  cert_file: $WORK/cert.pem
  key_file: $WORK/key.pem
  min_version: TLS13
basic_auth_users:
  bench: $(bcrypt_hash)
EOF
AUTH="Authorization: Basic $(printf 'bench:%s' "$PASSWORD" | base64)"

# start_daemon SCHEME ARGS...: starts vramd on the simulator; waits until
# /readyz answers over SCHEME.
start_daemon() {
    local scheme=$1
    shift
    PORT=$(free_port "$PORT")
    ADDR="127.0.0.1:$PORT"
    URL="$scheme://$ADDR"
    env -u VRAMD_SERVER__LISTEN "$BIN" --config config/vramd.toml --log-level warn \
        --listen "$ADDR" --simulate multi-tenant --gpus 8 "$@" >"$WORK/daemon.log" 2>&1 &
    PID=$!
    for _ in $(seq 200); do
        if curl -skf --max-time 1 -H "$AUTH" "$URL/readyz" >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/daemon.log" >&2; die "vramd exited"; }
        sleep 0.1
    done
    die "vramd not ready on $URL within 20 s"
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; }
requests() { awk '/ requests in / { print $1 }' "$1"; }

# scrape LABEL: wrk on /metrics, WRK_REPEATS runs; prints the medians.
scrape() {
    local label=$1
    : >"$WORK/s.rps"
    : >"$WORK/s.p50"
    : >"$WORK/s.p99"
    for _ in $(seq "$WRK_REPEATS"); do
        timeout $((WRK_SECONDS + 20)) wrk -t1 -c"$WRK_CONNECTIONS" -d"${WRK_SECONDS}s" \
            --timeout 5s --latency -H "$AUTH" -H 'Accept-Encoding: gzip' "$URL/metrics" \
            >"$WORK/wrk.out"
        grep -q 'Non-2xx' "$WORK/wrk.out" && { cat "$WORK/wrk.out" >&2; die "non-2xx"; }
        wrk_figures "$WORK/wrk.out" "$WORK/s"
    done
    read -r rps _ _ < <(stats <"$WORK/s.rps")
    read -r p50 _ _ < <(stats <"$WORK/s.p50")
    read -r p99 _ _ < <(stats <"$WORK/s.p99")
    printf '%-28s p50 %7.2f ms  p99 %7.2f ms  %8.0f req/s\n' "$label" "$p50" "$p99" "$rps"
}

# handshakes LABEL: wrk with a new connection per request on /healthz;
# prints the daemon's CPU per request in microseconds.
handshakes() {
    local label=$1 before after count
    before=$(cpu_ticks)
    timeout $((WRK_SECONDS + 20)) wrk -t1 -c"$WRK_CONNECTIONS" -d"${WRK_SECONDS}s" \
        --timeout 5s -H 'Connection: close' "$URL/healthz" >"$WORK/wrk.out"
    after=$(cpu_ticks)
    count=$(requests "$WORK/wrk.out")
    local ticks_per_second
    ticks_per_second=$(getconf CLK_TCK)
    awk -v t=$((after - before)) -v n="$count" -v hz="$ticks_per_second" -v l="$label" \
        'BEGIN { printf "%-28s %8d connections  %7.1f us daemon CPU each\n", l, n, t / hz / n * 1e6 }'
}

log "(a) /metrics: plain HTTP"
start_daemon http
sleep 3
scrape "plain HTTP"
handshakes "plain, new connection" | tee "$WORK/plain.cpu"
stop_daemon

log "(a) /metrics: TLS 1.3 + basic auth"
start_daemon https --web.config.file "$WORK/web.yml"
sleep 3
scrape "TLS 1.3 + basic auth"
handshakes "TLS, new connection" | tee "$WORK/tls.cpu"
stop_daemon

awk 'FNR == 1 { v[FILENAME] = $(NF - 4) } END {
    for (f in v) if (f ~ /tls/) t = v[f]; else p = v[f]
    printf "full TLS handshake: %.1f us of daemon CPU (TLS minus plain per connection)\n", t - p }' \
    "$WORK/plain.cpu" "$WORK/tls.cpu"
