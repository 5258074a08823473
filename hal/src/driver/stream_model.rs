//! The stream model: the few things a GPU exposes that the scheduler needs. `driver-cuda` implements
//! it with CUstreams and CUevents, `driver-cpu-sim` with worker threads, and the scheduler in
//! [`crate::driver::scheduler`] is written once over it.
//!
//! Semantics follow CUDA's: a stream runs its work in order; `record_event` captures "everything
//! enqueued on this stream so far"; `wait_event` makes a stream wait for the event's latest capture
//! (waiting on a never-recorded event is a no-op in CUDA, so the scheduler never does it); the host
//! can query or block on an event.

use std::sync::Arc;

use smallvec::SmallVec;

use crate::driver::{ProfileSink, QueueOp};
use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{Mutex, get_mut, lock};

/// What a GPU-like backend exposes.
///
/// Who calls what, and under which lock (the scheduler never calls the model under a semaphore's
/// lock, and never runs user code under its own locks):
///
/// | method | thread | lock held |
/// | --- | --- | --- |
/// | `create_stream` | the one creating the device | none |
/// | `create_event`, `record_event`, `wait_event`, `enqueue` | the issuing thread (a submitter, a thread whose signal released held work, a host-call thread) | the issue lock of the stream's queue: enqueue, wait and record on one stream never interleave |
/// | `light_at_issue` | the issuing thread | the issue lock of the stream's queue |
/// | `run_at_issue` | the issuing thread, only when every earlier submission of the queue has retired | the queue's issue lock and its retiring lock |
/// | `retires_at_submission` | the submitting thread | none |
/// | `run_at_submission` | the submitting thread, only when nothing of the queue is in flight | the queue's issue lock and its retiring lock |
/// | `query_event`, `complete`, `discard` | the retiring thread (the queue's completion thread, or a host waiter retiring for itself) | the retiring lock of the event's queue |
/// | `await_completion` | the queue's completion thread | none |
/// | `host_wait`, `synchronize_event` (through the defaults) | a host thread in a semaphore wait, or the completion thread | none |
/// | `synchronize_stream` | the thread dropping the device (teardown) | none |
///
/// Calls on different queues run concurrently; a backend's own shared state needs its own locking.
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

    /// Blocks the completion thread of `stream`'s queue until `event`'s capture completes (`Some`;
    /// `Err` on a device fault), or until `taken_over()` says another thread has the work in hand
    /// (`None`): a host waiter is polling this very event and retires the work once it completes,
    /// or the work has already retired. A backend that polls asks `taken_over` before each query
    /// and queries nothing while it holds: each query can take a lock the submitting and the
    /// waiting thread need (on CUDA, a driver lock; `docs/decisions.md#host-waiter-takes-the-event-over`).
    /// Backends may wake the thread their own way here (CUDA: a host callback on a second stream)
    /// and may ignore `taken_over`. Defaults to `synchronize_event`.
    fn await_completion(
        &self,
        stream: &Self::Stream,
        event: &Self::Event,
        taken_over: &dyn Fn() -> bool,
    ) -> Option<Result<()>> {
        let _ = (stream, taken_over);
        Some(self.synchronize_event(event))
    }

    /// Whether the backend checks `Work::upstream_fault` before running work. Backends whose
    /// faults are sticky for the whole device (CUDA) say `false`: later work fails anyway, and the
    /// scheduler then hands the work no upstream references (it still keeps the producers on other
    /// queues with the submission, to retire them first: see `completion`).
    const CHECKS_UPSTREAM_FAULTS: bool = true;

    /// Whether a stream of one device can wait on an event recorded by another device of this
    /// model in the same process (CUDA: yes, across contexts and GPUs; cpu-sim: yes). Then a wait
    /// on a semaphore another device's queue signals becomes a stream wait on that device's event
    /// instead of a trip through the host.
    const SHARES_EVENTS_ACROSS_DEVICES: bool = false;

    /// Blocks a host thread that waits for a semaphore value until `event`'s capture completes (the
    /// waiter then retires the work itself), until `deadline` passes, or until `stop()` says the
    /// waiter no longer needs the event (the value was reached another way, e.g. by a host signal):
    /// `None` in the last two cases, and the waiter falls back to parking on the semaphore.
    /// Implementations must call `stop` every few tens of microseconds to a millisecond while they
    /// wait, so such a waiter wakes promptly. Backends may wait differently here than on completion
    /// threads, e.g. poll harder because someone is waiting for exactly this. The default cannot be
    /// interrupted: it blocks in `synchronize_event` only when there is no deadline and `stop()` is
    /// false, and leaves everything else to the semaphore (`None` at once).
    fn host_wait(
        &self,
        event: &Self::Event,
        deadline: Option<std::time::Instant>,
        stop: &dyn Fn() -> bool,
    ) -> Option<Result<()>> {
        match deadline {
            None if !stop() => Some(self.synchronize_event(event)),
            _ => None,
        }
    }

    /// Enqueues the device work of `work.op` on `stream`. A failure found while the work runs later is
    /// stored in `work.fault`; work whose upstream producers faulted (`Work::upstream_fault`) must
    /// be skipped with their status (backends with sticky faults, like CUDA, get this for free).
    fn enqueue(&self, stream: &Self::Stream, work: &Arc<Work>) -> Result<()>;

    /// Whether the backend would rather run `work` itself, on the issuing thread, than enqueue it:
    /// light enough that a trip through its stream and the completion thread would cost more than
    /// the work. Asked (without side effects) only for work that waits on no stream event, is not
    /// profiled and has no upstream producer; when the stream has nothing left to run (every
    /// earlier submission of the queue retired), the scheduler then calls
    /// [`run_at_issue`](Self::run_at_issue) and retires the work on that thread. The default,
    /// `false`, always enqueues.
    fn light_at_issue(&self, work: &Work) -> bool {
        let _ = work;
        false
    }

    /// Runs `work`, which [`light_at_issue`](Self::light_at_issue) chose, now, on the issuing
    /// thread; a failure goes in `work.fault`, as a stream stores one. Called with the queue's
    /// issue lock and retiring lock held, so later submissions of the queue stay behind it.
    fn run_at_issue(&self, work: &Arc<Work>) {
        let _ = work;
    }

    /// Whether [`enqueue`](Self::enqueue) would put nothing at all on the stream for `work` (no
    /// work, no timing event): then the scheduler skips it, and when the stream's last recorded
    /// event was recorded after everything on the stream, `work` shares that event instead of
    /// recording another (it marks the same point). Such work never runs a fault or cancellation
    /// check of its own, so the scheduler asks only for work whose signals could not fail on the
    /// stream: no profiling, no upstream producer where [`Self::CHECKS_UPSTREAM_FAULTS`].
    /// The default, `false`, always enqueues; [`QueueOp::runs_nothing_on_a_stream`] is the usual
    /// answer.
    fn enqueues_nothing(&self, work: &Work) -> bool {
        let _ = work;
        false
    }

    /// Whether `op`, submitted with every wait already reached and no profiling session, may retire
    /// on the submitting thread when its queue has nothing in flight: no [`Work`], no issue, no
    /// [`complete`](Self::complete) call (the scheduler's queue-local fast path). Only for ops that
    /// need nothing of `complete` and either put nothing on the stream, or whose stream call
    /// [`run_at_submission`](Self::run_at_submission) makes and which are done once that call
    /// returns on an idle stream (nothing the device must run first or after). The default, `false`,
    /// sends every submission through the issue path.
    fn retires_at_submission(&self, op: &QueueOp) -> bool {
        let _ = op;
        false
    }

    /// Makes the stream call of `op`, which [`retires_at_submission`](Self::retires_at_submission)
    /// chose, on `stream` now: called with the queue's issue and retiring locks held and nothing in
    /// flight on the queue. An error fails the op's signals with it. The default does nothing.
    fn run_at_submission(&self, stream: &Self::Stream, op: &QueueOp) -> Result<()> {
        let _ = (stream, op);
        Ok(())
    }

    /// Whether the scheduler may leave a submission's stream point unrecorded until something
    /// observes it (see the scheduler's `seal` module): consecutive submissions of a busy queue then
    /// share one event. The default, `true`, suits backends whose records cost a driver call; a
    /// backend (or a test model) that wants one event per submission says `false`.
    fn leaves_marks_open(&self) -> bool {
        true
    }

    /// Runs on the completion thread after `work`'s event completed and before its signals are
    /// applied (e.g. to hand a read's staged bytes to the host). The default does nothing.
    fn complete(&self, work: &Work) -> Result<()> {
        let _ = work;
        Ok(())
    }

    /// Runs on the completion thread instead of [`complete`](Self::complete) when `work`'s event
    /// reported a fault: none of the work runs any more, so what `enqueue` set aside for it (e.g. a
    /// staging block) can be released. The default does nothing.
    fn discard(&self, work: &Work) {
        let _ = work;
    }

    /// How this backend puts device times on the host's clock, in words (a profile reports it).
    fn clock_method(&self) -> String {
        "none: this backend does not time work".to_owned()
    }

    /// Prepares to time work that records into `sink` (`Work::profile`), which a profiling session
    /// begun now will hand to the submissions it issues; e.g. anchors the device clock to the
    /// host's. The default refuses: a backend that times nothing must say so rather than return
    /// empty profiles.
    fn begin_profiling(&self, sink: &Arc<ProfileSink>) -> Result<()> {
        let _ = sink;
        Err(Error::unimplemented("this driver cannot profile"))
    }

    /// The profiling session ended (the backend may let go of what it kept for it).
    fn end_profiling(&self) {}

    /// Blocks until everything enqueued on `stream` completed (teardown only).
    fn synchronize_stream(&self, stream: &Self::Stream) -> Result<()>;
}

