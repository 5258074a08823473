//! Completion: one thread per queue blocks on the oldest in-flight event, then retires, in the same
//! wake-up, every submission whose event has completed (coalesced: no host callback per submission).
//! Retiring applies the signals (or fails them with the fault), hands host calls whose turn has come
//! to their threads (`host_calls`), and drops the submission's event references so the events return
//! to the pool. Listeners woken by the signals (wakers, released actions) run after the retiring lock
//! is released (`defer_delivery`), never under it.

use std::sync::Arc;

use smallvec::SmallVec;

use super::event_pool::EventRef;
use super::event_semaphore::{Producer, SemaphoreEvents};
use super::host_calls::Job;
use super::seal::StreamMark;
use super::watch;
use super::{InFlight, QueueSlot, Shared};
use crate::driver::QueueOp;
use crate::driver::stream_model::{StreamModel, Work};
use crate::error::Result;
use crate::semaphore::{SemaphoreValue, defer_delivery};
use crate::sync::atomic::Ordering;
use crate::sync::{MutexGuard, lock, try_lock, wait, yield_now};
use std::time::{Duration, Instant};

/// How long an idle completion thread watches for the next submission before it sleeps: a queue fed
/// continuously never makes its submitting thread pay for a wake-up (a system call per issue).
const IDLE_WATCH: Duration = Duration::from_micros(50);

/// A yield that returns later than this shows the cores are wanted by other threads: the thread
/// stops watching for [`CONTENDED_PAUSE`] and sleeps when idle. While it watches, submitters do not
/// wake it, so on a machine whose cores are all busy (a build beside the program) a watcher queued
/// behind another process notices the next submission only after that process's time slice,
/// milliseconds later, where a sleeping one is woken at once.
const CONTENDED_YIELD: Duration = Duration::from_micros(20);

/// How long a completion thread that saw contention sleeps at once when idle, before it watches
/// again.
const CONTENDED_PAUSE: Duration = Duration::from_millis(100);

/// The completion thread of `queue`; returns once the device shuts down and nothing is in flight.
pub(super) fn run<M: StreamModel>(shared: &Arc<Shared<M>>, queue: usize) {
    super::mark_scheduler_thread();
    let slot = &shared.queues[queue];
    let mut no_watch_until: Option<Instant> = None;
    loop {
        let front = {
            let mut inflight = lock(&slot.inflight);
            let mut idle_since: Option<Instant> = None;
            loop {
                if let Some(front) = inflight.front() {
                    break (front.work.id, front.event.clone(), slot.watch.pops());
                }
                if shared.shutting_down.load(Ordering::Acquire) {
                    return;
                }
                let idle_since = *idle_since.get_or_insert_with(Instant::now);
                let paused = no_watch_until.is_some_and(|until| Instant::now() < until);
                if !paused && idle_since.elapsed() < IDLE_WATCH {
                    let seen = slot.issued.load(Ordering::Acquire);
                    drop(inflight);
                    while slot.issued.load(Ordering::Acquire) == seen
                        && idle_since.elapsed() < IDLE_WATCH
                        && !shared.shutting_down.load(Ordering::Acquire)
                    {
                        // Politely: on a busy machine the submitting thread may need this core.
                        let yielded = Instant::now();
                        std::thread::yield_now();
                        if yielded.elapsed() > CONTENDED_YIELD {
                            no_watch_until = Some(Instant::now() + CONTENDED_PAUSE);
                            break;
                        }
                    }
                    inflight = lock(&slot.inflight);
                    continue;
                }
                slot.sleeping.store(true, Ordering::Relaxed);
                inflight = wait(&slot.wake, inflight);
                slot.sleeping.store(false, Ordering::Relaxed);
            }
        };
        let (id, event, pops) = front;
        let status = match &event {
            Some(mark) => match shared.event_for_completion(queue, mark) {
                Ok(event) => {
                    let key = watch::event_key(event.event());
                    let taken_over = || slot.watch.taken_over(pops, key);
                    match shared.model.await_completion(&slot.stream, event.event(), &taken_over) {
                        Some(status) => status,
                        None => {
                            // Retired by another thread, or a host waiter polls this event and
                            // retires the work itself: wait for that, then read the front again.
                            drop(event);
                            slot.watch.wait_while_watched(pops, key);
                            continue;
                        }
                    }
                }
                Err(status) => Err(status),
            },
            None => Ok(()),
        };
        drop(event);
        retire_completed(shared, queue, Some((id, status)));
    }
}

