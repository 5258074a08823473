//! Working beside other Vulkan code in the same process: a renderer, a video decoder, compute an
//! embedder records itself, on the driver's own `VkDevice`.
//!
//! - **Native objects**: the device's `VkInstance`, `VkPhysicalDevice` and `VkDevice`
//!   ([`instance`], [`physical_device`], [`logical_device`]), and everything needed to make objects
//!   of one's own on that device ([`handles`]: `ash`'s function tables, the API version, the
//!   extensions and features enabled, kept alive while the [`VulkanHandles`] lives); a queue's
//!   `VkQueue` ([`queue`]) and a way to submit to it under the driver's own lock ([`with_queue`]);
//!   a buffer's `VkBuffer` range ([`buffer`]).
//! - **Memory another library allocated**: [`hal::Device::import_external_memory`] with
//!   [`hal::ExternalMemory::VulkanBuffer`] makes a HAL buffer over a range of a `VkBuffer` the
//!   embedder created on this device's `VkDevice` (memory bound; storage, transfer-source and
//!   transfer-destination usage, and indirect-buffer usage to hold indirect dispatch counts).
//!   Fills, updates, copies and dispatch bindings use the embedder's buffer at its offset; queue
//!   reads and writes are device copies through a staging buffer. The HAL never destroys the
//!   buffer or frees its memory: the release runs once the HAL buffer and every queued use of it
//!   are done (at once when the import is refused). The driver checks a non-null handle and a range
//!   within the buffer's memory requirements (`vkGetBufferMemoryRequirements`; Vulkan tells no
//!   buffer's size exactly); it cannot check that the handle is a buffer of this `VkDevice` or its
//!   usage flags (the validation layer does). An import has **no host view**: the embedder hands
//!   over a `VkBuffer`, not its `VkDeviceMemory` or a mapping of it, and the HAL cannot map memory
//!   it does not know, so host-visible memory types are refused (`InvalidArgument`) and
//!   `Buffer::map` has nothing to map.
//! - **Another library's queue**: [`hal::Queue::wait_external`] and [`hal::Queue::signal_external`]
//!   with [`hal::ExternalTimepoint::VulkanTimeline`] order a HAL queue with a value of a timeline
//!   `VkSemaphore` of this `VkDevice`, both ways, on the device: the queue's submission for it also
//!   waits on the value, or also signals it (`external.rs`).
//! - **Another API on the same GPU** (CUDA): memory and timeline semaphores shared through opaque
//!   POSIX file descriptors ([`allocate_exportable_buffer`], [`export_memory`],
//!   [`hal::ExternalMemory::OpaqueFd`] imports, [`create_exportable_timeline`],
//!   [`import_timeline_fd`], [`TimelineSemaphore`]), and the device's UUID to pair it with the
//!   other API's device of the same GPU ([`device_uuid`]); see `shared.rs` and `docs/interop.md`.
//!
//! HAL semaphores have **no `VkSemaphore`**: they are host-side values the HAL's scheduler keeps,
//! and each HAL queue signals a timeline semaphore of its own whose values count its submissions,
//! not a semaphore's values ([`semaphore_timeline`] says so). To have Vulkan work wait for HAL
//! work, signal a timeline semaphore of your own with [`hal::Queue::signal_external`].
//!
//! # The contract across the border
//!
//! - **A wait** ([`hal::Queue::wait_external`]): the queue's next submission waits on the device
//!   until the semaphore reaches the value; later work of the queue runs after it. The value's
//!   signal must come from the host (`vkSignalSemaphore`), from another `VkQueue`, or from a
//!   submission made to the HAL queue's `VkQueue` before the `wait_external` call: drivers that
//!   run a queue's submissions in order (Mesa's common code, lavapipe) do not start a later
//!   submission to a `VkQueue` while an earlier one waits. HAL queues share the device's `VkQueue`s
//!   round robin ([`queue`] names the one), so where there are fewer than the HAL devices on it
//!   have queues (lavapipe has one) other HAL queues wait behind the value too.
//! - **A value that never comes**: host waits on the wait's HAL signals end at their timeouts.
//!   Dropping the device releases the wait: Vulkan cannot take back a submitted wait, and a
//!   `VkDevice` cannot be destroyed (nor its queues drained) while a submission on it waits, so the
//!   driver signals the embedder's semaphore to the waited value from the host
//!   (`vkSignalSemaphore`, only where its counter is below the value, logged as a warning), the
//!   queues drain, and the wait's signals fail with `Cancelled`. The embedder must then not signal
//!   that value or a lower one itself (a timeline is only signalled upwards), nor have a signal of
//!   it pending on a queue when it drops the device (Vulkan forbids a host signal below a pending
//!   one). Both other ways out are worse: a teardown that hangs for good, or one that leaks the
//!   `VkDevice` with its queue blocked under every later HAL device on it.
//! - **A signal** ([`hal::Queue::signal_external`]): the value is signalled on the device once the
//!   queue's waits are reached and its earlier work is done. A Vulkan timeline has no failure
//!   state, so a HAL failure cannot be passed on: the value is signalled anyway, so that the
//!   embedder's queue never hangs on the HAL. When earlier work faulted or was cancelled, by the
//!   same submission in queue order; when the submission is never made (its waits failed, the
//!   device was dropped first, the HAL refused the submission after preparing it), from the host.
//!   Check the HAL signals before trusting what the HAL produced. A value the semaphore has
//!   reached already is refused at the call (`InvalidArgument`); one it reaches another way before
//!   the submission is not signalled again, and the work fails with `FailedPrecondition`.
//! - **Lifetimes**: the semaphore stays alive until the call's HAL signals are reached or failed;
//!   an imported buffer until its release runs. Both are objects of the driver's `VkDevice`, which
//!   lives while any HAL device on that physical device, or any [`VulkanHandles`], does: hold a
//!   `VulkanHandles` to destroy them after the HAL device is dropped.
//!
//! ```no_run
//! use driver_vulkan::ash::vk::{self, Handle};
//! use driver_vulkan::interop;
//! use hal::{BufferParams, ExternalMemory, ExternalTimepoint, SemaphoreValue as SV, Timeout};
//! # fn their_buffer(_: &driver_vulkan::ash::Device) -> vk::Buffer { vk::Buffer::null() }
//!
//! let mut registry = hal::Registry::new();
//! driver_vulkan::register(&mut registry);
//! let device = registry.create_device("vulkan", 0)?;
//! let queue = device.queue(0)?;
//! // SAFETY: nothing reached through the handles is destroyed or used against the rules below.
//! let native = unsafe { interop::handles(&device)? };
//! // Their timeline semaphore and buffer, made on the driver's VkDevice.
//! let mut kind = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
//! let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
//! // SAFETY: a valid create info; destroyed below, after the HAL's uses.
//! let semaphore = unsafe { native.device().create_semaphore(&info, None) }.expect("vkCreateSemaphore");
//! let buffer = their_buffer(native.device());
//! let timeline = |value| ExternalTimepoint::VulkanTimeline { semaphore: semaphore.as_raw(), value };
//! // SAFETY: the buffer stays alive until the release runs.
//! let theirs = unsafe {
//!     device.import_external_memory(
//!         ExternalMemory::VulkanBuffer { buffer: buffer.as_raw(), offset: 0, length: 4096 },
//!         BufferParams::device_local(),
//!         || { /* the buffer is theirs again */ },
//!     )?
//! };
//! let done = device.create_semaphore(0)?;
//! queue.fill(&[], &theirs, 0, 4096, 1.0f32, &[SV::new(&done, 1)])?;
//! // Their semaphore reaches 1 once the fill is done, on the device.
//! // SAFETY: the semaphore outlives the signals.
//! unsafe { queue.signal_external(&[SV::new(&done, 1)], timeline(1), &[])? };
//! // Their work, submitted to the queue's VkQueue under the driver's lock, waits for 1, signals 2.
//! // SAFETY: the submission finishes (its wait's signal was submitted before it).
//! unsafe { interop::with_queue(&queue, |vk_queue| { /* vkQueueSubmit(vk_queue, ...) */ })? };
//! // The HAL's next work runs after 2.
//! // SAFETY: as above.
//! unsafe { queue.wait_external(&[], timeline(2), &[SV::new(&done, 2)])? };
//! done.wait(2, Timeout::Infinite)?;
//! drop(theirs);
//! drop(device);
//! // SAFETY: the HAL's uses are done; `native` keeps the VkDevice alive.
//! unsafe { native.device().destroy_semaphore(semaphore, None) };
//! # Ok::<(), hal::Error>(())
//! ```