/// Where a running operation reports a failure found after it was enqueued.
#[derive(Default)]
pub struct FaultSlot {
    fault: Mutex<Option<Error>>,
    /// Set once a fault is stored: every retirement reads the slot, and almost none finds one, so
    /// the read takes no lock while this is clear.
    stored: AtomicBool,
}

impl FaultSlot {
    /// An empty slot.
    pub fn new() -> Self {
        FaultSlot { fault: Mutex::new(None), stored: AtomicBool::new(false) }
    }

    /// Stores `error` unless a fault is already stored.
    pub fn set(&self, error: Error) {
        let mut fault = lock(&self.fault);
        if fault.is_none() {
            *fault = Some(error);
            // Release, under the lock: a reader that sees the flag finds the fault under the lock.
            self.stored.store(true, Ordering::Release);
        }
    }

    /// The stored fault.
    pub fn get(&self) -> Option<Error> {
        if !self.stored.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.fault).clone()
    }

    /// Empties the slot (for reuse; exclusive access, so no lock is taken).
    pub(crate) fn clear(&mut self) {
        *get_mut(&mut self.fault) = None;
        self.stored.store(false, Ordering::Relaxed);
    }
}

/// How many waits of one submission its per-wait records (the waits the device goes past, the
/// events its stream waits on, the work those follow) hold without a heap allocation: a join of
/// four producers. A submission with more waits allocates for them.
pub const INLINE_WAITS: usize = 4;

