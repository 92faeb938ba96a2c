#!/usr/bin/env python3
"""Which crates' code a running vramd keeps resident (issue 37, part 3).

Reads the daemon's executable mapping from /proc/PID/maps, asks
/proc/PID/pagemap (root) which of its pages are present in memory, and
attributes each present code page to the crates whose functions lie on it
(from `nm`'s symbol addresses and sizes; a page shared by several crates
is split by bytes). Prints, per crate group and per crate, the code in the
binary and the code resident in the process, largest first.

A symbol's crate is the first path segment of its demangled name
(`tokio::runtime::…`, `<hyper::proto::h1::… as …>::poll` -> tokio,
hyper); generic code instantiated in vramd's crate by another crate's
generics counts where the symbol's name puts it. The groups answer the
question the issue asks: what the TLS, gRPC and HTTP stacks cost.

Usage: scripts/code-pages.py PID [BINARY]   (BINARY defaults to the
process's /proc/PID/exe)
"""

import collections
import os
import re
import struct
import subprocess
import sys

PAGE = os.sysconf("SC_PAGE_SIZE")

# Crates by the stack they belong to; the rest is "other".
GROUPS = {
    "tls": {"rustls", "ring", "rustls_pki_types", "rustls_native_certs", "webpki",
            "rustls_webpki", "tokio_rustls", "untrusted", "bcrypt", "blowfish", "base64"},
    "grpc (kubernetes)": {"tonic", "prost", "tonic_prost", "h2", "tower", "hyper_util",
                          "hyper_timeout", "tokio_stream", "indexmap"},
    "http server": {"axum", "axum_core", "hyper", "http", "http_body", "http_body_util",
                    "tower_http", "httparse", "matchit", "async_compression", "flate2",
                    "miniz_oxide", "crc32fast"},
    "async runtime": {"tokio", "tokio_util", "mio", "futures_util", "futures_core",
                      "futures_channel", "futures_task", "parking_lot", "parking_lot_core"},
    "nvml": {"nvml_wrapper", "nvml_wrapper_sys", "libloading"},
    "serialization": {"serde", "serde_json", "serde_core", "toml", "toml_edit", "toml_parser",
                      "winnow", "ryu", "itoa", "schemars", "utoipa", "serde_path_to_error"},
    "logging": {"tracing", "tracing_core", "tracing_subscriber", "sharded_slab",
                "regex_automata", "regex_syntax", "regex"},
    "metrics": {"prometheus", "protobuf"},
    "vramd": {"vramd"},
    "std": {"std", "core", "alloc", "compiler_builtins", "hashbrown", "memchr",
            "gimli", "addr2line", "rustc_demangle", "miniz_oxide_std"},
}
GROUP_OF = {crate: group for group, crates in GROUPS.items() for crate in crates}

SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def crate_of(name: str) -> str:
    """The first path segment of a demangled symbol name."""
    name = name.lstrip("<&*( ")
    for prefix in ("dyn ", "mut ", "impl ", "const "):
        if name.startswith(prefix):
            name = name[len(prefix):].lstrip("<&*( ")
    match = SEGMENT.match(name)
    if not match or "::" not in name[match.end():match.end() + 2]:
        return "(c or unnamed)"
    return match.group(0)


def code_mapping(pid: int, binary: str):
    """(start, end, file offset) of the executable's r-x mapping."""
    real = os.path.realpath(binary)
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[1].startswith("r-x") and os.path.realpath(fields[5]) == real:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                return start, end, int(fields[2], 16)
    sys.exit(f"code-pages: no executable mapping of {real} in /proc/{pid}/maps")


def load_base(pid: int, binary: str) -> int:
    """Where the ELF's address 0 lies in the process (PIE): the lowest mapping of the file."""
    real = os.path.realpath(binary)
    with open(f"/proc/{pid}/maps") as maps:
        starts = [int(line.split("-")[0], 16) - int(line.split()[2], 16)
                  for line in maps
                  if len(line.split()) >= 6 and os.path.realpath(line.split()[5]) == real]
    return min(starts)


def present_pages(pid: int, start: int, end: int) -> set:
    """Page numbers (virtual) in [start, end) whose pagemap entry says present."""
    present = set()
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        pagemap.seek(start // PAGE * 8)
        data = pagemap.read((end - start) // PAGE * 8)
    for n, (entry,) in enumerate(struct.iter_unpack("<Q", data)):
        if entry >> 63 & 1:
            present.add(start // PAGE + n)
    return present


def symbols(binary: str):
    """(address, size, demangled name) of every sized text symbol."""
    out = subprocess.run(["nm", "-C", "--defined-only", "-S", binary],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[2] in ("t", "T", "W", "w"):
            yield int(parts[0], 16), int(parts[1], 16), parts[3]


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    pid = int(sys.argv[1])
    binary = sys.argv[2] if len(sys.argv) > 2 else f"/proc/{pid}/exe"
    start, end, _ = code_mapping(pid, binary)
    base = load_base(pid, binary)
    present = present_pages(pid, start, end)
    in_binary = collections.Counter()
    resident = collections.Counter()
    for address, size, name in symbols(binary):
        crate = crate_of(name)
        in_binary[crate] += size
        first, last = base + address, base + address + size
        page = first // PAGE
        while page * PAGE < last:
            if page in present:
                overlap = min(last, (page + 1) * PAGE) - max(first, page * PAGE)
                resident[crate] += max(overlap, 0)
            page += 1
    groups_binary = collections.Counter()
    groups_resident = collections.Counter()
    for crate in in_binary:
        group = GROUP_OF.get(crate, "other")
        groups_binary[group] += in_binary[crate]
        groups_resident[group] += resident[crate]
    kib = lambda n: f"{n / 1024:,.0f}"
    print(f"code mapping {kib(end - start)} KiB, resident {kib(len(present) * PAGE)} KiB "
          f"({len(present)} pages)")
    print(f"{'group':<20} {'in binary KiB':>14} {'resident KiB':>13}")
    for group, size in groups_binary.most_common():
        print(f"{group:<20} {kib(size):>14} {kib(groups_resident[group]):>13}")
    print()
    print(f"{'crate':<28} {'group':<20} {'in binary KiB':>14} {'resident KiB':>13}")
    for crate, size in resident.most_common(25):
        print(f"{crate:<28} {GROUP_OF.get(crate, 'other'):<20} {kib(in_binary[crate]):>14} "
              f"{kib(size):>13}")


if __name__ == "__main__":
    main()
