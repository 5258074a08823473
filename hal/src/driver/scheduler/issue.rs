//! The issue path: a submission whose waits are all resolved goes onto its queue's dispatch stream
//! (stream-waits on the covering events, the work, one pooled event recorded after it), publishes
//! that event on the signal semaphores this device owns, and is handed to the queue's completion
//! thread. A blocking host call ahead of it may hold it back first (`admission`).

use std::sync::Arc;

use smallvec::SmallVec;

use super::event_pool::EventRef;
use super::event_semaphore::{Producer, SemaphoreEvents, SignalEvent};
use super::seal::{RECORD_EVERY, Seal, StreamMark};
use super::wait_cover::Covers;
use super::{InFlight, Issue, IssuerCache, QueueSlot, Shared};
use crate::driver::stream_model::{PerWait, StreamModel, Submitted, Work};
use crate::driver::{HostCall, Submission};
use crate::error::{Error, Result};
use crate::semaphore::{SemaphoreList, SemaphoreValue};
use crate::sync::atomic::Ordering;
use crate::sync::{MutexGuard, lock, try_lock};

impl<M: StreamModel> Shared<M> {
    /// Issues a submission whose waits are resolved: see the module docs, step 3. Under the issue
    /// lock it picks a [`Route`], marks where the work ends, publishes that mark and hands the work
    /// to the completion thread; outside it, wakes what waits for the publication, or fails the
    /// signals.
    pub(crate) fn issue(&self, id: u64, issue: Issue<M>) {
        // Fields are moved out where they are used: each move of the op is a copy.
        let queue = issue.queue;
        let _span = tracing::trace_span!("issue", queue, action = id, op = issue.op.kind()).entered();
        let signals = issue.signals;
        let Covers { waited, events: wait_events, upstream } = issue.covers;
        let has_upstream = !upstream.is_empty();
        let (upstream, producers) = split_upstream(queue, upstream);
        let slot = &self.queues[queue];
        let mut issuer = lock(&slot.issuer);
        // Teardown closes the queues under this lock: work released after that (a signal that
        // arrived as the device went away) would reach a stream no completion thread retires.
        if self.shutting_down.load(Ordering::Acquire) {
            drop(issuer);
            self.cancel_issue(id, queue, issue.op, &signals);
            return;
        }
        let submitted = issue.profiled.map(|profiled| {
            let (at, waits) = *profiled;
            let signals = u32::try_from(signals.len()).unwrap_or(u32::MAX);
            Submitted { at, ready: std::time::Instant::now(), waits, signals }
        });
        let (work, host_call) = self.new_work(&mut issuer.work, id, queue, issue.op, upstream, submitted);
        work.set_signal_count(signals.len());
        // Taken whatever happens next: only a successful enqueue (or share) below sets it again.
        let shareable = issuer.last_mark.take();
        let (marked, tables) = match self.route(slot, &work, host_call.as_ref(), &wait_events, has_upstream, shareable)
        {
            Route::RetireNow(retiring) => {
                drop(issuer);
                let entry =
                    InFlight { work, host_call, event: None, signals, waited, _wait_events: wait_events, producers };
                super::completion::retire_at_issue(self, entry, retiring);
                return;
            }
            // A host call publishes no mark.
            Route::HostCall => (Ok(None), SmallVec::new()),
            Route::Share(mark) => (Ok(Some(mark)), event_tables::<M>(&signals, self.device)),
            Route::Stream => {
                let tables = event_tables::<M>(&signals, self.device);
                let waited_elsewhere = tables.iter().flatten().any(|table| table.waited_elsewhere());
                (self.enqueue_on_stream(queue, &mut issuer, &work, &wait_events, waited_elsewhere).map(Some), tables)
            }
        };
        match marked {
            Ok(mark) => {
                issuer.last_mark.clone_from(&mark);
                let published = self.publish(queue, &work, &signals, &tables, mark.as_ref());
                drop(tables);
                let entry =
                    InFlight { work, host_call, event: mark, signals, waited, _wait_events: wait_events, producers };
                push_inflight(slot, entry);
                drop(issuer);
                // Outside the issue lock: waking enqueued-waiters may issue on this same queue.
                for signal in published {
                    signal.semaphore.advance_enqueued(signal.value);
                }
            }
            Err(status) => {
                if !wait_events.is_empty() {
                    self.fence_failed_issue(queue, &mut issuer, &work, wait_events, producers, &status);
                }
                drop(issuer);
                fail_issue(&work, &signals, status);
            }
        }
    }

