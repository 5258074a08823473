//! Buffers: a `VkBuffer` bound to memory from gpu-allocator, placed by what uses it most
//! ([`Placement`]). Memory kernels use (HAL `DEVICE_LOCAL` buffers) is the device's own; where that
//! memory is host-visible (lavapipe's only type, a resizable BAR) it is mapped and queue reads and
//! writes are host copies in queue order, and where it is not (NVIDIA's video memory) they are
//! device copies through a staging buffer (`stream.rs`). Host-visible HAL buffers and staging are
//! mapped host memory. `DEVICE_LOCAL`-only buffers are not mappable through the HAL, as on any GPU.
//! An embedder's `VkBuffer` ([`Block::external`]) and memory shared with another API through an
//! opaque file descriptor ([`Block::exportable`], [`Block::import_fd`]) are not mapped here either.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use ash::vk::Handle;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use hal::driver::lock;
use hal::driver::{BufferBackend, BufferExt, HostView, ImportedHostMemory, ReleaseOnce};
use hal::{Buffer, Error, MemoryType, Result};

use crate::error::from_vk;
use crate::gpu::Gpu;
use crate::one_shot;

/// Allocations at least this large get memory of their own.
const DEDICATED_BYTES: u64 = 64 << 20;

/// The usage of every `VkBuffer` the driver makes: storage (dispatch bindings), both transfer
/// directions (fills, updates, copies) and indirect (dispatch counts).
pub(crate) const BUFFER_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::INDIRECT_BUFFER.as_raw(),
);

/// The handle type of memory shared through file descriptors.
const OPAQUE_FD: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;

/// Where a block's memory lives, by who reads and writes it most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Kernels: the device's own memory (gpu-allocator's `GpuOnly`). Mapped only where that
    /// memory is host-visible. IREE's kernels ran several times slower on NVIDIA's device-local
    /// host-visible memory type (`Upload`'s) than here.
    Device,
    /// Written by the host, read by the device: host-visible memory, device-local where the device
    /// has such (`CpuToGpu`).
    Upload,
    /// Written by the device, read by the host once the device is done (the driver's read-back
    /// staging): host-cached memory (`GpuToCpu`), which the host reads at memory speed
    /// (device-local host-visible memory is uncached for the host).
    Readback,
}

impl Placement {
    /// Where a HAL buffer of `memory_type` goes: device-local-only types to the device, the rest
    /// to `Upload`. Not `Readback`, though the host reads those faster: with host-visible buffers
    /// there, tests whose kernel polls a word the host writes while it runs (a gate) hung on an
    /// H200, and passed again in `Upload`'s memory.
    pub fn of(memory_type: MemoryType) -> Placement {
        if memory_type.intersects(MemoryType::HOST_VISIBLE | MemoryType::HOST_LOCAL) {
            Placement::Upload
        } else {
            Placement::Device
        }
    }

    fn location(self) -> MemoryLocation {
        match self {
            Placement::Device => MemoryLocation::GpuOnly,
            Placement::Upload => MemoryLocation::CpuToGpu,
            Placement::Readback => MemoryLocation::GpuToCpu,
        }
    }
}

/// Bytes of buffer memory in use on a device.
#[derive(Debug, Default)]
pub struct MemoryCounter(AtomicU64);

