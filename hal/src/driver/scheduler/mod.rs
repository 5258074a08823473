//! The scheduler, written once over the [`StreamModel`]: every driver that looks like a GPU (CUDA,
//! the CPU simulator) runs this code.
//!
//! The life of one submission (`Queue::execute` -> [`Scheduler::submit`]):
//! 0. Work that puts nothing on the stream, whose waits are all reached, retires at once when its
//!    queue has nothing in flight (the queue-local fast path, `quiet`): what step 3 would do for it,
//!    without building anything.
//! 1. Each wait is checked: reached on the host (nothing to do), covered by an event a device stream
//!    recorded after the signalling work (a stream-wait will do), failed (the submission's signals
//!    fail, nothing runs), or neither.
//! 2. If every wait is reached or covered, the submission is issued at once on the calling thread.
//!    Otherwise it becomes a pending action (`pending_actions`) with one timepoint per open wait,
//!    and the resolution of its last wait issues it.
//! 3. Issuing (`issue`; held first in the queue's admission list while a blocking host call ahead
//!    of it has not returned: `admission`) makes the queue's dispatch stream wait on the covering
//!    events, enqueues the work, marks where it ends
//!    (`seal`: a pooled event recorded after it, or, while the queue is busy, an open mark that the
//!    next record on the stream fills, made when something observes it), publishes that mark on
//!    every signal semaphore this device owns (so waiters elsewhere can chain device-side) and
//!    hands the submission to the queue's completion thread.
//!    Work that puts nothing on the stream (a barrier, an execute with no device work) retires right
//!    there when every earlier submission of its queue has retired (its stream point is reached),
//!    and otherwise shares the stream's last event when nothing was put on the stream since.
//! 4. The completion thread (`completion`) blocks on the oldest in-flight event and then retires
//!    every submission whose event has completed in one wake-up (coalesced): signals are applied, or
//!    failed with the device fault, and events go back to the pool; a host call is handed to its
//!    thread (`host_calls`); the `Work` record goes back for reuse (`work_pool`).
//!
//! Dropping the scheduler is `teardown`; the hang report is `report`.

mod admission;
mod completion;
pub mod event_pool;
pub mod event_semaphore;
mod host_calls;
mod issue;
mod pending_actions;
mod quiet;
mod report;
mod seal;
mod teardown;
mod wait_cover;
mod watch;
mod work_pool;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::thread::JoinHandle;

use self::admission::Admission;
use self::event_pool::{EventCache, EventPool, EventRef};
use self::event_semaphore::{Producer, SemaphoreEvents};
use self::host_calls::HostCallRunner;
use self::pending_actions::Action;
use self::seal::{SealHandle, SealSpares, StreamMark};
use self::wait_cover::Covers;
use self::watch::Watch;
use crate::device::{DeviceId, PoolUsage, ResourceUsage};
use crate::driver::stream_model::{PerWait, StreamModel, Work};
use crate::driver::{HostCall, ProfileSink, ProfileSwitch, Submission};
use crate::error::{Error, Result};
use crate::profile::{Profile, ProfileOptions};
use crate::semaphore::{Semaphore, SemaphoreFlags, SemaphoreList, SemaphoreValue};
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{CachePadded, Condvar, MODEL_CHECKED, Mutex, lock, try_lock};

/// The scheduler of one device. Dropping it drains every queue and stops its threads.
pub struct Scheduler<M: StreamModel> {
    shared: Arc<Shared<M>>,
    completion_threads: Vec<JoinHandle<()>>,
}

pub(crate) struct Shared<M: StreamModel> {
    pub(crate) device: DeviceId,
    pub(crate) model: M,
    events: Arc<EventPool<M>>,
    queues: Vec<QueueSlot<M>>,
    pending: CachePadded<Mutex<HashMap<u64, Arc<Action<M>>>>>,
    /// Retired `Work` allocations for reuse, so a steady stream of submissions does not allocate.
    /// Pushed by completion threads, popped by issuers.
    spare_work: CachePadded<Mutex<Vec<Arc<Work>>>>,
    /// Written by every submission: on a line of its own, away from what completion threads write.
    next_id: CachePadded<AtomicU64>,
    timepoints: CachePadded<AtomicUsize>,
    shutting_down: AtomicBool,
    /// Runs host calls on threads of their own.
    host_calls: Arc<HostCallRunner>,
    /// The profiling session in progress: issues hand its sink to their work.
    pub(crate) profiling: ProfileSwitch,
    /// This scheduler, weakly: what it leaves in the semaphore tables it publishes into, so that
    /// waiting devices can retire its work.
    pub(crate) this: std::sync::Weak<Shared<M>>,
}

