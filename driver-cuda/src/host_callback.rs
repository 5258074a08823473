//! Completion through host callbacks ([`CompletionWait::HostCallback`](crate::CompletionWait)): each
//! queue gets a second, non-blocking *callback stream*. To wait for an event, the queue's completion
//! thread makes the callback stream wait on it (`cuStreamWaitEvent`), enqueues one host function
//! there (`cuLaunchHostFunc`) and sleeps until the driver runs it. The host function only bumps a
//! counter and wakes the thread (CUDA forbids driver calls inside it); the thread then retires every
//! submission that completed, so one callback covers a whole burst and at most one is outstanding
//! per queue. The dispatch stream never waits for the host: the callback stream does.
//!
//! CUDA does not run host functions once the context has a sticky fault, so the sleeping thread
//! wakes every [`FAULT_CHECK`] to query the event: a fault is reported, never waited on forever.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use cudarc::driver::sys::{CUstream, CUstream_flags};
use hal::Result;
use hal::driver::{lock, wait_timeout};

use crate::event::CudaEvent;
use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// How often a thread waiting for a callback checks its event for a device fault (CUDA skips host
/// functions on a faulted context, so the callback would never come).
pub const FAULT_CHECK: Duration = Duration::from_millis(2);

/// Counts the callbacks the driver ran; shared with the host function through a raw pointer.
#[derive(Default)]
struct Notifier {
    ran: Mutex<u64>,
    wake: Condvar,
}

/// The host function: runs on a driver thread once the callback stream reached it.
unsafe extern "C" fn callback_reached(user_data: *mut c_void) {
    // SAFETY: `user_data` is the `Notifier` of a live `CallbackStream` (`launch`), and a notifier
    // outlives every callback launched with it: `CallbackStream::drop` drains the callback stream, and
    // leaks the notifier if callbacks are still outstanding after that (faulted context).
    let notifier = unsafe { &*(user_data as *const Notifier) };
    // Never panic here: unwinding out of an `extern "C"` function aborts the process.
    let mut ran = lock(&notifier.ran);
    *ran += 1;
    notifier.wake.notify_all();
}

/// A queue's callback stream, for the device's lifetime. Drained and destroyed on drop.
pub struct CallbackStream {
    raw: CUstream,
    queue: usize,
    notifier: Arc<Notifier>,
    /// Callbacks enqueued so far (only the queue's completion thread launches).
    launched: AtomicU64,
    context: Arc<Context>,
}

// SAFETY: a CUstream is a driver handle, and only the queue's completion thread enqueues on this one;
// the notifier is `Sync`.
unsafe impl Send for CallbackStream {}
// SAFETY: see `Send`.
unsafe impl Sync for CallbackStream {}

impl CallbackStream {
    /// A new non-blocking callback stream for `queue`.
    pub fn create(context: &Arc<Context>, queue: usize) -> Result<Self> {
        let raw = result::stream_create(&context.bind()?, CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
            .map_err(|e| e.context(format!("callback stream of queue {queue}")))?;
        Ok(CallbackStream {
            raw,
            queue,
            notifier: Arc::new(Notifier::default()),
            launched: AtomicU64::new(0),
            context: context.clone(),
        })
    }

    /// How many callbacks the driver has run on this stream.
    pub fn callbacks_run(&self) -> u64 {
        *lock(&self.notifier.ran)
    }

    /// Blocks until `event`'s latest capture completed, woken by a host callback; `Err` on a device
    /// fault. Called by the queue's completion thread only, so at most one callback is outstanding.
    pub fn wait(&self, event: &CudaEvent) -> Result<()> {
        let bound = self.context.bind()?;
        // The event was recorded: the scheduler waits only on recorded events and keeps them from
        // being re-recorded meanwhile.
        result::stream_wait_event(&bound, self.raw, event.raw())?;
        let target = self.launch(&bound)?;
        let mut ran = lock(&self.notifier.ran);
        while *ran < target {
            let (guard, timed_out) = wait_timeout(&self.notifier.wake, ran, FAULT_CHECK);
            ran = guard;
            if timed_out && *ran < target {
                drop(ran);
                // A fault stops host functions for good: report it instead of waiting for the callback.
                event.query()?;
                ran = lock(&self.notifier.ran);
            }
        }
        Ok(())
    }

    /// Enqueues one callback; returns the count of callbacks run that means it ran.
    fn launch(&self, bound: &Bound<'_>) -> Result<u64> {
        let user_data = Arc::as_ptr(&self.notifier) as *mut c_void;
        // SAFETY: the host function makes no CUDA calls, only locks the `Sync` notifier, and its data
        // outlives it (see `callback_reached`).
        unsafe { result::launch_host_func(bound, self.raw, callback_reached, user_data) }?;
        Ok(self.launched.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

impl Drop for CallbackStream {
    fn drop(&mut self) {
        let bound = match self.context.bind() {
            Ok(bound) => bound,
            Err(e) => {
                tracing::warn!(queue = self.queue, %e, "cannot bind the context to destroy a callback stream");
                // Callbacks may still run: their notifier must stay valid.
                std::mem::forget(self.notifier.clone());
                return;
            }
        };
        // Draining waits for its host functions to run.
        let drained = result::stream_synchronize(&bound, self.raw);
        if self.callbacks_run() < self.launched.load(Ordering::Relaxed) {
            // Faulted context: CUDA will not run these callbacks, but the notifier is never freed
            // under one anyway (a few bytes, once per faulted queue).
            std::mem::forget(self.notifier.clone());
        }
        // SAFETY: destroyed once, here; only the stopped completion thread enqueued on it.
        let destroyed = unsafe { result::stream_destroy(&bound, self.raw) };
        for (what, result) in [("drain", drained), ("destroy", destroyed)] {
            if let Err(e) = result {
                tracing::warn!(queue = self.queue, %e, "callback stream {what} failed at teardown");
            }
        }
    }
}
