//! A queue's progress word: completion learned from memory instead of from the driver.
//!
//! Every `cuEventQuery` takes a driver lock that launches on other threads need, and a completion
//! thread polls its queue's oldest event while work is in flight: with several submitting threads,
//! or a library whose own calls take the same locks (NCCL), the polls slow the submissions down
//! (measured in `docs/decisions.md#completion-word-optional`). With [`CudaOptions::completion_word`](crate::CudaOptions),
//! each recorded mark is followed on the stream by a `cuStreamWriteValue64` of the next number of
//! the stream's sequence into a word of pinned, device-mapped memory. The stream runs in order, so
//! the word reaching a mark's number means everything before the mark ran: the event is complete,
//! and finding that out is a memory read. While the word has not reached it, the event itself is
//! queried at most about once a millisecond, to notice a device fault (the word never moves again
//! after one).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys::{CUdeviceptr, CUstream};
use hal::Result;

use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// One stream's word and the number of its next write. Shared (`Arc`) by the stream and the events
/// it marked, so the memory outlives every query of it.
pub struct ProgressWord {
    /// Pinned, device-mapped; written only by the stream.
    host: *mut u64,
    device: CUdeviceptr,
    next: AtomicU64,
    context: Arc<Context>,
}

// SAFETY: the word is read on the host only through atomic loads and written by the device; the
// sequence is atomic; the memory is freed once, on drop, when no stream writes it and no event
// reads it (both hold the `Arc`).
unsafe impl Send for ProgressWord {}
// SAFETY: see `Send`.
unsafe impl Sync for ProgressWord {}

impl ProgressWord {
    /// A zeroed word for one stream.
    pub(crate) fn create(context: &Arc<Context>, bound: &Bound<'_>) -> Result<Self> {
        let devicemap = 0x2; // CU_MEMHOSTALLOC_DEVICEMAP
        let host = result::mem_host_alloc(bound, 64, devicemap)?.cast::<u64>();
        // SAFETY: 64 bytes of pinned memory just allocated, used by nothing yet; 8-byte aligned.
        unsafe { host.write(0) };
        match result::mem_host_get_device_pointer(bound, host.cast()) {
            Ok(device) => Ok(ProgressWord { host, device, next: AtomicU64::new(1), context: context.clone() }),
            Err(e) => {
                // SAFETY: allocated above, used by nothing yet.
                let _ = unsafe { result::mem_free_host(bound, host.cast()) };
                Err(e)
            }
        }
    }

    /// Enqueues on `stream` (this word's stream, after a mark's record) the write of the next
    /// number, which it returns: the mark is complete once [`reached`](Self::reached) says so.
    /// Called under the queue's issue lock, so numbers go onto the stream in order.
    pub(crate) fn advance(&self, bound: &Bound<'_>, stream: CUstream) -> Result<u64> {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        result::stream_write_value64(bound, stream, self.device, number)?;
        Ok(number)
    }

    /// The word as a shared reference to read atomically.
    fn word(&self) -> &AtomicU64 {
        // SAFETY: the word is 8 aligned bytes of pinned memory that lives as long as `self`; the
        // device writes it whole (64-bit stream writes), so an atomic load sees an old or a new value.
        unsafe { AtomicU64::from_ptr(self.host) }
    }

    /// Whether the stream passed the write of `number`.
    pub(crate) fn reached(&self, number: u64) -> bool {
        self.word().load(Ordering::Acquire) >= number
    }
}

impl Drop for ProgressWord {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else { return };
        // SAFETY: freed once, here: the stream that wrote it was drained and dropped (it held an
        // `Arc`), and no event refers to it any more.
        if let Err(e) = unsafe { result::mem_free_host(&bound, self.host.cast()) } {
            tracing::debug!(%e, "freeing a progress word failed");
        }
    }
}
