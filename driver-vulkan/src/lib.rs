//! `driver-vulkan`: the HAL driver for Vulkan devices, on `ash` with the Vulkan library loaded at
//! run time (no SDK at build time). A machine without a loader or without a Vulkan 1.2 device with
//! timeline semaphores gets an `Unavailable` error naming the reason.
//!
//! - **Streams and events**: each HAL queue is a stream with a timeline `VkSemaphore` of its own
//!   and a submit thread (`stream.rs`); an event is a (timeline, value) pair. A wait on another
//!   queue's event is a submit-time timeline wait on the device; the host and the completion
//!   threads wait with `vkWaitSemaphores` and counter queries.
//! - **Executables**: SPIR-V with IREE's Vulkan ABI (`executable.rs`): binding `i` is the storage
//!   buffer at set 0, binding `i` (pushed with `VK_KHR_push_descriptor`), the constants one
//!   push-constant block of 32-bit words, the entry point the export's name.
//! - **Command buffers** (`commands/`): a reusable one is recorded once per stream and replayed
//!   (`commands/replay.rs`). One recorded against binding slots is too where the device has
//!   `descriptorBindingStorageBufferUpdateAfterBind` (`commands/bound.rs`): its dispatches bind
//!   update-after-bind descriptor sets that each execute writes its table's buffers into; elsewhere,
//!   or with [`UPDATE_AFTER_BIND_ENV`]` = 0`, each execute records it (the device property
//!   [`BINDING_TABLE_EXECUTES`] says which).
//! - **Memory**: host-visible memory from `gpu-allocator` (`memory.rs`); queue reads and writes are
//!   host copies in queue order.
//! - **Several devices**: HAL devices made on one physical device share its `VkDevice`, so their
//!   queues wait on each other's timelines on the device and copy each other's buffers; waits on a
//!   device of another `VkDevice` go through the host (lavapipe has no exportable semaphores).
//! - **Imported host memory** through `VK_EXT_external_memory_host`; **profiling** with timestamp
//!   queries ([`timing`]).
//! - **Interop** ([`interop`]): the native handles, an embedder's submissions on a HAL queue's
//!   `VkQueue` ([`interop::with_queue`]), an embedder's `VkBuffer` imported as a HAL buffer, and
//!   HAL queues ordered with an embedder's timeline semaphore both ways on the device; memory and
//!   timeline semaphores shared with CUDA on the same GPU through opaque file descriptors.
//! - **Not here**: collectives (`Unimplemented`: Vulkan has no collective library).
//!
//! The files are the rooms every driver has, `device.rs`, `stream.rs`, `commands/`,
//! `executable.rs`, `memory.rs` and `timing.rs`, and Vulkan's own beside them: `instance.rs` (the
//! loader and instance), `gpu.rs` (one logical device, its queues, allocator and limits),
//! `spirv.rs` (SPIR-V validated and rewritten by naga), `wgsl.rs` (WGSL compiled to SPIR-V),
//! `error.rs` (Vulkan result codes as HAL errors) and `cts.rs` (the conformance suite's fixture,
//! feature `cts`).
//!
//! Set `HAL_VULKAN_VALIDATION=1` to run under the Khronos validation layer; a validation error then
//! aborts the process with the message.
//!
//! ```
//! use hal::{BufferParams, SemaphoreValue, Timeout};
//!
//! let mut registry = hal::Registry::new();
//! driver_vulkan::register(&mut registry);
//! let device = match registry.create_device("vulkan", 0) {
//!     Ok(device) => device,
//!     Err(e) => {
//!         eprintln!("no Vulkan device here: {e}");
//!         return Ok(());
//!     }
//! };
//! let buffer = device.allocate_buffer(BufferParams::host_visible(), 16)?;
//! let done = device.create_semaphore(0)?;
//! device.queue(0)?.fill(&[], &buffer, 0, 16, 0xABu8, &[SemaphoreValue::new(&done, 1)])?;
//! done.wait(1, Timeout::Infinite)?;
//! assert_eq!(buffer.read_to_vec()?, vec![0xAB; 16]);
//! # Ok::<(), hal::Error>(())
//! ```

mod commands;
#[cfg(feature = "cts")]
pub mod cts;
mod device;
pub mod error;
mod executable;
mod gpu;
mod host_waits;
mod instance;
pub mod interop;
mod interrupt_cpus;
mod memory;
mod one_shot;
mod spirv;
mod spirv_bitcasts;
mod spirv_conversions;
mod stream;
mod submit_batch;
mod thread_counts;
#[doc(hidden)]
pub use thread_counts::HostThreadCounts;
pub mod timing;
#[cfg(feature = "wgsl")]
pub mod wgsl;

use std::sync::Arc;