impl MemoryCounter {
    /// Bytes now allocated.
    pub fn in_use(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A `VkBuffer` with its memory, mapped (but for an embedder's buffer); freed when the last holder
/// drops it (a buffer handle, a mapping's view, or a submission in flight).
pub struct Block {
    gpu: Arc<Gpu>,
    pub(crate) buffer: vk::Buffer,
    backing: Backing,
    /// The host address of the `VkBuffer`'s byte 0 (`None`: memory not mapped here: device memory the
    /// host cannot see, an embedder's buffer, memory shared with another API).
    ptr: Option<NonNull<u8>>,
    /// Where the HAL buffer's byte 0 lies in the `VkBuffer` (an import's page alignment, an
    /// embedder's buffer's offset).
    pub(crate) base: u64,
    size: u64,
    counter: Option<Arc<MemoryCounter>>,
}

/// The memory behind a block.
enum Backing {
    /// From gpu-allocator (`None` once freed).
    Allocated(Option<Allocation>),
    /// Host memory the embedder lent, imported with `VK_EXT_external_memory_host`; the release
    /// runs once the memory object is freed.
    Imported(vk::DeviceMemory, Option<ReleaseOnce>),
    /// The embedder's `VkBuffer` with its memory: neither destroyed nor freed here; the release
    /// hands it back once the block is gone.
    External(Option<ReleaseOnce>),
    /// Memory shared with another API through an opaque file descriptor: allocated here to be
    /// exported ([`Block::exportable`]), or imported from one ([`Block::import_fd`], whose release
    /// runs once the memory object is freed). Device-local, not mapped.
    Shared {
        memory: vk::DeviceMemory,
        /// `VkMemoryAllocateInfo::allocationSize`: what an import of an export must name.
        allocation_size: u64,
        /// Whether it is a dedicated allocation (`VkMemoryDedicatedAllocateInfo`).
        dedicated: bool,
        /// Allocated with `VkExportMemoryAllocateInfo` (so `vkGetMemoryFdKHR` may be called).
        exportable: bool,
        release: Option<ReleaseOnce>,
    },
}

// SAFETY: `ptr` points into the mapped allocation the block owns; the block hands it out only as a
// raw address, and the memory stays mapped until the block drops. An embedder's buffer is a handle
// the embedder keeps valid until the release runs (the import's contract), used from any thread.
unsafe impl Send for Block {}
// SAFETY: as above; the block is not changed after it is made (only dropped).
unsafe impl Sync for Block {}

impl Block {
    /// A buffer of `size` bytes (at least 4: Vulkan has no empty buffers) in memory placed by
    /// `placement`, counted in `counter` when given. Every placement but `Device` is mapped. The
    /// memory is zeroed, but for unmapped memory when `zero_unmapped` is false (queue allocations,
    /// whose contents are undefined, as on every GPU: zeroing would wait for the device).
    pub fn new(
        gpu: &Arc<Gpu>,
        size: u64,
        counter: Option<&Arc<MemoryCounter>>,
        name: &str,
        placement: Placement,
        zero_unmapped: bool,
    ) -> Result<Block> {
        let vk_size = size.max(4).next_multiple_of(4);
        let info =
            vk::BufferCreateInfo::default().size(vk_size).usage(BUFFER_USAGE).sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid create info; the buffer is destroyed on every path below or by `Drop`.
        let buffer = unsafe { gpu.device.create_buffer(&info, None) }.map_err(|e| from_vk("vkCreateBuffer", e))?;
        // SAFETY: `buffer` is a live buffer of this device.
        let requirements = unsafe { gpu.device.get_buffer_memory_requirements(buffer) };
        let scheme = if vk_size >= DEDICATED_BYTES {
            AllocationScheme::DedicatedBuffer(buffer)
        } else {
            AllocationScheme::GpuAllocatorManaged
        };
        let allocated = gpu.with_allocator(|allocator| {
            allocator
                .allocate(&AllocationCreateDesc {
                    name,
                    requirements,
                    location: placement.location(),
                    linear: true,
                    allocation_scheme: scheme,
                })
                .map_err(|e| Error::resource_exhausted(format!("vulkan: allocating {size} bytes: {e}")))
        });
        let allocation = match allocated {
            Ok(allocation) => allocation,
            Err(e) => {
                // SAFETY: not bound or used yet.
                unsafe { gpu.device.destroy_buffer(buffer, None) };
                return Err(e);
            }
        };
        let unmapped = placement == Placement::Device && !gpu.physical.map_device_memory;
        let ptr = allocation.mapped_ptr().map(|p| p.cast::<u8>()).filter(|_| !unmapped);
        // SAFETY: the allocation's memory and offset fit the buffer's requirements (the allocator
        // was given them).
        let bound = unsafe { gpu.device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) };
        let failed = match (ptr, bound) {
            (_, Err(e)) => Some(from_vk("vkBindBufferMemory", e)),
            (None, Ok(())) if placement != Placement::Device => {
                Some(Error::internal("vulkan: host-visible memory came back unmapped"))
            }
            _ => None,
        };
        let zeroed = match (failed, ptr) {
            (Some(e), _) => Err(e),
            (None, Some(ptr)) => {
                // SAFETY: the mapping covers `vk_size >= size` bytes, and nothing else uses it yet.
                // Memory recycled by the allocator may hold old bytes; new buffers start zeroed.
                unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, vk_size as usize) };
                Ok(())
            }
            (None, None) if zero_unmapped => one_shot::zero(gpu, buffer, vk_size),
            (None, None) => Ok(()),
        };
        if let Err(e) = zeroed {
            let _ = gpu.with_allocator(|a| a.free(allocation).map_err(|e| Error::internal(e.to_string())));
            // SAFETY: not used by any command (a zeroing submission completed or never ran).
            unsafe { gpu.device.destroy_buffer(buffer, None) };
            return Err(e);
        }
        if let Some(counter) = counter {
            counter.0.fetch_add(vk_size, Ordering::Relaxed);
        }
        Ok(Block {
            gpu: gpu.clone(),
            buffer,
            backing: Backing::Allocated(Some(allocation)),
            ptr,
            base: 0,
            size: vk_size,
            counter: counter.cloned(),
        })
    }

