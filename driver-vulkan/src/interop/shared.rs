//! Memory and timeline semaphores shared with another API on the same GPU (CUDA, another
//! `VkDevice`) through opaque POSIX file descriptors (`VK_KHR_external_memory_fd`,
//! `VK_KHR_external_semaphore_fd`, enabled at device creation where the device has them;
//! [`fd_sharing`] says what it offers).
//!
//! - **Memory**: [`allocate_exportable_buffer`] makes a HAL buffer whose memory is a
//!   `VkDeviceMemory` of its own allocated for export; [`export_memory`] gives a new descriptor of
//!   it (`vkGetMemoryFdKHR`) with what an import needs. The other way,
//!   [`hal::Device::import_external_memory`] with [`hal::ExternalMemory::OpaqueFd`] imports
//!   another API's memory object as a HAL buffer (`VkImportMemoryFdInfoKHR`).
//! - **Timeline semaphores**: [`create_exportable_timeline`] and [`import_timeline_fd`] make a
//!   [`TimelineSemaphore`], which owns its `VkSemaphore` (destroyed on drop) and orders HAL queues
//!   through [`TimelineSemaphore::at`] ([`hal::ExternalTimepoint::VulkanTimeline`]); an external
//!   timepoint naming it holds it alive until its work retired.
//! - **Which GPU**: [`device_uuid`] is `VkPhysicalDeviceIDProperties::deviceUUID`, which NVIDIA's
//!   driver makes equal to CUDA's device UUID (`cuDeviceGetUuid`): the way to pair a Vulkan device
//!   with the CUDA device of the same GPU.
//!
//! Shared memory is device-local and not mapped here: queue reads and writes of it are device
//! copies through a staging buffer. Where an extension or capability is missing, the calls are
//! `Unimplemented`, naming it.

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ash::vk;
use ash::vk::Handle;
use hal::driver::{BufferExt, lock};
use hal::{Buffer, BufferParams, Device, Error, ExternalMemory, ExternalTimepoint, Result};

use super::vulkan_device;
use crate::error::from_vk;
pub use crate::gpu::FdSharing;
use crate::gpu::Gpu;
use crate::memory::{Block, VulkanMemory, resolve};

/// What `device` shares through opaque file descriptors.
pub fn fd_sharing(device: &Device) -> Result<FdSharing> {
    Ok(vulkan_device(device)?.gpu().physical.fd_sharing)
}

/// `device`'s `VkPhysicalDeviceIDProperties::deviceUUID`. On NVIDIA's driver it equals CUDA's UUID of
/// the same GPU (`cuDeviceGetUuid`; `driver_cuda::interop::device_uuid`); its hex digits are also
/// the device's `DeviceInfo::stable_id`.
pub fn device_uuid(device: &Device) -> Result<[u8; 16]> {
    Ok(vulkan_device(device)?.gpu().physical.uuid)
}

/// A HAL buffer of `size` bytes whose memory can be exported as an opaque file descriptor
/// ([`export_memory`]): device-local memory of its own (a `VkDeviceMemory` allocated for this
/// buffer alone with `VkExportMemoryAllocateInfo`, dedicated where the device requires it), bound
/// to a `VkBuffer` with the usage of every buffer of the driver, so dispatches, fills, copies and
/// queue reads and writes use it like any buffer. Not mappable; its contents start undefined.
/// `Unimplemented` naming what is missing where the device cannot export memory;
/// `InvalidArgument` for 0 bytes.
pub fn allocate_exportable_buffer(device: &Device, size: u64) -> Result<Buffer> {
    let vulkan = vulkan_device(device)?;
    if size == 0 {
        return Err(Error::invalid_argument("vulkan: an exportable buffer of 0 bytes has nothing to share"));
    }
    let params = BufferParams::device_local();
    if size > device.info().max_allocation_size {
        return Err(Error::resource_exhausted(format!(
            "vulkan: an exportable buffer of {size} bytes exceeds the largest allocation of {} bytes",
            device.info().max_allocation_size
        )));
    }
    let block = Block::exportable(vulkan.gpu(), size, vulkan.memory_counter())?;
    let memory = VulkanMemory::shared(vulkan.gpu(), vulkan.memory_counter(), size, block);
    // SAFETY: the memory was made on this device's `VkDevice` for its queues and kernels.
    Ok(unsafe { Buffer::from_backend(device.id(), params, Arc::new(memory)) })
}

