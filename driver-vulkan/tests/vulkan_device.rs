//! What the Vulkan driver does beyond the conformance suite: its storage-range limit, and a clean
//! `Unavailable` where there is no Vulkan device. Where no device was found at build time the tests
//! that need one are ignored (see `build.rs`).

use std::process::Command;

use ctest::kernels::wgsl::SpirvCatalogue;
use ctest::{Kernel, KernelCatalogue};
use hal::driver::Driver;
use hal::{BufferBinding, BufferParams, BufferUsage, CommandBufferMode, ExecutableKind, MemoryType, StatusCode};

fn device() -> hal::Device {
    let mut registry = hal::Registry::new();
    driver_vulkan::register(&mut registry);
    registry.create_device(driver_vulkan::DRIVER_NAME, 0).expect("a Vulkan device")
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn a_binding_past_the_storage_buffer_range_is_refused_when_recorded_naming_the_limit() {
    let device = device();
    let limit = device.info().max_binding_length;
    assert!(limit < u64::MAX, "a Vulkan device states its maxStorageBufferRange");
    if limit > 1 << 30 {
        // NVIDIA states 4 GiB - 1: a buffer past it is more memory than a test should take.
        println!(
            "not run: the device's storage-buffer range is {limit} bytes; this test allocates past it only up to 1 GiB"
        );
        return;
    }
    let buffer =
        device.allocate_buffer(BufferParams::new(MemoryType::DEVICE_LOCAL, BufferUsage::DEFAULT), limit + 4).unwrap();
    let catalogue = SpirvCatalogue::new(driver_vulkan::wgsl::compile);
    let fill = device.load_executable(&catalogue.source(Kernel::FillU32, ExecutableKind::Spirv).unwrap()).unwrap();
    let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    let e = cb.dispatch(&fill, 0, [1, 1, 1], &[7], &[BufferBinding::range(&buffer, 0, limit + 4)]).unwrap_err();
    assert_eq!(e.code(), StatusCode::OutOfRange, "{e}");
    assert!(e.message().contains(&limit.to_string()) && e.message().contains("binding 0"), "{e}");
    // The limit itself is fine.
    cb.dispatch(&fill, 0, [1, 1, 1], &[7], &[BufferBinding::range(&buffer, 0, limit)]).unwrap();
}

/// Run by [`without_a_driver_the_device_is_unavailable_with_the_reason`] in a child whose loader
/// finds no driver.
#[test]
#[ignore = "run (with --include-ignored) by without_a_driver_the_device_is_unavailable_with_the_reason"]
fn probe_in_a_process_without_a_driver() {
    let e = driver_vulkan::VulkanDriver.probe().unwrap_err();
    let mut registry = hal::Registry::new();
    driver_vulkan::register(&mut registry);
    let created = registry.create_device(driver_vulkan::DRIVER_NAME, 0).unwrap_err();
    println!("probe: {e}; create: {created}");
    assert_eq!(e.code(), StatusCode::Unavailable, "{e}");
    assert_eq!(created.code(), StatusCode::Unavailable, "{created}");
}

#[test]
fn without_a_driver_the_device_is_unavailable_with_the_reason() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args(["probe_in_a_process_without_a_driver", "--exact", "--include-ignored", "--nocapture"])
        // The loader reads only this ICD list, and the file is not there.
        .env("VK_DRIVER_FILES", "/nonexistent/vulkan-icd.json")
        .env("VK_ICD_FILENAMES", "/nonexistent/vulkan-icd.json")
        .output()
        .expect("run this test binary");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{text}");
    assert!(text.contains("probe: UNAVAILABLE: vulkan:"), "{text}");
}