    /// Imports `memory` (lent by the embedder) with `VK_EXT_external_memory_host`. The import
    /// covers the whole pages around the loan (the extension takes page-aligned ranges; those pages
    /// are mapped, as they hold the loan); the `VkBuffer` covers them, and the HAL buffer starts
    /// at the loan's first byte (`base`). The device touches only the loan's bytes.
    pub fn import(gpu: &Arc<Gpu>, memory: ImportedHostMemory, counter: &Arc<MemoryCounter>) -> Result<Block> {
        let Some((external, alignment)) = &gpu.external_host else {
            return Err(Error::unimplemented(
                "vulkan: the device has no VK_EXT_external_memory_host, which imports of host memory need",
            ));
        };
        let alignment = (*alignment).max(1);
        let address = memory.ptr().as_ptr() as u64;
        let start = address / alignment * alignment;
        let end = (address + memory.length()).next_multiple_of(alignment);
        let (size, base) = (end - start, address - start);
        let handle = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
        let mut properties = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: `start` is a mapped, page-aligned host address (the page holds the loan); the
        // function only looks the address up.
        let looked_up = unsafe {
            (external.fp().get_memory_host_pointer_properties_ext)(
                gpu.device.handle(),
                handle,
                start as *const std::ffi::c_void,
                &mut properties,
            )
        };
        if looked_up != vk::Result::SUCCESS {
            return Err(from_vk("vkGetMemoryHostPointerPropertiesEXT", looked_up));
        }
        let mut external_info = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
        let info = vk::BufferCreateInfo::default().size(size).usage(BUFFER_USAGE).push_next(&mut external_info);
        // SAFETY: a valid create info; destroyed on every path below or by `Drop`.
        let buffer = unsafe { gpu.device.create_buffer(&info, None) }.map_err(|e| from_vk("vkCreateBuffer", e))?;
        // SAFETY: a live buffer of this device.
        let requirements = unsafe { gpu.device.get_buffer_memory_requirements(buffer) };
        let types = requirements.memory_type_bits & properties.memory_type_bits;
        let Some(type_index) = (0..32).find(|i| types & (1 << i) != 0) else {
            // SAFETY: unused.
            unsafe { gpu.device.destroy_buffer(buffer, None) };
            return Err(Error::invalid_argument(format!(
                "vulkan: no memory type can import host memory at {address:#x} for a storage buffer"
            )));
        };
        let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
            .handle_type(handle)
            .host_pointer(start as *mut std::ffi::c_void);
        let allocate = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(type_index)
            .push_next(&mut import);
        // SAFETY: the loan (and so its pages) stays valid until the release, which runs after the
        // memory object is freed (`Drop`).
        let device_memory = match unsafe { gpu.device.allocate_memory(&allocate, None) } {
            Ok(device_memory) => device_memory,
            Err(e) => {
                // SAFETY: unused.
                unsafe { gpu.device.destroy_buffer(buffer, None) };
                return Err(from_vk("vkAllocateMemory (import of host memory)", e));
            }
        };
        // SAFETY: the memory was made for this buffer's requirements and size.
        if let Err(e) = unsafe { gpu.device.bind_buffer_memory(buffer, device_memory, 0) } {
            // SAFETY: unused.
            unsafe {
                gpu.device.destroy_buffer(buffer, None);
                gpu.device.free_memory(device_memory, None);
            }
            return Err(from_vk("vkBindBufferMemory", e));
        }
        counter.0.fetch_add(size, Ordering::Relaxed);
        let ptr = NonNull::new(start as *mut u8);
        Ok(Block {
            gpu: gpu.clone(),
            buffer,
            backing: Backing::Imported(device_memory, Some(memory.into_release())),
            ptr,
            base,
            size,
            counter: Some(counter.clone()),
        })
    }

