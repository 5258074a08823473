//! The event-backed part of a device's semaphores: for each signal value whose work is enqueued but
//! not yet retired, the event recorded right after that work (a device-signal timepoint).
//!
//! A device-side wait for `v` uses the event of the *smallest* published value `>= v`. Events are
//! published only after they are recorded, so no stream ever waits on an unrecorded event; entries
//! are pruned when the host value passes them, at their submission's retirement.
//!
//! Across devices: when the stream model says its streams can wait on events of another device of
//! the same model (`StreamModel::SHARES_EVENTS_ACROSS_DEVICES`: CUDA devices of one process, cpu-sim
//! devices), every such device publishes into and waits on a semaphore's table, whichever device
//! created it. An entry then names its device; a wait on another device's event keeps that device's
//! scheduler (weakly) with the producer, so the waiting side can retire the producer first, and the
//! event returns to its own device's pool when the last wait on it is gone.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Instant;

use smallvec::SmallVec;

use super::Shared;
use super::seal::StreamMark;
use crate::device::DeviceId;
use crate::driver::stream_model::{StreamModel, Work};
use crate::semaphore::{Semaphore, SemaphoreDriverData};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Mutex, lock};

/// The published signal events of one semaphore, attached to it as driver data.
pub struct SemaphoreEvents<M: StreamModel> {
    /// Sorted by value; a deque because entries are added at the back and pruned from the front (a
    /// dependent chain keeps thousands here).
    table: Mutex<VecDeque<SignalEvent<M>>>,
    /// The schedulers that published here, by device (the creating device's first): to help host
    /// waits (see `assist_wait`) and to retire another device's producers.
    publishers: Mutex<Publishers<M>>,
    /// Set once a stream of another queue (or device) waited on one of this semaphore's events: its
    /// signals are then recorded at issue rather than left open (see `seal`), since such a wait
    /// seals them at once anyway, from the waiting side, at a higher cost.
    waited_elsewhere: AtomicBool,
    /// The device that created the semaphore (first in `publishers`).
    creator: DeviceId,
}

/// The schedulers that published into a table, by device.
type Publishers<M> = SmallVec<[(DeviceId, Weak<Shared<M>>); 2]>;

/// One device-signal timepoint: the event after the work that signals `value`, and that work (a wait
/// on the event must not run if the work faulted).
pub struct SignalEvent<M: StreamModel> {
    /// The value the work signals.
    pub value: u64,
    /// Where the work ends on its stream: an event recorded after it, or the seal the next record
    /// fills (see `seal`).
    pub(crate) event: StreamMark<M>,
    /// The work (for its fault slot).
    pub producer: Arc<Work>,
    /// The queue whose stream recorded the event.
    pub queue: usize,
    /// The device that queue belongs to.
    pub device: DeviceId,
}

/// What a host waiter takes from the entry covering its value (see
/// [`SemaphoreEvents::covering_mark`]).
pub(crate) struct CoveringMark<M: StreamModel> {
    event: StreamMark<M>,
    queue: usize,
    device: DeviceId,
    action: u64,
}

/// Work whose event a submission's stream waits on. `scheduler` is set when it is another device's
/// work: that device's scheduler retires it.
pub(crate) struct Producer<M: StreamModel> {
    pub(crate) work: Arc<Work>,
    pub(crate) scheduler: Option<Weak<Shared<M>>>,
}

impl<M: StreamModel> Producer<M> {
    /// Work of the waiting device.
    pub(crate) fn local(work: Arc<Work>) -> Self {
        Producer { work, scheduler: None }
    }
}

/// How a published event covers a device-side wait.
pub(crate) enum Cover<M: StreamModel> {
    /// Recorded on the waiting queue's own stream: stream order already runs the wait's work after
    /// it, so no event is held (holding one would only cost reference counting shared with the
    /// completion thread). Carries the producer when the caller asked for it (drivers that check
    /// upstream faults).
    InStreamOrder(Option<Arc<Work>>),
    /// Recorded on another queue's stream (of this device, or of another whose scheduler comes
    /// along): the waiting stream must wait on the event.
    Event(SignalEvent<M>, Option<Weak<Shared<M>>>),
}

impl<M: StreamModel> Clone for SignalEvent<M> {
    fn clone(&self) -> Self {
        SignalEvent {
            value: self.value,
            event: self.event.clone(),
            producer: self.producer.clone(),
            queue: self.queue,
            device: self.device,
        }
    }
}

impl<M: StreamModel> SemaphoreEvents<M> {
    pub(crate) fn new(device: DeviceId, scheduler: Weak<Shared<M>>) -> Self {
        let mut publishers = SmallVec::new();
        publishers.push((device, scheduler));
        SemaphoreEvents {
            table: Mutex::new(VecDeque::new()),
            publishers: Mutex::new(publishers),
            waited_elsewhere: AtomicBool::new(false),
            creator: device,
        }
    }

    /// The table of `semaphore` that `device` publishes into and covers its waits from: the
    /// semaphore's own if `device` created it, or if it is event-backed by this stream model and the
    /// model's streams wait on other devices' events.
    pub fn of(semaphore: &Semaphore, device: DeviceId) -> Option<&SemaphoreEvents<M>> {
        if semaphore.owner() != Some(device) && !M::SHARES_EVENTS_ACROSS_DEVICES {
            return None;
        }
        semaphore.driver_data()?.downcast_ref::<SemaphoreEvents<M>>()
    }

