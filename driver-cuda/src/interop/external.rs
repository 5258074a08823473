//! A HAL queue waiting for, or signalling, a point on another library's CUDA stream
//! ([`hal::Queue::wait_external`], [`hal::Queue::signal_external`] with
//! [`ExternalTimepoint::CudaStream`]), on the device, through a word of `word_slots`:
//!
//! | use | at the call, on the foreign stream | when the HAL queue issues it, on its stream |
//! | --- | --- | --- |
//! | wait | write the ticket (after the work enqueued so far), record the lease's event | wait until the word reaches the ticket |
//! | signal | wait until the word reaches the ticket, record the lease's event | write the ticket (after the queue's waits and earlier work) |
//!
//! The foreign stream's part is enqueued at the call, so the point is the one the embedder means:
//! "what the stream holds now" or "what the stream gets from now on". A signal whose waits fail, or
//! that the device drops first, writes its ticket from the host (the lease's drop): a CUDA stream
//! cannot be told of a failure, so it runs on, and the embedder checks the HAL signals.
//!
//! [`ExternalTimepoint::CudaExternalSemaphore`] (an imported timeline semaphore) is `semaphore.rs`.

use std::sync::Arc;

use cudarc::driver::sys::CUstream;
use hal::driver::NativeOp;
use hal::{Error, ExternalTimepoint, ExternalUse, Result};

use super::semaphore::{self, SemaphoreSignal, SemaphoreWait, SemaphoreWaits};
use super::word_slots::{Lease, WordSlots};
use crate::queue_stream::CudaStream;
use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// What a CUDA queue enqueues for an external timepoint.
pub(crate) enum ExternalOp {
    /// The queue's stream waits until the foreign stream wrote the ticket.
    WaitStream(Lease),
    /// The queue's stream writes the ticket the foreign stream waits for.
    SignalStream(Lease),
    /// The queue's stream waits for a value of an imported semaphore.
    WaitSemaphore(SemaphoreWait),
    /// The queue's stream signals a value of an imported semaphore.
    SignalSemaphore(SemaphoreSignal),
}

/// Prepares queue `queue`'s part of `timepoint` used as `use_`, enqueuing the foreign stream's part
/// now (a CUDA stream's; an imported semaphore has no part but the queue's).
pub(crate) fn prepare(
    context: &Arc<Context>,
    slots: &Arc<WordSlots>,
    waits: &Arc<SemaphoreWaits>,
    queue: usize,
    timepoint: ExternalTimepoint,
    use_: ExternalUse,
) -> Result<NativeOp> {
    let verb = if use_ == ExternalUse::Wait { "wait for" } else { "signal of" };
    if let ExternalTimepoint::CudaExternalSemaphore { semaphore, value } = timepoint {
        let what = || format!("cuda: queue {queue}: {use_:?} of {timepoint}");
        let (kind, op) = match use_ {
            ExternalUse::Wait => {
                let lease = || slots.lease(&context.bind()?);
                let wait =
                    semaphore::prepare_wait(context, waits, lease, semaphore, value).map_err(|e| e.context(what()))?;
                ("wait-external", ExternalOp::WaitSemaphore(wait))
            }
            ExternalUse::Signal => {
                let signal = semaphore::prepare_signal(context, semaphore, value).map_err(|e| e.context(what()))?;
                ("signal-external", ExternalOp::SignalSemaphore(signal))
            }
        };
        return Ok(NativeOp::new(kind, format!("{verb} {timepoint}"), op));
    }
    let ExternalTimepoint::CudaStream(raw) = timepoint else {
        return Err(Error::unimplemented(format!(
            "cuda: no external timepoints of kind {} ({timepoint}); the CUDA driver orders with CUDA streams and \
             CUDA external semaphores",
            timepoint.kind()
        )));
    };
    let foreign = raw as CUstream;
    let bound = context.bind()?;
    // A stream of another context (another GPU's, or a context the embedder made) cannot wait on
    // or write this device's words: refused here, as a value, instead of failing on the device.
    let owner =
        result::stream_get_ctx(&bound, foreign).map_err(|e| e.context(format!("queue {queue}: {timepoint}")))?;
    if owner != context.raw() {
        return Err(Error::invalid_argument(format!(
            "cuda: queue {queue}: {timepoint} belongs to CUDA context {owner:p}, not this device's primary context {:p}",
            context.raw()
        )));
    }
    let lease = slots.lease(&bound)?;
    let on_foreign = |bound: &Bound<'_>, lease: &Lease| -> Result<()> {
        match use_ {
            ExternalUse::Wait => result::stream_write_value64(bound, foreign, lease.address(), lease.ticket()),
            ExternalUse::Signal => result::stream_wait_value64_geq(bound, foreign, lease.address(), lease.ticket()),
        }?;
        lease.record_on(bound, foreign)
    };
    // On an error the lease drops, writing its ticket: whatever part reached the foreign stream
    // passes at once.
    on_foreign(&bound, &lease).map_err(|e| e.context(format!("queue {queue}: {use_:?} of {timepoint}")))?;
    let (kind, op) = match use_ {
        ExternalUse::Wait => ("wait-external", ExternalOp::WaitStream(lease)),
        ExternalUse::Signal => ("signal-external", ExternalOp::SignalStream(lease)),
    };
    Ok(NativeOp::new(kind, format!("{verb} {timepoint}"), op))
}

/// Enqueues the queue's part of `op` on `stream`.
pub(crate) fn enqueue(bound: &Bound<'_>, stream: &CudaStream, op: &NativeOp) -> Result<()> {
    match op.payload::<ExternalOp>() {
        Some(ExternalOp::WaitStream(lease)) => {
            result::stream_wait_value64_geq(bound, stream.raw(), lease.address(), lease.ticket())
        }
        Some(ExternalOp::SignalStream(lease)) => {
            result::stream_write_value64(bound, stream.raw(), lease.address(), lease.ticket())
        }
        Some(ExternalOp::WaitSemaphore(wait)) => wait.enqueue(bound, stream),
        Some(ExternalOp::SignalSemaphore(signal)) => signal.enqueue(bound, stream),
        None => Err(Error::invalid_argument("cuda: a native operation another driver prepared")),
    }
}

/// After `op`'s work completed: a wait that teardown released before the foreign stream wrote its
/// ticket (or before the semaphore reached its value) did not wait for the foreign work, so its
/// signals fail.
pub(crate) fn complete(op: &NativeOp) -> Result<()> {
    match op.payload::<ExternalOp>() {
        Some(ExternalOp::WaitStream(lease)) if lease.released_early() => Err(Error::cancelled(
            "device destroyed while its queue waited for a CUDA stream: the wait was released without the \
             stream's work",
        )),
        Some(ExternalOp::WaitSemaphore(wait)) => wait.complete(),
        _ => Ok(()),
    }
}
