//! Timeline semaphores another API exported (a Vulkan timeline, as an opaque fd), imported into
//! CUDA, and a HAL queue waiting for or signalling one of their values
//! ([`ExternalTimepoint::CudaExternalSemaphore`]) on its stream:
//!
//! | use | on the queue's stream, when the queue issues it | when the HAL side fails or never runs |
//! | --- | --- | --- |
//! | wait | `cuWaitExternalSemaphoresAsync(value)`, then a write of a word of `word_slots` (the wait passed) | nothing is enqueued |
//! | signal | `cuSignalExternalSemaphoresAsync(value)` after the queue's waits and earlier work | signalled anyway, from the host |
//!
//! A semaphore made by [`import_semaphore_fd`] is held by every operation naming it (an `Arc`), so
//! dropping the [`ImportedSemaphore`] early cannot destroy it under queued work; a handle the
//! embedder imported itself is used as given (the `unsafe` contract of the queue's calls).
//!
//! **Teardown.** A queue waiting on a value nobody signals blocks its stream, and dropping the
//! device drains the streams. So dropping the device first closes the waits
//! ([`SemaphoreWaits::release_all`]): a wait not issued yet is not (its work is cancelled), and
//! each issued wait whose stream has not passed it (its word not written) is released by
//! signalling the semaphore to the value from the host (`cuSignalExternalSemaphoresAsync` on a
//! private stream, logged as a warning), so the stream drains; that wait's signals fail with
//! `Cancelled`. The embedder must then not signal that value or a lower one itself (a timeline is
//! only signalled upwards; a Vulkan timeline forbids it), nor have a signal of it pending. CUDA
//! cannot read a timeline's value, so a wait that passed an instant before teardown looked (the
//! value came, its word not written yet) is released too: the semaphore is set to the value
//! again, which holds where nobody signalled past it meanwhile.

use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use cudarc::driver::sys::{CUexternalSemaphore, CUstream_flags};
use hal::driver::lock;
use hal::{Device, Error, ExternalTimepoint, Result};

use super::cuda_device;
use super::word_slots::Lease;
use crate::queue_stream::CudaStream;
use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// A `CUexternalSemaphore` this driver imported, destroyed when the last holder drops.
pub(crate) struct SemaphoreHandle {
    raw: CUexternalSemaphore,
    context: Arc<Context>,
}

// SAFETY: a driver handle owned by this value and destroyed once, in `Drop`; the driver's external
// semaphore functions may be called from any thread with the context bound.
unsafe impl Send for SemaphoreHandle {}
// SAFETY: see `Send`; nothing mutates the value.
unsafe impl Sync for SemaphoreHandle {}

impl Drop for SemaphoreHandle {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else { return };
        // SAFETY: the last holder is gone: every queue operation naming it held it until it retired
        // (its wait or signal completed), and a signal from the host synchronizes before it returns.
        if let Err(e) = unsafe { result::destroy_external_semaphore(&bound, self.raw) } {
            tracing::debug!(%e, "cuda: destroying an imported semaphore failed");
        }
    }
}

/// Every semaphore [`import_semaphore_fd`] made that is still alive, process-wide: an external
/// timepoint naming one holds it.
static IMPORTED: Mutex<Vec<Weak<SemaphoreHandle>>> = Mutex::new(Vec::new());

/// A timeline semaphore imported into CUDA from an opaque file descriptor
/// ([`import_semaphore_fd`]): `cuDestroyExternalSemaphore` when the last handle (or queue operation
/// naming it) is gone. Clones are handles to the same semaphore.
#[derive(Clone)]
pub struct ImportedSemaphore {
    handle: Arc<SemaphoreHandle>,
}

impl std::fmt::Debug for ImportedSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedSemaphore")
            .field("semaphore", &self.handle.raw)
            .field("gpu", &self.handle.context.ordinal())
            .finish()
    }
}

impl ImportedSemaphore {
    /// The `CUexternalSemaphore`, valid while this handle (or a clone) lives; the caller must not
    /// destroy it.
    pub fn raw(&self) -> CUexternalSemaphore {
        self.handle.raw
    }

    /// The external timepoint of `value` on it, for [`hal::Queue::wait_external`] and
    /// [`hal::Queue::signal_external`] on a queue of a CUDA device of the same GPU.
    pub fn at(&self, value: u64) -> ExternalTimepoint {
        ExternalTimepoint::CudaExternalSemaphore { semaphore: self.handle.raw as u64, value }
    }
}

