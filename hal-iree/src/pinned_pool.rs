//! The memory of IREE's buffers on a CUDA device: pinned, device-mapped host memory from the HAL.
//!
//! IREE's heap allocator makes a CUDA device's buffers (so IREE maps them as it maps any heap
//! buffer), with this pool as its data allocator: each allocation is a host-visible HAL buffer
//! (pinned by `cuMemHostAlloc`, which kernels reach through its device address). A queue operation
//! on an IREE buffer imports its range back into the HAL device; the CUDA driver sees the memory is
//! already mapped and uses it in place, with no registration per operation.
//!
//! Pinned allocations and frees are slow CUDA calls (a free may wait for the device), and IREE
//! allocates per call (transients), so freed blocks are kept, by power-of-two size, and handed out
//! again; a block is reused only once no import of it is in flight (each import holds a lease, given
//! back when the HAL is done with it), so work still reading it never sees the next owner's data.
//!
//! Kernels read this memory over the host link, not from the GPU's own memory: fine for the small
//! programs this bridge is measured with, slower than IREE's CUDA driver for large tensors (see
//! `README.md`).
//!
//! On Vulkan devices the blocks are host-visible Vulkan memory (sub-allocated by the driver's
//! allocator, so a block costs no driver call of its own) and a queue operation uses a subspan of
//! the block's buffer; blocks are not reused (the HAL keeps a freed block's memory until the last
//! operation using it is done).

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::ffi::{self, code, iree_status_t, sys};

/// Smallest block handed out (one page).
const MIN_BLOCK: usize = 4096;
/// Freed blocks kept for reuse, in bytes; past it the oldest idle ones are freed.
const KEEP_BYTES: usize = 256 << 20;

/// One pinned allocation.
pub(crate) struct Block {
    /// Holds the memory (freed when the last lease, subspan and the pool let go).
    buffer: hal::Buffer,
    base: usize,
    len: usize,
}

#[derive(Default)]
struct State {
    /// Blocks IREE holds, by base address.
    live: BTreeMap<usize, Arc<Block>>,
    /// Blocks IREE freed, oldest first (some may still be leased by imports in flight).
    freed: Vec<Arc<Block>>,
    /// Bytes in `freed`.
    freed_bytes: usize,
}

/// A CUDA device's pool of pinned blocks (see the module docs).
pub(crate) struct PinnedPool {
    /// `None` once the device is gone: frees still work, allocations fail.
    device: Mutex<Option<hal::Device>>,
    state: Mutex<State>,
    /// CUDA: freed blocks are reused and operations import ranges (leasing the block); Vulkan:
    /// freed blocks go, and operations take subspans of the block's buffer.
    pinned_imports: bool,
}

impl PinnedPool {
    /// A pool allocating on `device`, and IREE's allocator over it. The allocator holds one
    /// reference for as long as IREE may call it (IREE's buffers outlive their device), which is
    /// never given back: a few words per device; [`close`](Self::close) frees the blocks.
    /// `pinned_imports`: CUDA's way (see the field).
    pub(crate) fn create(device: hal::Device, pinned_imports: bool) -> (Arc<PinnedPool>, sys::iree_allocator_t) {
        let pool = Arc::new(PinnedPool {
            device: Mutex::new(Some(device)),
            state: Mutex::new(State::default()),
            pinned_imports,
        });
        let allocator = sys::iree_allocator_t { self_: Arc::into_raw(pool.clone()).cast_mut().cast(), ctl: Some(ctl) };
        (pool, allocator)
    }

    /// Frees the idle blocks and refuses allocations from now on (the device is going away).
    pub(crate) fn close(&self) {
        *hal::driver::lock(&self.device) = None;
        let mut state = hal::driver::lock(&self.state);
        state.freed.clear();
        state.freed_bytes = 0;
    }

    /// A block of at least `bytes` bytes: an idle freed one of its size, or a new one.
    fn allocate(&self, bytes: usize) -> Result<usize, hal::Error> {
        let size = bytes
            .max(MIN_BLOCK)
            .checked_next_power_of_two()
            .ok_or_else(|| hal::Error::resource_exhausted(format!("a pinned allocation of {bytes} bytes")))?;
        {
            let mut state = hal::driver::lock(&self.state);
            if let Some(at) = state.freed.iter().position(|b| b.len == size && Arc::strong_count(b) == 1) {
                let block = state.freed.remove(at);
                state.freed_bytes -= size;
                let base = block.base;
                state.live.insert(base, block);
                return Ok(base);
            }
        }
        let device = hal::driver::lock(&self.device)
            .clone()
            .ok_or_else(|| hal::Error::failed_precondition("an allocation for a CUDA device that is gone"))?;
        let buffer = device.allocate_buffer(hal::BufferParams::host_visible(), size as u64)?;
        let base = {
            let mut mapping = buffer.map(0, size as u64)?;
            // SAFETY: host-visible CUDA memory is pinned and mapped for the buffer's whole life, so
            // the address stays valid after the mapping object goes, while the block holds `buffer`.
            unsafe { mapping.as_mut_slice() }.as_mut_ptr() as usize
        };
        hal::driver::lock(&self.state).live.insert(base, Arc::new(Block { buffer, base, len: size }));
        Ok(base)
    }

