//! The committed BPF object is what its committed source compiles to: the
//! test rebuilds it with `bpf/build.sh` and compares, byte for byte, when
//! the clang that built the committed one is present (any other version
//! emits different, equally valid bytes, so it is skipped, saying why).

// A test crate: a panic here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_types)]

use std::path::Path;
use std::process::Command;

#[test]
fn the_committed_object_matches_its_source() {
    let bpf = Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf");
    let recorded = std::fs::read_to_string(bpf.join("driver_trace.bpf.clang-version")).unwrap();
    let present = Command::new("clang").arg("--version").output();
    let Some(present) = present.ok().filter(|output| output.status.success()) else {
        eprintln!("SKIP: no clang here; the object was built by {}", recorded.trim());
        return;
    };
    let present = String::from_utf8_lossy(&present.stdout);
    if present.lines().next().map(str::trim) != Some(recorded.trim()) {
        eprintln!("SKIP: clang here is not {} (that built the object)", recorded.trim());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rebuilt = dir.path().join("driver_trace.bpf.o");
    let status = Command::new(bpf.join("build.sh")).arg(&rebuilt).status().unwrap();
    assert!(status.success(), "bpf/build.sh failed");
    let committed = std::fs::read(bpf.join("driver_trace.bpf.o")).unwrap();
    assert!(
        std::fs::read(&rebuilt).unwrap() == committed,
        "bpf/driver_trace.bpf.o is stale: run crates/driver-trace/bpf/build.sh and commit it"
    );
    assert_eq!(committed, driver_trace::OBJECT, "the crate embeds the committed object");
}