/// Imports the timeline semaphore `fd` refers to (an opaque fd another API exported from a timeline
/// semaphore: `driver_vulkan::interop::TimelineSemaphore::export_fd`) into `device`'s context:
/// `cuImportExternalSemaphore` with `CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD`.
/// CUDA takes the descriptor on success; on failure it is closed here. The semaphore is destroyed
/// when the returned handle and every queue operation naming it are gone.
pub fn import_semaphore_fd(device: &Device, fd: OwnedFd) -> Result<ImportedSemaphore> {
    let context = cuda_device(device)?.context().clone();
    let bound = context.bind()?;
    // SAFETY: `fd` is open and ours; CUDA takes it only on success (then it is given up below);
    // on failure it drops, closed, at the `?`.
    let raw = unsafe { result::import_external_semaphore_timeline_fd(&bound, fd.as_raw_fd()) }
        .map_err(|e| e.context(format!("cuda: {}: import of a timeline semaphore fd", device.id())))?;
    let _ = fd.into_raw_fd();
    let handle = Arc::new(SemaphoreHandle { raw, context: context.clone() });
    let mut imported = lock(&IMPORTED);
    imported.retain(|handle| handle.strong_count() > 0);
    imported.push(Arc::downgrade(&handle));
    Ok(ImportedSemaphore { handle })
}

/// The semaphore an external timepoint names: one of [`import_semaphore_fd`]'s, held alive, or
/// one the embedder imported itself.
enum SemaphoreRef {
    Held(Arc<SemaphoreHandle>),
    Raw(CUexternalSemaphore),
}

impl SemaphoreRef {
    fn raw(&self) -> CUexternalSemaphore {
        match self {
            SemaphoreRef::Held(handle) => handle.raw,
            SemaphoreRef::Raw(raw) => *raw,
        }
    }
}

/// What a queue enqueues to wait for a value.
pub(crate) struct SemaphoreWait {
    point: Arc<WaitPoint>,
    waits: Arc<SemaphoreWaits>,
}

/// A wait's value, and whether teardown released it.
pub(crate) struct WaitPoint {
    semaphore: SemaphoreRef,
    value: u64,
    /// A word the queue's stream writes right after the wait: written, the wait has passed.
    passed: Lease,
    /// The wait is on the stream.
    issued: AtomicBool,
    /// Teardown signalled the value from the host while the stream had not passed the wait.
    released_early: AtomicBool,
}

// SAFETY: the semaphore is a driver handle (held, or live under the queue call's contract); the
// rest is atomics and a lease, which is `Send + Sync`.
unsafe impl Send for WaitPoint {}
// SAFETY: see `Send`.
unsafe impl Sync for WaitPoint {}

/// What a queue enqueues to signal a value; signalled from the host when dropped unissued.
pub(crate) struct SemaphoreSignal {
    semaphore: SemaphoreRef,
    value: u64,
    context: Arc<Context>,
    /// The signal is on the stream (or was made from the host).
    settled: AtomicBool,
}

// SAFETY: as for `WaitPoint`.
unsafe impl Send for SemaphoreSignal {}
// SAFETY: see `Send`.
unsafe impl Sync for SemaphoreSignal {}

/// The semaphore `raw` names on `context`'s GPU: one of [`import_semaphore_fd`]'s (held), or the
/// embedder's. `InvalidArgument` for null, or for one imported on another GPU.
fn resolve(context: &Context, raw: u64) -> Result<SemaphoreRef> {
    let raw = raw as CUexternalSemaphore;
    if raw.is_null() {
        return Err(Error::invalid_argument("a null CUexternalSemaphore"));
    }
    let held = lock(&IMPORTED).iter().filter_map(Weak::upgrade).find(|handle| handle.raw == raw);
    match held {
        Some(handle) if handle.context.ordinal() != context.ordinal() => Err(Error::invalid_argument(format!(
            "the semaphore was imported on GPU {}, and this queue's device is GPU {}",
            handle.context.ordinal(),
            context.ordinal()
        ))),
        Some(handle) => Ok(SemaphoreRef::Held(handle)),
        None => Ok(SemaphoreRef::Raw(raw)),
    }
}

/// A queue's wait for `value` of semaphore `raw`, prepared: a word to learn that it passed.
pub(crate) fn prepare_wait(
    context: &Context,
    waits: &Arc<SemaphoreWaits>,
    lease: impl FnOnce() -> Result<Lease>,
    raw: u64,
    value: u64,
) -> Result<SemaphoreWait> {
    let semaphore = resolve(context, raw)?;
    let point = Arc::new(WaitPoint {
        semaphore,
        value,
        passed: lease()?,
        issued: AtomicBool::new(false),
        released_early: AtomicBool::new(false),
    });
    Ok(SemaphoreWait { point, waits: waits.clone() })
}

/// A queue's signal of `value` of semaphore `raw`, prepared.
pub(crate) fn prepare_signal(context: &Arc<Context>, raw: u64, value: u64) -> Result<SemaphoreSignal> {
    let semaphore = resolve(context, raw)?;
    Ok(SemaphoreSignal { semaphore, value, context: context.clone(), settled: AtomicBool::new(false) })
}

