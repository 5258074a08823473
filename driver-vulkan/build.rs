//! Decides whether the Vulkan tests run by default in this build, so that a machine without a
//! Vulkan device reports them as ignored (with the reason) instead of as passed.
//!
//! - `hal_vulkan_found`: the Vulkan loader opened here at build time and listed a device.
//! - `hal_vulkan_required`: `HAL_REQUIRE_VULKAN=1` at build time; the tests then run (and fail
//!   where there is no device) even where none was found.
//!
//! The device is looked for again when `HAL_REQUIRE_VULKAN`, `VK_DRIVER_FILES`, `VK_ICD_FILENAMES`
//! or `LD_LIBRARY_PATH` change (or this file does); after installing a driver,
//! `touch driver-vulkan/build.rs`.

/// Set to `1` where a Vulkan device must be present.
const REQUIRE_ENV: &str = "HAL_REQUIRE_VULKAN";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(hal_vulkan_found)");
    println!("cargo::rustc-check-cfg=cfg(hal_vulkan_required)");
    println!("cargo::rerun-if-changed=build.rs");
    for name in [REQUIRE_ENV, "VK_DRIVER_FILES", "VK_ICD_FILENAMES", "LD_LIBRARY_PATH"] {
        println!("cargo::rerun-if-env-changed={name}");
    }
    let required = match std::env::var(REQUIRE_ENV).as_deref() {
        Ok("1") => true,
        Ok("0" | "") | Err(std::env::VarError::NotPresent) => false,
        Ok(other) => panic!("{REQUIRE_ENV}='{other}': expected 1 (a missing device fails the Vulkan tests) or 0"),
        Err(std::env::VarError::NotUnicode(value)) => panic!("{REQUIRE_ENV}={value:?}: expected 1 or 0"),
    };
    if required {
        println!("cargo::rustc-cfg=hal_vulkan_required");
    }
    if device_found() {
        println!("cargo::rustc-cfg=hal_vulkan_found");
    }
}

/// Whether the loader opens and lists at least one physical device.
fn device_found() -> bool {
    // SAFETY: opening the loader runs only its initialisers.
    let Ok(entry) = (unsafe { ash::Entry::load() }) else { return false };
    let app = ash::vk::ApplicationInfo::default().api_version(ash::vk::API_VERSION_1_2);
    let info = ash::vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: the create info outlives the call; the instance is destroyed below.
    let Ok(instance) = (unsafe { entry.create_instance(&info, None) }) else { return false };
    // SAFETY: a plain query of a live instance, which is destroyed after it.
    let found = unsafe { instance.enumerate_physical_devices() }.is_ok_and(|d| !d.is_empty());
    // SAFETY: nothing was made from the instance.
    unsafe { instance.destroy_instance(None) };
    found
}
