//! The example calculator plugin, built in release into a target directory
//! of the benchmarks' own (so a benchmark never waits on the outer cargo's
//! build lock). Shared by the benchmarks that call a plugin tool.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the calculator plugin; the path of its library.
pub fn calculator() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = root.join("target/plugin-bench");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "sa-plugin-calculator",
            "--target-dir",
        ])
        .arg(&target)
        .status()
        .expect("cargo builds the calculator plugin");
    assert!(status.success(), "building the calculator plugin failed");
    target.join("release/libsa_plugin_calculator.so")
}
