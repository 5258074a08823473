//! The contract fuzzer (`ctest::fuzz`) on CUDA: the programs cpu-sim runs (2 devices x 4 queues,
//! both on one GPU), checked against the same model, with ctest's kernel catalogue compiled to PTX
//! with NVRTC instead of native closures. The completion mode is the driver's: `HAL_CUDA_COMPLETION`
//! (`poll`, the default completion thread, or `host-callback`, ...), read when each device is made.
//!
//! `ranks_that_leave` is left out by default (NCCL takes one rank per GPU, and these devices share
//! GPU 0); the header the run prints says so. The fuzzer's knobs apply (`HAL_FUZZ_SECONDS`, ...;
//! see docs/conformance.md, "Contract fuzzer"); the slack defaults to [`CUDA_SLACK`].
//! Where the CUDA driver library was missing at build time both tests are ignored (see
//! `tests/common/mod.rs`). On a GPU:
//!
//! ```sh
//! HAL_FUZZ_SECONDS=300 HAL_REQUIRE_CUDA=1 cargo test -p timeline-hal-cuda --release --test contract_fuzz \
//!     -- --include-ignored --nocapture
//! HAL_CUDA_COMPLETION=host-callback HAL_FUZZ_SECONDS=300 HAL_REQUIRE_CUDA=1 \
//!     cargo test -p timeline-hal-cuda --release --test contract_fuzz -- --include-ignored --nocapture
//! ```

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ctest::fuzz::{FuzzOptions, run_fuzz, run_regression_seeds};
use ctest::{Fixture, Kernel};
use driver_cuda::Context;

/// How late a wait may return after its deadline on a GPU, unless `HAL_FUZZ_SLACK_MS` says.
const CUDA_SLACK: Duration = Duration::from_millis(200);

const REPLAY: &str = "HAL_REQUIRE_CUDA=1 cargo test -p timeline-hal-cuda --release --test contract_fuzz -- --include-ignored --nocapture";

/// The fixture and options, or `None` (after `common::not_run`) where CUDA or NVRTC is missing. The
/// GPU's primary context stays retained for the process, and one device has loaded the kernels
/// before the first program counts threads, so the driver's own threads are there already.
fn setup() -> Option<(Fixture, FuzzOptions)> {
    if !common::require_cuda() {
        return None;
    }
    // SAFETY: only tries to open the NVRTC library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        common::not_run("NVRTC (libnvrtc.so) not found: ctest's CUDA kernels cannot be compiled");
        return None;
    }
    let completion = std::env::var(driver_cuda::ENV_COMPLETION).unwrap_or_else(|_| "poll".to_string());
    if let Err(e) = driver_cuda::CudaOptions::from_env() {
        panic!("{e}");
    }
    static CONTEXT: OnceLock<Option<Arc<Context>>> = OnceLock::new();
    CONTEXT.get_or_init(|| Context::retain(0).ok());
    let fixture =
        Fixture::from_fn(driver_cuda::DRIVER_NAME, || driver_cuda::create_device(0), common::ctest_catalogue())
            .with_sticky_faults()
            .with_fault_marker("CUDA_ERROR_")
            .with_max_ranks(1);
    let warm = fixture.create_device().unwrap_or_else(|e| panic!("cuda device 0: {e}"));
    let mut sleep = None;
    for kernel in [Kernel::FillU32, Kernel::Sleep] {
        match ctest::kernels::load(fixture.catalogue(), &warm, kernel) {
            Ok(executable) => sleep = Some(executable),
            Err(e) => panic!("loading ctest's {kernel:?} kernel: {e}"),
        }
    }
    // A 20 ms kernel waited on through the device's queue, so that in host-callback mode CUDA has
    // started the thread that runs host functions: it lives as long as the process, and takes the
    // name of the thread that first launched one (a completion thread's).
    let warm_up = || -> hal::Result<()> {
        let sleep = sleep.as_ref().ok_or_else(|| hal::Error::internal("no sleep kernel"))?;
        let commands = warm.create_command_buffer(hal::CommandBufferMode::OneShot)?;
        commands.dispatch(sleep, 0, [1, 1, 1], &[20_000], &[])?;
        commands.end()?;
        let done = warm.create_semaphore(0)?;
        warm.queue(0)?.execute(&[], &commands, &[hal::SemaphoreValue::new(&done, 1)])?;
        done.wait(1, hal::Timeout::After(std::time::Duration::from_secs(10)))
    };
    warm_up().unwrap_or_else(|e| panic!("warming up: {e}"));
    drop(warm);
    let options =
        FuzzOptions::new(&fixture, REPLAY).with_slack(CUDA_SLACK).from_env().unwrap_or_else(|e| panic!("{e}"));
    println!("contract_fuzz on cuda: completion {completion} ({})", driver_cuda::ENV_COMPLETION);
    Some((fixture, options))
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn contract_fuzz() {
    let Some((fixture, options)) = setup() else { return };
    match run_fuzz(&fixture, &options) {
        Ok(report) => println!("{report}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn contract_fuzz_regression_seeds() {
    let Some((fixture, options)) = setup() else { return };
    if let Err(failure) = run_regression_seeds(&fixture, &options) {
        panic!("{failure}");
    }
}
