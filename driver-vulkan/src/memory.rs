//! Buffers: a `VkBuffer` bound to host-visible memory from gpu-allocator. Every memory type the
//! driver offers is backed by mapped memory (lavapipe's only type is device-local and host-visible;
//! NVIDIA's device-local memory is host-visible too), so queue reads and writes are host copies in
//! queue order; `DEVICE_LOCAL`-only buffers are still not mappable through the HAL, as on any GPU.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use hal::driver::{BufferBackend, BufferExt, HostView};
use hal::{Buffer, Error, MemoryType, Result};

use crate::error::from_vk;
use crate::gpu::Gpu;

/// Allocations at least this large get memory of their own.
const DEDICATED_BYTES: u64 = 64 << 20;

/// Bytes of buffer memory in use on a device.
#[derive(Debug, Default)]
pub struct MemoryCounter(AtomicU64);

impl MemoryCounter {
    /// Bytes now allocated.
    pub fn in_use(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A `VkBuffer` with its memory, mapped; freed when the last holder drops it (a buffer handle, a
/// mapping's view, or a submission in flight).
pub struct Block {
    gpu: Arc<Gpu>,
    pub(crate) buffer: vk::Buffer,
    allocation: Mutex<Option<Allocation>>,
    ptr: NonNull<u8>,
    size: u64,
    counter: Option<Arc<MemoryCounter>>,
}

// SAFETY: `ptr` points into the mapped allocation the block owns; the block hands it out only as a
// raw address, and the memory stays mapped until the block drops.
unsafe impl Send for Block {}
// SAFETY: as above; the block has no interior state but the allocation behind a lock.
unsafe impl Sync for Block {}

impl Block {
    /// A buffer of `size` bytes (at least 4: Vulkan has no empty buffers) in mapped memory,
    /// counted in `counter` when given. The memory is zeroed.
    pub fn new(gpu: &Arc<Gpu>, size: u64, counter: Option<&Arc<MemoryCounter>>, name: &str) -> Result<Block> {
        let vk_size = size.max(4).next_multiple_of(4);
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST
            | vk::BufferUsageFlags::INDIRECT_BUFFER;
        let info = vk::BufferCreateInfo::default().size(vk_size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
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
                    location: MemoryLocation::CpuToGpu,
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
        let ptr = allocation.mapped_ptr().map(|p| p.cast::<u8>());
        // SAFETY: the allocation's memory and offset fit the buffer's requirements (the allocator
        // was given them).
        let bound = unsafe { gpu.device.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) };
        let (Some(ptr), Ok(())) = (ptr, bound) else {
            let _ = gpu.with_allocator(|a| a.free(allocation).map_err(|e| Error::internal(e.to_string())));
            // SAFETY: not used by any command.
            unsafe { gpu.device.destroy_buffer(buffer, None) };
            return Err(match bound {
                Err(e) => from_vk("vkBindBufferMemory", e),
                Ok(()) => Error::internal("vulkan: host-visible memory came back unmapped"),
            });
        };
        // SAFETY: the mapping covers `vk_size >= size` bytes, and nothing else uses it yet. Memory
        // recycled by the allocator may hold old bytes; new buffers start zeroed.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, vk_size as usize) };
        if let Some(counter) = counter {
            counter.0.fetch_add(vk_size, Ordering::Relaxed);
        }
        Ok(Block {
            gpu: gpu.clone(),
            buffer,
            allocation: Mutex::new(Some(allocation)),
            ptr,
            size: vk_size,
            counter: counter.cloned(),
        })
    }

    /// The mapped address of byte 0.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if let Some(counter) = &self.counter {
            counter.0.fetch_sub(self.size, Ordering::Relaxed);
        }
        // SAFETY: the last holder is gone, and submissions hold a block until they completed.
        unsafe { self.gpu.device.destroy_buffer(self.buffer, None) };
        if let Some(allocation) = self.allocation.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = self.gpu.with_allocator(|a| a.free(allocation).map_err(|e| Error::internal(e.to_string())));
        }
    }
}

/// A HAL buffer's memory: a block now (allocated buffers), or a block from its alloca to its
/// dealloca (transient buffers).
pub struct VulkanMemory {
    gpu: Arc<Gpu>,
    size: u64,
    mappable: bool,
    transient: bool,
    counter: Arc<MemoryCounter>,
    block: Mutex<Option<Arc<Block>>>,
}

impl VulkanMemory {
    /// Memory of `size` bytes now.
    pub fn allocate(gpu: &Arc<Gpu>, counter: &Arc<MemoryCounter>, memory_type: MemoryType, size: u64) -> Result<Self> {
        let block = Block::new(gpu, size, Some(counter), "hal buffer")?;
        Ok(VulkanMemory {
            gpu: gpu.clone(),
            size,
            mappable: memory_type.contains(MemoryType::HOST_VISIBLE),
            transient: false,
            counter: counter.clone(),
            block: Mutex::new(Some(Arc::new(block))),
        })
    }

    /// A transient buffer of `size` bytes, without memory until its alloca runs.
    pub fn transient(gpu: &Arc<Gpu>, counter: &Arc<MemoryCounter>, memory_type: MemoryType, size: u64) -> Self {
        VulkanMemory {
            gpu: gpu.clone(),
            size,
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

    /// Whether the memory is on `gpu`'s `VkDevice`.
    pub fn is_on(&self, gpu: &Arc<Gpu>) -> bool {
        Arc::ptr_eq(&self.gpu, gpu)
    }

    /// The block now behind the memory: `FailedPrecondition` naming the buffer for a transient
    /// buffer whose alloca has not run or whose dealloca ran.
    pub fn block(&self, buffer: &Buffer) -> Result<Arc<Block>> {
        self.block.lock().unwrap_or_else(|p| p.into_inner()).clone().ok_or_else(|| {
            Error::failed_precondition(format!(
                "{buffer}: has no memory (a transient buffer whose queue_alloca has not run, or whose \
                 queue_dealloca already ran)"
            ))
        })
    }

    /// Commits a transient buffer's memory (its alloca).
    pub fn commit(&self, buffer: &Buffer) -> Result<()> {
        let mut block = self.block.lock().unwrap_or_else(|p| p.into_inner());
        if !self.transient || block.is_some() {
            return Err(Error::failed_precondition(format!("{buffer}: alloca of a buffer that has memory")));
        }
        *block = Some(Arc::new(Block::new(&self.gpu, self.size, Some(&self.counter), "hal transient buffer")?));
        Ok(())
    }

    /// Releases a transient buffer's memory (its dealloca); held views and submissions keep it
    /// until they end.
    pub fn release(&self, buffer: &Buffer) -> Result<()> {
        let mut block = self.block.lock().unwrap_or_else(|p| p.into_inner());
        if !self.transient || block.is_none() {
            return Err(Error::failed_precondition(format!("{buffer}: dealloca of a buffer without memory")));
        }
        *block = None;
        Ok(())
    }
}

/// The block and byte offset behind `buffer` (a subspan's offset included).
pub fn resolve(buffer: &Buffer) -> Result<(Arc<Block>, u64)> {
    let block = VulkanMemory::of(buffer)?.block(buffer)?;
    Ok((block, buffer.memory_offset()))
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
        let block = self.block.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        let ptr = block.ptr();
        Some(HostView::kept_alive(ptr, block))
    }

    fn device_address(&self) -> u64 {
        // Vulkan kernels reach buffers through descriptors; the mapped address identifies it.
        self.block.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map_or(0, |b| b.ptr().as_ptr() as u64)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
