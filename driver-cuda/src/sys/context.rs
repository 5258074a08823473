//! The device's primary context: retained for as long as any object of the device (a stream, an
//! event, a buffer, a module) lives, and bound on every thread that calls CUDA.
//!
//! A CUDA context is current per thread, and the scheduler calls the stream model from
//! threads we do not own: the submitting thread, the completion threads, and whichever thread
//! signals a semaphore that releases a pending action. So every entry point calls
//! [`Context::bind`] first. Its fast path is one thread-local comparison; a thread is rebound only
//! when it last bound another context. `bind` returns a [`Bound`] token, and every function of the
//! driver-call layer (`result.rs`) that needs a current context takes one: "the context is bound"
//! is a type the compiler checks, not a comment. Code that changes a thread's current context behind
//! our back (another CUDA library calling `cuCtxSetCurrent`) is not seen by that check: such code
//! should bind its own context before each use, as cudarc's safe API does.
//!
//! All devices of one GPU in a process share its primary context, and so share its fate when a kernel
//! faults (see the crate docs).
//!
//! The context also keeps the pinned host blocks its owners dropped ([`PinnedCache`]); they live
//! here, with their owner, so that the driver-call layer below the rest of the crate imports
//! nothing from above it. When to take a kept block and when to allocate is `src/pinned_cache.rs`.

use std::cell::Cell;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdeviceptr, CUstream};
use hal::Result;
use hal::driver::lock;

use crate::sys::result;
use crate::sys::unloader::KeptModules;

/// The bytes of device memory zero-length dispatch bindings point to.
pub(crate) const EMPTY_BINDING_BYTES: usize = 64 << 10;

/// A retained primary context. Dropping the last `Arc` releases it.
pub struct Context {
    /// Unique per retain in the process, so a thread-local can tell contexts apart even if the
    /// driver hands out the same handle again after a release.
    id: u64,
    ordinal: usize,
    device: CUdevice,
    raw: CUcontext,
    /// A stream that runs nothing but frees of `cuMemAlloc` memory (see [`Context::free_stream`]).
    free_stream: CUstream,
    /// Pinned host blocks of dropped host-visible buffers, kept for reuse.
    pinned: PinnedCache,
    /// Modules of dropped executables, kept loaded (see `unloader.rs`).
    modules: KeptModules,
    /// Device memory of the context's own that zero-length dispatch bindings point to (see
    /// [`Context::empty_binding`]); 0 until made in `retain`.
    empty_binding: u64,
}

// SAFETY: a CUcontext is a driver handle usable from any thread once bound there; this type never
// exposes it mutably and binds it before each use.
unsafe impl Send for Context {}
// SAFETY: see `Send`; every method takes `&self` and calls thread-safe driver functions.
unsafe impl Sync for Context {}

/// Proof that `context` is current on this thread: made only by [`Context::bind`], and neither
/// `Send` nor `Sync`, so it cannot reach a thread where the context may not be current.
///
/// It stays true as long as nothing makes another context current on this thread while the token
/// lives: binding a second context in its scope (another device's object dropped there, or foreign
/// code calling `cuCtxSetCurrent`) makes it stale. The crate keeps tokens to the scope of one entry
/// point for that reason. A stale token is a correctness bug, not a memory-safety one: driver calls
/// then fail or act on the wrong context, and no pointer the layer dereferences depends on it.
pub(crate) struct Bound<'a> {
    context: &'a Context,
    /// `*const ()` makes the token `!Send + !Sync`.
    _this_thread: PhantomData<*const ()>,
}

impl<'a> Bound<'a> {
    /// The context that is current.
    #[inline]
    pub(crate) fn context(&self) -> &'a Context {
        self.context
    }
}

impl std::fmt::Debug for Bound<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bound({:?})", self.context)
    }
}

thread_local! {
    /// The id of the context this thread last bound (0: none).
    static BOUND: Cell<u64> = const { Cell::new(0) };
}

