//! Pinned host blocks (host-visible buffers, indirect dispatches' fault rings): allocated, or taken
//! from the blocks their context kept when an earlier owner dropped, instead of freed.
//!
//! `cuMemFreeHost` waits until every kernel running on the GPU has finished and, meanwhile, holds
//! back every other thread's launches (`docs/drivers.md`); memory from `cuMemHostAlloc` has no
//! stream-ordered free (a host memory pool has, but allocates far slower). So a released block
//! goes into its context's cache, and the next allocation that fits takes it (zeroed again) instead
//! of calling `cuMemHostAlloc`. The cache (`PinnedCache`, kept by the context in `src/sys/context.rs`)
//! holds at most [`CAPACITY`](crate::sys::context::CAPACITY) bytes; a block that would
//! overflow it is freed as before, and the rest are freed when the context goes (the device's
//! teardown has drained its streams by then).

use std::sync::Arc;

use cudarc::driver::sys;
use hal::{Error, Result};

use crate::sys::context::{Bound, Context, PinnedBlock};
use crate::sys::result;

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
/// [`CAPACITY`](crate::sys::context::CAPACITY).
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
