#!/usr/bin/env bash
# Compiles driver_trace.bpf.c into driver_trace.bpf.o (committed) with the
# exact flags tests/object.rs uses to check that the two match.
#   crates/driver-trace/bpf/build.sh [OUTPUT]
# Needs clang and libbpf's headers (Debian: clang llvm libbpf-dev).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(realpath -m "${1:-$here/driver_trace.bpf.o}")"
# From the source's own folder, by relative path: the object records the
# source's name, and must not depend on where the tree or the caller is.
cd "$here"
# -g: BTF, which describes the maps to the loader.
clang -target bpf -O2 -g -D__TARGET_ARCH_x86 \
  -fdebug-compilation-dir=. -fno-ident \
  -I/usr/include/x86_64-linux-gnu \
  -c driver_trace.bpf.c -o "$out"
llvm-strip -g --keep-section=.BTF --keep-section=.BTF.ext "$out" 2>/dev/null || true
clang --version | head -1 > "${out%.o}.clang-version"