/// One queue: its dispatch stream and the submissions in flight on it, oldest first.
///
/// Issuing threads and the completion thread both touch a slot for every submission. Fields one
/// side writes sit on cache lines of their own (`CachePadded`), so neither side's writes take the
/// other's lines away: such transfers can dominate the scheduler's cost per submission
/// (`docs/decisions.md#scheduler-cache-lines` has the measurement).
struct QueueSlot<M: StreamModel> {
    stream: M::Stream,
    /// Serialises the stream calls of one issue (wait, enqueue, record) against other issuers, and
    /// holds the allocations issuers of this queue reuse.
    issuer: CachePadded<Mutex<IssuerCache<M>>>,
    inflight: CachePadded<Mutex<VecDeque<InFlight<M>>>>,
    /// Submissions pushed onto `inflight` so far: an idle completion thread watches it without the
    /// lock before going to sleep (see `completion::run`).
    issued: CachePadded<AtomicU64>,
    /// Set, under the `inflight` lock, while the completion thread sleeps on `wake`: only then does
    /// an issue need the notify (a system call).
    sleeping: CachePadded<AtomicBool>,
    wake: Condvar,
    /// Held while retiring, so retirements of one queue apply their signals in stream order.
    retiring: CachePadded<Mutex<()>>,
    /// Set by the completion thread when the oldest submission in flight is open (see `seal`) and
    /// it could not take the issue lock to record: the next issue records.
    seal_wanted: CachePadded<AtomicBool>,
    /// The event a host waiter polls itself, which the completion thread then leaves alone (see
    /// `watch`).
    watch: CachePadded<Watch>,
    /// Blocking host calls not yet returned, and the work they hold (see `admission`).
    admission: Admission<M>,
}

/// `Work` allocations and free events taken from the device-wide lists in batches, so an issue
/// reuses them without touching a list that completion threads push onto (one lock and one cache-line
/// transfer per batch instead of per submission).
struct IssuerCache<M: StreamModel> {
    work: Vec<Arc<Work>>,
    events: EventCache<M>,
    /// The mark of the last submission put on the queue's stream, while nothing was put on the
    /// stream after it (no stream-wait, no work) and no host call was issued since: work that puts
    /// nothing on the stream (a barrier, an empty execute) shares it instead of recording one, as
    /// it marks the same point (see `Shared::issue`).
    last_mark: Option<StreamMark<M>>,
    /// The seal of the submissions issued since the last record, which recorded nothing (see
    /// `seal`).
    open: Option<SealHandle<M>>,
    /// Seals emptied for reuse.
    seal_spares: Arc<SealSpares<M>>,
    /// How many submissions were left open since the last record.
    unrecorded: u32,
}

impl<M: StreamModel> IssuerCache<M> {
    /// Events held here and nowhere else: the free ones, and the last recorded one once every
    /// submission that used it has retired.
    fn cached_events(&self) -> usize {
        self.events.len() + usize::from(self.last_mark.as_ref().is_some_and(StreamMark::holds_sole_event))
    }
}

/// A submission on its way through a stream.
struct InFlight<M: StreamModel> {
    /// The stream's work, or for a host call a record that puts nothing on a stream (a barrier).
    work: Arc<Work>,
    /// The host call, for one: the completion thread hands it to a host-call thread once the work
    /// before it has retired.
    host_call: Option<HostCall>,
    /// Where the work ends on the stream; `None` for host calls and work retired at issue.
    event: Option<StreamMark<M>>,
    signals: SemaphoreList,
    /// The waits the device went past on an event (not reached on the host at issue): if one fails
    /// before it is reached, the signals carry that failure (see `completion::retire`).
    waited: PerWait<SemaphoreValue>,
    /// Events this submission's stream waits on, held until it retires (see `event_pool`).
    _wait_events: PerWait<EventRef<M>>,
    /// The submissions on other queues (of this device or another) whose events this one's stream
    /// waits on. They completed on the device before this one, and are retired on the host before
    /// it too (see `completion`).
    producers: PerWait<Producer<M>>,
}

/// Everything needed to issue a submission whose waits are all resolved.
pub(crate) struct Issue<M: StreamModel> {
    pub(crate) queue: usize,
    pub(crate) op: Submission,
    pub(crate) signals: SemaphoreList,
    /// The device events that cover its waits.
    pub(crate) covers: Covers<M>,
    /// Its place in its queue's order, taken at submission (see `admission`).
    pub(crate) place: admission::Place,
    /// When it was submitted and how many semaphores it waits on, while the device profiles (boxed:
    /// every submission carries the field).
    pub(crate) profiled: Option<Box<(std::time::Instant, u32)>>,
}