/// Retires, oldest first, every in-flight submission of `queue` whose event has completed, and
/// returns how many. `front` is the already-known status of the submission with that id (the thread
/// just blocked on it), used only if it is still the oldest; everything else is queried. Never
/// blocks on the device.
pub(super) fn retire_completed<M: StreamModel>(
    shared: &Shared<M>,
    queue: usize,
    front: Option<(u64, Result<()>)>,
) -> usize {
    in_retirement(|| {
        let retiring = lock(&shared.queues[queue].retiring);
        retire_completed_locked(shared, queue, front, Until::Open, retiring)
    })
}

/// Retires, without blocking on the device, every submission of `queue` that has completed, sealing
/// open marks on the way (see `seal`): `Scheduler::poll_completions`, which tests and loom models
/// drive completion with.
pub(super) fn poll_completed<M: StreamModel>(shared: &Shared<M>, queue: usize) -> usize {
    in_retirement(|| {
        let retiring = lock(&shared.queues[queue].retiring);
        retire_completed_locked(shared, queue, None, Until::Nothing, retiring)
    })
}

/// Where a retirement pass stops (besides at a submission still running).
#[derive(Clone, Copy)]
enum Until<'a> {
    /// Nowhere else: open marks are sealed (the issue lock is taken under the retiring lock, which
    /// is safe: an issuer only ever tries the retiring lock).
    Nothing,
    /// At the first open mark: the completion thread seals it without blocking on the issue lock,
    /// and a host waiter has its own event.
    Open,
    /// Once this work (a producer of a dependant being retired) has retired.
    Retired(&'a Work),
    /// As `Retired`, for a producer whose dependant's mark completed without a fault after the
    /// dependant's stream waited on the producer's event: the producer and every entry before it
    /// on its stream completed, so no event is asked or sealed on the way (each query takes a
    /// driver lock the submitting threads need, and two queues feeding each other would ask on
    /// every hop).
    RetiredCompleted(&'a Work),
}

/// How long a host waiter tries for a queue's retiring lock that another thread holds before it
/// leaves the retirement to that thread. Retirement runs no user code, so the lock is held for
/// microseconds; a waiter that gave up at once would park and pay a wake-up instead.
const WAITER_RETIRE_PATIENCE: Duration = Duration::from_micros(100);

/// [`retire_completed`] for a host waiter. If another thread is retiring `queue` and does not let go
/// within [`WAITER_RETIRE_PATIENCE`], the waiter leaves it to that thread (and parks on its
/// semaphore, which that retirement wakes): a wait with a deadline never queues behind a lock.
pub(super) fn try_retire_completed<M: StreamModel>(shared: &Shared<M>, queue: usize, front: (u64, Result<()>)) {
    in_retirement(|| {
        let retiring = &shared.queues[queue].retiring;
        let mut started: Option<Instant> = None;
        let guard = loop {
            if let Some(guard) = try_lock(retiring) {
                break guard;
            }
            if started.get_or_insert_with(Instant::now).elapsed() >= WAITER_RETIRE_PATIENCE {
                return;
            }
            crate::sync::spin_hint();
        };
        retire_completed_locked(shared, queue, Some(front), Until::Open, guard);
    });
}

/// Retires, on the issuing thread, a submission that put nothing on its stream while every earlier
/// submission of its queue had retired (`retiring` held since that was seen, the in-flight FIFO
/// empty): the stream point it marks has been reached. Its listeners are told once the lock is
/// released, as after any retirement.
pub(super) fn retire_at_issue<M: StreamModel>(shared: &Shared<M>, entry: InFlight<M>, retiring: MutexGuard<'_, ()>) {
    in_retirement(|| {
        let work = retire(shared, entry, Ok(()), None);
        drop(retiring);
        shared.recycle_work_at_issue(work.queue, work);
    });
}

/// Retires a submission that never became work (see `quiet`): applies `signals` and prunes their
/// event tables, the queue's retiring lock held until done.
pub(super) fn retire_at_submission<M: StreamModel>(
    shared: &Shared<M>,
    signals: &[SemaphoreValue],
    outcome: Result<()>,
    retiring: MutexGuard<'_, ()>,
) {
    in_retirement(|| {
        apply_and_prune(shared, signals, outcome, 0);
        drop(retiring);
    });
}

/// Applies `outcome` to `signals` and prunes the events this device published for the values.
fn apply_and_prune<M: StreamModel>(shared: &Shared<M>, signals: &[SemaphoreValue], outcome: Result<()>, action: u64) {
    apply_outcome(signals, outcome, action);
    for signal in signals {
        prune(shared, signal);
    }
}

crate::sync::thread_local! {
    #[allow(clippy::missing_const_for_thread_local)]
    /// How deep this thread is in retirements (see [`retiring_here`]).
    static RETIRING: std::cell::Cell<usize> = std::cell::Cell::new(0);
}

/// Whether this thread is inside a retirement (holding a retiring lock, or about to): a device
/// dropped here must not wait for its completion threads (see `teardown`).
pub(super) fn retiring_here() -> bool {
    RETIRING.with(std::cell::Cell::get) > 0
}

/// Runs a retirement: the thread counts as retiring meanwhile (see [`retiring_here`]), and the
/// listeners its signals wake are told once it is over, outside the retiring lock.
fn in_retirement<R>(retire: impl FnOnce() -> R) -> R {
    defer_delivery(|| {
        let _here = RetiringHere::enter();
        retire()
    })
}

/// Marks this thread as retiring while it lives.
struct RetiringHere;

impl RetiringHere {
    fn enter() -> Self {
        RETIRING.with(|r| r.set(r.get() + 1));
        RetiringHere
    }
}

impl Drop for RetiringHere {
    fn drop(&mut self) {
        RETIRING.with(|r| r.set(r.get().saturating_sub(1)));
    }
}

/// [`retire_completed`] with `queue`'s retiring lock already taken.
fn retire_completed_locked<M: StreamModel>(
    shared: &Shared<M>,
    queue: usize,
    front: Option<(u64, Result<()>)>,
    until: Until<'_>,
    _retiring: MutexGuard<'_, ()>,
) -> usize {
    let slot = &shared.queues[queue];
    let mut known = front;
    // Entries at the front known to have completed: one query of a newer event covers every older
    // one on the same stream, so a burst retires with one driver call instead of one each.
    let mut complete_prefix = 0usize;
    let mut probe = Probe::default();
    let mut retired = 0;
    loop {
        // Retiring for a dependant stops at its producer: retiring more could need producers whose
        // queues this thread already holds further up.
        if matches!(until, Until::Retired(work) | Until::RetiredCompleted(work) if work.is_retired()) {
            break;
        }
        // The completion thread's own passes retire a known-complete run from the front in
        // batches: one lock of the FIFO and one prune of each semaphore's events a batch, instead
        // of two locks and a prune an entry, each on lines the issuing threads use too. (Passes for
        // a dependant stop at its producer, so they go one by one.)
        if complete_prefix > 0 && matches!(until, Until::Open | Until::Nothing) {
            let batch = retire_batch(shared, slot, complete_prefix);
            if batch == 0 {
                break;
            }
            complete_prefix -= batch;
            retired += batch;
            continue;
        }
        let (id, front_event) = match lock(&slot.inflight).front() {
            Some(next) => (next.work.id, next.event.clone()),
            None => break,
        };
        let status = if complete_prefix > 0 {
            complete_prefix -= 1;
            Ok(())
        } else if matches!(until, Until::RetiredCompleted(_)) {
            Ok(())
        } else {
            match (known.take(), front_event) {
                (Some((known_id, status)), _) if known_id == id => status,
                (_, None) => Ok(()),
                (_, Some(mark)) => {
                    let event = match (mark.recorded(), until) {
                        (Some(outcome), _) => outcome,
                        (None, Until::Open) => break,
                        (None, _) => mark.sealed(shared),
                    };
                    match event {
                        Err(status) => Err(status),
                        Ok(event) => match probe.front(shared, queue, id, &event) {
                            Probed::Complete { covered } if matches!(until, Until::Open | Until::Nothing) => {
                                // The front included: the batch above retires them.
                                complete_prefix = covered;
                                continue;
                            }
                            Probed::Complete { covered } => {
                                complete_prefix = covered - 1;
                                Ok(())
                            }
                            Probed::Front(status) => status,
                            Probed::Pending => break,
                        },
                    }
                }
            }
        };
        let Some(entry) = pop_front(slot) else { break };
        let work = retire(shared, entry, status, None);
        shared.recycle_work(work);
        retired += 1;
    }
    retired
}

/// The most submissions [`retire_batch`] takes off the FIFO at once (kept on the stack, so a
/// retirement allocates nothing).
const RETIRE_BATCH: usize = 16;

/// Retires up to `complete` (at most [`RETIRE_BATCH`]) submissions from the front of `slot`'s
/// FIFO, all known to have completed, taken off it under one lock: their signals are applied in
/// order, then each semaphore's published events pruned once, up to the largest value signalled
/// (entries for values already reached only cost a lookup meanwhile: a wait finds the value first),
/// and only then is the work recycled (a table entry still holds it until pruned). Returns how many
/// it retired.
fn retire_batch<M: StreamModel>(shared: &Shared<M>, slot: &QueueSlot<M>, complete: usize) -> usize {
    let batch: SmallVec<[InFlight<M>; RETIRE_BATCH]> = {
        let mut inflight = lock(&slot.inflight);
        let count = complete.min(RETIRE_BATCH).min(inflight.len());
        let batch = inflight.drain(..count).collect();
        slot.watch.popped_many(count);
        batch
    };
    let count = batch.len();
    let mut prunes = Prunes::default();
    let mut spent: SmallVec<[Arc<Work>; RETIRE_BATCH]> = SmallVec::new();
    for entry in batch {
        spent.push(retire(shared, entry, Ok(()), Some(&mut prunes)));
    }
    prunes.apply(shared);
    for work in spent {
        shared.recycle_work(work);
    }
    count
}

/// The event-table prunes a batch of retirements owes: per semaphore, the largest value signalled.
#[derive(Default)]
struct Prunes {
    pending: SmallVec<[SemaphoreValue; PRUNES_KEPT]>,
}

/// How many semaphores a batch's prunes are kept for; the signals of any further one are pruned at
/// once (so keeping them never allocates).
const PRUNES_KEPT: usize = 4;

impl Prunes {
    /// Notes the prunes `signals` (just applied) owe, or prunes them now when the list is full.
    fn note<M: StreamModel>(&mut self, shared: &Shared<M>, signals: &[SemaphoreValue]) {
        for signal in signals {
            if let Some(pending) = self.pending.iter_mut().find(|p| p.semaphore.same_as(&signal.semaphore)) {
                pending.value = pending.value.max(signal.value);
            } else if self.pending.len() < PRUNES_KEPT {
                self.pending.push(signal.clone());
            } else {
                prune(shared, signal);
            }
        }
    }

    /// Prunes every semaphore noted.
    fn apply<M: StreamModel>(self, shared: &Shared<M>) {
        for signal in &self.pending {
            prune(shared, signal);
        }
    }
}

/// Drops the events this device published on `signal`'s semaphore for values up to its value.
fn prune<M: StreamModel>(shared: &Shared<M>, signal: &SemaphoreValue) {
    if let Some(table) = SemaphoreEvents::<M>::of(&signal.semaphore, shared.device) {
        table.prune(signal.value);
    }
}

/// Pops the oldest in-flight entry, counting the pop (see `watch`).
fn pop_front<M: StreamModel>(slot: &QueueSlot<M>) -> Option<InFlight<M>> {
    let mut inflight = lock(&slot.inflight);
    let entry = inflight.pop_front()?;
    slot.watch.popped();
    Some(entry)
}

/// The event queries of one retirement pass, planned so that a pass costs few driver calls (each
/// takes a driver lock the submitting threads' launches need too, so a completion thread that
/// queries every entry slows the submitters down; `docs/decisions.md#completion-thread-default` and
/// `docs/decisions.md#producers-retire-without-a-query` have the measurements).
///
/// Events on one stream complete in order. A submitting thread that keeps the GPU busy is usually
/// one submission ahead of it, so a pass asks the newest event first (all done?), then the one
/// before it (all but the newest?), and only then walks from the front. Steady state: two queries
/// per pass however many submissions it retires, and none for the newest again once it is known
/// to be pending.
#[derive(Default)]
struct Probe {
    /// Whether the newest and the second-newest event were asked this pass.
    newest_asked: bool,
    second_asked: bool,
    /// The submission whose event is the newest, once this pass found it pending.
    newest_pending: Option<u64>,
}

/// What a [`Probe`] found out about the front submission.
enum Probed {
    /// The front and the entries after it, `covered` in all, have completed.
    Complete { covered: usize },
    /// The front's own event says this (completed, or the device fault).
    Front(Result<()>),
    /// The front is still running.
    Pending,
}

impl Probe {
    fn front<M: StreamModel>(
        &mut self,
        shared: &Shared<M>,
        queue: usize,
        front_id: u64,
        front_event: &EventRef<M>,
    ) -> Probed {
        let slot = &shared.queues[queue];
        if self.newest_pending == Some(front_id) {
            return Probed::Pending;
        }
        if !self.newest_asked {
            self.newest_asked = true;
            if let Some((covered, id, event)) = newer_event(&slot.inflight, 0) {
                match shared.model.query_event(event.event()) {
                    Ok(true) => return Probed::Complete { covered },
                    Ok(false) => self.newest_pending = Some(id),
                    Err(_) => {} // the front's own query below reports the fault
                }
            }
        }
        if self.newest_pending.is_some() && !self.second_asked {
            self.second_asked = true;
            if let Some((covered, _, event)) = newer_event(&slot.inflight, 1)
                && let Ok(true) = shared.model.query_event(event.event())
            {
                return Probed::Complete { covered };
            }
        }
        match shared.model.query_event(front_event.event()) {
            Ok(true) => Probed::Front(Ok(())),
            Ok(false) => Probed::Pending,
            Err(fault) => Probed::Front(Err(fault)),
        }
    }
}

/// The `skip`-th newest in-flight event of a queue (0: the newest), if it is not the front's: how
/// many entries from the front it covers, its submission and the event.
fn newer_event<M: StreamModel>(
    inflight: &crate::sync::Mutex<std::collections::VecDeque<InFlight<M>>>,
    skip: usize,
) -> Option<(usize, u64, EventRef<M>)> {
    let inflight = lock(inflight);
    let (at, entry) = inflight
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, e)| e.event.as_ref().is_some_and(StreamMark::is_recorded))
        .nth(skip)?;
    let Some(Ok(event)) = entry.event.as_ref()?.recorded() else { return None };
    (at > 0).then(|| (at + 1, entry.work.id, event))
}

