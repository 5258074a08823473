//! A GPU device's host-visible memory for IREE's staging and readback buffers: blocks of
//! host-visible HAL buffers (pinned, device-mapped host memory on CUDA; host-visible memory on
//! Vulkan), handed out whole to IREE buffers that ask for host-visible memory.
//!
//! Pinned allocations and frees are slow CUDA calls (a free may wait for the device), and IREE
//! allocates staging buffers per transfer, so on CUDA freed blocks are kept by power-of-two size and
//! handed out again. A queue operation reaches a CUDA block by importing its range back into the
//! HAL device (the driver sees the memory is already mapped and uses it in place), and each import
//! holds a lease given back when the HAL is done with it: a block is reused only once no lease is
//! out, so work still reading it never sees the next owner's data.
//!
//! On Vulkan a block is one allocation of the driver's sub-allocator (no driver call of its own);
//! queue operations use the block's buffer directly, and freed blocks go (the HAL keeps the memory
//! until the last operation using it is done).

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Smallest block handed out (one page).
const MIN_BLOCK: usize = 4096;
/// Freed blocks kept for reuse, in bytes; past it the oldest idle ones are freed.
const KEEP_BYTES: usize = 256 << 20;

/// One host-visible allocation.
pub(crate) struct Block {
    /// Holds the memory (freed when the last lease and the pool let go).
    buffer: hal::Buffer,
    host: NonNull<u8>,
    len: usize,
}

// SAFETY: `host` is the address of memory the block's buffer owns for its whole life; the block
// hands it out, it never dereferences it itself.
unsafe impl Send for Block {}
// SAFETY: as above; the block has no interior state.
unsafe impl Sync for Block {}

impl Block {
    /// Where the host sees the block's first byte.
    pub(crate) fn host(&self) -> NonNull<u8> {
        self.host
    }
}

#[derive(Default)]
struct Freed {
    /// Blocks IREE freed, oldest first (some may still be leased by operations in flight).
    blocks: Vec<Arc<Block>>,
    /// Bytes in `blocks`.
    bytes: usize,
}

/// A GPU device's pool of host-visible blocks (see the module docs).
pub(crate) struct PinnedPool {
    /// `None` once the device is gone: frees still work, allocations fail.
    device: Mutex<Option<hal::Device>>,
    freed: Mutex<Freed>,
    /// CUDA: freed blocks are reused and operations lease them through imports; Vulkan: freed
    /// blocks go, and operations use the block's buffer.
    reuse: bool,
}

impl PinnedPool {
    /// A pool allocating on `device`; `reuse`: CUDA's way (see the field).
    pub(crate) fn new(device: hal::Device, reuse: bool) -> Arc<PinnedPool> {
        Arc::new(PinnedPool { device: Mutex::new(Some(device)), freed: Mutex::default(), reuse })
    }

    /// Frees the idle blocks and refuses allocations from now on (the device is going away).
    pub(crate) fn close(&self) {
        *hal::driver::lock(&self.device) = None;
        *hal::driver::lock(&self.freed) = Freed::default();
    }

    /// A block of at least `bytes` bytes: an idle freed one of its size, or a new one.
    pub(crate) fn take(&self, bytes: u64) -> Result<Arc<Block>, hal::Error> {
        let size = usize::try_from(bytes)
            .ok()
            .and_then(|b| b.max(MIN_BLOCK).checked_next_power_of_two())
            .ok_or_else(|| hal::Error::resource_exhausted(format!("a host-visible block of {bytes} bytes")))?;
        {
            let mut freed = hal::driver::lock(&self.freed);
            if let Some(at) = freed.blocks.iter().position(|b| b.len == size && Arc::strong_count(b) == 1) {
                freed.bytes -= size;
                return Ok(freed.blocks.remove(at));
            }
        }
        let device = hal::driver::lock(&self.device)
            .clone()
            .ok_or_else(|| hal::Error::failed_precondition("an allocation for a device that is gone"))?;
        let buffer = device.allocate_buffer(hal::BufferParams::host_visible(), size as u64)?;
        // Valid while the block holds `buffer`.
        let host = crate::buffer::host_address(&buffer)?;
        Ok(Arc::new(Block { buffer, host, len: size }))
    }

    /// IREE is done with `block`: kept for reuse (CUDA) or let go.
    pub(crate) fn give_back(&self, block: Arc<Block>) {
        if !self.reuse || hal::driver::lock(&self.device).is_none() {
            return;
        }
        let mut freed = hal::driver::lock(&self.freed);
        freed.bytes += block.len;
        freed.blocks.push(block);
        while freed.bytes > KEEP_BYTES {
            let Some(at) = freed.blocks.iter().position(|b| Arc::strong_count(b) == 1) else { break };
            let oldest = freed.blocks.remove(at);
            freed.bytes -= oldest.len;
        }
    }

    /// `block` as a HAL buffer of `device` for one queue operation: on CUDA an import of its memory
    /// that leases the block until the HAL is done with it, on Vulkan the block's buffer.
    pub(crate) fn lend(&self, device: &hal::Device, block: &Arc<Block>) -> Result<hal::Buffer, hal::Error> {
        if !self.reuse {
            return Ok(block.buffer.clone());
        }
        let lease = block.clone();
        // SAFETY: the range is the block's pinned memory (the block holds its buffer), which the
        // lease moved into the release keeps allocated and out of reuse until the HAL lets go.
        unsafe {
            device.import_host_memory(block.host, block.len as u64, hal::BufferParams::host_visible(), move || {
                drop(lease)
            })
        }
    }
}
