//! The stream model: the few things a GPU exposes that the scheduler needs. `driver-cuda` implements
//! it with CUstreams and CUevents, `driver-cpu-sim` with worker threads, and the scheduler in
//! [`crate::scheduler`] is written once over it.
//!
//! Semantics follow CUDA's: a stream runs its work in order; `record_event` captures "everything
//! enqueued on this stream so far"; `wait_event` makes a stream wait for the event's latest capture
//! (waiting on a never-recorded event is a no-op in CUDA, so the scheduler never does it); the host
//! can query or block on an event.

use std::sync::Arc;

use smallvec::SmallVec;

use crate::driver::QueueOp;
use crate::error::{Error, Result};
use crate::sync::{Mutex, lock};

/// What a GPU-like backend exposes. All methods are called with the scheduler's per-queue issue lock
/// held for the stream they name (so enqueue, wait and record on one stream never interleave).
pub trait StreamModel: Send + Sync + 'static {
    /// An in-order work queue of the device.
    type Stream: Send + Sync;
    /// A completion marker recorded on a stream.
    type Event: Send + Sync;

    /// A new stream (created once per queue for the device's lifetime).
    fn create_stream(&self, queue: usize) -> Result<Self::Stream>;

    /// A new event, never recorded yet.
    fn create_event(&self) -> Result<Self::Event>;

    /// Captures all work enqueued on `stream` so far into `event`.
    fn record_event(&self, event: &Self::Event, stream: &Self::Stream) -> Result<()>;

    /// Makes later work on `stream` wait until `event`'s latest capture completes.
    fn wait_event(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;

    /// Whether `event`'s capture completed; `Err` when the device faulted (sticky on CUDA).
    fn query_event(&self, event: &Self::Event) -> Result<bool>;

    /// Blocks the host until `event`'s capture completes; `Err` on a device fault.
    fn synchronize_event(&self, event: &Self::Event) -> Result<()>;

    /// Enqueues the device work of `work.op` on `stream`. A failure found while the work runs later is
    /// stored in `work.fault`; work whose `upstream` producers faulted must be skipped with their
    /// status (backends with sticky faults, like CUDA, get this for free).
    fn enqueue(&self, stream: &Self::Stream, work: &Arc<Work>) -> Result<()>;

    /// Runs on the completion thread after `work`'s event completed and before its signals are
    /// applied (e.g. to hand a read's staged bytes to the host). The default does nothing.
    fn complete(&self, work: &Work) -> Result<()> {
        let _ = work;
        Ok(())
    }

    /// Blocks until everything enqueued on `stream` completed (teardown only).
    fn synchronize_stream(&self, stream: &Self::Stream) -> Result<()>;
}

/// Where a running operation reports a failure found after it was enqueued.
#[derive(Default)]
pub struct FaultSlot {
    fault: Mutex<Option<Error>>,
}

impl FaultSlot {
    /// An empty slot.
    pub fn new() -> Self {
        FaultSlot { fault: Mutex::new(None) }
    }

    /// Stores `error` unless a fault is already stored.
    pub fn set(&self, error: Error) {
        let mut fault = lock(&self.fault);
        if fault.is_none() {
            *fault = Some(error);
        }
    }

    /// The stored fault.
    pub fn get(&self) -> Option<Error> {
        lock(&self.fault).clone()
    }
}

/// One issued operation, shared by the scheduler and the stream that runs it.
pub struct Work {
    /// Device-unique submission number (for traces and reports).
    pub id: u64,
    /// The queue it runs on.
    pub queue: usize,
    /// What to run.
    pub op: QueueOp,
    /// Set by the backend when running the op fails (shared with downstream work that waits on it).
    pub fault: Arc<FaultSlot>,
    /// The fault slots of the operations whose events this one waits on: if one faulted, this one
    /// must not run. Slots, not the operations, so long dependency chains do not keep each other alive.
    pub upstream: SmallVec<[Arc<FaultSlot>; 2]>,
}

impl Work {
    /// The first fault among the upstream producers (checked by backends before running).
    pub fn upstream_fault(&self) -> Option<Error> {
        self.upstream.iter().find_map(|slot| slot.get())
    }
}
