//! A HAL queue waiting for, or signalling, a value of an embedder's timeline `VkSemaphore`
//! ([`hal::Queue::wait_external`], [`hal::Queue::signal_external`] with
//! [`ExternalTimepoint::VulkanTimeline`]), on the device: the queue's submission for it is an empty
//! `vkQueueSubmit` (`stream.rs`) that also waits on (semaphore, value), or also signals it.
//!
//! | use | in the submission | when the HAL side fails or never runs |
//! | --- | --- | --- |
//! | wait | a timeline wait on (semaphore, value) beside the stream's own waits | a faulted or cancelled wait submits without it |
//! | signal | a timeline signal of (semaphore, value) beside the stream's own signal | signalled anyway: by the same submission, or from the host (`vkSignalSemaphore`) |
//!
//! Dropping the device releases each wait whose value has not come ([`ExternalWaits::release_all`]):
//! it signals the embedder's semaphore to the value from the host, and the wait's signals fail
//! with `Cancelled` ([`complete`]). See the crate's `interop` module for the contract.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use ash::vk;
use ash::vk::Handle;
use hal::driver::{NativeOp, QueueOp, lock};
use hal::{Error, ExternalTimepoint, ExternalUse, Result};

use crate::error::from_vk;
use crate::gpu::Gpu;

/// What a Vulkan queue submits for an external timepoint: the embedder's timeline value, how it is
/// used, and what happened to it.
pub(crate) struct ExternalOp {
    gpu: Arc<Gpu>,
    point: Arc<Point>,
}

/// A value of an embedder's timeline semaphore, as one external timepoint uses it.
pub(crate) struct Point {
    use_: ExternalUse,
    semaphore: vk::Semaphore,
    value: u64,
    /// A signal: the value's signal is on the device (submitted) or was made from the host.
    settled: AtomicBool,
    /// A wait: teardown signalled the value from the host while the wait had not passed.
    released_early: AtomicBool,
    /// Its work retired: the embedder may destroy the semaphore once the signals are applied, so
    /// teardown no longer touches it.
    retired: AtomicBool,
    /// The semaphore, where it is a [`crate::interop::TimelineSemaphore`]: held alive until the
    /// work retired (and any host signal teardown or a failure makes is done).
    #[cfg(unix)]
    _owner: Option<Arc<crate::interop::shared::OwnedTimeline>>,
}

impl Point {
    /// Whether the queue waits for the value (or signals it).
    pub(crate) fn is_wait(&self) -> bool {
        self.use_ == ExternalUse::Wait
    }

    /// The semaphore and value.
    pub(crate) fn timeline(&self) -> (vk::Semaphore, u64) {
        (self.semaphore, self.value)
    }

    /// The value's signal was submitted (or made from the host).
    pub(crate) fn set_settled(&self) {
        self.settled.store(true, Ordering::Release);
    }
}

/// The counter of `semaphore`, a timeline semaphore of `gpu`'s device.
fn counter(gpu: &Gpu, semaphore: vk::Semaphore) -> Result<u64> {
    // SAFETY: the embedder keeps the semaphore, a timeline semaphore of this device, alive until
    // the external timepoint's signals are reached or failed (`Queue::wait_external`'s contract).
    unsafe { gpu.device.get_semaphore_counter_value(semaphore) }
        .map_err(|e| from_vk("vkGetSemaphoreCounterValue (an embedder's semaphore)", e))
}

/// Signals `point`'s value from the host unless the semaphore is there already: whether it
/// signalled.
fn signal_from_host(gpu: &Gpu, point: &Point) -> Result<bool> {
    if counter(gpu, point.semaphore)? >= point.value {
        return Ok(false);
    }
    let info = vk::SemaphoreSignalInfo::default().semaphore(point.semaphore).value(point.value);
    // SAFETY: a live timeline semaphore of this device (as above) whose counter is below the value;
    // the embedder has no signal of it pending at or below the value (the interop contract).
    unsafe { gpu.device.signal_semaphore(&info) }
        .map_err(|e| from_vk("vkSignalSemaphore (an embedder's semaphore)", e))?;
    Ok(true)
}