/// A new opaque file descriptor of a memory object, with what an import of it needs.
#[derive(Debug)]
pub struct ExportedMemory {
    /// The descriptor (`vkGetMemoryFdKHR`): the caller's, until handed to an import.
    pub fd: OwnedFd,
    /// Bytes of the memory object (its `allocationSize`, at least the buffer's size).
    pub length: u64,
    /// Whether it is a dedicated allocation.
    pub dedicated: bool,
}

impl ExportedMemory {
    /// The [`ExternalMemory::OpaqueFd`] to import it with (CUDA's or another Vulkan device's
    /// [`hal::Device::import_external_memory`], which takes the descriptor over).
    pub fn into_external(self) -> ExternalMemory {
        ExternalMemory::opaque_fd(self.fd, self.length, self.dedicated)
    }
}

/// A new descriptor of the memory behind `buffer`, a buffer from [`allocate_exportable_buffer`] (or
/// a subspan of one: the whole memory object is exported, from its first byte). Each call makes a
/// new descriptor, each an independent reference to the same memory. `InvalidArgument` for other
/// buffers.
pub fn export_memory(buffer: &Buffer) -> Result<ExportedMemory> {
    let (block, _) = resolve(buffer)?;
    let (fd, length, dedicated) = block.export_fd().map_err(|e| e.context(buffer.to_string()))?;
    Ok(ExportedMemory { fd, length, dedicated })
}

/// A timeline `VkSemaphore` of a device's `VkDevice` that the driver made and owns: destroyed when
/// the last handle drops, and held alive by every external timepoint naming it
/// ([`hal::Queue::wait_external`], [`hal::Queue::signal_external`]) until its work retired. Cloning
/// gives another handle to the same semaphore.
#[derive(Clone)]
pub struct TimelineSemaphore {
    inner: Arc<OwnedTimeline>,
}

/// The semaphore behind a [`TimelineSemaphore`].
pub(crate) struct OwnedTimeline {
    gpu: Arc<Gpu>,
    semaphore: vk::Semaphore,
    /// Created with `VkExportSemaphoreCreateInfo` (so `vkGetSemaphoreFdKHR` may be called).
    exportable: bool,
}

impl Drop for OwnedTimeline {
    fn drop(&mut self) {
        // SAFETY: every HAL submission naming it held this value alive until it completed, and the
        // owner's own uses ended with its last handle (the `TimelineSemaphore` contract). Another
        // API's import of its payload keeps the payload, not this object.
        unsafe { self.gpu.device.destroy_semaphore(self.semaphore, None) };
    }
}

impl std::fmt::Debug for TimelineSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimelineSemaphore")
            .field("semaphore", &self.inner.semaphore)
            .field("exportable", &self.inner.exportable)
            .finish()
    }
}

impl TimelineSemaphore {
    /// The `VkSemaphore`. It stays valid while this handle (or a clone) lives; the caller must
    /// not destroy it.
    pub fn handle(&self) -> vk::Semaphore {
        self.inner.semaphore
    }

    /// The external timepoint of `value` on it, for [`hal::Queue::wait_external`] and
    /// [`hal::Queue::signal_external`].
    pub fn at(&self, value: u64) -> ExternalTimepoint {
        ExternalTimepoint::VulkanTimeline { semaphore: self.inner.semaphore.as_raw(), value }
    }