    /// Publishes the event recorded after work that signals `value`; `scheduler` is the recording
    /// device's (noted the first time that device publishes here).
    pub(crate) fn publish(&self, entry: SignalEvent<M>, scheduler: &Weak<Shared<M>>) {
        // The creating device is always listed: its publications (nearly all) skip the lock.
        if entry.device != self.creator {
            let mut publishers = lock(&self.publishers);
            if !publishers.iter().any(|(device, _)| *device == entry.device) {
                publishers.push((entry.device, scheduler.clone()));
            }
        }
        let mut table = lock(&self.table);
        let at = table.partition_point(|e| e.value <= entry.value);
        table.insert(at, entry);
    }

    /// The scheduler of `device`, if it published here and still exists.
    fn scheduler_of(&self, device: DeviceId) -> Option<Weak<Shared<M>>> {
        lock(&self.publishers).iter().find(|(d, _)| *d == device).map(|(_, s)| s.clone())
    }

    /// Applies `f` to the entry of the smallest published value `>= value`, under the table's lock.
    fn with_covering<R>(&self, value: u64, f: impl FnOnce(&SignalEvent<M>) -> R) -> Option<R> {
        let table = lock(&self.table);
        let at = table.partition_point(|e| e.value < value);
        table.get(at).map(f)
    }

    /// Where the smallest published value `>= value` ends on its stream, with the queue, device and
    /// action id of the work that signals it: what a host waiter needs, and no reference to the work
    /// itself. (One held through the waiter's retirement of that work would keep it out of the work
    /// pool, so the next submission would allocate another.)
    pub(crate) fn covering_mark(&self, value: u64) -> Option<CoveringMark<M>> {
        self.with_covering(value, |entry| CoveringMark {
            event: entry.event.clone(),
            queue: entry.queue,
            device: entry.device,
            action: entry.producer.id,
        })
    }

    /// How a wait for `value` by `queue`'s stream of `device` is covered, if a published event
    /// covers it, cloning only what the wait needs (see [`Cover`]).
    pub(crate) fn cover(
        &self,
        value: u64,
        device: DeviceId,
        queue: usize,
        same_queue_producer: bool,
    ) -> Option<Cover<M>> {
        let entry = self.with_covering(value, |entry| {
            if entry.device == device && entry.queue == queue {
                Err(same_queue_producer.then(|| entry.producer.clone()))
            } else {
                Ok(entry.clone())
            }
        })?;
        Some(match entry {
            Err(producer) => Cover::InStreamOrder(producer),
            Ok(entry) => {
                self.note_waited_elsewhere();
                let scheduler = if entry.device == device { None } else { self.scheduler_of(entry.device) };
                Cover::Event(entry, scheduler)
            }
        })
    }

    /// Notes that a stream of a queue other than the signalling one waits on this semaphore.
    pub(crate) fn note_waited_elsewhere(&self) {
        if !self.waited_elsewhere.load(Ordering::Relaxed) {
            self.waited_elsewhere.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a stream of a queue other than the signalling one ever waited on this semaphore.
    pub(crate) fn waited_elsewhere(&self) -> bool {
        self.waited_elsewhere.load(Ordering::Relaxed)
    }

    /// Drops the entries for values `<= value` (the host value has passed them).
    pub fn prune(&self, value: u64) {
        // The event references drop under the table's lock (they only take the event pool's lock,
        // which never waits on a table), so pruning allocates nothing.
        let mut table = lock(&self.table);
        let end = table.partition_point(|e| e.value <= value);
        if end > 0 {
            table.drain(..end);
        }
    }

    /// Entries published and not yet pruned.
    pub fn len(&self) -> usize {
        lock(&self.table).len()
    }

    /// Whether nothing is published.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<M: StreamModel> SemaphoreDriverData for SemaphoreEvents<M> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    /// Counts this failure against the work in flight that would signal this semaphore; work whose
    /// every signal semaphore has failed is asked to stop early, as nobody can observe its success
    /// any more (a cpu-sim dispatch stops between workgroups; a GPU cannot stop launched work, and
    /// finishes it). Signals of semaphores without an event table (host semaphores) never count
    /// down, so such work always finishes.
    fn failed(&self) {
        for entry in lock(&self.table).iter() {
            entry.producer.signal_failed();
        }
    }

    /// Blocks on the event covering `value` (until `deadline` at most, and no longer than the value
    /// stays unreached: a host signal may reach it first) and retires its queue's completed
    /// submissions on this thread, so the waiter wakes straight from the device instead of through
    /// the completion thread.
    fn assist_wait(&self, semaphore: &Semaphore, value: u64, deadline: Option<Instant>) -> bool {
        let Some(entry) = self.covering_mark(value) else { return false };
        let Some(shared) = self.scheduler_of(entry.device).and_then(|s| s.upgrade()) else { return false };
        let reached_otherwise = || semaphore.check_fast(value).is_some();
        // An open mark is sealed now: this waiter observes it.
        let status = match entry.event.sealed(&shared) {
            Ok(event) => {
                // The completion thread leaves this event to us meanwhile (see `watch`).
                let _watching = shared.watch(entry.queue, event.event());
                let Some(status) = shared.model.host_wait(event.event(), deadline, &reached_otherwise) else {
                    return false;
                };
                status
            }
            Err(status) => Err(status),
        };
        drop(entry.event);
        shared.retire_from_waiter(entry.queue, entry.action, status);
        true
    }
}