impl SemaphoreWait {
    /// Enqueues the wait and the word's write on `stream`; `Cancelled` once teardown began.
    pub(crate) fn enqueue(&self, bound: &Bound<'_>, stream: &CudaStream) -> Result<()> {
        let point = &self.point;
        // Under the lock: teardown either sees this wait issued, or closed first and it is not.
        let mut state = lock(&self.waits.state);
        if state.closed {
            return Err(Error::cancelled(format!(
                "cuda: device destroyed before its queue issued the wait for CUDA external semaphore {:p} value {}",
                point.semaphore.raw(),
                point.value
            )));
        }
        result::wait_external_semaphore(bound, point.semaphore.raw(), point.value, stream.raw())?;
        point.issued.store(true, Ordering::Release);
        state.live.retain(|point| point.strong_count() > 0);
        state.live.push(Arc::downgrade(point));
        drop(state);
        result::stream_write_value64(bound, stream.raw(), point.passed.address(), point.passed.ticket())
    }

    /// After its work completed: `Cancelled` where teardown released the wait before the value
    /// came.
    pub(crate) fn complete(&self) -> Result<()> {
        if self.point.released_early.load(Ordering::Acquire) {
            return Err(Error::cancelled(format!(
                "cuda: device destroyed while its queue waited for CUDA external semaphore {:p} value {}: the wait was \
                 released by a signal from the host, without the other API's work",
                self.point.semaphore.raw(),
                self.point.value
            )));
        }
        Ok(())
    }
}

impl SemaphoreSignal {
    /// Enqueues the signal on `stream`.
    pub(crate) fn enqueue(&self, bound: &Bound<'_>, stream: &CudaStream) -> Result<()> {
        result::signal_external_semaphore(bound, self.semaphore.raw(), self.value, stream.raw())?;
        self.settled.store(true, Ordering::Release);
        Ok(())
    }
}

impl Drop for SemaphoreSignal {
    /// A signal that never reached the stream (its waits failed, the device was dropped first, or
    /// the submission was refused) is made from the host, so the other API never waits on it
    /// forever: a timeline semaphore cannot carry a failure.
    fn drop(&mut self) {
        if self.settled.swap(true, Ordering::AcqRel) {
            return;
        }
        match signal_from_host(&self.context, self.semaphore.raw(), self.value) {
            Ok(()) => tracing::debug!(
                value = self.value,
                "cuda: an external semaphore signal whose HAL work did not run was signalled from the host"
            ),
            Err(e) => tracing::error!(%e, "cuda: signalling an external semaphore from the host"),
        }
    }
}

/// Sets `semaphore` to `value` from the host: a signal on a private stream, waited for.
fn signal_from_host(context: &Context, semaphore: CUexternalSemaphore, value: u64) -> Result<()> {
    let bound = context.bind()?;
    let stream = result::stream_create(&bound, CUstream_flags::CU_STREAM_NON_BLOCKING as u32)?;
    let signalled = result::signal_external_semaphore(&bound, semaphore, value, stream)
        .and_then(|()| result::stream_synchronize(&bound, stream));
    // SAFETY: made above, used by nothing else, drained (or its signal refused).
    let destroyed = unsafe { result::stream_destroy(&bound, stream) };
    signalled.and(destroyed)
}

/// The external-semaphore waits a device's queues issued, for teardown to release.
pub(crate) struct SemaphoreWaits {
    context: Arc<Context>,
    state: Mutex<WaitsState>,
}

#[derive(Default)]
struct WaitsState {
    /// Teardown began: no wait is issued any more.
    closed: bool,
    live: Vec<Weak<WaitPoint>>,
}

impl SemaphoreWaits {
    /// None yet, on `context`.
    pub(crate) fn new(context: &Arc<Context>) -> Arc<SemaphoreWaits> {
        Arc::new(SemaphoreWaits { context: context.clone(), state: Mutex::new(WaitsState::default()) })
    }

    /// Dropping the device: no wait is issued from now on, and each issued wait whose stream has
    /// not passed it is released by signalling its value from the host (see the module docs); its
    /// signals then fail with `Cancelled`.
    pub(crate) fn release_all(&self) {
        let live: Vec<Arc<WaitPoint>> = {
            let mut state = lock(&self.state);
            state.closed = true;
            std::mem::take(&mut state.live).iter().filter_map(Weak::upgrade).collect()
        };
        for point in live {
            if !point.issued.load(Ordering::Acquire) || point.passed.reached() {
                continue;
            }
            // Marked before the signal: the completion thread may retire the wait as soon as it lands.
            point.released_early.store(true, Ordering::Release);
            match signal_from_host(&self.context, point.semaphore.raw(), point.value) {
                Ok(()) => tracing::warn!(
                    value = point.value,
                    "cuda: device dropped while a queue waited for an external semaphore value that had not come: the \
                     semaphore was signalled to it from the host, and the wait's signals fail with Cancelled"
                ),
                Err(e) => tracing::error!(
                    %e,
                    "cuda: releasing an external semaphore wait at teardown failed; the queue may not drain"
                ),
            }
        }
    }
}