    /// `length` bytes from `offset` of `buffer`, a `VkBuffer` of `gpu`'s device that the embedder
    /// created and bound memory to (`Device::import_external_memory`). Checked: a non-null handle,
    /// and a range inside the buffer's memory requirements (`vkGetBufferMemoryRequirements`, whose
    /// size is at least the buffer's: an upper bound, the only size Vulkan tells). Not mapped, not
    /// counted (the embedder allocated it); `release` runs when the block drops, or now on an error.
    pub fn external(
        gpu: &Arc<Gpu>,
        buffer: vk::Buffer,
        offset: u64,
        length: u64,
        release: ReleaseOnce,
    ) -> Result<Block> {
        let what = || format!("vulkan: import of Vulkan buffer {:#x} [{offset}, +{length})", buffer.as_raw());
        if buffer == vk::Buffer::null() {
            return Err(Error::invalid_argument(format!("{}: a null VkBuffer", what())));
        }
        let Some(end) = offset.checked_add(length) else {
            return Err(Error::out_of_range(format!("{}: the range ends past 2^64", what())));
        };
        // SAFETY: the embedder vouches (the import's contract) that `buffer` is a live buffer of this
        // device; the query reads nothing else.
        let requirements = unsafe { gpu.device.get_buffer_memory_requirements(buffer) };
        if end > requirements.size {
            return Err(Error::out_of_range(format!(
                "{}: past the end of the buffer ({} bytes at most, its memory requirements' size)",
                what(),
                requirements.size
            )));
        }
        Ok(Block {
            gpu: gpu.clone(),
            buffer,
            backing: Backing::External(Some(release)),
            ptr: None,
            base: offset,
            size: length,
            counter: None,
        })
    }

    /// `size` bytes (at least 4, a multiple of 4) of device-local memory of its own that can be
    /// exported as an opaque file descriptor ([`Block::export_fd`]): a `VkBuffer` created with
    /// `VkExternalMemoryBufferCreateInfo`, bound at offset 0 to a `VkDeviceMemory` allocated for it
    /// alone with `VkExportMemoryAllocateInfo` (and `VkMemoryDedicatedAllocateInfo` where the device
    /// requires a dedicated allocation). Not mapped; its contents start undefined. Counted in
    /// `counter` (its allocation size).
    #[cfg(unix)]
    pub fn exportable(gpu: &Arc<Gpu>, size: u64, counter: &Arc<MemoryCounter>) -> Result<Block> {
        let sharing = gpu.physical.fd_sharing;
        if gpu.memory_fd.is_none() {
            return Err(Error::unimplemented(
                "vulkan: the device has no VK_KHR_external_memory_fd, which exporting memory as a file descriptor needs",
            ));
        }
        if !sharing.memory_export {
            return Err(Error::unimplemented(
                "vulkan: the device does not export storage-buffer memory as opaque file descriptors \
                 (vkGetPhysicalDeviceExternalBufferProperties, VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT)",
            ));
        }
        let vk_size = size.max(4).next_multiple_of(4);
        let what = || format!("exportable memory of {size} bytes");
        let (buffer, requirements, required_dedicated) = shareable_buffer(gpu, vk_size)?;
        let dedicated = sharing.memory_dedicated_only || required_dedicated;
        let made = allocate_shared(gpu, buffer, &requirements, requirements.size, dedicated, None)
            .and_then(|memory| bind_or_free(gpu, buffer, memory));
        let memory = match made {
            Ok(memory) => memory,
            Err(e) => {
                // SAFETY: not bound or used.
                unsafe { gpu.device.destroy_buffer(buffer, None) };
                return Err(e.context(what()));
            }
        };
        counter.0.fetch_add(requirements.size, Ordering::Relaxed);
        Ok(Block {
            gpu: gpu.clone(),
            buffer,
            backing: Backing::Shared {
                memory,
                allocation_size: requirements.size,
                dedicated,
                exportable: true,
                release: None,
            },
            ptr: None,
            base: 0,
            size: requirements.size,
            counter: Some(counter.clone()),
        })
    }

