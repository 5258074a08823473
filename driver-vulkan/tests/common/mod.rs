//! What the Vulkan test binaries built on ctest share: the fixture of the Vulkan driver, or one
//! that says why Vulkan is not available here.

use ctest::Fixture;
use ctest::kernels::wgsl::SpirvCatalogue;
use hal::driver::Driver;

/// Set to `1` where a Vulkan device must be present: the tests then fail instead of not running.
pub const REQUIRE_VULKAN_ENV: &str = "HAL_REQUIRE_VULKAN";

/// Whether [`REQUIRE_VULKAN_ENV`] is `1`.
pub fn vulkan_required() -> bool {
    std::env::var(REQUIRE_VULKAN_ENV).is_ok_and(|v| v == "1")
}

/// ctest's fixture on Vulkan device 0, its kernels ctest's SPIR-V catalogue (WGSL compiled with
/// naga). Where Vulkan is not usable: a fixture that is not available, naming the reason, or a
/// panic under [`REQUIRE_VULKAN_ENV`]` = 1`.
pub fn vulkan_fixture() -> Fixture {
    if let Err(reason) = driver_vulkan::VulkanDriver.probe() {
        let notice = format!("Vulkan not available: {reason}");
        if vulkan_required() {
            panic!("{REQUIRE_VULKAN_ENV}=1 but the Vulkan tests cannot run: {notice}");
        }
        return Fixture::not_available(driver_vulkan::DRIVER_NAME, notice);
    }
    let mut registry = hal::Registry::new();
    driver_vulkan::register(&mut registry);
    let workgroup_memory = driver_vulkan::VulkanDriver
        .enumerate()
        .ok()
        .and_then(|devices| {
            let info = devices.into_iter().next()?;
            info.properties.iter().find(|(name, _)| name == "max_compute_shared_memory_size")?.1.parse().ok()
        })
        .unwrap_or(0);
    let catalogue = SpirvCatalogue::new(driver_vulkan::wgsl::compile).with_workgroup_memory_limit(workgroup_memory);
    Fixture::from_registry(registry, driver_vulkan::DRIVER_NAME, catalogue).with_max_ranks(1)
}
