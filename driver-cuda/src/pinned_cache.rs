//! Pinned host blocks (host-visible buffers, indirect dispatches' fault rings) kept for reuse when
//! their owner drops, instead of freed.
//!
//! `cuMemFreeHost` waits until every kernel running on the GPU has finished and, meanwhile, holds
//! back every other thread's launches (`docs/drivers.md`); memory from `cuMemHostAlloc` has no
//! stream-ordered free (a host memory pool has, but allocates far slower). So a released block
//! goes into its context's cache, and the next allocation that fits takes it (zeroed again) instead
//! of calling `cuMemHostAlloc`. The cache holds at most [`CAPACITY`] bytes; a block that would
//! overflow it is freed as before, and the rest are freed when the context goes (the device's
//! teardown has drained its streams by then).

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUdeviceptr};
use hal::driver::lock;
use hal::{Error, Result};

use crate::context::{Bound, Context};
use crate::result;

/// Bytes of dropped pinned blocks one context keeps for reuse.
pub(crate) const CAPACITY: usize = 256 << 20;

/// The page size pinned allocations are rounded to.
const PAGE: usize = 4096;

/// Pinned, mapped (`DEVICEMAP | PORTABLE`), zeroed host memory of at least `size` bytes: a block
/// `context` kept, or a new one. Give it back with [`release`].
pub(crate) fn allocate(context: &Arc<Context>, size: u64) -> Result<PinnedBlock> {
    let too_large = || Error::resource_exhausted(format!("allocation of {size} bytes does not fit the address space"));
    // Whole pages (what the driver pins anyway), so blocks of equal requests match in the cache; one
    // page for 0 bytes.
    let bytes =
        usize::try_from(size).map_err(|_| too_large())?.max(1).checked_next_multiple_of(PAGE).ok_or_else(too_large)?;
    if let Some(block) = context.pinned_cache().take(bytes) {
        // SAFETY: a kept block holds `block.bytes >= bytes` writable bytes that nothing uses (its
        // owner released it after its last use).
        unsafe { std::ptr::write_bytes(block.host.cast::<u8>(), 0, bytes) };
        return Ok(block);
    }
    let bound = context.bind()?;
    let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
    let raw = result::mem_host_alloc(&bound, bytes, flags)
        .map_err(|e| e.context(format!("host-visible allocation of {size} bytes")))?;
    let address = match result::mem_host_get_device_pointer(&bound, raw) {
        Ok(address) => address,
        Err(e) => {
            // SAFETY: `raw` came from cuMemHostAlloc just above and is not used after this.
            // The error that matters is the lookup's; a failed free would only leak.
            let _ = unsafe { result::mem_free_host(&bound, raw) };
            return Err(e);
        }
    };
    // SAFETY: `raw` holds `bytes` writable bytes that nothing else uses yet.
    unsafe { std::ptr::write_bytes(raw.cast::<u8>(), 0, bytes) };
    Ok(PinnedBlock { host: raw, address, bytes })
}

/// Gives `block` back: kept by the bound context for reuse, or freed when that would overflow
/// [`CAPACITY`].
///
/// # Safety
/// `block` came from [`allocate`] with the bound context, is released once, and neither the host
/// nor the device uses it any more.
pub(crate) unsafe fn release(bound: &Bound<'_>, block: PinnedBlock) -> Result<()> {
    match bound.context().pinned_cache().keep(block) {
        None => Ok(()),
        // SAFETY: from cuMemHostAlloc (per the contract), freed once here: the cache refused it.
        Some(block) => unsafe { result::mem_free_host(bound, block.host) },
    }
}

/// One pinned, mapped block: its host pointer, device address and length.
#[derive(Debug)]
pub(crate) struct PinnedBlock {
    pub(crate) host: *mut c_void,
    pub(crate) address: CUdeviceptr,
    pub(crate) bytes: usize,
}

impl PinnedBlock {
    /// No memory: what an owner leaves behind once it released its block.
    pub(crate) fn empty() -> Self {
        PinnedBlock { host: std::ptr::null_mut(), address: 0, bytes: 0 }
    }
}

