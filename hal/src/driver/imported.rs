//! Host memory an embedder owns and lends to a device ([`Device::import_host_memory`]): where it
//! is, how long, and the release to run, exactly once, when the HAL no longer uses it.
//!
//! [`Device::import_host_memory`]: crate::Device::import_host_memory

use std::fmt;
use std::ptr::NonNull;

use crate::sync::{Mutex, lock};

/// The embedder's release of imported memory: runs at most once, when [`release`](Self::release)
/// is called or, at the latest, when this value drops.
pub struct ReleaseOnce {
    release: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl ReleaseOnce {
    /// Wraps `release`.
    pub fn new(release: impl FnOnce() + Send + 'static) -> Self {
        ReleaseOnce { release: Mutex::new(Some(Box::new(release))) }
    }

    /// Runs the release now, if it has not run. It may run on a thread of the HAL's (the one that
    /// let go of the memory last): a panic in it is contained and logged, never passed on to that
    /// thread.
    pub fn release(&self) {
        let release = lock(&self.release).take();
        if let Some(release) = release
            && let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(release))
        {
            tracing::error!(panic = %crate::error::panic_message(&*panic), "the release of imported memory panicked");
        }
    }
}

impl Drop for ReleaseOnce {
    fn drop(&mut self) {
        self.release();
    }
}

impl fmt::Debug for ReleaseOnce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReleaseOnce")
    }
}

/// `length` bytes at `ptr` that the embedder lends to a device until `release` runs. A driver turns
/// it into a buffer backend that keeps it (and so delays the release) while the memory is in use,
/// and drops it (running the release) when the memory is no longer used, also on an error path.
#[derive(Debug)]
pub struct ImportedHostMemory {
    ptr: NonNull<u8>,
    length: u64,
    release: ReleaseOnce,
}

// SAFETY: the memory is the embedder's, lent whole to the HAL until the release runs (the contract
// of `new`); the pointer is only an address here, and accesses through it follow the HAL's shared
// memory rule (atomic, or ordered by semaphores).
unsafe impl Send for ImportedHostMemory {}
// SAFETY: as for `Send`; `&ImportedHostMemory` exposes the address and length only.
unsafe impl Sync for ImportedHostMemory {}

impl ImportedHostMemory {
    /// `length` bytes at `ptr`, lent until `release` runs.
    ///
    /// # Safety
    /// Until `release` runs: `ptr` is valid for reads and writes of `length` bytes, the memory is
    /// neither freed nor moved, and every access to it from outside the HAL that may race with queue
    /// work is atomic or ordered by the semaphores that work signals (the rule of
    /// [`shared_memory`](crate::driver::shared_memory)).
    pub unsafe fn new(ptr: NonNull<u8>, length: u64, release: ReleaseOnce) -> Self {
        ImportedHostMemory { ptr, length, release }
    }

    /// The first byte.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Bytes lent.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// The release, for a backend to keep until it is done with the memory.
    pub fn into_release(self) -> ReleaseOnce {
        self.release
    }
}
