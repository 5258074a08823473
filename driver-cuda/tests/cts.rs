//! The conformance suite (`ctest`) on CUDA: one test per case, named `cuda::<area>::<case>`, each
//! run in its own child process (a trapping kernel poisons the GPU for the rest of its process).
//!
//! The kernels are ctest's CUDA catalogue (`ctest::kernels::cuda`): CUDA C compiled to PTX with NVRTC
//! (through cudarc) once per process. The fixture declares CUDA's faults sticky, so the fault cases
//! check the sticky contract (see `docs/conformance.md`), and that fault statuses name the CUDA error.
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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use ctest::Fixture;
use driver_cuda::Context;
use hal::driver::Driver;

/// In a process that runs cases (a child, or every case with `CTEST_ISOLATE=0`), keeps the GPU's
/// primary context retained for the process, so the devices of consecutive cases do not each create
/// and destroy it. Devices still get their own streams, events, pools and threads.
fn keep_primary_context() {
    static CONTEXT: OnceLock<Option<Arc<Context>>> = OnceLock::new();
    if !ctest::isolate::isolation_wanted() {
        CONTEXT.get_or_init(|| Context::retain(0).ok());
    }
}

fn cuda_fixture() -> Fixture {
    if let Err(reason) = driver_cuda::CudaDriver::default().probe() {
        let notice = format!("CUDA not available: {reason}");
        if common::cuda_required() {
            panic!("{}=1 but the CUDA CTS cannot run: {notice}", common::REQUIRE_CUDA_ENV);
        }
        return Fixture::not_available(driver_cuda::DRIVER_NAME, notice);
    }
    keep_primary_context();
    let mut registry = hal::Registry::new();
    driver_cuda::register(&mut registry);
    let fixture = Fixture::from_registry(registry.clone(), driver_cuda::DRIVER_NAME, common::ctest_catalogue())
        .with_sticky_faults()
        .with_fault_marker("CUDA_ERROR_");
    let gpus = driver_cuda::loader::probe().map_or(1, |p| p.device_count);
    let first: usize = std::env::var(ORDINAL_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    if std::env::var(SPREAD_ENV).is_ok_and(|v| v == "1") && gpus > 1 {
        // A case's devices go round the GPUs (its first on GPU 0 in a fresh process), so the
        // multi-device and collective cases cross GPUs; NCCL takes one rank per GPU.
        let next = Arc::new(AtomicUsize::new(0));
        let fixture = fixture
            .with_factory(move || {
                registry.create_device(driver_cuda::DRIVER_NAME, next.fetch_add(1, Ordering::Relaxed) % gpus)
            })
            .with_max_ranks(gpus)
            .with_channels_dying_on_abandon();
        // The embedder's choice of lazy connection (see `driver_cuda::collective::connects_lazily`)
        // blocks the peers of an abandoned first collective inside NCCL, where no abort reaches them.
        if driver_cuda::collective::connects_lazily() {
            fixture.with_abandon_blocking_peers(
                "the process set NCCL_RUNTIME_CONNECT to other than 0, so NCCL connects ranks at their first \
                 collective and the peers of an abandoned one stay blocked inside NCCL",
            )
        } else {
            fixture
        }
    } else {
        // Every device of this fixture is on one GPU, and NCCL takes one rank per GPU.
        fixture.with_factory(move || registry.create_device(driver_cuda::DRIVER_NAME, first)).with_max_ranks(1)
    }
}

/// The GPU ordinal the fixture's devices are made on (default 0; with `CTEST_CUDA_SPREAD=1`,
/// where each case's devices start).
const ORDINAL_ENV: &str = "CTEST_CUDA_ORDINAL";

/// `1`: the fixture spreads each case's devices over every GPU (see `cuda_fixture`).
const SPREAD_ENV: &str = "CTEST_CUDA_SPREAD";

ctest::instantiate_cts!(
    cuda,
    cuda_fixture,
    #[cfg_attr(
        not(any(hal_cuda_found, hal_cuda_required)),
        ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
    )]
);