// SAFETY: the pointer names pinned memory owned by whoever holds the block (a buffer or the cache);
// it is freed once, by that owner, from any thread.
unsafe impl Send for PinnedBlock {}

/// The blocks a context keeps, and their total length.
#[derive(Debug, Default)]
pub(crate) struct PinnedCache {
    kept: Mutex<(Vec<PinnedBlock>, usize)>,
}

impl PinnedCache {
    /// The smallest kept block of at least `bytes` and at most twice that (a small request does not
    /// take a large block), removed from the cache.
    pub(crate) fn take(&self, bytes: usize) -> Option<PinnedBlock> {
        let mut kept = lock(&self.kept);
        let limit = bytes.saturating_mul(2);
        let (index, _) = kept
            .0
            .iter()
            .enumerate()
            .filter(|(_, block)| block.bytes >= bytes && block.bytes <= limit)
            .min_by_key(|(_, block)| block.bytes)?;
        let block = kept.0.swap_remove(index);
        kept.1 -= block.bytes;
        Some(block)
    }

    /// Keeps `block` for reuse, or hands it back when it would overflow [`CAPACITY`] (the caller
    /// frees it). No work may use the block any more.
    pub(crate) fn keep(&self, block: PinnedBlock) -> Option<PinnedBlock> {
        let mut kept = lock(&self.kept);
        if kept.1 + block.bytes > CAPACITY {
            return Some(block);
        }
        kept.1 += block.bytes;
        kept.0.push(block);
        None
    }

    /// Frees every kept block, leaving the cache empty (`Device::trim`, the context's teardown):
    /// each free waits for the whole device. The first failure is returned, after every block was
    /// tried.
    pub(crate) fn free_all(&self, bound: &Bound<'_>) -> Result<()> {
        let kept = {
            let mut kept = lock(&self.kept);
            kept.1 = 0;
            std::mem::take(&mut kept.0)
        };
        let mut outcome = Ok(());
        for block in kept {
            // SAFETY: from cuMemHostAlloc, released by its owner (no work uses it) and kept only by
            // this cache, which gave it up just above: freed once, here.
            let freed = unsafe { result::mem_free_host(bound, block.host) };
            outcome = outcome.and(freed.map_err(|e| e.context(format!("freeing {} kept pinned bytes", block.bytes))));
        }
        outcome
    }

    /// Bytes kept now.
    pub(crate) fn kept_bytes(&self) -> usize {
        lock(&self.kept).1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(bytes: usize) -> PinnedBlock {
        // Never dereferenced: the cache only moves blocks around.
        PinnedBlock { host: bytes as *mut c_void, address: bytes as CUdeviceptr, bytes }
    }

    #[test]
    fn takes_the_smallest_block_that_fits_without_wasting_more_than_half() {
        let cache = PinnedCache::default();
        for bytes in [8192, 4096, 1 << 20] {
            assert!(cache.keep(block(bytes)).is_none());
        }
        assert_eq!(cache.kept_bytes(), 8192 + 4096 + (1 << 20));
        assert_eq!(cache.take(4096).map(|b| b.bytes), Some(4096), "smallest fit");
        assert_eq!(cache.take(4096).map(|b| b.bytes), Some(8192), "next fit, within twice the request");
        assert!(cache.take(4096).is_none(), "a 1 MiB block is not spent on a page");
        assert_eq!(cache.take(1 << 20).map(|b| b.host as usize), Some(1 << 20));
        assert_eq!(cache.kept_bytes(), 0);
    }

    #[test]
    fn a_block_that_would_overflow_the_capacity_is_handed_back() {
        let cache = PinnedCache::default();
        assert!(cache.keep(block(CAPACITY - 4096)).is_none());
        assert!(cache.keep(block(4096)).is_none());
        let refused = cache.keep(block(4096)).expect("full");
        assert_eq!(refused.bytes, 4096);
        assert_eq!(cache.kept_bytes(), CAPACITY);
    }
}
