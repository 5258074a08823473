//! What the Vulkan test binaries built on ctest share: the driver's fixture
//! (`driver_vulkan::cts::fixture`) with the tests' policy where Vulkan is not usable.

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
