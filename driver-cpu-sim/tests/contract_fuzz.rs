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
use hal::driver::lock;

const REPLAY: &str = "cargo test -p timeline-hal-cpu-sim --test contract_fuzz -- --nocapture";

/// cpu-sim devices with 2 workgroup threads (the fuzzer's devices are many and short-lived).
fn fixture() -> Fixture {
    let options = driver_cpu_sim::CpuSimOptions::default().with_workgroup_threads(2);
    let driver = driver_cpu_sim::CpuSimDriver::with_options(options);
    Fixture::from_fn(driver_cpu_sim::DRIVER_NAME, move || driver.create_device(0), NativeCatalogue)
}

/// The fuzzer's options, once the process-lifetime threads are there: the first channel id made in
/// a process starts cpu-sim's listener for ranks of other processes, which lives as long as the
/// process, so the threads a program leaves behind are counted from after it.
fn options(fixture: &Fixture) -> FuzzOptions {
    let device = fixture.create_device().unwrap_or_else(|e| panic!("cpu-sim device: {e}"));
    device.create_channel_id().unwrap_or_else(|e| panic!("a channel id: {e}"));
    drop(device);
    FuzzOptions::new(fixture, REPLAY).from_env().unwrap_or_else(|e| panic!("{e}"))
}

/// One fuzz test at a time: a program counts the HAL's threads in the whole process before and
/// after it, so another test's devices must not come and go meanwhile.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    lock(&SERIAL)
}

#[test]
fn contract_fuzz() {
    let _serial = one_at_a_time();
    let fixture = fixture();
    match run_fuzz(&fixture, &options(&fixture)) {
        Ok(report) => println!("{report}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn contract_fuzz_regression_seeds() {
    let _serial = one_at_a_time();
    let fixture = fixture();
    if let Err(failure) = run_regression_seeds(&fixture, &options(&fixture)) {
        panic!("{failure}");
    }
}
