//! Helpers shared by kvroute's cross-crate tests: where the shared data lives, and what a
//! test does when it is absent.
//!
//! Data files (real traces, hash vectors, engine event streams) are not part of the
//! repository: they are read from `../shared/data` beside the checkout, or from the folder
//! named by `KVROUTE_DATA_DIR`. When they are missing, a test skips with a printed notice,
//! except when the `CI` environment variable is set, where a missing file fails the test.

use std::path::PathBuf;

/// The data folder: `$KVROUTE_DATA_DIR`, else `<checkout>/../shared/data`.
pub fn data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KVROUTE_DATA_DIR") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data")
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
    if std::env::var_os("CI").is_some() {
        panic!(
            "shared data file {} is missing (CI is set, so this is a failure)",
            path.display()
        );
    }
    eprintln!(
        "NOTICE: skipping: shared data file {} not found (set KVROUTE_DATA_DIR to run this test)",
        path.display()
    );
    None
}