/// One entry per wait of a submission, the first [`INLINE_WAITS`] inline.
pub type PerWait<T> = SmallVec<[T; INLINE_WAITS]>;

/// One issued operation, shared by the scheduler and the stream that runs it. The scheduler reuses
/// these allocations once a submission retires (see `Work::recycle`).
pub struct Work {
    /// Device-unique submission number (for traces and reports).
    pub id: u64,
    /// The queue it runs on.
    pub queue: usize,
    /// What to run.
    pub op: QueueOp,
    /// Set by the backend when running the op fails (read by downstream work that waits on it).
    pub fault: FaultSlot,
    /// The operations whose events this one waits on: if one faulted, this one must not run. Cleared
    /// when this one retires, so long dependency chains do not keep each other alive.
    upstream: Mutex<PerWait<Arc<Work>>>,
    /// Set once the scheduler retired it (outcome applied to its signals).
    retired: AtomicBool,
    /// Set when the work should stop early (device teardown, a failed signal semaphore); backends
    /// that can stop between pieces of work poll it (see `Work::cancel_requested`).
    cancel: AtomicBool,
    /// How many of its signal semaphores have not failed (set by the scheduler at issue, counted
    /// down as they fail): it is cancelled for failed signals only once none is left (nobody can
    /// observe its success any more).
    live_signals: AtomicU64,
    /// Nanoseconds the device spent on it, when the backend measures that (`NO_DEVICE_TIME`: not).
    device_time_ns: AtomicU64,
    /// Where its timings go when it was issued while the device profiled.
    profile: Option<Arc<ProfileSink>>,
    /// When it was submitted and issued, for a profile (set with `profile`).
    submitted: Option<Submitted>,
}