    /// A memory object another API exported as the opaque file descriptor `fd`, of `length` bytes
    /// (its allocation size), imported (`VkImportMemoryFdInfoKHR`) and bound to a `VkBuffer` of
    /// `length` bytes. `fd` is only borrowed: Vulkan is handed a duplicate, which it owns once the
    /// import succeeded and which is closed here when it fails. The memory type is the one
    /// [`Block::exportable`] picks (Vulkan requires an import of an opaque fd to name the exporter's
    /// type; the same driver picks the same). Not counted: another API allocated it. `release` runs
    /// once the memory object is freed (or now, on an error).
    #[cfg(unix)]
    pub fn import_fd(gpu: &Arc<Gpu>, fd: i32, length: u64, dedicated: bool, release: ReleaseOnce) -> Result<Block> {
        use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd};
        let what = || format!("import of opaque file descriptor {fd} ({length} bytes)");
        if gpu.memory_fd.is_none() {
            return Err(Error::unimplemented(format!(
                "vulkan: {}: the device has no VK_KHR_external_memory_fd, which importing memory from a file \
                 descriptor needs",
                what()
            )));
        }
        if !gpu.physical.fd_sharing.memory_import {
            return Err(Error::unimplemented(format!(
                "vulkan: {}: the device does not import storage-buffer memory from opaque file descriptors \
                 (vkGetPhysicalDeviceExternalBufferProperties)",
                what()
            )));
        }
        let (buffer, requirements, _) = shareable_buffer(gpu, length).map_err(|e| e.context(what()))?;
        let destroy = |e: Error| {
            // SAFETY: not bound or used.
            unsafe { gpu.device.destroy_buffer(buffer, None) };
            Err(e.context(what()))
        };
        if requirements.size > length {
            return destroy(Error::invalid_argument(format!(
                "a buffer over it needs {} bytes of memory (vkGetBufferMemoryRequirements), more than the object has",
                requirements.size
            )));
        }
        // SAFETY: the caller of `Device::import_external_memory` handed over an open descriptor,
        // which the HAL keeps open for the length of this call.
        let duplicate = match unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned() {
            Ok(duplicate) => duplicate,
            Err(e) => return destroy(Error::invalid_argument(format!("duplicating the descriptor: {e}"))),
        };
        let memory = match allocate_shared(gpu, buffer, &requirements, length, dedicated, Some(duplicate.as_raw_fd())) {
            // A successful import took the duplicate: Vulkan closes it when the memory is freed.
            Ok(memory) => memory,
            Err(e) => {
                if gpu.physical.closes_refused_fds {
                    // Closed by the driver already (lavapipe): closing it again could close a
                    // descriptor another thread just opened under the same number.
                    let _ = duplicate.into_raw_fd();
                }
                // Otherwise `duplicate` drops here, closed: Vulkan leaves a refused one to us.
                return destroy(e);
            }
        };
        let _ = duplicate.into_raw_fd();
        let memory = match bind_or_free(gpu, buffer, memory) {
            Ok(memory) => memory,
            Err(e) => return destroy(e),
        };
        Ok(Block {
            gpu: gpu.clone(),
            buffer,
            backing: Backing::Shared {
                memory,
                allocation_size: length,
                dedicated,
                exportable: false,
                release: Some(release),
            },
            ptr: None,
            base: 0,
            size: length,
            counter: None,
        })
    }

    /// A new opaque file descriptor of the memory of an [exportable](Block::exportable) block
    /// (`vkGetMemoryFdKHR`), with the memory's allocation size and whether it is dedicated:
    /// everything an import needs. `InvalidArgument` for other blocks.
    #[cfg(unix)]
    pub fn export_fd(&self) -> Result<(std::os::fd::OwnedFd, u64, bool)> {
        use std::os::fd::FromRawFd;
        let Backing::Shared { memory, allocation_size, dedicated, exportable: true, .. } = &self.backing else {
            return Err(Error::invalid_argument(format!(
                "vulkan: the memory of Vulkan buffer {:#x} was not allocated for export \
                 (driver_vulkan::interop::allocate_exportable_buffer makes such buffers)",
                self.buffer.as_raw()
            )));
        };
        let Some(memory_fd) = &self.gpu.memory_fd else {
            return Err(Error::internal("vulkan: exportable memory on a device without VK_KHR_external_memory_fd"));
        };
        let info = vk::MemoryGetFdInfoKHR::default().memory(*memory).handle_type(OPAQUE_FD);
        // SAFETY: a live memory object of this device, allocated with VkExportMemoryAllocateInfo
        // for this handle type.
        let fd = unsafe { memory_fd.get_memory_fd(&info) }.map_err(|e| from_vk("vkGetMemoryFdKHR", e))?;
        // SAFETY: vkGetMemoryFdKHR made a new descriptor, which the caller owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Ok((fd, *allocation_size, *dedicated))
    }

    /// The mapped address of the `VkBuffer`'s byte 0: `InvalidArgument` for a block that is not
    /// mapped here (device memory the host cannot see, an embedder's buffer, memory shared through
    /// a file descriptor).
    pub fn ptr(&self) -> Result<NonNull<u8>> {
        self.ptr.ok_or_else(|| {
            Error::invalid_argument(format!(
                "vulkan: Vulkan buffer {:#x} has no host mapping here (device memory the host cannot see, an \
                 embedder's buffer, or memory shared with another API)",
                self.buffer.as_raw()
            ))
        })
    }

    /// Whether the block is not mapped here (device memory the host cannot see, an embedder's
    /// buffer, memory shared through a file descriptor): the host reaches it only through device
    /// copies.
    pub fn is_unmapped(&self) -> bool {
        self.ptr.is_none()
    }

    /// Whether the host may read or write the block's memory behind the device's back: it is mapped
    /// here, or it is not the HAL's own allocation (host memory the embedder lent, an embedder's
    /// buffer, memory shared with another API, which others may map). Device work that touches such
    /// a block ends with a barrier that makes its writes visible to the host; the HAL's own
    /// unmapped device memory is reached from the host only through device copies into mapped
    /// staging, which carry that barrier themselves.
    pub fn host_may_access(&self) -> bool {
        self.ptr.is_some() || !matches!(self.backing, Backing::Allocated(_))
    }

    /// The device the block is on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The mapped address of the HAL buffer's byte 0 (`None` for a block not mapped here).
    pub fn first_byte(&self) -> Option<NonNull<u8>> {
        // SAFETY: `base` lies inside the mapping (an import's offset into its first page).
        self.ptr.map(|ptr| unsafe { ptr.add(self.base as usize) })
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if let Some(counter) = &self.counter {
            counter.0.fetch_sub(self.size, Ordering::Relaxed);
        }
        if let Backing::External(release) = &mut self.backing {
            // The embedder's buffer: the last holder is gone (submissions hold a block until they
            // completed), so it is theirs again.
            drop(release.take());
            return;
        }
        // SAFETY: the last holder is gone, and submissions hold a block until they completed.
        unsafe { self.gpu.device.destroy_buffer(self.buffer, None) };
        match &mut self.backing {
            Backing::Allocated(allocation) => {
                if let Some(allocation) = allocation.take() {
                    let _ = self.gpu.with_allocator(|a| a.free(allocation).map_err(|e| Error::internal(e.to_string())));
                }
            }
            Backing::Imported(device_memory, release) | Backing::Shared { memory: device_memory, release, .. } => {
                // SAFETY: the buffer bound to it is gone.
                unsafe { self.gpu.device.free_memory(*device_memory, None) };
                // The embedder gets its memory back only now.
                drop(release.take());
            }
            Backing::External(_) => {}
        }
    }
}