pub(crate) mod external;
#[cfg(unix)]
pub(crate) mod shared;

use std::ffi::CStr;
use std::sync::Arc;

use ash::vk;
use hal::driver::{DeviceExt, lock};
use hal::{Buffer, Device, Error, Queue, Result, Semaphore};

use crate::device::VulkanDevice;
use crate::gpu::Gpu;
use crate::memory::resolve;
#[cfg(unix)]
pub use shared::{
    ExportedMemory, FdSharing, TimelineSemaphore, allocate_exportable_buffer, create_exportable_timeline, device_uuid,
    export_memory, fd_sharing, import_timeline_fd,
};

/// The Vulkan device behind `device`, or `InvalidArgument` naming the driver that made it.
pub fn vulkan_device(device: &Device) -> Result<&VulkanDevice> {
    device.backend_as::<VulkanDevice>().ok_or_else(|| {
        Error::invalid_argument(format!("{}: a device of driver '{}', not vulkan", device.id(), device.info().driver))
    })
}

/// The `VkInstance` of `device`: one per process, shared by every Vulkan device of the HAL.
///
/// # Safety
/// The handle is valid while `device` lives (while a [`VulkanHandles`] of it lives, when one is
/// held). The caller must not destroy it, nor destroy objects the driver made from it (its debug
/// messenger under the validation layer).
pub unsafe fn instance(device: &Device) -> Result<vk::Instance> {
    Ok(vulkan_device(device)?.gpu().instance.instance.handle())
}