use hal::driver::{DeviceExt, Driver};
use hal::{Device, DeviceId, DeviceInfo, Error, Registry, Result};

/// The `ash` the driver is built with: the Vulkan types and function tables of
/// [`interop`] are this crate's, so an embedder names them through this re-export.
pub use ash;
pub use device::{BINDING_TABLE_EXECUTES, VulkanDevice};
pub use executable::entry_point_sizes as spirv_entry_points;
pub use gpu::{DEVICE_MEMORY_ENV, UPDATE_AFTER_BIND_ENV};
pub use host_waits::{DEFAULT_HOST_POLL, DEFAULT_SUBMIT_WATCH, HOST_POLL_ENV, ISSUE_ON_CALLER_ENV, SUBMIT_WATCH_ENV};
pub use instance::VALIDATION_ENV;
pub use interrupt_cpus::{AVOID_INTERRUPT_CPUS_ENV, keep_process_off_interrupt_cpus};
pub use submit_batch::{DEFAULT_SUBMIT_BATCH, SUBMIT_BATCH_ENV};

/// The name the driver is registered under.
pub const DRIVER_NAME: &str = "vulkan";

/// The Vulkan driver.
#[derive(Debug, Default)]
pub struct VulkanDriver;

impl VulkanDriver {
    fn physical_devices(&self) -> Result<(Arc<instance::Instance>, Vec<gpu::PhysicalInfo>)> {
        let instance = instance::instance()?;
        let devices = gpu::physical_devices(&instance)?;
        if devices.is_empty() {
            return Err(Error::unavailable(
                "vulkan: no device with Vulkan 1.2, timeline semaphores and a compute queue",
            ));
        }
        Ok((instance, devices))
    }
}

impl Driver for VulkanDriver {
    fn name(&self) -> &str {
        DRIVER_NAME
    }

    fn probe(&self) -> Result<()> {
        self.physical_devices().map(drop)
    }

    fn enumerate(&self) -> Result<Vec<DeviceInfo>> {
        let (_, devices) = self.physical_devices()?;
        Ok(devices.iter().enumerate().map(|(ordinal, p)| device::device_info(ordinal, p)).collect())
    }

    fn create_device(&self, ordinal: usize) -> Result<Device> {
        let (instance, devices) = self.physical_devices()?;
        let count = devices.len();
        let physical = devices
            .into_iter()
            .nth(ordinal)
            .ok_or_else(|| Error::out_of_range(format!("vulkan: device {ordinal} does not exist (it has {count})")))?;
        let gpu = gpu::shared(instance, physical, device::VULKAN_QUEUES_WANTED)?;
        let id = DeviceId::next();
        let backend = Arc::new(VulkanDevice::new(id, ordinal, gpu)?);
        // SAFETY: `id` is fresh and names this device only, and the backend tags every buffer,
        // executable and semaphore it makes with the `id` it was built with.
        Ok(unsafe { Device::from_backend(id, backend) })
    }
}

/// How many times the Vulkan driver recorded `command_buffer` (a reusable one, recorded once and
/// replayed, or one with binding slots whose executes replay recordings and write their tables into
/// its descriptor sets) into a `VkCommandBuffer`; `None` for a command buffer it records at each
/// execute.
#[doc(hidden)]
pub fn recordings_of(command_buffer: &hal::CommandBuffer) -> Option<u64> {
    use hal::driver::CommandBufferExt;
    let Some(prepared) = command_buffer.prepared() else {
        return commands::bound::kept_replays(command_buffer.binding_state()).map(|replays| replays.recorded());
    };
    let prepared = prepared.as_any().downcast_ref::<commands::VulkanPreparedCommands>()?;
    prepared.replays.as_ref().map(|replays| replays.recorded())
}

/// How many submissions `device`, a Vulkan device, issued on the submitting thread instead of
/// handing them to its queue's submit thread (a submission whose queue the host saw reach its
/// previous value); `None` for a device of another driver.
#[doc(hidden)]
pub fn submissions_issued_by_callers(device: &Device) -> Option<u64> {
    host_thread_counts(device).map(|counts| counts.issued_by_callers)
}

/// What the host threads of `device`, a Vulkan device, did so far (see [`HostThreadCounts`]);
/// `None` for a device of another driver. A diagnostic: a process whose rounds run slow shows here
/// whether its threads slept between hand-offs or its `vkQueueSubmit` calls took longer.
#[doc(hidden)]
pub fn host_thread_counts(device: &Device) -> Option<HostThreadCounts> {
    device.backend_as::<VulkanDevice>().map(VulkanDevice::host_thread_counts)
}

/// Registers the Vulkan driver.
pub fn register(registry: &mut Registry) {
    registry.register(Arc::new(VulkanDriver));
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