    /// IREE frees the block holding `ptr`.
    fn free(&self, ptr: usize) {
        let mut state = hal::driver::lock(&self.state);
        let Some((&base, block)) = state.live.range(..=ptr).next_back() else { return };
        if ptr >= base + block.len {
            return;
        }
        let block = state.live.remove(&base).expect("found above");
        if !self.pinned_imports || hal::driver::lock(&self.device).is_none() {
            return;
        }
        state.freed_bytes += block.len;
        state.freed.push(block);
        while state.freed_bytes > KEEP_BYTES {
            let Some(at) = state.freed.iter().position(|b| Arc::strong_count(b) == 1) else { break };
            let oldest = state.freed.remove(at);
            state.freed_bytes -= oldest.len;
        }
    }

    /// The block holding `ptr..ptr + len`, if this pool made it.
    fn find(&self, ptr: usize, len: usize) -> Option<Arc<Block>> {
        let state = hal::driver::lock(&self.state);
        let (&base, block) = state.live.range(..=ptr).next_back()?;
        (ptr + len <= base + block.len).then(|| block.clone())
    }

    /// `len` bytes at `ptr` of a block of this pool as a HAL buffer of `device`, leasing the block
    /// (and holding `keep`) until the HAL is done with it; `Err(keep)` when the pool did not make
    /// that memory.
    pub(crate) fn import<K: Send + 'static>(
        &self,
        device: &hal::Device,
        ptr: NonNull<u8>,
        len: u64,
        keep: K,
    ) -> Result<Result<hal::Buffer, hal::Error>, K> {
        let Some(block) = self.find(ptr.as_ptr() as usize, len as usize) else { return Err(keep) };
        if !self.pinned_imports {
            // The subspan holds the block's memory for as long as the operation needs it.
            return Ok(block.buffer.subspan((ptr.as_ptr() as usize - block.base) as u64, len));
        }
        // SAFETY: the range lies inside the block's pinned memory (the block holds its buffer),
        // which the lease moved into the release keeps allocated and out of reuse until the HAL
        // lets go of the import.
        Ok(unsafe {
            device.import_host_memory(ptr, len, hal::BufferParams::host_visible(), move || drop((block, keep)))
        })
    }
}

unsafe extern "C" fn ctl(
    this: *mut c_void,
    command: sys::iree_allocator_command_t,
    params: *const c_void,
    inout: *mut *mut c_void,
) -> iree_status_t {
    // SAFETY: `this` is the reference `create` leaked, never given back.
    let pool = unsafe { &*this.cast::<PinnedPool>() };
    let bytes = || {
        // SAFETY: IREE passes its allocation parameters for these commands.
        unsafe { (*params.cast::<sys::iree_allocator_alloc_params_t>()).byte_length }
    };
    match command {
        sys::iree_allocator_command_e_IREE_ALLOCATOR_COMMAND_MALLOC
        | sys::iree_allocator_command_e_IREE_ALLOCATOR_COMMAND_CALLOC => {
            let length = bytes();
            match pool.allocate(length) {
                Ok(base) => {
                    if command == sys::iree_allocator_command_e_IREE_ALLOCATOR_COMMAND_CALLOC {
                        // SAFETY: the block holds at least `length` bytes.
                        unsafe { std::ptr::write_bytes(base as *mut u8, 0, length) };
                    }
                    // SAFETY: writable, per IREE's contract.
                    unsafe { *inout = base as *mut c_void };
                    ffi::ok()
                }
                Err(error) => ffi::from_result(Err(error)),
            }
        }
        sys::iree_allocator_command_e_IREE_ALLOCATOR_COMMAND_REALLOC => {
            let length = bytes();
            // SAFETY: IREE passes the old pointer (or NULL) in `inout`.
            let old = unsafe { *inout } as usize;
            let kept = if old == 0 { None } else { pool.find(old, 0) };
            match pool.allocate(length) {
                Ok(base) => {
                    if let Some(block) = kept {
                        let copy = (block.base + block.len - old).min(length);
                        // SAFETY: both ranges are live blocks of the pool, distinct allocations.
                        unsafe { std::ptr::copy_nonoverlapping(old as *const u8, base as *mut u8, copy) };
                        pool.free(old);
                    }
                    // SAFETY: writable.
                    unsafe { *inout = base as *mut c_void };
                    ffi::ok()
                }
                Err(error) => ffi::from_result(Err(error)),
            }
        }
        sys::iree_allocator_command_e_IREE_ALLOCATOR_COMMAND_FREE => {
            // SAFETY: IREE passes the pointer to free in `inout`.
            let ptr = unsafe { *inout } as usize;
            if ptr != 0 {
                pool.free(ptr);
            }
            ffi::ok()
        }
        other => ffi::status(code::UNIMPLEMENTED, &format!("allocator command {other}")),
    }
}