/// The `VkPhysicalDevice` of `device`.
///
/// # Safety
/// As for [`instance`]: valid while `device` lives; a physical device cannot be destroyed, but its
/// instance must not be either.
pub unsafe fn physical_device(device: &Device) -> Result<vk::PhysicalDevice> {
    Ok(vulkan_device(device)?.gpu().physical.physical)
}

/// The `VkDevice` of `device`: shared by every HAL device made on the same physical device while
/// one lives (their queues wait on each other and copy each other's buffers on the device).
///
/// # Safety
/// The handle is valid while `device` lives (or a [`VulkanHandles`] of it). The caller must not
/// destroy it, nor objects the driver made from it (queues' semaphores, command pools, buffers,
/// pipelines), nor call what needs every `VkQueue` of the device externally synchronized
/// (`vkDeviceWaitIdle`) while the HAL may submit; it must touch a HAL queue's `VkQueue` only
/// through [`with_queue`].
pub unsafe fn logical_device(device: &Device) -> Result<vk::Device> {
    Ok(vulkan_device(device)?.gpu().device.handle())
}

/// What an embedder needs to make Vulkan objects of its own on `device`'s `VkDevice`: `ash`'s
/// loader entry and function tables, the API version and what was enabled. It keeps the
/// `VkInstance` and `VkDevice` alive while it lives, past the HAL device, so that objects made on
/// them can be destroyed after it.
///
/// # Safety
/// What [`instance`] and [`logical_device`] say holds for the handles and tables it gives: the
/// caller must not destroy the instance or the device, nor objects the driver made, nor call
/// `vkDeviceWaitIdle` while the HAL may submit, nor touch a HAL queue's `VkQueue` other than
/// through [`with_queue`]. Objects the caller makes must be destroyed before the last
/// `VulkanHandles` and the last HAL device on the `VkDevice` are dropped.
pub unsafe fn handles(device: &Device) -> Result<VulkanHandles> {
    Ok(VulkanHandles { gpu: vulkan_device(device)?.gpu().clone() })
}

