//! The device's primary context: retained for as long as any object of the device (a stream, an
//! event, a buffer, a module) lives, and bound on every thread that calls CUDA.
//!
//! cudarc's `result` layer does not bind a context, and the scheduler calls the stream model from
//! threads we do not own: the submitting thread, the completion threads, and whichever thread
//! signals a semaphore that releases a pending action. So every entry point calls
//! [`Context::bind`] first. Its fast path is one thread-local comparison; a thread is rebound only
//! when it last bound another context. Code that changes a thread's current context behind our back
//! (another CUDA library calling `cuCtxSetCurrent`) is not seen by that check: such code should bind
//! its own context before each use, as cudarc's safe API does.
//!
//! All devices of one GPU in a process share its primary context, and so share its fate when a kernel
//! faults (see the crate docs).

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys::{self, CUcontext, CUdevice};
use hal::Result;

use crate::error::check;

/// A retained primary context. Dropping the last `Arc` releases it.
pub struct Context {
    /// Unique per retain in the process, so a thread-local can tell contexts apart even if the
    /// driver hands out the same handle again after a release.
    id: u64,
    ordinal: usize,
    device: CUdevice,
    raw: CUcontext,
}

// SAFETY: a CUcontext is a driver handle usable from any thread once bound there; this type never
// exposes it mutably and binds it before each use.
unsafe impl Send for Context {}
// SAFETY: see `Send`; every method takes `&self` and calls thread-safe driver functions.
unsafe impl Sync for Context {}

thread_local! {
    /// The id of the context this thread last bound (0: none).
    static BOUND: Cell<u64> = const { Cell::new(0) };
}

impl Context {
    /// Retains the primary context of device `ordinal` and binds it on this thread. The probe must
    /// have succeeded (see `loader`).
    pub fn retain(ordinal: usize) -> Result<Arc<Self>> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let mut device: CUdevice = 0;
        // SAFETY: the probe ran cuInit; the out-pointer is a live local.
        check(unsafe { sys::cuDeviceGet(&mut device, ordinal as i32) }, "cuDeviceGet")?;
        let mut raw: CUcontext = std::ptr::null_mut();
        // SAFETY: `device` is a valid device handle; the out-pointer is a live local.
        check(unsafe { sys::cuDevicePrimaryCtxRetain(&mut raw, device) }, "cuDevicePrimaryCtxRetain")?;
        let context = Arc::new(Context { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), ordinal, device, raw });
        context.bind()?;
        Ok(context)
    }

    /// Makes this context current on the calling thread unless it already is (one thread-local
    /// comparison on the fast path).
    #[inline]
    pub fn bind(&self) -> Result<()> {
        if BOUND.with(Cell::get) == self.id {
            return Ok(());
        }
        self.bind_slow()
    }

    #[cold]
    fn bind_slow(&self) -> Result<()> {
        // SAFETY: `raw` is a retained primary context, alive while `self` is.
        check(unsafe { sys::cuCtxSetCurrent(self.raw) }, "cuCtxSetCurrent")?;
        BOUND.with(|bound| bound.set(self.id));
        Ok(())
    }

    /// The context handle.
    pub fn raw(&self) -> CUcontext {
        self.raw
    }

    /// The device handle.
    pub fn device(&self) -> CUdevice {
        self.device
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // A thread that still names this context as bound must rebind whatever it uses next.
        BOUND.with(|bound| {
            if bound.get() == self.id {
                bound.set(0);
            }
        });
        // SAFETY: matched with the retain in `Context::retain`; nothing of this context is used after.
        let code = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
        if let Err(e) = check(code, "cuDevicePrimaryCtxRelease") {
            tracing::warn!(ordinal = self.ordinal, %e, "releasing the primary context failed");
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context(cuda:{} #{})", self.ordinal, self.id)
    }
}