/// A HAL buffer's memory: a block now (allocated buffers), or a block from its alloca to its
/// dealloca (transient buffers).
pub struct VulkanMemory {
    gpu: Arc<Gpu>,
    size: u64,
    memory_type: MemoryType,
    mappable: bool,
    transient: bool,
    counter: Arc<MemoryCounter>,
    block: Mutex<Option<Arc<Block>>>,
}

impl VulkanMemory {
    /// Memory of `size` bytes now.
    pub fn allocate(gpu: &Arc<Gpu>, counter: &Arc<MemoryCounter>, memory_type: MemoryType, size: u64) -> Result<Self> {
        let block = Block::new(gpu, size, Some(counter), "hal buffer", Placement::of(memory_type), true)?;
        Ok(Self::holding(gpu, counter, memory_type, size, block))
    }

    /// A buffer over host memory the embedder lends (see [`Block::import`]).
    pub fn import(
        gpu: &Arc<Gpu>,
        counter: &Arc<MemoryCounter>,
        memory_type: MemoryType,
        memory: ImportedHostMemory,
    ) -> Result<Self> {
        let size = memory.length();
        let block = Block::import(gpu, memory, counter)?;
        Ok(Self::holding(gpu, counter, memory_type, size, block))
    }

    /// A buffer over `block`, a range of the embedder's `VkBuffer` (see [`Block::external`]).
    /// Never mappable: the embedder's memory has no mapping here.
    pub fn external(gpu: &Arc<Gpu>, counter: &Arc<MemoryCounter>, block: Block) -> Self {
        let size = block.size;
        Self::holding(gpu, counter, MemoryType::DEVICE_LOCAL, size, block)
    }

    /// A buffer of `size` bytes over `block`, memory shared through a file descriptor (see
    /// [`Block::exportable`], [`Block::import_fd`]). Never mappable: device-local memory not mapped
    /// here.
    pub fn shared(gpu: &Arc<Gpu>, counter: &Arc<MemoryCounter>, size: u64, block: Block) -> Self {
        Self::holding(gpu, counter, MemoryType::DEVICE_LOCAL, size, block)
    }

    /// Memory of `size` bytes that holds `block` for its whole life.
    fn holding(gpu: &Arc<Gpu>, counter: &Arc<MemoryCounter>, memory_type: MemoryType, size: u64, block: Block) -> Self {
        VulkanMemory {
            gpu: gpu.clone(),
            size,
            memory_type,
            mappable: memory_type.contains(MemoryType::HOST_VISIBLE),
            transient: false,
            counter: counter.clone(),
            block: Mutex::new(Some(Arc::new(block))),
        }
    }

