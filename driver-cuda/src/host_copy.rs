//! Copies in stream order that never block the submitting thread. CUDA runs a copy between two
//! host ranges (pinned or registered, even through their device-mapped addresses, whichever copy
//! call is used) on the calling thread once the stream's earlier work has finished: a queue copy
//! between host-visible buffers, an upload into one or a read of one would wait there for the device.
//! Such a copy goes through a block of device memory instead (host to device, device to host), taken
//! from and given back to the device's memory pool in stream order, so the call returns at once.

use cudarc::driver::sys::{CUdeviceptr, CUstream};
use hal::Result;

use crate::sys::context::Bound;
use crate::sys::result;

/// One end of a copy: a unified address and whether it is host memory.
#[derive(Clone, Copy, Debug)]
pub struct CopyEnd {
    /// The unified address.
    pub address: CUdeviceptr,
    /// Whether it is host memory (pinned, or registered imported memory).
    pub host: bool,
}

/// Enqueues a copy of `bytes` from `src` to `dst` on `stream`, returning at once (see the module
/// docs): host to host goes through device memory.
///
/// # Safety
/// Both ends address at least `bytes` bytes of live memory that stay allocated until the copy
/// completed on `stream`, and the ranges do not overlap.
pub unsafe fn copy_async(bound: &Bound<'_>, dst: CopyEnd, src: CopyEnd, bytes: usize, stream: CUstream) -> Result<()> {
    if !(dst.host && src.host) {
        return result::memcpy_async(bound, dst.address, src.address, bytes, stream);
    }
    let bounce = result::mem_alloc_async(bound, bytes, stream)?;
    let copied = result::memcpy_async(bound, bounce, src.address, bytes, stream)
        .and_then(|()| result::memcpy_async(bound, dst.address, bounce, bytes, stream));
    // SAFETY: `bounce` came from the stream-ordered allocation above and is freed once; its only uses,
    // the two copies, are ordered before the free on the same stream (or were never enqueued).
    let freed = unsafe { result::mem_free_async(bound, bounce, stream) };
    copied.and(freed)
}
