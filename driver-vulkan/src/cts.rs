//! The conformance suite's fixture for Vulkan (feature `cts`): what the driver's own CTS tests and
//! `hal cts --device vulkan[:N]` run the suite on. ctest depends on no driver; each driver crate
//! supplies its fixture, so the suite publishes before the drivers.
//!
//! The kernels are ctest's SPIR-V catalogue (`ctest::kernels::wgsl`): WGSL compiled in-process by
//! [`crate::wgsl::compile`] (naga), so nothing beyond Cargo is needed.

use ctest::Fixture;
use ctest::kernels::wgsl::SpirvCatalogue;
use hal::Registry;
use hal::driver::Driver;

use crate::{DRIVER_NAME, VulkanDriver};

/// ctest's fixture on Vulkan device `ordinal` (as `hal devices` numbers them): its devices are
/// made on that physical device, its kernels are ctest's SPIR-V catalogue within that device's
/// workgroup memory (`max_compute_shared_memory_size`), and a collective channel has one rank
/// (Vulkan has no collectives). It declares the external kinds the driver takes (Vulkan buffers,
/// Vulkan timeline semaphores), which ctest's `interop` cases leave to `tests/vulkan_interop.rs`.
/// The registry cases run against a registry holding the driver.
///
/// Where Vulkan is not usable here (no loader, no Vulkan 1.2 device with timeline semaphores) the
/// fixture is [not available](Fixture::not_available), its notice `Vulkan not available: <reason>`.
/// An `ordinal` with no device is not a panic: each device the fixture makes is an `OutOfRange`
/// error naming the ordinal and how many devices there are.
///
/// ```
/// let fixture = driver_vulkan::cts::fixture(0);
/// assert_eq!(fixture.driver(), "vulkan");
/// match fixture.unavailable() {
///     Some(notice) => assert!(notice.starts_with("Vulkan not available: ")),
///     None => {
///         assert_eq!(fixture.create_device()?.info().driver, "vulkan");
///         assert_eq!(fixture.external_memory_kinds(), ["Vulkan buffer", "opaque file descriptor"]);
///     }
/// }
/// // No machine has 1000 Vulkan devices: an error, with or without Vulkan.
/// let missing = driver_vulkan::cts::fixture(1000).create_device().err().expect("no device 1000");
/// assert!(fixture.unavailable().is_some() || missing.message().contains("device 1000 does not exist"));
/// # Ok::<(), hal::Error>(())
/// ```
pub fn fixture(ordinal: usize) -> Fixture {
    if let Err(reason) = VulkanDriver.probe() {
        return Fixture::not_available(DRIVER_NAME, format!("Vulkan not available: {reason}"));
    }
    let mut registry = Registry::new();
    crate::register(&mut registry);
    // The device's own limit; 0 (no kernel that needs workgroup memory) if it is not listed.
    let workgroup_memory = VulkanDriver
        .enumerate()
        .ok()
        .and_then(|devices| {
            let info = devices.into_iter().find(|info| info.ordinal == ordinal)?;
            info.properties.iter().find(|(name, _)| name == "max_compute_shared_memory_size")?.1.parse().ok()
        })
        .unwrap_or(0);
    let catalogue = SpirvCatalogue::new(crate::wgsl::compile).with_workgroup_memory_limit(workgroup_memory);
    let devices = registry.clone();
    Fixture::from_registry(registry, DRIVER_NAME, catalogue)
        .with_factory(move || devices.create_device(DRIVER_NAME, ordinal))
        .with_max_ranks(1)
        .with_external_memory_kinds(&["Vulkan buffer", "opaque file descriptor"])
        .with_external_timepoint_kinds(&["Vulkan timeline semaphore"])
}