    /// Where submission `work` goes (see [`Route`]). `shareable` is the mark of the last
    /// submission put on the queue's stream, if nothing was put on the stream since.
    fn route<'q>(
        &self,
        slot: &'q QueueSlot<M>,
        work: &Arc<Work>,
        host_call: Option<&HostCall>,
        wait_events: &[EventRef<M>],
        has_upstream: bool,
        shareable: Option<StreamMark<M>>,
    ) -> Route<'q, M> {
        if host_call.is_some() {
            return Route::HostCall;
        }
        // Waits for nothing on the stream, is not profiled and (where the backend checks upstream
        // faults) follows no producer: it could be retired here, if nothing else needs the stream.
        let alone = wait_events.is_empty() && work.profile().is_none() && !(M::CHECKS_UPSTREAM_FAULTS && has_upstream);
        if !alone {
            return Route::Stream;
        }
        // Puts nothing on the stream: it marks the stream point where the queue's earlier work ends.
        let quiet = self.model.enqueues_nothing(work);
        // Or the backend would run it here, were the stream idle (no upstream producer at all: it
        // would have to pass a fault on).
        let light = !quiet && !has_upstream && self.model.light_at_issue(work);
        if !quiet && !light {
            return Route::Stream;
        }
        // If every earlier submission of the queue has retired, that point is reached, and the
        // stream is idle: quiet work retires now, and light work runs here first. The retiring lock
        // (only tried: lock order) keeps retirements of the queue in order until it is done.
        if let Some(retiring) = try_lock(&slot.retiring) {
            // The in-flight lock is released before the work runs.
            let idle = lock(&slot.inflight).is_empty();
            if idle {
                if light {
                    self.model.run_at_issue(work);
                }
                return Route::RetireNow(retiring);
            }
        }
        if quiet { shareable.map_or(Route::Stream, Route::Share) } else { Route::Stream }
    }

    /// Publishes `mark` on every signal semaphore whose event table this device publishes into
    /// (`tables`, one per signal), so waiters elsewhere can chain device-side; returns those
    /// signals. Under the issue lock: marks are published in stream order.
    fn publish(
        &self,
        queue: usize,
        work: &Arc<Work>,
        signals: &[SemaphoreValue],
        tables: &[Option<&SemaphoreEvents<M>>],
        mark: Option<&StreamMark<M>>,
    ) -> Published {
        let mut published = Published::new();
        let Some(mark) = mark else { return published };
        for (signal, table) in signals.iter().zip(tables) {
            if let Some(table) = table {
                let entry = SignalEvent {
                    value: signal.value,
                    event: mark.clone(),
                    producer: work.clone(),
                    queue,
                    device: self.device,
                };
                table.publish(entry, &self.this);
                published.push(signal.clone());
            }
        }
        published
    }

    /// Cancels a submission released after teardown closed its queue.
    fn cancel_issue(&self, id: u64, queue: usize, op: Submission, signals: &[SemaphoreValue]) {
        // A blocking host call was admitted: it will never return now.
        self.call_returned(queue, id);
        let status = Error::cancelled(format!(
            "{}: device destroyed while queue {queue} action {id} ({}) was being issued",
            self.device,
            op.kind()
        ));
        op.will_not_run(&status);
        drop(op);
        fail_signals(signals, &status);
    }

    /// After an issue that failed once its stream may already hold waits on `wait_events` (a wait
    /// was enqueued, then the work or the record failed): records a fence event after those waits
    /// and keeps the wait events, in an in-flight entry with no signals, until the stream has passed
    /// the fence. Without it the events could go back to the pool, and be recorded again, while a
    /// pending stream-wait may still observe them. A stream that cannot even record the fence (a
    /// device fault) will run nothing more, so then nothing needs keeping.
    fn fence_failed_issue(
        &self,
        queue: usize,
        issuer: &mut IssuerCache<M>,
        work: &Arc<Work>,
        wait_events: PerWait<EventRef<M>>,
        producers: PerWait<Producer<M>>,
        status: &Error,
    ) {
        let Ok(fence) = self.record_now(queue, issuer) else { return };
        // Retires as failed: its (empty) signal list is all it would apply.
        work.fail(status.clone());
        let entry = InFlight {
            work: work.clone(),
            host_call: None,
            event: Some(StreamMark::Recorded(fence)),
            signals: SemaphoreList::new(),
            waited: PerWait::new(),
            _wait_events: wait_events,
            producers,
        };
        push_inflight(&self.queues[queue], entry);
    }

    /// Stream-waits and enqueues; then records an event after the work, or leaves the submission
    /// open (see `seal`): when the queue has work in flight that a later record will follow anyway,
    /// nobody asked for a record, fewer than [`RECORD_EVERY`] submissions are open, and none of its
    /// signal semaphores is one that streams of other queues wait on (`waited_elsewhere`: they
    /// would seal it at once). Profiled work always records (its timing is read when it retires).
    fn enqueue_on_stream(
        &self,
        queue: usize,
        issuer: &mut IssuerCache<M>,
        work: &Arc<Work>,
        wait_events: &[EventRef<M>],
        waited_elsewhere: bool,
    ) -> Result<StreamMark<M>> {
        let slot = &self.queues[queue];
        for event in wait_events {
            self.model.wait_event(&slot.stream, event.event())?;
        }
        self.model.enqueue(&slot.stream, work)?;
        let leave_open = self.model.leaves_marks_open()
            && work.profile().is_none()
            && !waited_elsewhere
            && issuer.unrecorded + 1 < RECORD_EVERY
            && !slot.seal_wanted.load(Ordering::Relaxed)
            && !lock(&slot.inflight).is_empty();
        if leave_open {
            issuer.unrecorded += 1;
            let spares = &issuer.seal_spares;
            let seal = issuer.open.get_or_insert_with(|| Seal::take(queue, spares));
            return Ok(StreamMark::Open(seal.clone()));
        }
        self.record_now(queue, issuer).map(StreamMark::Recorded)
    }
}