/// The outcome of stream work whose mark completed with `status`: the backend completes it (or
/// discards it on a fault). Faults in the slot already name their submission (`Work::fail`) or are
/// an upstream status passed on unchanged; everything found here is named now.
fn stream_outcome<M: StreamModel>(shared: &Shared<M>, work: &Work, status: Result<()>) -> Result<()> {
    match status {
        Err(fault) => {
            shared.model.discard(work);
            Err(work.describe_fault(fault))
        }
        Ok(()) => match work.fault.get() {
            // Failed before it ran (its upstream, or the backend while issuing it): the backend
            // lets go of what it keeps for the work, as for a fault on the stream.
            Some(fault) => {
                shared.model.discard(work);
                Err(fault)
            }
            None => shared.model.complete(work).map_err(|e| work.describe_fault(e)),
        },
    }
}

/// Applies the outcome of one completed submission (a host call is handed to its thread, which
/// applies the outcome once the call returns). Returns the work for recycling.
fn retire<M: StreamModel>(
    shared: &Shared<M>,
    entry: InFlight<M>,
    status: Result<()>,
    prunes: Option<&mut Prunes>,
) -> Arc<Work> {
    let span = tracing::trace_span!(
        "complete",
        queue = entry.work.queue,
        action = entry.work.id,
        op = entry.kind(),
        device_ns = tracing::field::Empty
    )
    .entered();
    let InFlight { work, host_call, event, signals, waited, _wait_events, producers } = entry;
    // Its stream waited on every producer's event before its work: a mark that completed without a
    // fault says the producers completed too.
    let after_producers = event.is_some() && host_call.is_none() && status.is_ok();
    retire_producers_first(shared, &producers, after_producers);
    shared.reclaim_producers(producers.into_iter().map(|producer| producer.work));
    // A host call put nothing on a stream: the backend has nothing to complete for it.
    let mut outcome = match host_call {
        Some(_) => status,
        None => stream_outcome(shared, &work, status),
    };
    if let Some(elapsed) = work.device_time() {
        span.record("device_ns", u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }
    // A wait the device went past on an event may since have failed on the host (the work it waited
    // for never signalled): the work ran, or stopped because its producer was cancelled, but its
    // signals carry that semaphore's failure, as those of held work do.
    if let Some(failure) = waited.iter().find_map(|w| w.semaphore.failed_short_of(w.value)) {
        outcome = Err(failure);
    }
    // A read's bytes reach the host in the step that applies its signals, or its status does.
    if let QueueOp::Read { target, .. } = &work.op {
        target.settle(&outcome);
    }
    match host_call {
        Some(call) => {
            let outcome = outcome.and_then(|()| work.upstream_fault().map_or(Ok(()), Err));
            let job = Job {
                device: shared.device.get(),
                queue: work.queue,
                action: work.id,
                call: call.take(),
                outcome,
                signals,
                scheduler: shared.this.clone(),
            };
            shared.host_calls.run(job);
        }
        None => match prunes {
            Some(prunes) => {
                apply_outcome(&signals, outcome, work.id);
                prunes.note(shared, &signals);
            }
            None => apply_and_prune(shared, &signals, outcome, work.id),
        },
    }
    drop(event);
    work.mark_retired();
    work
}

/// Applies a finished submission's outcome to its signals: each is signalled, or failed with the
/// status. A signal behind the value its semaphore already reached (unordered submissions signalled
/// it, and a later value completed first) changes nothing a waiter can see, as values only grow,
/// but is never dropped in silence: it is logged and counted on the semaphore
/// ([`crate::Semaphore::behind_signals`], and its report line).
pub(super) fn apply_outcome(signals: &[SemaphoreValue], outcome: Result<()>, action: u64) {
    match outcome {
        Ok(()) => {
            for signal in signals {
                if let Err(refused) = signal.semaphore.signal(signal.value)
                    && signal.semaphore.query().is_ok()
                {
                    signal.semaphore.note_behind_signal();
                    tracing::warn!(action, %refused, "a signal completed behind the value already reached");
                }
            }
        }
        Err(status) => {
            for signal in signals {
                signal.semaphore.fail(status.clone());
            }
        }
    }
}

/// Waits until every producer on another queue (work whose event this submission's stream waited
/// on) has retired, retiring their queues' completed work on this thread when no other thread is.
///
/// Completion threads retire their queues independently, so without this a dependant could apply
/// its signals (say `s = 24`) before its producer on another queue retired: a host that saw `s >= 19`
/// through the larger value would find the producer's effects (a read's bytes) not there yet. The
/// producers completed on the device before this submission did, so this waits only for another
/// thread that is retiring them now, never for the device. It cannot deadlock: a thread holding
/// another queue's retiring lock waits in turn only for work issued before its own (nested
/// retirement stops at the producer it was for), and issue order has no cycles.
///
/// `completed`: the dependant's mark completed without a fault, so the producers (and all work
/// before each on its stream) completed as well and are retired without asking their events.
fn retire_producers_first<M: StreamModel>(shared: &Shared<M>, producers: &[Producer<M>], completed: bool) {
    for producer in producers {
        // Another device's work is retired by that device's scheduler, the same way (issue order
        // is one order across devices, so the argument above holds); a device already gone has
        // retired or cancelled all of its work at teardown.
        let owner = match &producer.scheduler {
            Some(weak) => match weak.upgrade() {
                Some(owner) => Some(owner),
                None => continue,
            },
            None => None,
        };
        let shared = owner.as_deref().unwrap_or(shared);
        let work = &producer.work;
        while !work.is_retired() {
            let slot = &shared.queues[work.queue];
            if let Some(guard) = try_lock(&slot.retiring) {
                let until = if completed { Until::RetiredCompleted(work) } else { Until::Retired(work) };
                retire_completed_locked(shared, work.queue, None, until, guard);
            }
            if !work.is_retired() {
                // Another thread retires that queue now, or a host call ahead of the producer waits
                // for its completion thread.
                yield_now();
            }
        }
    }
}