/// What a profile says of a submission besides its device time: when it was submitted and became
/// ready on the host, and how many semaphores it waited on and signalled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Submitted {
    pub(crate) at: std::time::Instant,
    pub(crate) ready: std::time::Instant,
    pub(crate) waits: u32,
    pub(crate) signals: u32,
}

/// `Work::device_time_ns` when nothing was measured.
const NO_DEVICE_TIME: u64 = u64::MAX;

impl Work {
    /// A new operation.
    pub fn new(id: u64, queue: usize, op: QueueOp, upstream: PerWait<Arc<Work>>) -> Self {
        Work {
            id,
            queue,
            op,
            fault: FaultSlot::new(),
            upstream: Mutex::new(upstream),
            retired: AtomicBool::new(false),
            cancel: AtomicBool::new(false),
            live_signals: AtomicU64::new(0),
            device_time_ns: AtomicU64::new(NO_DEVICE_TIME),
            profile: None,
            submitted: None,
        }
    }

    /// Where to record its timings: set when it was issued while the device profiled (see
    /// [`ProfileSink`]).
    pub fn profile(&self) -> Option<&ProfileSink> {
        self.profile.as_deref()
    }

    /// Makes it record into `sink` (the scheduler, at issue, before the work is shared; tests).
    pub fn set_profile(&mut self, sink: Option<Arc<ProfileSink>>) {
        self.profile = sink;
    }

    /// When it was submitted and issued, where a profile asked (see `set_submitted`).
    pub(crate) fn submitted(&self) -> Option<&Submitted> {
        self.submitted.as_ref()
    }

    /// Notes when it was submitted and issued (the scheduler, at issue, for profiled work).
    pub(crate) fn set_submitted(&mut self, submitted: Option<Submitted>) {
        self.submitted = submitted;
    }

    /// Records how many semaphores it signals (before it is shared).
    pub(crate) fn set_signal_count(&self, count: usize) {
        self.live_signals.store(count as u64, Ordering::Relaxed);
    }

    /// One of its signal semaphores failed: once all have, it is asked to stop.
    pub(crate) fn signal_failed(&self) {
        let before = self.live_signals.fetch_sub(1, Ordering::Relaxed);
        if before == 1 {
            self.request_cancel();
        } else if before == 0 {
            self.live_signals.store(0, Ordering::Relaxed);
        }
    }