    /// Its counter now (`vkGetSemaphoreCounterValue`).
    pub fn value(&self) -> Result<u64> {
        // SAFETY: a live timeline semaphore of this device.
        unsafe { self.inner.gpu.device.get_semaphore_counter_value(self.inner.semaphore) }
            .map_err(|e| from_vk("vkGetSemaphoreCounterValue", e))
    }

    /// Waits on the host until the counter reaches `value` or `timeout` passes: whether it did
    /// (`vkWaitSemaphores`).
    pub fn wait(&self, value: u64, timeout: Duration) -> Result<bool> {
        let (semaphores, values) = ([self.inner.semaphore], [value]);
        let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: a live timeline semaphore of this device; the arrays outlive the call.
        match unsafe { self.inner.gpu.device.wait_semaphores(&info, nanos) } {
            Ok(()) => Ok(true),
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(e) => Err(from_vk("vkWaitSemaphores", e)),
        }
    }

    /// Signals `value` from the host (`vkSignalSemaphore`). `InvalidArgument` where the counter is
    /// at `value` or beyond already (a timeline is only signalled upwards).
    ///
    /// # Safety
    /// No signal of the semaphore at or below `value` is pending on a queue, of Vulkan or of
    /// another API that imported it (Vulkan forbids a host signal below a pending one).
    pub unsafe fn signal(&self, value: u64) -> Result<()> {
        let now = self.value()?;
        if now >= value {
            return Err(Error::invalid_argument(format!(
                "vulkan: host signal of timeline semaphore {:#x} to {value}: it is at {now} already",
                self.inner.semaphore.as_raw()
            )));
        }
        let info = vk::SemaphoreSignalInfo::default().semaphore(self.inner.semaphore).value(value);
        // SAFETY: a live timeline semaphore below `value`; the caller vouches for pending signals.
        unsafe { self.inner.gpu.device.signal_semaphore(&info) }.map_err(|e| from_vk("vkSignalSemaphore", e))
    }