/// Prepares queue `queue`'s part of `timepoint` used as `use_`: checks the handle, and for a
/// signal that the semaphore is below the value (a timeline only grows, and a signal to a value it
/// has reached is invalid in Vulkan).
pub(crate) fn prepare(
    gpu: &Arc<Gpu>,
    queue: usize,
    timepoint: ExternalTimepoint,
    use_: ExternalUse,
) -> Result<NativeOp> {
    let ExternalTimepoint::VulkanTimeline { semaphore, value } = timepoint else {
        return Err(Error::unimplemented(format!(
            "vulkan: no external timepoints of kind {} ({timepoint}); the Vulkan driver orders with Vulkan timeline \
             semaphores",
            timepoint.kind()
        )));
    };
    let what = || format!("vulkan: queue {queue}: {use_:?} of {timepoint}");
    let semaphore = vk::Semaphore::from_raw(semaphore);
    if semaphore == vk::Semaphore::null() {
        return Err(Error::invalid_argument(format!("{}: a null VkSemaphore", what())));
    }
    if use_ == ExternalUse::Signal {
        let now = counter(gpu, semaphore).map_err(|e| e.context(what()))?;
        if now >= value {
            return Err(Error::invalid_argument(format!(
                "{}: the semaphore is at {now} already, and a timeline is only signalled upwards",
                what()
            )));
        }
    }
    let point = Arc::new(Point {
        use_,
        semaphore,
        value,
        settled: AtomicBool::new(false),
        released_early: AtomicBool::new(false),
        retired: AtomicBool::new(false),
        #[cfg(unix)]
        _owner: crate::interop::shared::owned_timeline(gpu, semaphore),
    });
    let (kind, verb) = match use_ {
        ExternalUse::Wait => ("wait-external", "wait for"),
        ExternalUse::Signal => ("signal-external", "signal of"),
    };
    Ok(NativeOp::new(kind, format!("{verb} {timepoint}"), ExternalOp { gpu: gpu.clone(), point }))
}

impl ExternalOp {
    /// The external timepoint `op` carries: `None` for other work, `InvalidArgument` for a native
    /// operation another driver prepared.
    pub(crate) fn of(op: &QueueOp) -> Result<Option<&ExternalOp>> {
        match op {
            QueueOp::Native(native) => native.payload::<ExternalOp>().map(Some).ok_or_else(|| {
                Error::invalid_argument(format!("vulkan: {} was prepared by another driver", op.kind()))
            }),
            _ => Ok(None),
        }
    }

    /// The value and its use.
    pub(crate) fn point(&self) -> &Arc<Point> {
        &self.point
    }

    /// Before a signal is submitted: `FailedPrecondition` where the semaphore reached the value
    /// already (someone else signalled it: Vulkan forbids signalling it again), which counts as
    /// settled.
    pub(crate) fn check_signal(&self) -> Result<()> {
        if self.point.is_wait() {
            return Ok(());
        }
        let now = counter(&self.gpu, self.point.semaphore)?;
        if now < self.point.value {
            return Ok(());
        }
        self.point.set_settled();
        Err(Error::failed_precondition(format!(
            "vulkan: signal of {:#x} value {}: the semaphore reached {now} before the HAL signalled it, and a timeline \
             is only signalled upwards",
            self.point.semaphore.as_raw(),
            self.point.value
        )))
    }

    /// A signal whose submission was not made: signals the value from the host now (the embedder's
    /// queue must not wait forever on a HAL failure), once.
    pub(crate) fn settle_on_host(&self) {
        if self.point.is_wait() || self.point.settled.swap(true, Ordering::AcqRel) {
            return;
        }
        match signal_from_host(&self.gpu, &self.point) {
            Ok(true) => tracing::debug!(
                semaphore = self.point.semaphore.as_raw(),
                value = self.point.value,
                "vulkan: an external signal whose HAL work did not run was signalled from the host"
            ),
            Ok(false) => {}
            Err(e) => tracing::error!(%e, "vulkan: signalling an external value from the host"),
        }
    }
}

