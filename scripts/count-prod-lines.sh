#!/usr/bin/env bash
# Counts production lines under src/: every line of every .rs file, less
# test files (tests.rs, *_tests.rs, tests_*.rs, anything under a tests/
# folder) and less each `#[cfg(test)]` item (a `mod … { … }` block is
# skipped to its closing brace). Blank and comment lines count: this is
# "what a reader has to read", the figure issue 12 asks for.
#   scripts/count-prod-lines.sh          -> total
#   scripts/count-prod-lines.sh --files  -> per file, then the total
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
per_file=0
[ "${1:-}" = "--files" ] && per_file=1
total=0
while IFS= read -r file; do
    case "$file" in
        */tests/*|*/tests.rs|*_tests.rs|*/tests_*.rs) continue ;;
    esac
    n=$(awk '
        skip_next && /^[[:space:]]*mod [a-z_0-9]+;/ { skip_next = 0; next }
        skip_next && /\{[[:space:]]*$/ { skip_next = 0; depth = 1; next }
        depth > 0 {
            opens = gsub(/\{/, "{"); closes = gsub(/\}/, "}")
            depth += opens - closes
            next
        }
        /^[[:space:]]*#\[cfg\(test\)\][[:space:]]*$/ { skip_next = 1; next }
        { count++ }
        END { print count + 0 }
    ' "$file")
    total=$((total + n))
    [ "$per_file" = 1 ] && printf '%6d %s\n' "$n" "$file"
done < <(find src -name '*.rs' | sort)
echo "$total production lines under src/"
