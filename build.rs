//! Embeds the git revision for `vramd_build_info{revision}`; "unknown" when
//! the source is not a git checkout or git is missing.
//!
//! The variable must not start with `VRAMD_`: cargo also sets it in the
//! environment of `cargo run` and `cargo test`, and every `VRAMD_*`
//! variable is read as a configuration key.

use std::process::Command;

fn main() {
    let revision = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=BUILD_GIT_REVISION={revision}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs");
}