impl Drop for ExternalOp {
    /// A signal that never reached the device (its waits failed, the device was dropped first, or
    /// the submission was refused) is signalled from the host, so nothing waits on it forever.
    fn drop(&mut self) {
        self.settle_on_host();
    }
}

/// After `op`'s submission completed (before its signals are applied): a wait that teardown
/// released before its value came did not wait for the embedder's work, so its signals fail.
pub(crate) fn complete(op: &QueueOp) -> Result<()> {
    let Ok(Some(external)) = ExternalOp::of(op) else { return Ok(()) };
    external.point.retired.store(true, Ordering::Release);
    if external.point.released_early.load(Ordering::Acquire) {
        return Err(Error::cancelled(format!(
            "vulkan: device destroyed while its queue waited for {}: the wait was released by a signal from the host, \
             without the embedder's work",
            op.describe()
        )));
    }
    Ok(())
}

/// `op` retired as failed (its signals are failed next).
pub(crate) fn discard(op: &QueueOp) {
    if let Ok(Some(external)) = ExternalOp::of(op) {
        external.point.retired.store(true, Ordering::Release);
    }
}

/// The external waits a device's queues have submitted, for teardown to release.
pub(crate) struct ExternalWaits {
    gpu: Arc<Gpu>,
    state: Mutex<WaitsState>,
}

#[derive(Default)]
struct WaitsState {
    /// Teardown began: no wait is submitted any more.
    closed: bool,
    live: Vec<Weak<Point>>,
}

impl ExternalWaits {
    /// None yet, on `gpu`'s device.
    pub(crate) fn new(gpu: &Arc<Gpu>) -> Arc<ExternalWaits> {
        Arc::new(ExternalWaits { gpu: gpu.clone(), state: Mutex::new(WaitsState::default()) })
    }

    /// Notes `point`, a wait about to be submitted: `false` once teardown began (the wait is then
    /// not submitted, and its work is cancelled).
    pub(crate) fn register(&self, point: &Arc<Point>) -> bool {
        let mut state = lock(&self.state);
        if state.closed {
            return false;
        }
        state.live.retain(|point| point.strong_count() > 0);
        state.live.push(Arc::downgrade(point));
        true
    }

    /// Dropping the device: no wait is submitted from now on, and each submitted wait whose value
    /// has not come is released by signalling the embedder's semaphore to the value from the host
    /// (logged as a warning), so that the queues drain. Such a wait's signals fail with `Cancelled`.
    pub(crate) fn release_all(&self) {
        let live: Vec<Arc<Point>> = {
            let mut state = lock(&self.state);
            state.closed = true;
            std::mem::take(&mut state.live)
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|point| !point.retired.load(Ordering::Acquire))
                .collect()
        };
        for point in live {
            // Marked before the signal: the completion thread may retire the wait as soon as it
            // lands. Taken back where the value had come another way (the wait passed by itself).
            point.released_early.store(true, Ordering::Release);
            match signal_from_host(&self.gpu, &point) {
                Ok(false) => point.released_early.store(false, Ordering::Release),
                Ok(true) => tracing::warn!(
                    semaphore = point.semaphore.as_raw(),
                    value = point.value,
                    "vulkan: device dropped while a queue waited for an embedder's timeline value that had not come: \
                     the semaphore was signalled to it from the host, and the wait's signals fail with Cancelled"
                ),
                Err(e) => tracing::error!(
                    %e,
                    semaphore = point.semaphore.as_raw(),
                    "vulkan: releasing an external wait at teardown failed; the queue may not drain"
                ),
            }
        }
    }
}
