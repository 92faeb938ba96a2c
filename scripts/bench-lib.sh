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

# fake_nvml_scenario GPUS PER_GPU SLOT_BYTES [HANG_GPU]: a scenario for the
# fake libnvidia-ml.so (tests/fake-nvml): GPUS H100-like devices, each with
# PER_GPU compute processes taken in order from the SLEEPERS array (real
# PIDs, so /proc reads are real), process N using (N + 1) * SLOT_BYTES;
# device HANG_GPU (none by default) sleeps 10 min in its memory call.
# With MOVING_STEP_BYTES set (environment), every process's usage moves on
# every call by 0-31 steps of that size (the moving-process scenario).
fake_nvml_scenario() {
    local gpus=$1 per_gpu=$2 slot_bytes=$3 hang=${4:--1}
    local gpu slot pid sep devices="" procs faults moving=""
    if [[ -n "${MOVING_STEP_BYTES:-}" ]]; then
        moving=", \"moving_step_bytes\": $MOVING_STEP_BYTES"
    fi
    for ((gpu = 0; gpu < gpus; gpu++)); do
        procs=""
        for ((slot = 0; slot < per_gpu; slot++)); do
            pid=${SLEEPERS[$((gpu * per_gpu + slot))]}
            sep=${procs:+,}
            procs+="$sep{\"pid\": $pid, \"used_bytes\": $(((slot + 1) * slot_bytes))$moving}"
        done
        faults=""
        if ((gpu == hang)); then
            faults=', "faults": {"sleep_ms": {"nvmlDeviceGetMemoryInfo_v2": 600000}}'
        fi
        sep=${devices:+,}
        devices+="$sep
    {\"uuid\": \"GPU-8f6a2c1e-0000-4d7b-9a1e-3b5c7d9e1f2$gpu\",
     \"memory\": {\"total_bytes\": 85899345920, \"reserved_bytes\": 536870912,
                \"used_bytes\": 42949672960},
     \"utilization\": {\"gpu\": 87, \"memory\": 41},
     \"processes\": {\"compute\": [$procs], \"graphics\": [], \"mps\": []},
     \"temperature_c\": 64, \"power_usage_mw\": 412000, \"power_limit_mw\": 700000,
     \"clocks\": {\"graphics_mhz\": 1980, \"sm_mhz\": 1980, \"memory_mhz\": 2619,
                \"video_mhz\": 1755},
     \"throttle_reasons\": 4, \"persistence_mode\": true, \"compute_mode\": \"default\",
     \"bar1\": {\"total_bytes\": 137438953472, \"used_bytes\": 8388608}$faults}"
    done
    printf '{"devices": [%s\n]}\n' "$devices"
}

# Builds the release daemon and the fake libnvidia-ml.so unless
# SKIP_BUILD=1, copies the library into the folder $1 (a concurrent cargo
# build cannot replace a private copy mid-run) and prints the copy's path.
# Uses the caller's `log` and `die`.
release_daemon_and_fake_nvml() {
    local fake=target/release/libnvidia_ml_fake.so
    if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
        log "cargo build --release --bin vramd; cargo build -p fake-nvml --release --lib"
        cargo build --release --bin vramd --quiet >&2
        cargo build -p fake-nvml --release --lib --quiet >&2
    fi
    [[ -f "$fake" ]] || die "$fake not found"
    cp "$fake" "$1/libnvidia-ml.so.1"
    printf '%s\n' "$1/libnvidia-ml.so.1"
}
