//! Decides whether the CUDA tests run by default in this build, so that a machine without CUDA
//! reports them as ignored (with the reason) instead of as passed.
//!
//! - `hal_cuda_found`: the CUDA driver library opened here, at build time. No device is needed.
//! - `hal_cuda_required`: `HAL_REQUIRE_CUDA=1` at build time; the tests then run (and fail where
//!   there is no usable GPU) even where the library is missing, so that variable can never be met
//!   by a run that quietly ignores everything.
//!
//! The tests carry `#[cfg_attr(not(any(hal_cuda_found, hal_cuda_required)), ignore = "...")]`. The
//! library is looked for again only when `HAL_REQUIRE_CUDA` or `LD_LIBRARY_PATH` change (or this
//! file does); after installing a driver, `touch driver-cuda/build.rs`.

/// The names the CUDA driver library goes by (the run-time probe tries more, through cudarc).
const LIBRARY_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so", "nvcuda.dll"];

/// Set to `1` where a GPU must be present: CUDA tests then fail instead of not running.
const REQUIRE_ENV: &str = "HAL_REQUIRE_CUDA";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(hal_cuda_found)");
    println!("cargo::rustc-check-cfg=cfg(hal_cuda_required)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed={REQUIRE_ENV}");
    println!("cargo::rerun-if-env-changed=LD_LIBRARY_PATH");

    let required = match std::env::var(REQUIRE_ENV).as_deref() {
        Ok("1") => true,
        Ok("0" | "") | Err(std::env::VarError::NotPresent) => false,
        Ok(other) => panic!("{REQUIRE_ENV}='{other}': expected 1 (a missing GPU fails the CUDA tests) or 0"),
        Err(std::env::VarError::NotUnicode(value)) => {
            panic!("{REQUIRE_ENV}={value:?}: expected 1 (a missing GPU fails the CUDA tests) or 0")
        }
    };
    if required {
        println!("cargo::rustc-cfg=hal_cuda_required");
    }
    if driver_library_opens() {
        println!("cargo::rustc-cfg=hal_cuda_found");
    }
}

fn driver_library_opens() -> bool {
    LIBRARY_NAMES.iter().any(|name| {
        // SAFETY: opening the driver library runs only its initialisers, which have no preconditions;
        // nothing is called through it.
        match unsafe { libloading::Library::new(*name) } {
            // Left loaded, as the driver does at run time: libcuda does not support being unloaded.
            Ok(library) => {
                std::mem::forget(library);
                true
            }
            Err(_) => false,
        }
    })
}
