#!/usr/bin/env bash
# What `vramd check-config` prints, and its exit status, in fixed cases
# (no file; config/vramd.toml; file, environment and flags together;
# environment and flags without a file), one file per case in OUTDIR.
# For a change to the configuration machinery, whose printed file must
# stay byte-identical: run it with the binary before and after, then
#   diff -r BEFORE AFTER
# Error messages are pinned by `cargo test --test golden` instead.
#   scripts/config-snapshot.sh OUTDIR [VRAMD_BINARY]   (default target/debug/vramd)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:?usage: scripts/config-snapshot.sh OUTDIR [VRAMD_BINARY]}
bin=$(realpath "${2:-target/debug/vramd}")
sample=$(realpath config/vramd.toml)
mkdir -p "$out"
snap() {
    local name=$1; shift
    # A clean environment, and a directory without config/vramd.toml, so
    # only the case's own layers count.
    (cd / && env -i "$@" >"$out/$name.out" 2>"$out/$name.err"; echo $? >"$out/$name.rc") || true
}
snap defaults "$bin" check-config
snap sample "$bin" check-config --config "$sample"
snap layers VRAMD_SAMPLER__FAST_INTERVAL=100ms VRAMD_ALERTS__MEMORY_HIGH__THRESHOLD=0.95 \
    VRAMD_NOTIFY__WEBHOOK_URL=http://hooks:1 "$bin" check-config --config "$sample" \
    --listen 127.0.0.1:1234 --gpus 3 --seed 7 --speed 2.5 --simulate leak --log-level debug \
    --require-gpu
snap no-file VRAMD_HISTORY__RETENTION=2h VRAMD_NVML__XID_EVENTS=false \
    VRAMD_ALERTS__ALLOCATOR_FRAGMENTATION_HIGH__MIN_RESERVED=3GiB \
    VRAMD_SIMULATOR__SEED=18446744073709551615 "$bin" check-config \
    --replay /tmp/trace.ndjson --record /tmp/out.ndjson --log-format json
snap refused VRAMD_SAMPLER__FAST_INTERVALL=1s "$bin" check-config
echo "check-config outputs in $out"