    /// A transient buffer of `size` bytes, without memory until its alloca runs.
    pub fn transient(gpu: &Arc<Gpu>, counter: &Arc<MemoryCounter>, memory_type: MemoryType, size: u64) -> Self {
        VulkanMemory {
            gpu: gpu.clone(),
            size,
            memory_type,
            mappable: memory_type.contains(MemoryType::HOST_VISIBLE),
            transient: true,
            counter: counter.clone(),
            block: Mutex::new(None),
        }
    }

    /// The driver's memory behind `buffer` (`InvalidArgument` for another driver's buffer).
    pub fn of(buffer: &Buffer) -> Result<&VulkanMemory> {
        buffer
            .backend()
            .as_any()
            .downcast_ref::<VulkanMemory>()
            .ok_or_else(|| Error::invalid_argument(format!("{buffer}: not a Vulkan buffer")))
    }

    /// Whether the memory is a transient buffer's, whose `VkBuffer` is only known once its alloca ran.
    pub fn is_transient(&self) -> bool {
        self.transient
    }

    /// Whether the memory is on `gpu`'s `VkDevice`.
    pub fn is_on(&self, gpu: &Arc<Gpu>) -> bool {
        Arc::ptr_eq(&self.gpu, gpu)
    }

    /// The block now behind the memory: `FailedPrecondition` naming the buffer for a transient
    /// buffer whose alloca has not run or whose dealloca ran.
    pub fn block(&self, buffer: &Buffer) -> Result<Arc<Block>> {
        lock(&self.block).clone().ok_or_else(|| {
            Error::failed_precondition(format!(
                "{buffer}: has no memory (a transient buffer whose queue_alloca has not run, or whose \
                 queue_dealloca already ran)"
            ))
        })
    }

    /// Commits a transient buffer's memory (its alloca).
    pub fn commit(&self, buffer: &Buffer) -> Result<()> {
        let mut block = lock(&self.block);
        if !self.transient || block.is_some() {
            return Err(Error::failed_precondition(format!("{buffer}: alloca of a buffer that has memory")));
        }
        let placement = Placement::of(self.memory_type);
        let made = Block::new(&self.gpu, self.size, Some(&self.counter), "hal transient buffer", placement, false)?;
        *block = Some(Arc::new(made));
        Ok(())
    }

    /// Releases a transient buffer's memory (its dealloca); held views and submissions keep it
    /// until they end.
    pub fn release(&self, buffer: &Buffer) -> Result<()> {
        let mut block = lock(&self.block);
        if !self.transient || block.is_none() {
            return Err(Error::failed_precondition(format!("{buffer}: dealloca of a buffer without memory")));
        }
        *block = None;
        Ok(())
    }
}

/// A `VkBuffer` of `size` bytes whose memory may be shared through an opaque file descriptor
/// (`VkExternalMemoryBufferCreateInfo`), with its memory requirements and whether it requires a
/// dedicated allocation (`VkMemoryDedicatedRequirements`).
#[cfg(unix)]
fn shareable_buffer(gpu: &Gpu, size: u64) -> Result<(vk::Buffer, vk::MemoryRequirements, bool)> {
    let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(OPAQUE_FD);
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(BUFFER_USAGE)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .push_next(&mut external);
    // SAFETY: a valid create info; the callers destroy the buffer on every error path.
    let buffer = unsafe { gpu.device.create_buffer(&info, None) }.map_err(|e| from_vk("vkCreateBuffer", e))?;
    let mut dedicated = vk::MemoryDedicatedRequirements::default();
    let mut requirements = vk::MemoryRequirements2::default().push_next(&mut dedicated);
    let query = vk::BufferMemoryRequirementsInfo2::default().buffer(buffer);
    // SAFETY: a live buffer of this device; the chain lives on this stack frame (Vulkan 1.1 core).
    unsafe { gpu.device.get_buffer_memory_requirements2(&query, &mut requirements) };
    let memory_requirements = requirements.memory_requirements;
    let required = dedicated.requires_dedicated_allocation == vk::TRUE;
    Ok((buffer, memory_requirements, required))
}

