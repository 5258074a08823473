//! What the Vulkan test binaries built on ctest share: the driver's fixture
//! (`driver_vulkan::cts::fixture`) with the tests' policy where Vulkan is not usable, and children
//! that run one test in a process of its own.

// Each test binary uses a part of it.
#![allow(dead_code)]

use ctest::Fixture;

/// Set to `1` where a Vulkan device must be present: the tests then fail instead of not running.
pub const REQUIRE_VULKAN_ENV: &str = "HAL_REQUIRE_VULKAN";

/// Whether [`REQUIRE_VULKAN_ENV`] is `1`.
pub fn vulkan_required() -> bool {
    std::env::var(REQUIRE_VULKAN_ENV).is_ok_and(|v| v == "1")
}

/// ctest's fixture on Vulkan device 0 (`driver_vulkan::cts::fixture(0)`). Where Vulkan is not
/// usable: that fixture, not available and naming the reason, or a panic under
/// [`REQUIRE_VULKAN_ENV`]` = 1`.
pub fn vulkan_fixture() -> Fixture {
    let fixture = driver_vulkan::cts::fixture(0);
    if let Some(notice) = fixture.unavailable()
        && vulkan_required()
    {
        panic!("{REQUIRE_VULKAN_ENV}=1 but the Vulkan tests cannot run: {notice}");
    }
    fixture
}

/// Runs `test` of this test binary alone in a child process with `env` set, and fails unless it
/// ran and passed (for a test that needs a process of its own: its own environment, or no other
/// test's devices beside it).
pub fn run_in_child(test: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = std::process::Command::new(exe)
        .args([test, "--exact", "--include-ignored", "--nocapture"])
        .envs(env.iter().copied())
        .output()
        .expect("run this test binary");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child did not run: {text}");
}