/// Where an issued submission goes, decided under its queue's issue lock.
enum Route<'q, M: StreamModel> {
    /// It puts nothing on the stream (or the backend just ran it here: `StreamModel::run_at_issue`)
    /// and every earlier submission of its queue has retired: the stream point it marks is reached,
    /// so it retires on this thread, with no event and no trip through the completion thread (the
    /// queue's retiring lock held).
    RetireNow(MutexGuard<'q, ()>),
    /// A host call: in flight with no mark; the completion thread hands it to a host-call thread
    /// when the work before it has retired.
    HostCall,
    /// It puts nothing on the stream, right after the last submission put there: it marks the
    /// same stream point, so it shares that submission's mark instead of recording one.
    Share(StreamMark<M>),
    /// Onto the stream: waits on the covering events, the work, a mark after it.
    Stream,
}

/// The signals whose semaphores an issue published its mark on (their enqueued-waiters are woken
/// once the issue lock is released).
type Published = SmallVec<[SemaphoreValue; 2]>;

/// The producers whose faults a backend checks before running work (`Work::upstream_fault`).
type UpstreamWork = PerWait<Arc<Work>>;

/// Splits the work a submission's waits follow into what its `Work` carries (the producers whose
/// faults the backend checks, only where it does) and the producers it retires after: those on
/// other queues or devices (ones on its own queue retire before it anyway, in stream order).
#[inline]
fn split_upstream<M: StreamModel>(
    queue: usize,
    upstream: PerWait<Producer<M>>,
) -> (UpstreamWork, PerWait<Producer<M>>) {
    if upstream.is_empty() {
        return (SmallVec::new(), upstream);
    }
    // Loops of pushes: a collect into a `SmallVec` takes its general path, several times the cost
    // for the one or two items a submission has (every issue runs this).
    let mut checked = SmallVec::new();
    if M::CHECKS_UPSTREAM_FAULTS {
        for producer in &upstream {
            checked.push(producer.work.clone());
        }
    }
    let mut producers = SmallVec::new();
    for producer in upstream {
        if producer.scheduler.is_some() || producer.work.queue != queue {
            producers.push(producer);
        }
    }
    (checked, producers)
}

/// The event tables of the signal semaphores a device publishes into (one per signal, `None`
/// where it publishes nothing), looked up once per issue and only for work that publishes a mark.
fn event_tables<M: StreamModel>(
    signals: &[SemaphoreValue],
    device: crate::device::DeviceId,
) -> SmallVec<[Option<&SemaphoreEvents<M>>; 4]> {
    let mut tables = SmallVec::new();
    for signal in signals {
        tables.push(SemaphoreEvents::<M>::of(&signal.semaphore, device));
    }
    tables
}

/// Fails `work`, which could not be put on its stream, and its signals with `status`.
fn fail_issue(work: &Work, signals: &[SemaphoreValue], status: Error) {
    let status = status.context(format!("queue {} action {} ({})", work.queue, work.id, work.op.describe()));
    work.op.will_not_run(&status);
    tracing::warn!(%status, "issue failed");
    fail_signals(signals, &status);
}

/// Fails every signal with `status`.
fn fail_signals(signals: &[SemaphoreValue], status: &Error) {
    for signal in signals {
        signal.semaphore.fail(status.clone());
    }
}

/// Hands an issued submission to its queue's completion thread (called with the issue lock held, so
/// the FIFO is in stream order).
fn push_inflight<M: StreamModel>(slot: &QueueSlot<M>, entry: InFlight<M>) {
    let mut inflight = lock(&slot.inflight);
    inflight.push_back(entry);
    slot.issued.fetch_add(1, Ordering::Release);
    // `sleeping` changes only under this lock, so this read cannot miss a sleeper.
    let asleep = slot.sleeping.load(Ordering::Relaxed);
    drop(inflight);
    if asleep {
        slot.wake.notify_one();
    }
}