    /// Asks the backend to stop this work as soon as it can: work not started yet does not run, and a
    /// running dispatch stops between workgroups; either way the work fails with `Cancelled`. Only a
    /// request: a backend that cannot interrupt (a launched CUDA kernel) finishes the work.
    pub fn request_cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// Whether [`request_cancel`](Self::request_cancel) was called. One relaxed load: cheap enough to
    /// ask between workgroups.
    pub fn cancel_requested(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Records how long the device took to run this work (backends that time submissions call it
    /// from `StreamModel::complete`; the scheduler puts it on the `complete` span as `device_ns`).
    pub fn set_device_time(&self, elapsed: std::time::Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(NO_DEVICE_TIME - 1).min(NO_DEVICE_TIME - 1);
        self.device_time_ns.store(ns, Ordering::Relaxed);
    }

    /// How long the device took to run this work, if the backend measured it.
    pub fn device_time(&self) -> Option<std::time::Duration> {
        match self.device_time_ns.load(Ordering::Relaxed) {
            NO_DEVICE_TIME => None,
            ns => Some(std::time::Duration::from_nanos(ns)),
        }
    }

    /// Whether the scheduler has retired it: its completion effects (a read's bytes, a host call)
    /// happened and its signals were applied or failed.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Marks it retired (the scheduler, after applying its outcome).
    pub(crate) fn mark_retired(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// The first fault among the upstream producers. Backends call it once, when the work is about
    /// to run (every producer has finished by then). The producers stay referenced until this work
    /// retires: the scheduler then takes their allocations back for reuse, which a backend's thread
    /// dropping the last reference would free instead.
    pub fn upstream_fault(&self) -> Option<Error> {
        lock(&self.upstream).iter().find_map(|w| w.fault.get())
    }

    /// Records that running this work failed with `error` (named after this submission). Backends
    /// call this; an upstream fault is passed on unchanged with `fault.set`.
    pub fn fail(&self, error: Error) {
        self.fault.set(self.describe_fault(error));
    }

    /// `error` prefixed with this submission's queue, id and kind.
    pub fn describe_fault(&self, error: Error) -> Error {
        error.context(format!("queue {} action {} ({})", self.queue, self.id, self.op.describe()))
    }

    /// Lets go of the references to upstream work (at retirement), returned so that the caller can
    /// take back the allocations it held last.
    pub(crate) fn release_upstream(&self) -> PerWait<Arc<Work>> {
        std::mem::take(&mut *lock(&self.upstream))
    }

    /// Lets go of what the finished operation held (its op, profile and upstream references), so
    /// the allocation can wait for reuse holding nothing. `&mut self`: ours alone, so no lock. The
    /// upstream references are returned, as by [`release_upstream`](Self::release_upstream).
    pub(crate) fn clear_for_reuse(&mut self) -> PerWait<Arc<Work>> {
        self.op = QueueOp::Barrier;
        self.profile = None;
        self.submitted = None;
        std::mem::take(get_mut(&mut self.upstream))
    }

    /// Reuses this allocation for another operation.
    pub(crate) fn reset(&mut self, id: u64, queue: usize, op: QueueOp, upstream: PerWait<Arc<Work>>) {
        self.id = id;
        self.queue = queue;
        self.op = op;
        // `&mut self`: the reused allocation is ours alone, so its locks need not be taken.
        self.fault.clear();
        *get_mut(&mut self.upstream) = upstream;
        self.retired.store(false, Ordering::Relaxed);
        self.cancel.store(false, Ordering::Relaxed);
        self.device_time_ns.store(NO_DEVICE_TIME, Ordering::Relaxed);
        self.profile = None;
        self.submitted = None;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn device_time_is_recorded_and_cleared_on_reuse() {
        let mut work = Work::new(1, 0, QueueOp::Barrier, SmallVec::new());
        assert_eq!(work.device_time(), None, "nothing measured yet");
        work.set_device_time(std::time::Duration::from_micros(250));
        assert_eq!(work.device_time(), Some(std::time::Duration::from_micros(250)));
        // Longer than u64 nanoseconds can hold: saturates, never reads as "not measured".
        work.set_device_time(std::time::Duration::from_secs(u64::MAX));
        assert!(work.device_time().is_some());
        work.fail(Error::internal("boom"));
        work.reset(2, 1, QueueOp::Barrier, SmallVec::new());
        assert_eq!(work.device_time(), None, "a reused Work starts unmeasured");
        assert!(work.fault.get().is_none(), "and without a fault");
        assert_eq!((work.id, work.queue), (2, 1));
    }

    #[test]
    fn cancel_request_is_seen_and_cleared_on_reuse() {
        let mut work = Work::new(1, 0, QueueOp::Barrier, SmallVec::new());
        assert!(!work.cancel_requested(), "a new Work is not cancelled");
        work.request_cancel();
        work.request_cancel(); // idempotent
        assert!(work.cancel_requested());
        work.reset(2, 0, QueueOp::Barrier, SmallVec::new());
        assert!(!work.cancel_requested(), "a reused Work starts without a cancel request");
    }
}