    /// A new opaque file descriptor of its payload (`vkGetSemaphoreFdKHR`), for another API to
    /// import (CUDA's `cuImportExternalSemaphore` with
    /// `CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD`: `driver_cuda::interop::import_semaphore_fd`).
    /// `InvalidArgument` for a semaphore not created exportable.
    pub fn export_fd(&self) -> Result<OwnedFd> {
        if !self.inner.exportable {
            return Err(Error::invalid_argument(format!(
                "vulkan: timeline semaphore {:#x} was not created exportable (create_exportable_timeline makes one)",
                self.inner.semaphore.as_raw()
            )));
        }
        let Some(semaphore_fd) = &self.inner.gpu.semaphore_fd else {
            return Err(Error::internal(
                "vulkan: an exportable semaphore on a device without VK_KHR_external_semaphore_fd",
            ));
        };
        let info = vk::SemaphoreGetFdInfoKHR::default()
            .semaphore(self.inner.semaphore)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
        // SAFETY: a live semaphore of this device created with VkExportSemaphoreCreateInfo for
        // this handle type.
        let fd = unsafe { semaphore_fd.get_semaphore_fd(&info) }.map_err(|e| from_vk("vkGetSemaphoreFdKHR", e))?;
        // SAFETY: vkGetSemaphoreFdKHR made a new descriptor, which the caller owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// `Unimplemented` naming what `gpu` lacks to share timeline semaphores the way `export` says.
fn check_timeline_sharing(gpu: &Gpu, export: bool) -> Result<()> {
    let verb = if export { "exporting" } else { "importing" };
    if gpu.semaphore_fd.is_none() {
        return Err(Error::unimplemented(format!(
            "vulkan: the device has no VK_KHR_external_semaphore_fd, which {verb} a timeline semaphore as a file \
             descriptor needs"
        )));
    }
    let sharing = gpu.physical.fd_sharing;
    if !(if export { sharing.timeline_export } else { sharing.timeline_import }) {
        return Err(Error::unimplemented(format!(
            "vulkan: the device does not support {verb} timeline semaphores as opaque file descriptors \
             (vkGetPhysicalDeviceExternalSemaphoreProperties, VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT)"
        )));
    }
    Ok(())
}

/// A timeline semaphore, at `initial`, whose payload can be exported as an opaque file descriptor
/// ([`TimelineSemaphore::export_fd`]): `VkExportSemaphoreCreateInfo` beside
/// `VkSemaphoreTypeCreateInfo`. `Unimplemented` naming what is missing where the device cannot.
pub fn create_exportable_timeline(device: &Device, initial: u64) -> Result<TimelineSemaphore> {
    let gpu = vulkan_device(device)?.gpu();
    check_timeline_sharing(gpu, true)?;
    let mut kind =
        vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(initial);
    let mut export =
        vk::ExportSemaphoreCreateInfo::default().handle_types(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind).push_next(&mut export);
    // SAFETY: a valid create info whose chain lives on this stack frame; destroyed by `OwnedTimeline`.
    let semaphore = unsafe { gpu.device.create_semaphore(&info, None) }
        .map_err(|e| from_vk("vkCreateSemaphore (exportable timeline)", e))?;
    Ok(register(gpu, semaphore, true))
}

/// A timeline semaphore whose payload is the one `fd` refers to (an opaque fd another API or
/// device exported from a timeline semaphore): `vkImportSemaphoreFdKHR`, permanent. Vulkan takes
/// the descriptor on success; on failure it is closed here. `Unimplemented` naming what is
/// missing where the device cannot import one.
pub fn import_timeline_fd(device: &Device, fd: OwnedFd) -> Result<TimelineSemaphore> {
    let gpu = vulkan_device(device)?.gpu();
    check_timeline_sharing(gpu, false)?;
    let Some(semaphore_fd) = &gpu.semaphore_fd else {
        return Err(Error::internal("vulkan: checked above"));
    };
    let mut kind = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
    // SAFETY: a valid create info; destroyed below on failure, or by `OwnedTimeline`.
    let semaphore = unsafe { gpu.device.create_semaphore(&info, None) }
        .map_err(|e| from_vk("vkCreateSemaphore (timeline to import into)", e))?;
    let raw = fd.into_raw_fd();
    let import = vk::ImportSemaphoreFdInfoKHR::default()
        .semaphore(semaphore)
        .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD)
        .fd(raw);
    // SAFETY: a fresh semaphore of this device used by nothing yet; `raw` is an open descriptor
    // this call owns (taken from the `OwnedFd`), which Vulkan takes on success.
    if let Err(e) = unsafe { semaphore_fd.import_semaphore_fd(&import) } {
        if !gpu.physical.closes_refused_fds {
            // SAFETY: the import failed, so the descriptor is still ours (but where the driver
            // closes refused ones itself), closed once, here.
            drop(unsafe { OwnedFd::from_raw_fd(raw) });
        }
        // SAFETY: unused.
        unsafe { gpu.device.destroy_semaphore(semaphore, None) };
        return Err(from_vk("vkImportSemaphoreFdKHR", e));
    }
    Ok(register(gpu, semaphore, false))
}

/// Wraps `semaphore` and notes it among the device's timelines.
fn register(gpu: &Arc<Gpu>, semaphore: vk::Semaphore, exportable: bool) -> TimelineSemaphore {
    let inner = Arc::new(OwnedTimeline { gpu: gpu.clone(), semaphore, exportable });
    let mut timelines = lock(&gpu.timelines);
    timelines.retain(|timeline| timeline.strong_count() > 0);
    timelines.push(Arc::downgrade(&inner));
    TimelineSemaphore { inner }
}

/// The [`TimelineSemaphore`] of `gpu` whose handle is `semaphore`, while one lives.
pub(crate) fn owned_timeline(gpu: &Gpu, semaphore: vk::Semaphore) -> Option<Arc<OwnedTimeline>> {
    lock(&gpu.timelines).iter().filter_map(Weak::upgrade).find(|timeline| timeline.semaphore == semaphore)
}
