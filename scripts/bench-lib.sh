# Shell functions shared by the benchmark scripts (sourced, not run).

# free_port PORT: the first port from PORT on that nothing listens on.
free_port() {
    local port=$1
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        port=$((port + 1))
    done
    echo "$port"
}

# median, min and max of the numbers on stdin, one per line.
stats() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "n/a n/a n/a"; exit }
        med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%s %s %s\n", med, v[1], v[NR] }'
}

# wrk_figures WRK_OUTPUT PREFIX: appends the run's req/s to PREFIX.rps and
# its p50 and p99 latencies, normalised to ms (wrk prints us, ms or s), to
# PREFIX.p50 and PREFIX.p99.
wrk_figures() {
    local out=$1 prefix=$2 q
    awk '/^Requests\/sec:/ { print $2 }' "$out" >>"$prefix.rps"
    for q in 50 99; do
        awk -v q="$q%" '$1 == q { v = $2
            if (v ~ /us$/) v = v / 1000; else if (v ~ /ms$/) v = v + 0; else if (v ~ /s$/) v = v * 1000
            print v }' "$out" >>"$prefix.p$q"
    done
}

# stop_daemon: stops the daemon whose pid is in PID (TERM, then KILL after
# 5 s), reaps it and clears PID. Safe to call when none runs.
stop_daemon() {
    if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
        kill -TERM "$PID" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
    PID=""
}
