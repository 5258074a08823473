//! IREE's runtime on this HAL's devices: an IREE HAL driver whose devices are timeline-hal devices.
//!
//! [`register_drivers`] adds a driver factory to an IREE driver registry; IREE then lists and opens
//! `thal-cpu-sim` and `thal-cuda` like its own drivers, and IREE's VM runs
//! programs compiled by `iree-compile` on them. On cpu-sim, IREE's CPU executables (its
//! embedded-ELF format, loaded by IREE's own loader) run one workgroup at a time on cpu-sim's
//! workgroup runners; on CUDA, IREE's CUDA executables (PTX) run as the HAL CUDA driver's kernels;
//! transfers, dispatches and semaphores go through the HAL's queues.
//!
//! What is bridged and what answers `UNIMPLEMENTED` is listed in `README.md`.
//!
//! ```
//! use eerie_sys::runtime as sys;
//!
//! let mut registry = std::ptr::null_mut();
//! // SAFETY: IREE's registry functions with a writable output and the system allocator.
//! unsafe {
//!     let allocator = hal_iree::system_allocator();
//!     assert!(sys::iree_hal_driver_registry_allocate(allocator, &mut registry).is_null());
//!     hal_iree::register_drivers(registry)?;
//!     sys::iree_hal_driver_registry_free(registry);
//! }
//! # Ok::<(), hal::Error>(())
//! ```

mod allocator;
mod buffer;
mod buffer_import;
mod cuda_executable;
mod device;
mod driver;
mod event;
mod executable;
mod ffi;
mod file_io;
mod flatbuffer;
mod gpu_executable;
pub mod npy;
mod pinned_pool;
mod poll_claim;
mod profiling;
mod queue_pool;
mod recorder;
pub mod runner;
mod semaphore;
mod table_recording;
mod vulkan_executable;

pub use eerie_sys;

/// The IREE driver name of cpu-sim's devices.
pub const CPU_SIM_DRIVER: &str = "thal-cpu-sim";

/// The IREE driver name of the CUDA driver's devices (IREE's CUDA executables, `cuda-nvptx-fb`).
pub const CUDA_DRIVER: &str = "thal-cuda";

/// The IREE driver name of the Vulkan driver's devices (IREE's Vulkan executables,
/// `vulkan-spirv-fb`).
pub const VULKAN_DRIVER: &str = "thal-vulkan";

/// Registers the `thal-*` driver factory into IREE's driver `registry`.
///
/// # Safety
/// `registry` is a live IREE driver registry; the factory stays registered for the process's life
/// (it is static).
pub unsafe fn register_drivers(
    registry: *mut eerie_sys::runtime::iree_hal_driver_registry_t,
) -> Result<(), hal::Error> {
    // SAFETY: the caller's contract; the factory record is static.
    ffi::into_result(unsafe {
        eerie_sys::runtime::iree_hal_driver_registry_register_factory(registry, &driver::FACTORY.0)
    })
}

/// `Ok` for IREE's OK status, else a [`hal::Error`] with the status's code (IREE codes the HAL
/// lacks become `Internal`) and its text; gives up `status`.
///
/// # Safety
/// `status` is an IREE status the caller owns (NULL is OK).
pub unsafe fn check(status: eerie_sys::runtime::iree_status_t) -> Result<(), hal::Error> {
    ffi::into_result(status)
}

/// IREE's system allocator (`iree_allocator_system()`, an inline function in IREE's headers).
pub fn system_allocator() -> eerie_sys::runtime::iree_allocator_t {
    // SAFETY: returns a value; no state.
    unsafe { ffi::thal_iree_system_allocator() }
}
