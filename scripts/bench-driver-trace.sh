#!/usr/bin/env bash
# The driver trace's overhead per traced call (issue 33: at most 2 us per
# allocation call, nothing on calls that are not traced): a C loop over the
# fake libcuda, untraced then traced (crates/driver-trace/examples/overhead.rs).
# Needs root (or CAP_SYS_ADMIN + CAP_SYS_PTRACE) and cc.
#   scripts/bench-driver-trace.sh [ITERATIONS]      (default 200000)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
iterations="${1:-200000}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cargo build --quiet --release -p fake-cuda --lib
cp target/release/libcuda_fake.so "$work/libcuda.so.1"
echo '{"devices": [{}]}' > "$work/scenario.json"
cc -O2 -o "$work/overhead" crates/driver-trace/examples/overhead.c -ldl
cargo run --quiet --release -p driver-trace --example overhead -- \
    "$work/overhead" "$work/libcuda.so.1" "$work/scenario.json" "$iterations"
