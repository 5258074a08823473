//! The FFI layer: what stands between the driver and `cudarc`'s raw bindings, and imports nothing
//! from the rest of the crate.
//!
//! - `result.rs`: every CUDA driver and NCCL call, wrapped once (crate-private), and whether NVRTC
//!   opens (feature `cts`);
//! - `context.rs`: the device's primary [`Context`](context::Context), the `Bound` token the calls
//!   take as proof that it is current, and the pinned blocks it keeps;
//! - [`loader`]: the probe for `libcuda` before any cudarc call;
//! - `unloader.rs`: module unloads on a thread of their own.
//!
//! `context.rs` and `result.rs` import each other: binding a context is a driver call, and the calls
//! take the token binding makes.

pub(crate) mod context;
pub mod loader;
pub(crate) mod result;
pub(crate) mod unloader;

/// Every `.rs` file under the crate's `src/`, its rooms included: the tests that check where driver
/// calls are made read them all.
#[cfg(test)]
pub(crate) fn source_files() -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("the crate's sources") {
            let path = entry.expect("a source entry").path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    files
}
