//! The contract fuzzer (`ctest::fuzz`) on Vulkan: the programs cpu-sim and CUDA run (2 devices x 4
//! queues, both on Vulkan device 0, so they share its `VkDevice`), checked against the same model,
//! with ctest's kernels from the SPIR-V catalogue (WGSL compiled with naga). The catalogue has no
//! `sleep_us`, so the fuzzer keeps the device busy with `spin` over as many workgroups as the time
//! asked takes, measured on an idle device first (the run prints the rate).
//!
//! A plain `cargo test` runs [`CI_PROGRAMS`] programs; the fuzzer's knobs apply (`HAL_FUZZ_SECONDS`,
//! `HAL_FUZZ_SEED`, ...; see docs/conformance.md, "Contract fuzzer"), and `HAL_VULKAN_VALIDATION=1`
//! runs it under the Khronos validation layer, where a validation error aborts the run. Where no
//! Vulkan device was found at build time both tests are ignored; run anyway without one, each prints
//! `not run: <test>: Vulkan not available: <reason>`, or fails under `HAL_REQUIRE_VULKAN=1`.
//!
//! ```sh
//! HAL_REQUIRE_VULKAN=1 cargo test -p timeline-hal-vulkan --test contract_fuzz -- --nocapture
//! HAL_REQUIRE_VULKAN=1 HAL_VULKAN_VALIDATION=1 HAL_FUZZ_SECONDS=60 \
//!     cargo test -p timeline-hal-vulkan --test contract_fuzz -- --nocapture
//! ```

mod common;

use std::time::Duration;

use ctest::Fixture;
use ctest::fuzz::{FuzzOptions, run_fuzz, run_regression_seeds};
use hal::driver::lock;

/// Programs a plain `cargo test` runs: fewer than on cpu-sim, as lavapipe shares CI's two cores
/// with the device work it runs.
const CI_PROGRAMS: u64 = 40;

/// How late a wait may return after its deadline, unless `HAL_FUZZ_SLACK_MS` says: lavapipe runs
/// the device work on the host's cores, beside the threads that wait.
const VULKAN_SLACK: Duration = Duration::from_millis(200);

const REPLAY: &str = "HAL_REQUIRE_VULKAN=1 cargo test -p timeline-hal-vulkan --test contract_fuzz -- --nocapture";

/// The fixture and options, or `None` (after printing why) where no Vulkan device is usable.
fn setup(test: &str) -> Option<(Fixture, FuzzOptions)> {
    let fixture = common::vulkan_fixture();
    if let Some(notice) = fixture.unavailable() {
        eprintln!("not run: {test}: {notice}");
        return None;
    }
    let options = FuzzOptions::new(&fixture, REPLAY)
        .with_programs(CI_PROGRAMS)
        .with_slack(VULKAN_SLACK)
        .from_env()
        .unwrap_or_else(|e| panic!("{e}"));
    let validation = std::env::var(driver_vulkan::VALIDATION_ENV).is_ok_and(|v| v == "1");
    println!("contract_fuzz on vulkan: validation layer {}", if validation { "on" } else { "off" });
    Some((fixture, options))
}

/// One fuzz test at a time: a program counts the HAL's threads in the whole process before and
/// after it, so another test's devices must not come and go meanwhile.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    lock(&SERIAL)
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn contract_fuzz() {
    let _serial = one_at_a_time();
    let Some((fixture, options)) = setup("contract_fuzz") else { return };
    match run_fuzz(&fixture, &options) {
        Ok(report) => println!("{report}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn contract_fuzz_regression_seeds() {
    let _serial = one_at_a_time();
    let Some((fixture, options)) = setup("contract_fuzz_regression_seeds") else { return };
    if let Err(failure) = run_regression_seeds(&fixture, &options) {
        panic!("{failure}");
    }
}
