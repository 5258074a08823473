//! The conformance suite (`ctest`) on Vulkan: one test per case, named `vulkan::<area>::<case>`.
//!
//! The kernels are ctest's SPIR-V catalogue (`ctest::kernels::wgsl`): WGSL compiled in-process with
//! naga, so nothing beyond Cargo is needed. Where no Vulkan device was found at build time every
//! test is ignored, with the reason (see `build.rs`). Run anyway (`--include-ignored`) without a
//! device, each test prints `not run: vulkan::<area>::<case>: Vulkan not available: <reason>` on
//! stderr and passes, or fails under `HAL_REQUIRE_VULKAN=1`. On lavapipe or a GPU:
//!
//! ```sh
//! HAL_REQUIRE_VULKAN=1 cargo test -p timeline-hal-vulkan --test cts
//! HAL_REQUIRE_VULKAN=1 HAL_VULKAN_VALIDATION=1 cargo test -p timeline-hal-vulkan --test cts   # validation layer
//! ```

use ctest::Fixture;
use ctest::kernels::wgsl::SpirvCatalogue;
use hal::driver::Driver;

/// Set to `1` where a Vulkan device must be present: the tests then fail instead of not running.
const REQUIRE_VULKAN_ENV: &str = "HAL_REQUIRE_VULKAN";

fn vulkan_required() -> bool {
    std::env::var(REQUIRE_VULKAN_ENV).is_ok_and(|v| v == "1")
}

fn vulkan_fixture() -> Fixture {
    if let Err(reason) = driver_vulkan::VulkanDriver.probe() {
        let notice = format!("Vulkan not available: {reason}");
        if vulkan_required() {
            panic!("{REQUIRE_VULKAN_ENV}=1 but the Vulkan CTS cannot run: {notice}");
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

ctest::instantiate_cts!(
    vulkan,
    vulkan_fixture,
    #[cfg_attr(
        not(any(hal_vulkan_found, hal_vulkan_required)),
        ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
    )]
);