impl Context {
    /// Retains the primary context of device `ordinal` and binds it on this thread. The probe must
    /// have succeeded (see `loader`).
    pub fn retain(ordinal: usize) -> Result<Arc<Self>> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let device = result::device_get(ordinal)?;
        let raw = result::primary_ctx_retain(device)?;
        let mut context = Context {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            ordinal,
            device,
            raw,
            free_stream: std::ptr::null_mut(),
            pinned: PinnedCache::default(),
            modules: KeptModules::default(),
            empty_binding: 0,
        };
        // The free stream is made before the context is shared; a failure drops `context`, which
        // releases the retain.
        let free_stream = result::stream_create(&context.bind()?, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)?;
        context.free_stream = free_stream;
        let bound = context.bind()?;
        let empty = result::mem_alloc(&bound, EMPTY_BINDING_BYTES)?;
        let zeroed = result::memset_d8(&bound, empty, 0, EMPTY_BINDING_BYTES);
        context.empty_binding = empty;
        zeroed?;
        Ok(Arc::new(context))
    }

    /// Makes this context current on the calling thread unless it already is (one thread-local
    /// comparison on the fast path), and returns the token that says so.
    #[inline]
    pub(crate) fn bind(&self) -> Result<Bound<'_>> {
        if BOUND.with(Cell::get) != self.id {
            self.bind_slow()?;
        }
        Ok(Bound { context: self, _this_thread: PhantomData })
    }

    #[cold]
    fn bind_slow(&self) -> Result<()> {
        result::ctx_set_current(self.raw)?;
        BOUND.with(|bound| bound.set(self.id));
        Ok(())
    }

    /// The context handle.
    pub(crate) fn raw(&self) -> CUcontext {
        self.raw
    }

    /// The device handle.
    pub(crate) fn device(&self) -> CUdevice {
        self.device
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// A non-blocking stream on which `cuMemAlloc` memory is freed with `cuMemFreeAsync`.
    ///
    /// `cuMemFree` waits until the whole device is idle and, while it waits, holds a driver lock
    /// that every other thread's launches and records take: a buffer dropped while a long kernel
    /// runs on another stream stalls every submission in the process until it ends
    /// (`docs/drivers.md`). A free on this stream, which never holds work, waits for nothing; the
    /// memory's last uses finished before the free is made (a buffer is freed when its last handle
    /// drops, and submissions hold one until they retire).
    pub(crate) fn free_stream(&self) -> CUstream {
        self.free_stream
    }

    /// The device address a zero-length dispatch binding passes: memory of the context's own
    /// ([`EMPTY_BINDING_BYTES`] bytes), so a kernel that writes through such a binding anyway
    /// reaches none of the buffer's bytes (a binding of 0 bytes means the same on every driver).
    pub(crate) fn empty_binding(&self) -> u64 {
        self.empty_binding
    }

    /// Pinned host blocks kept for reuse (`crate::pinned_cache` takes and gives them back): `cuMemFreeHost` waits for the
    /// whole device, and holds back every thread's launches meanwhile.
    pub(crate) fn pinned_cache(&self) -> &PinnedCache {
        &self.pinned
    }

    /// Modules of dropped executables not unloaded yet (`crate::sys::unloader` keeps and unloads
    /// them): an unload can hold back launches until the device's running kernels end.
    pub(crate) fn kept_modules(&self) -> &KeptModules {
        &self.modules
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let freed = self.bind().and_then(|bound| {
            self.modules.unload_all(&bound);
            self.pinned.free_all(&bound)
        });
        if let Err(e) = freed {
            tracing::debug!(ordinal = self.ordinal, %e, "freeing kept pinned blocks failed");
        }
        if self.empty_binding != 0 {
            // SAFETY: allocated in `retain`, freed once here; every launch that passed it held an
            // executable, so an `Arc` of this context, until it completed.
            let freed = self.bind().and_then(|bound| unsafe { result::mem_free(&bound, self.empty_binding) });
            if let Err(e) = freed {
                tracing::debug!(ordinal = self.ordinal, %e, "freeing the empty-binding memory failed");
            }
        }
        if !self.free_stream.is_null() {
            // Drained before it goes (its frees finish at once), then destroyed; every buffer of the
            // context held an `Arc` of it, so no free comes after.
            let drained = self.bind().and_then(|bound| {
                result::stream_synchronize(&bound, self.free_stream)?;
                // SAFETY: created in `retain`, destroyed once here, and nothing is enqueued after.
                unsafe { result::stream_destroy(&bound, self.free_stream) }
            });
            if let Err(e) = drained {
                tracing::warn!(ordinal = self.ordinal, %e, "draining the free stream failed");
            }
        }
        // A thread that still names this context as bound must rebind whatever it uses next.
        BOUND.with(|bound| {
            if bound.get() == self.id {
                bound.set(0);
            }
        });
        // SAFETY: matched with the retain in `Context::retain`; every object of this context holds an
        // `Arc` of it, so none is left to use it after.
        if let Err(e) = unsafe { result::primary_ctx_release(self.device) } {
            tracing::warn!(ordinal = self.ordinal, %e, "releasing the primary context failed");
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context(cuda:{} #{})", self.ordinal, self.id)
    }
}

/// Bytes of dropped pinned blocks one context keeps for reuse.
pub(crate) const CAPACITY: usize = 256 << 20;

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