/// `ash`'s view of a device's `VkInstance` and `VkDevice`, kept alive while this lives (see
/// [`handles`]).
#[derive(Clone)]
pub struct VulkanHandles {
    gpu: Arc<Gpu>,
}

impl VulkanHandles {
    /// The loader's entry points (for instance-level extension tables).
    pub fn entry(&self) -> &ash::Entry {
        &self.gpu.instance.entry
    }

    /// The instance's function table (its handle: `.handle()`).
    pub fn instance(&self) -> &ash::Instance {
        &self.gpu.instance.instance
    }

    /// The physical device.
    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.gpu.physical.physical
    }

    /// The device's function table (its handle: `.handle()`).
    pub fn device(&self) -> &ash::Device {
        &self.gpu.device
    }

    /// The Vulkan version the instance was created for (`VkApplicationInfo::apiVersion`, 1.2):
    /// what may be used of the device, whatever it offers beyond.
    pub fn api_version(&self) -> u32 {
        crate::instance::API_VERSION
    }

    /// The version the physical device offers (`VkPhysicalDeviceProperties::apiVersion`).
    pub fn device_api_version(&self) -> u32 {
        self.gpu.physical.api_version
    }

    /// The instance extensions enabled (`VK_EXT_debug_utils` under the validation layer, else
    /// none).
    pub fn instance_extensions(&self) -> &[&'static CStr] {
        &self.gpu.instance.extensions
    }

    /// The instance layers enabled (`VK_LAYER_KHRONOS_validation` with
    /// [`VALIDATION_ENV`](crate::VALIDATION_ENV)` = 1`, else none).
    pub fn instance_layers(&self) -> &[&'static CStr] {
        &self.gpu.instance.layers
    }

    /// The device extensions enabled (`VK_KHR_push_descriptor`, and `VK_EXT_external_memory_host`,
    /// `VK_KHR_external_memory_fd` and `VK_KHR_external_semaphore_fd` where the device has them).
    pub fn device_extensions(&self) -> &[&'static CStr] {
        &self.gpu.extensions
    }

    /// The physical device's `deviceUUID` (`VkPhysicalDeviceIDProperties`): on NVIDIA's driver,
    /// CUDA's UUID of the same GPU.
    pub fn device_uuid(&self) -> [u8; 16] {
        self.gpu.physical.uuid
    }

    /// The core features enabled (`robustBufferAccess`, `shaderInt64` and `shaderFloat64` where the
    /// device has them). Of Vulkan 1.2's, `timelineSemaphore` always is, and
    /// `descriptorBindingStorageBufferUpdateAfterBind` where [`update_after_bind`](Self::update_after_bind) says so.
    pub fn features(&self) -> vk::PhysicalDeviceFeatures {
        self.gpu.features
    }

    /// Whether `descriptorBindingStorageBufferUpdateAfterBind` is enabled.
    pub fn update_after_bind(&self) -> bool {
        self.gpu.update_after_bind_enabled
    }

    /// The queue family of every `VkQueue` the driver uses (a compute family).
    pub fn queue_family_index(&self) -> u32 {
        self.gpu.physical.queue_family
    }

    /// How many `VkQueue`s of that family the device was created with (the HAL devices on it take
    /// four each, round robin, sharing them where there are fewer).
    pub fn queue_count(&self) -> u32 {
        self.gpu.queues.len() as u32
    }
}

impl std::fmt::Debug for VulkanHandles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanHandles")
            .field("instance", &self.gpu.instance.instance.handle())
            .field("physical_device", &self.gpu.physical.physical)
            .field("device", &self.gpu.device.handle())
            .finish()
    }
}

/// A HAL queue's `VkQueue` and where it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeQueue {
    /// The `VkQueue`.
    pub queue: vk::Queue,
    /// Its queue family.
    pub family_index: u32,
    /// Its index in the family (`vkGetDeviceQueue`'s `queueIndex`).
    pub index: u32,
}

