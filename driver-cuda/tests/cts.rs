//! The conformance suite (`ctest`) on CUDA: one test per case, named `cuda::<area>::<case>`, each
//! run in its own child process (a trapping kernel poisons the GPU for the rest of its process).
//!
//! The fixture is the driver's (`driver_cuda::cts`, feature `cts`, which `hal cts --device cuda`
//! runs too): its kernels are ctest's CUDA catalogue (`ctest::kernels::cuda`), CUDA C compiled to
//! PTX with NVRTC (through cudarc) once per process; it declares CUDA's faults sticky, so the fault
//! cases check the sticky contract (see `docs/conformance.md`), and that fault statuses name the
//! CUDA error.
//!
//! Where the CUDA driver library was missing at build time every test is ignored, with the reason
//! (see `build.rs`). Run anyway (`--include-ignored`) without a usable GPU, each test prints
//! `not run: cuda::<area>::<case>: CUDA not available: <reason>` on stderr and passes, or fails under
//! `HAL_REQUIRE_CUDA=1`. On the GPU machine (NVRTC found as `libnvrtc.so`, see `scripts/device/run.sh cts`):
//!
//! ```sh
//! HAL_REQUIRE_CUDA=1 cargo test -p timeline-hal-cuda --release --test cts -- --test-threads=4
//! HAL_REQUIRE_CUDA=1 cargo test -p timeline-hal-cuda --release --test cts cuda::dispatch::          # one area
//! CTEST_ISOLATE=0 HAL_REQUIRE_CUDA=1 cargo test -p timeline-hal-cuda --release --test cts -- --test-threads=1   # in-process
//! ```

mod common;

use ctest::Fixture;
use driver_cuda::cts::CtsOptions;

/// The fixture of `driver_cuda::cts`, its devices placed as [`ORDINAL_ENV`] and [`SPREAD_ENV`]
/// say. Where CUDA (or NVRTC) is not usable: that fixture, not available and naming the reason, or
/// a panic under `HAL_REQUIRE_CUDA=1`.
fn cuda_fixture() -> Fixture {
    let ordinal = match std::env::var(ORDINAL_ENV) {
        Ok(value) => value.parse().unwrap_or_else(|_| panic!("{ORDINAL_ENV}='{value}': expected a GPU ordinal")),
        Err(_) => 0,
    };
    let spread = std::env::var(SPREAD_ENV).is_ok_and(|v| v == "1");
    let fixture = driver_cuda::cts::fixture(CtsOptions { ordinal, spread });
    if let Some(notice) = fixture.unavailable()
        && common::cuda_required()
    {
        panic!("{}=1 but the CUDA CTS cannot run: {notice}", common::REQUIRE_CUDA_ENV);
    }
    fixture
}

/// The GPU ordinal the fixture's devices are made on (default 0; with `CTEST_CUDA_SPREAD=1`,
/// where each case's devices start).
const ORDINAL_ENV: &str = "CTEST_CUDA_ORDINAL";

/// `1`: the fixture spreads each case's devices over every GPU (`CtsOptions::spread`).
const SPREAD_ENV: &str = "CTEST_CUDA_SPREAD";

ctest::instantiate_cts!(
    cuda,
    cuda_fixture,
    #[cfg_attr(
        not(any(hal_cuda_found, hal_cuda_required)),
        ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
    )]
);