impl<M: StreamModel> Issue<M> {
    /// Fails it without running it: its signals get `status`.
    pub(crate) fn fail(self, status: &Error) {
        let Issue { op, signals, .. } = self;
        op.will_not_run(status);
        // Before the signals fail: the op may hold user code (a host call's closure).
        drop(op);
        for signal in &signals {
            signal.semaphore.fail(status.clone());
        }
    }
}

impl<M: StreamModel> InFlight<M> {
    /// A short name of what it runs, for traces.
    fn kind(&self) -> &'static str {
        if self.host_call.is_some() { "host-call" } else { self.work.op.kind() }
    }

    /// What it runs, for reports.
    fn describe(&self) -> String {
        if self.host_call.is_some() { self.kind().to_owned() } else { self.work.op.describe() }
    }
}

impl<M: StreamModel> Scheduler<M> {
    /// A scheduler for `device` with `queue_count` queues, each with its own dispatch stream and
    /// completion thread.
    pub fn new(device: DeviceId, model: M, queue_count: usize) -> Result<Self> {
        if queue_count == 0 {
            return Err(Error::invalid_argument(format!("{device}: a device needs at least one queue")));
        }
        let mut queues = Vec::with_capacity(queue_count);
        for queue in 0..queue_count {
            let stream = model.create_stream(queue)?;
            queues.push(QueueSlot {
                stream,
                issuer: CachePadded(Mutex::new(IssuerCache {
                    work: Vec::new(),
                    events: EventCache::new(),
                    last_mark: None,
                    open: None,
                    seal_spares: SealSpares::new(),
                    unrecorded: 0,
                })),
                inflight: CachePadded(Mutex::new(VecDeque::new())),
                issued: CachePadded(AtomicU64::new(0)),
                sleeping: CachePadded(AtomicBool::new(false)),
                wake: Condvar::new(),
                retiring: CachePadded(Mutex::new(())),
                seal_wanted: CachePadded(AtomicBool::new(false)),
                watch: CachePadded(Watch::default()),
                admission: Admission::default(),
            });
        }
        let shared = Arc::new_cyclic(|this| Shared {
            device,
            model,
            events: EventPool::new(),
            queues,
            pending: CachePadded(Mutex::new(HashMap::new())),
            spare_work: CachePadded(Mutex::new(Vec::new())),
            next_id: CachePadded(AtomicU64::new(1)),
            timepoints: CachePadded(AtomicUsize::new(0)),
            shutting_down: AtomicBool::new(false),
            host_calls: HostCallRunner::new(device.get()),
            profiling: ProfileSwitch::new(),
            this: this.clone(),
        });
        let mut completion_threads = Vec::with_capacity(queue_count);
        // Under loom the model drives completion itself (`poll_completions`) from its own threads.
        let spawn_count = if MODEL_CHECKED { 0 } else { queue_count };
        for queue in 0..spawn_count {
            let worker = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("hal-completion-{}-q{queue}", device.get()))
                .spawn(move || completion::run(&worker, queue));
            match spawned {
                Ok(handle) => completion_threads.push(handle),
                Err(e) => {
                    let partial = Scheduler { shared, completion_threads };
                    drop(partial);
                    return Err(Error::resource_exhausted(format!(
                        "{device}: cannot start the completion thread of queue {queue}: {e}"
                    )));
                }
            }
        }
        Ok(Scheduler { shared, completion_threads })
    }

    /// The stream model (the driver's backend).
    pub fn model(&self) -> &M {
        &self.shared.model
    }

    /// Starts profiling the submissions issued from now on (see [`crate::ProfileOptions`]);
    /// `FailedPrecondition` while a session is in progress, and what the model says if it cannot
    /// time work.
    pub fn begin_profiling(&self, options: ProfileOptions) -> Result<()> {
        let device = self.shared.device;
        if self.shared.profiling.session().is_some() {
            return Err(Error::failed_precondition(format!("{device}: already profiling (end_profiling first)")));
        }
        let sink = Arc::new(ProfileSink::new(options, self.shared.model.clock_method()));
        self.shared.model.begin_profiling(&sink)?;
        self.shared.profiling.begin(sink).map_err(|_| {
            Error::failed_precondition(format!("{device}: already profiling (another thread began a session)"))
        })
    }

    /// Takes the records of profiled submissions that completed so far; `FailedPrecondition` when
    /// not profiling.
    pub fn collect_profile(&self) -> Result<Profile> {
        match self.shared.profiling.session() {
            Some(sink) => Ok(sink.take()),
            None => Err(self.not_profiling()),
        }
    }

    /// Stops profiling and returns the records not collected yet. Profiled submissions still in
    /// flight record nothing more.
    pub fn end_profiling(&self) -> Result<Profile> {
        match self.shared.profiling.end() {
            Some(sink) => {
                self.shared.model.end_profiling();
                Ok(sink.take())
            }
            None => Err(self.not_profiling()),
        }
    }

    fn not_profiling(&self) -> Error {
        Error::failed_precondition(format!("{}: not profiling (begin_profiling first)", self.shared.device))
    }

    /// The dispatch stream of `queue`.
    pub fn stream(&self, queue: usize) -> &M::Stream {
        &self.shared.queues[queue].stream
    }

    /// A semaphore of this device, event-backed: its signals from this device's queues publish
    /// events that this device's waits use directly.
    pub fn create_semaphore(&self, initial: u64) -> Semaphore {
        self.semaphore(initial, SemaphoreFlags::empty())
    }

    /// A semaphore of this device with `flags` (see [`SemaphoreFlags`]), event-backed as
    /// [`create_semaphore`](Self::create_semaphore)'s. Work waiting on one only the host signals is
    /// held on the host until the signal, as for any value nobody has signalled yet: a stream wait
    /// for it would hold back every later submission of its queue, and work chained on it, until
    /// the host signals (`docs/decisions.md#host-signalled-work-held-on-the-host`).
    pub fn create_semaphore_with(&self, initial: u64, flags: SemaphoreFlags) -> Result<Semaphore> {
        Ok(self.semaphore(initial, flags))
    }

    fn semaphore(&self, initial: u64, flags: SemaphoreFlags) -> Semaphore {
        let events = SemaphoreEvents::<M>::new(self.shared.device, Arc::downgrade(&self.shared));
        Semaphore::with_driver_data(initial, self.shared.device, Arc::new(events), flags)
    }

    /// Submits `op` on `queue`; see the module docs. Never blocks on device progress.
    pub fn submit(
        &self,
        queue: usize,
        op: impl Into<Submission>,
        waits: &[SemaphoreValue],
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        let shared = &self.shared;
        if queue >= shared.queues.len() {
            return Err(Error::out_of_range(format!("{}: queue {queue} does not exist", shared.device)));
        }
        if shared.shutting_down.load(Ordering::Acquire) {
            return Err(Error::cancelled(format!("{}: device is shutting down", shared.device)));
        }
        let op = op.into();
        if shared.retire_quiet_at_submission(queue, &op, waits, signals) {
            return Ok(());
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        // Built where it stays until it is issued: the op is the largest part, and each move of it
        // is a copy on the submission path.
        let mut issue = Issue {
            queue,
            op,
            signals: SemaphoreList::new(),
            covers: Covers::default(),
            place: shared.queues[queue].admission.place(shared.device.get(), queue),
            profiled: shared
                .profiling
                .is_on()
                .then(|| Box::new((std::time::Instant::now(), u32::try_from(waits.len()).unwrap_or(u32::MAX)))),
        };
        let host_only = matches!(issue.op, Submission::HostCall(_));
        let ready = match issue.covers.resolve_waits(shared, queue, waits, host_only) {
            Ok(ready) => ready,
            Err(status) => {
                tracing::debug!(action = id, %status, "wait semaphore failed at submission");
                issue.op.will_not_run(&status);
                for signal in signals {
                    signal.semaphore.fail(status.clone());
                }
                return Ok(());
            }
        };
        for signal in signals {
            issue.signals.push(signal.clone());
        }
        let blocking = issue.op.is_blocking_host_call();
        if ready.iter().all(|&ready| ready) {
            shared.admit(id, issue, waits);
        } else {
            if blocking {
                // In the list before its waits can resolve (see `admission`).
                shared.enter_waiting(id, queue, issue.place.clone(), waits);
            }
            Action::hold(shared, id, waits.iter().cloned().collect(), &ready, issue);
        }
        Ok(())
    }

    /// Retires what has completed on `queue` without blocking; returns how many submissions retired.
    /// The completion threads do this on their own; tests and loom models call it directly.
    pub fn poll_completions(&self, queue: usize) -> usize {
        completion::poll_completed(&self.shared, queue)
    }

    /// Waits until every queue has nothing pending or in flight, or `timeout` passes.
    pub fn wait_idle(&self, timeout: std::time::Duration) -> Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let busy = !lock(&self.shared.pending).is_empty()
                || self.shared.queues.iter().any(|q| !lock(&q.inflight).is_empty())
                || (0..self.shared.queues.len()).any(|queue| self.shared.held_count(queue) > 0);
            if !busy {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                let report = self.report();
                let report: Vec<&str> = report.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
                return Err(Error::deadline_exceeded(format!(
                    "{}: not idle after {timeout:?}: {}",
                    self.shared.device,
                    report.join("; ")
                )));
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// The hang report: every pending action with what it waits on, and what is in flight per queue.
    pub fn report(&self) -> String {
        report::render(&self.shared)
    }

    /// Occupancy of the event pool, timepoints, pending actions and in-flight submissions.
    pub fn resource_usage(&self) -> ResourceUsage {
        let shared = &self.shared;
        let inflight: usize = shared.queues.iter().map(|q| lock(&q.inflight).len()).sum();
        // Work held behind a host call counts as pending: its waits are resolved, its turn is not.
        let held: usize = (0..shared.queues.len()).map(|queue| shared.held_count(queue)).sum();
        let pending = lock(&shared.pending).len() + held;
        let host_calls = shared.host_calls.in_use();
        ResourceUsage {
            pools: vec![
                PoolUsage::new("events", shared.events_in_use(), shared.events.created()),
                PoolUsage::new(
                    "timepoints",
                    shared.timepoints.load(Ordering::Relaxed),
                    shared.timepoints.load(Ordering::Relaxed),
                ),
                PoolUsage::new("pending actions", pending, pending),
                PoolUsage::new("in-flight submissions", inflight, inflight),
                PoolUsage::new("host calls", host_calls, host_calls),
            ],
            memory_in_use: 0,
            memory_kept: 0,
        }
    }
}

impl<M: StreamModel> Shared<M> {
    pub(crate) fn pending_insert(&self, action: &Arc<Action<M>>) {
        lock(&self.pending).insert(action.id, action.clone());
    }

    pub(crate) fn pending_remove(&self, id: u64) {
        let removed = lock(&self.pending).remove(&id);
        drop(removed);
    }

    pub(crate) fn pending_get(&self, id: u64) -> Option<Arc<Action<M>>> {
        lock(&self.pending).get(&id).cloned()
    }

    /// Events held by submissions or semaphores (not those free in the pool or in an issuer's cache).
    /// Never blocks: an issuer busy in a driver call (perhaps the hang being reported) has its cached
    /// events counted as in use until it is done.
    pub(crate) fn events_in_use(&self) -> usize {
        let cached: usize =
            self.queues.iter().map(|q| try_lock(&q.issuer).map_or(0, |issuer| issuer.cached_events())).sum();
        self.events.in_use(cached)
    }

    pub(crate) fn timepoints_registered(&self) {
        self.timepoints.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn timepoints_resolved(&self, count: usize) {
        if count > 0 {
            self.timepoints.fetch_sub(count, Ordering::Relaxed);
        }
    }

    /// Publishes that the calling host thread polls `event` of `queue` until the guard drops: the
    /// queue's completion thread does not query it meanwhile (see `watch`).
    fn watch(&self, queue: usize, event: &M::Event) -> watch::Watching<'_> {
        self.queues[queue].watch.watch(watch::event_key(event))
    }

    /// Retires completed work of `queue` on a host thread that just waited for the event of
    /// submission `id` (with `status`), unless another thread is retiring it now.
    pub(crate) fn retire_from_waiter(&self, queue: usize, id: u64, status: Result<()>) {
        completion::try_retire_completed(self, queue, (id, status));
    }
}

impl<M: StreamModel> Drop for Scheduler<M> {
    fn drop(&mut self) {
        teardown::shut_down(&self.shared, std::mem::take(&mut self.completion_threads));
    }
}

crate::sync::thread_local! {
    #[allow(clippy::missing_const_for_thread_local)]
    /// Set on the threads a scheduler starts (completion, host calls): a device dropped there must
    /// not wait for its other threads, which may be waiting for this one.
    static SCHEDULER_THREAD: std::cell::Cell<bool> = std::cell::Cell::new(false);
}

/// Marks the calling thread as one a scheduler started.
pub(crate) fn mark_scheduler_thread() {
    SCHEDULER_THREAD.with(|t| t.set(true));
}

/// Whether the calling thread is one a scheduler started.
pub(crate) fn on_scheduler_thread() -> bool {
    SCHEDULER_THREAD.with(std::cell::Cell::get)
}
