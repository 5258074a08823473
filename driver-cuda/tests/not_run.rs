//! What a CUDA test does where it cannot run (no usable GPU or no NVRTC): under `HAL_REQUIRE_CUDA=1`
//! it fails, naming the reason; otherwise it prints `not run: <test>: <reason>` and passes. Checked
//! by running this binary's ignored test with `--include-ignored`, as the GPU scripts run the rest.

mod common;

use std::process::{Command, Output};

use common::*;
use hal::driver::Driver;

const NEEDS_CUDA: &str = "needs_a_gpu_and_nvrtc";

/// Run only by [`without_a_gpu_cuda_tests_fail_when_required_and_say_not_run_otherwise`].
#[test]
#[ignore = "run (with --include-ignored) by without_a_gpu_cuda_tests_fail_when_required_and_say_not_run_otherwise"]
fn needs_a_gpu_and_nvrtc() {
    if !require_cuda() {
        return;
    }
    assert!(ptx().is_some() || !cuda_required(), "ptx() returned None under HAL_REQUIRE_CUDA=1");
}

fn run_needs_cuda(require: &str) -> (Output, String) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args([NEEDS_CUDA, "--exact", "--include-ignored", "--test-threads=1"])
        .env(REQUIRE_CUDA_ENV, require)
        .output()
        .expect("run this test binary");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output, text)
}

#[test]
fn without_a_gpu_cuda_tests_fail_when_required_and_say_not_run_otherwise() {
    let cuda = driver_cuda::CudaDriver::default().probe();
    // SAFETY: only tries to open the NVRTC library.
    let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    let can_run = cuda.is_ok() && nvrtc;

    let (required, text) = run_needs_cuda("1");
    assert_eq!(required.status.success(), can_run, "HAL_REQUIRE_CUDA=1, CUDA {cuda:?}, NVRTC {nvrtc}:\n{text}");
    if !can_run {
        assert!(text.contains(&format!("HAL_REQUIRE_CUDA=1 but {NEEDS_CUDA} cannot run: ")), "{text}");
    }

    let (optional, text) = run_needs_cuda("0");
    assert!(optional.status.success(), "HAL_REQUIRE_CUDA=0:\n{text}");
    assert_eq!(text.contains(&format!("not run: {NEEDS_CUDA}: ")), !can_run, "HAL_REQUIRE_CUDA=0:\n{text}");
    assert!(text.contains("1 passed; 0 failed; 0 ignored"), "{text}");
}
