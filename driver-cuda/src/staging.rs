//! Pinned host staging memory for queue writes, reads and updates.
//!
//! `cuMemcpy*Async` with pageable host memory may synchronise with the stream (host to device) or is
//! fully synchronous (device to host), which would block a submitting thread on device progress. So
//! transfers go through pinned blocks: a write copies its bytes into a block and enqueues the copy
//! from it; a read copies into a block and the completion hands the bytes over. Blocks come in
//! power-of-two sizes from 4 KiB, are created on demand and reused; a [`StagingBlock`] goes back to
//! the pool when dropped.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;
use hal::driver::{get_mut, lock};
use hal::{Error, Result};

use crate::sys::context::Context;
use crate::sys::result;

/// The smallest block, as a power of two (4 KiB).
const MIN_CLASS_SHIFT: u32 = 12;
/// Size classes: 4 KiB to 2^63 bytes.
const CLASSES: usize = 64 - MIN_CLASS_SHIFT as usize;

/// A pool of pinned host blocks of one context.
pub struct StagingPool {
    context: Arc<Context>,
    free: Mutex<Vec<Vec<HostPtr>>>,
    bytes: AtomicU64,
    in_use: AtomicUsize,
    created: AtomicUsize,
}

/// A pinned host address (plain data; owned by the pool).
#[derive(Clone, Copy)]
struct HostPtr(NonNull<u8>);

// SAFETY: the address names pinned memory owned by the pool; access is ordered by the queue.
unsafe impl Send for HostPtr {}

/// A pinned block on loan from a [`StagingPool`]; returned on drop.
pub struct StagingBlock {
    ptr: HostPtr,
    class: usize,
    pool: Arc<StagingPool>,
}

// SAFETY: the block is exclusively this value's until it is dropped; the pointer is plain data.
unsafe impl Send for StagingBlock {}
// SAFETY: `&StagingBlock` only hands out the address; copies through it are ordered by the queue.
unsafe impl Sync for StagingBlock {}

impl StagingPool {
    /// An empty pool of `context`.
    pub fn new(context: &Arc<Context>) -> Arc<Self> {
        Arc::new(StagingPool {
            context: context.clone(),
            free: Mutex::new(vec![Vec::new(); CLASSES]),
            bytes: AtomicU64::new(0),
            in_use: AtomicUsize::new(0),
            created: AtomicUsize::new(0),
        })
    }

    fn class_of(len: usize) -> Result<usize> {
        let size = len.max(1 << MIN_CLASS_SHIFT).checked_next_power_of_two().ok_or_else(|| {
            Error::resource_exhausted(format!("cuda staging: {len} bytes is larger than any pinned block"))
        })?;
        Ok((size.trailing_zeros() - MIN_CLASS_SHIFT) as usize)
    }

    /// A block of at least `len` bytes.
    pub fn acquire(self: &Arc<Self>, len: usize) -> Result<StagingBlock> {
        let class = Self::class_of(len)?;
        let reused = lock(&self.free)[class].pop();
        let ptr = match reused {
            Some(ptr) => ptr,
            None => self.create(class)?,
        };
        self.in_use.fetch_add(1, Ordering::Relaxed);
        Ok(StagingBlock { ptr, class, pool: self.clone() })
    }

    fn create(&self, class: usize) -> Result<HostPtr> {
        let size = 1usize << (class as u32 + MIN_CLASS_SHIFT);
        let raw = result::mem_host_alloc(&self.context.bind()?, size, sys::CU_MEMHOSTALLOC_PORTABLE)
            .map_err(|e| e.context(format!("cuda staging block of {size} bytes")))?;
        let ptr = NonNull::new(raw.cast::<u8>())
            .ok_or_else(|| Error::internal("cuMemHostAlloc returned success and a null pointer"))?;
        self.bytes.fetch_add(size as u64, Ordering::Relaxed);
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(HostPtr(ptr))
    }

    /// Blocks on loan now.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Blocks created so far.
    pub fn created(&self) -> usize {
        self.created.load(Ordering::Relaxed)
    }
}

impl Drop for StagingPool {
    fn drop(&mut self) {
        // Every block on loan holds an `Arc` of the pool, so all blocks are in the free lists now.
        let free = std::mem::take(get_mut(&mut self.free));
        let Ok(bound) = self.context.bind() else { return };
        for ptr in free.into_iter().flatten() {
            // SAFETY: the block came from cuMemHostAlloc and is freed once, here; no block is on loan
            // (see above), so neither the host nor a copy uses it any more.
            if let Err(e) = unsafe { result::mem_free_host(&bound, ptr.0.as_ptr().cast()) } {
                tracing::debug!(%e, "freeing a staging block failed");
            }
        }
    }
}

impl StagingBlock {
    /// The block's first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.0.as_ptr()
    }
}

impl Drop for StagingBlock {
    fn drop(&mut self) {
        self.pool.in_use.fetch_sub(1, Ordering::Relaxed);
        lock(&self.pool.free)[self.class].push(self.ptr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_powers_of_two_from_4k() {
        assert_eq!(StagingPool::class_of(0).unwrap(), 0);
        assert_eq!(StagingPool::class_of(4096).unwrap(), 0);
        assert_eq!(StagingPool::class_of(4097).unwrap(), 1);
        assert_eq!(StagingPool::class_of(1 << 20).unwrap(), 8);
        assert!(StagingPool::class_of(usize::MAX).is_err());
    }
}