/// The memory type shared memory lives in, among `bits`: device-local and not host-visible where
/// there is one (NVIDIA's plain video memory), else device-local (lavapipe's only type), else the
/// first allowed. Exporter and importer pick the same, as an import of an opaque fd requires.
#[cfg(unix)]
fn shared_memory_type(gpu: &Gpu, bits: u32) -> Option<u32> {
    // SAFETY: a plain query of the device's physical device.
    let properties = unsafe { gpu.instance.instance.get_physical_device_memory_properties(gpu.physical.physical) };
    let types = properties.memory_types_as_slice();
    let allowed = |i: &usize| bits & (1 << i) != 0;
    let flags = |i: &usize| types[*i].property_flags;
    let local = vk::MemoryPropertyFlags::DEVICE_LOCAL;
    let visible = vk::MemoryPropertyFlags::HOST_VISIBLE;
    (0..types.len())
        .filter(allowed)
        .find(|i| flags(i).contains(local) && !flags(i).contains(visible))
        .or_else(|| (0..types.len()).filter(allowed).find(|i| flags(i).contains(local)))
        .or_else(|| (0..types.len()).find(allowed))
        .map(|i| i as u32)
}

/// Allocates memory of `allocation_size` bytes for `buffer` (not bound): exportable as an opaque
/// fd, or (`import`) imported from the descriptor given, which Vulkan owns if this succeeds.
#[cfg(unix)]
fn allocate_shared(
    gpu: &Gpu,
    buffer: vk::Buffer,
    requirements: &vk::MemoryRequirements,
    allocation_size: u64,
    dedicated: bool,
    import: Option<i32>,
) -> Result<vk::DeviceMemory> {
    let Some(type_index) = shared_memory_type(gpu, requirements.memory_type_bits) else {
        return Err(Error::invalid_argument("vulkan: no memory type can back a shareable storage buffer"));
    };
    let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(OPAQUE_FD);
    let mut imported = vk::ImportMemoryFdInfoKHR::default().handle_type(OPAQUE_FD).fd(import.unwrap_or(-1));
    let mut dedicated_info = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
    let mut allocate = vk::MemoryAllocateInfo::default().allocation_size(allocation_size).memory_type_index(type_index);
    allocate = match import {
        Some(_) => allocate.push_next(&mut imported),
        None => allocate.push_next(&mut export),
    };
    if dedicated {
        allocate = allocate.push_next(&mut dedicated_info);
    }
    let call =
        if import.is_some() { "vkAllocateMemory (import of an opaque fd)" } else { "vkAllocateMemory (exportable)" };
    // SAFETY: a valid allocate info whose chain lives on this stack frame; an imported descriptor
    // is an open one the caller owns (Vulkan takes it only on success).
    unsafe { gpu.device.allocate_memory(&allocate, None) }.map_err(|e| from_vk(call, e))
}

/// Binds `memory` (from [`allocate_shared`] for `buffer`) to `buffer` at offset 0, or frees it.
#[cfg(unix)]
fn bind_or_free(gpu: &Gpu, buffer: vk::Buffer, memory: vk::DeviceMemory) -> Result<vk::DeviceMemory> {
    // SAFETY: fresh memory of at least the buffer's requirements, of a type its requirements allow.
    if let Err(e) = unsafe { gpu.device.bind_buffer_memory(buffer, memory, 0) } {
        // SAFETY: unused; freeing an imported object releases the descriptor Vulkan took with it.
        unsafe { gpu.device.free_memory(memory, None) };
        return Err(from_vk("vkBindBufferMemory", e));
    }
    Ok(memory)
}

/// The block and byte offset behind `buffer` (a subspan's offset included).
pub fn resolve(buffer: &Buffer) -> Result<(Arc<Block>, u64)> {
    let block = VulkanMemory::of(buffer)?.block(buffer)?;
    let base = block.base + buffer.memory_offset();
    Ok((block, base))
}

// SAFETY: `size` never changes; a view points at the block's mapping of at least `size` bytes and
// keeps the block (so the mapping) alive; a buffer without a block gives no view.
unsafe impl BufferBackend for VulkanMemory {
    fn size(&self) -> u64 {
        self.size
    }

    fn host_view(&self) -> Option<HostView<'_>> {
        if !self.mappable {
            return None;
        }
        let block = lock(&self.block).clone()?;
        let ptr = block.first_byte()?;
        Some(HostView::kept_alive(ptr, block))
    }

    fn device_address(&self) -> u64 {
        // Vulkan kernels reach buffers through descriptors; the mapped address identifies it (and
        // is as aligned as the offset in the `VkBuffer`, which the HAL's binding check reads). An
        // embedder's buffer is not mapped: its offset in the `VkBuffer` stands in.
        lock(&self.block).as_ref().map_or(0, |b| b.first_byte().map_or(b.base, |ptr| ptr.as_ptr() as u64))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
