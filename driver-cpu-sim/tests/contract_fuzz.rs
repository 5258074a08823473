//! The contract fuzzer (`ctest::fuzz`) on cpu-sim: random programs over 2 devices x 4 queues checked
//! against the reference model of the timeline contract, kernels from the native catalogue.
//!
//! Knobs (see docs/conformance.md, "Contract fuzzer"): `HAL_FUZZ_SEED`, `HAL_FUZZ_SEEDS`,
//! `HAL_FUZZ_SECONDS`, `HAL_FUZZ_BASE`, `HAL_FUZZ_FAMILIES`, `HAL_FUZZ_SLACK_MS`,
//! `HAL_FUZZ_THREAD_CHECK`, `HAL_FUZZ_VERBOSE`. A plain `cargo test` runs `ctest::fuzz::CI_PROGRAMS`
//! programs.

use ctest::Fixture;
use ctest::fuzz::{FuzzOptions, run_fuzz, run_regression_seeds};
use ctest::kernels::native::NativeCatalogue;
use hal::driver::Driver;

const REPLAY: &str = "cargo test -p timeline-hal-cpu-sim --test contract_fuzz -- --nocapture";

/// cpu-sim devices with 2 workgroup threads (the fuzzer's devices are many and short-lived).
fn fixture() -> Fixture {
    let options = driver_cpu_sim::CpuSimOptions { workgroup_threads: 2, ..Default::default() };
    let driver = driver_cpu_sim::CpuSimDriver::with_options(options);
    Fixture::from_fn(driver_cpu_sim::DRIVER_NAME, move || driver.create_device(0), NativeCatalogue)
}

fn options(fixture: &Fixture) -> FuzzOptions {
    FuzzOptions::new(fixture, REPLAY).from_env().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn contract_fuzz() {
    let fixture = fixture();
    match run_fuzz(&fixture, &options(&fixture)) {
        Ok(report) => println!("{report}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn contract_fuzz_regression_seeds() {
    let fixture = fixture();
    if let Err(failure) = run_regression_seeds(&fixture, &options(&fixture)) {
        panic!("{failure}");
    }
}
