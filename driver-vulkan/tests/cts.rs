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

mod common;

use common::vulkan_fixture;

ctest::instantiate_cts!(
    vulkan,
    vulkan_fixture,
    #[cfg_attr(
        not(any(hal_vulkan_found, hal_vulkan_required)),
        ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
    )]
);
