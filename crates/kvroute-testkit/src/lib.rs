//! Test support shared by kvroute's crates (a dev-dependency of each; it depends on no
//! kvroute crate, so none of them has a dependency loop through it): where the shared data
//! lives, and what a test does when it is absent.
//!
//! Data files (real traces, hash vectors, engine event streams) are not part of the
//! repository: they are read from `../shared/data` beside the checkout, or from the folder
//! named by `KVROUTE_DATA_DIR` (an absolute path: tests run in their package's folder). When
//! they are missing, a test skips with a notice written straight to the terminal's stderr
//! (past the test harness's output capture), except when the `CI` environment variable is
//! set to anything but empty, `0` or `false`, where a missing file fails the test.
//!
//! [`stream`] reads the real engine KV event streams of the shared data; [`msgpack`] builds
//! msgpack inputs; [`SplitMix64`] is the seeded generator of test and benchmark inputs;
//! [`heap`] counts live heap bytes for memory tests and runs each case in its own process.

pub mod heap;
pub mod msgpack;
pub mod rng;
pub mod stream;

pub use rng::SplitMix64;

use std::io::Write;
use std::path::PathBuf;

/// Whether `CI` is set to a true-ish value (anything but empty, `0`, `false`).
pub fn in_ci() -> bool {
    std::env::var("CI")
        .map(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"))
        .unwrap_or(false)
}

/// The data folder: `$KVROUTE_DATA_DIR`, else `<checkout>/../shared/data`.
pub fn data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KVROUTE_DATA_DIR") {
        return PathBuf::from(dir);
    }
    checkout_root().join("../shared/data")
}

/// The checkout's root: this crate is `<checkout>/crates/kvroute-testkit`.
fn checkout_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The path of `relative` inside the data folder, or `None` (after printing a notice) when
/// it is missing and `CI` is not set.
///
/// # Panics
/// When the file is missing and the `CI` environment variable is set.
pub fn data_file(relative: &str) -> Option<PathBuf> {
    let path = data_dir().join(relative);
    if path.exists() {
        return Some(path);
    }
    if in_ci() {
        panic!(
            "shared data file {} is missing (CI is set, so this is a failure)",
            path.display()
        );
    }
    let hint = if std::env::var_os("KVROUTE_DATA_DIR").is_some() {
        "KVROUTE_DATA_DIR is set but does not hold it"
    } else {
        "put the shared data beside the checkout or set KVROUTE_DATA_DIR to run this test"
    };
    // Written to the process's stderr directly: `eprintln!` would be captured by the test
    // harness and never shown for a passing (skipped) test.
    let _ = writeln!(
        std::io::stderr().lock(),
        "NOTICE: skipping: shared data file {} not found ({hint})",
        path.display()
    );
    None
}

#[cfg(test)]
mod tests {
    use super::checkout_root;

    #[test]
    fn checkout_root_is_the_workspace_root() {
        let manifest = std::fs::read_to_string(checkout_root().join("Cargo.toml"))
            .expect("the checkout's Cargo.toml");
        assert!(
            manifest.contains("[workspace]"),
            "{} is not the workspace root",
            checkout_root().display()
        );
    }
}