/// The `VkQueue` HAL queue `queue` submits to, with its family and index. HAL queues share the
/// device's `VkQueue`s round robin where it has fewer than its HAL devices' queues (lavapipe has
/// one).
///
/// # Safety
/// The handle is valid while the queue's device lives (or a [`VulkanHandles`] of it). A `VkQueue`
/// is externally synchronized: the caller must not submit to it, wait for it to idle or bind
/// sparse memory on it other than inside [`with_queue`], which holds the driver's lock.
pub unsafe fn queue(queue: &Queue) -> Result<NativeQueue> {
    let device = vulkan_device(queue.device())?;
    let (gpu, index) = (device.gpu(), device.queue_index(queue.index()));
    Ok(NativeQueue { queue: *lock(gpu.queue(index)), family_index: gpu.physical.queue_family, index })
}

/// Runs `f` with the `VkQueue` of HAL queue `queue`, holding the lock the driver holds around its
/// own submissions to it: `f` may call `vkQueueSubmit`, `vkQueueWaitIdle` or other queue
/// functions on it. HAL submissions to that `VkQueue` (of any HAL queue sharing it) wait until `f`
/// returns, so keep it short.
///
/// Work submitted here runs beside the HAL's, ordered with it only through semaphores: its own
/// `VkSemaphore`s, or an embedder's timeline that [`hal::Queue::signal_external`] and
/// [`hal::Queue::wait_external`] use.
///
/// # Safety
/// `f` must not call into the HAL (a HAL call may wait for this lock), and what it submits must
/// finish: no wait on a value whose signal is not submitted yet to another queue or made from the
/// host (the `VkQueue` would stall the HAL queues behind it, and dropping the device waits for
/// the queue to idle), no use of HAL buffers' `VkBuffer`s that is not ordered with the HAL's uses.
/// The `VkQueue` must not be used after `f` returns.
pub unsafe fn with_queue<R>(queue: &Queue, f: impl FnOnce(vk::Queue) -> R) -> Result<R> {
    let device = vulkan_device(queue.device())?;
    let locked = lock(device.gpu().queue(device.queue_index(queue.index())));
    Ok(f(*locked))
}

/// A HAL buffer's range of its `VkBuffer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeBuffer {
    /// The `VkBuffer` (the embedder's own, for an imported buffer).
    pub buffer: vk::Buffer,
    /// Where the HAL buffer (a subspan's range, for a subspan) starts in it.
    pub offset: u64,
    /// Bytes of the HAL buffer from `offset`.
    pub size: u64,
}

/// The `VkBuffer` behind `buffer` and the range of it that `buffer` covers (a subspan's, for a
/// subspan). The `VkBuffer` has storage, transfer-source, transfer-destination and indirect usage.
/// `FailedPrecondition` for a transient buffer without memory (before its `queue_alloca` ran, or
/// after its `queue_dealloca`).
///
/// # Safety
/// The handle is valid while `buffer` (any handle to its memory) lives, and, for a transient
/// buffer, until its `queue_dealloca` runs in queue order. The caller must not destroy it nor
/// rebind its memory, and its accesses through it must be ordered with the HAL's uses of the
/// buffer (semaphores, or [`hal::Queue::wait_external`] and [`hal::Queue::signal_external`]);
/// unordered accesses race.
pub unsafe fn buffer(buffer: &Buffer) -> Result<NativeBuffer> {
    let (block, base) = resolve(buffer)?;
    Ok(NativeBuffer { buffer: block.buffer, offset: base, size: buffer.size() })
}

/// The timeline `VkSemaphore` of a HAL semaphore: there is none on this driver, so always
/// `Unimplemented` with the reason. A HAL semaphore is a value the HAL's scheduler keeps on the
/// host; the device work that reaches it signals a per-queue timeline whose values count the
/// queue's submissions. Signal a timeline semaphore of your own with
/// [`hal::Queue::signal_external`] instead.
pub fn semaphore_timeline(semaphore: &Semaphore) -> Result<vk::Semaphore> {
    Err(Error::unimplemented(format!(
        "vulkan: {semaphore} has no VkSemaphore: HAL semaphores are host-side values of the scheduler; Vulkan work \
         waits for HAL work through Queue::signal_external on a timeline semaphore of its own"
    )))
}
