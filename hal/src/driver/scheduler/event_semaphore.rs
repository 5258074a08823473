//! The event-backed part of a device's semaphores: for each signal value whose work is enqueued but
//! not yet retired, the event recorded right after that work (a device-signal timepoint).
//!
//! A device-side wait for `v` uses the event of the *smallest* published value `>= v`. Events are
//! published only after they are recorded, so no stream ever waits on an unrecorded event; entries
//! are pruned when the host value passes them, at their submission's retirement.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Instant;

use super::Shared;
use super::event_pool::EventRef;
use crate::device::DeviceId;
use crate::driver::stream_model::{StreamModel, Work};
use crate::semaphore::{Semaphore, SemaphoreDriverData};
use crate::sync::{Mutex, lock};

/// The published signal events of one semaphore, attached to it as driver data.
pub struct SemaphoreEvents<M: StreamModel> {
    /// Sorted by value; a deque because entries are added at the back and pruned from the front (a
    /// dependent chain keeps thousands here).
    table: Mutex<VecDeque<SignalEvent<M>>>,
    /// The scheduler that publishes here, to help host waits (see `assist_wait`).
    scheduler: Weak<Shared<M>>,
}

/// One device-signal timepoint: the event after the work that signals `value`, and that work (a wait
/// on the event must not run if the work faulted).
pub struct SignalEvent<M: StreamModel> {
    /// The value the work signals.
    pub value: u64,
    /// Recorded after the work.
    pub event: EventRef<M>,
    /// The work (for its fault slot).
    pub producer: Arc<Work>,
    /// The queue whose stream recorded the event.
    pub queue: usize,
}

/// How a published event covers a device-side wait.
pub enum Cover<M: StreamModel> {
    /// Recorded on the waiting queue's own stream: stream order already runs the wait's work after
    /// it, so no event is held (holding one would only cost reference counting shared with the
    /// completion thread). Carries the producer when the caller asked for it (drivers that check
    /// upstream faults).
    InStreamOrder(Option<Arc<Work>>),
    /// Recorded on another queue's stream: the waiting stream must wait on the event.
    Event(SignalEvent<M>),
}

impl<M: StreamModel> Clone for SignalEvent<M> {
    fn clone(&self) -> Self {
        SignalEvent { value: self.value, event: self.event.clone(), producer: self.producer.clone(), queue: self.queue }
    }
}

impl<M: StreamModel> SemaphoreEvents<M> {
    pub(crate) fn new(scheduler: Weak<Shared<M>>) -> Self {
        SemaphoreEvents { table: Mutex::new(VecDeque::new()), scheduler }
    }

    /// The table of `semaphore` if `device` owns it and it is event-backed by this stream model.
    pub fn of(semaphore: &Semaphore, device: DeviceId) -> Option<&SemaphoreEvents<M>> {
        if semaphore.owner() != Some(device) {
            return None;
        }
        semaphore.driver_data()?.downcast_ref::<SemaphoreEvents<M>>()
    }

    /// Publishes the event recorded after work that signals `value`.
    pub fn publish(&self, entry: SignalEvent<M>) {
        let mut table = lock(&self.table);
        let at = table.partition_point(|e| e.value <= entry.value);
        table.insert(at, entry);
    }

    /// Applies `f` to the entry of the smallest published value `>= value`, under the table's lock.
    fn with_covering<R>(&self, value: u64, f: impl FnOnce(&SignalEvent<M>) -> R) -> Option<R> {
        let table = lock(&self.table);
        let at = table.partition_point(|e| e.value < value);
        table.get(at).map(f)
    }

    /// The event of the smallest published value `>= value`.
    pub fn covering(&self, value: u64) -> Option<SignalEvent<M>> {
        self.with_covering(value, SignalEvent::clone)
    }

    /// How a wait for `value` by `queue`'s stream is covered, if a published event covers it, cloning
    /// only what the wait needs (see [`Cover`]).
    pub fn cover(&self, value: u64, queue: usize, same_queue_producer: bool) -> Option<Cover<M>> {
        self.with_covering(value, |entry| {
            if entry.queue == queue {
                Cover::InStreamOrder(same_queue_producer.then(|| entry.producer.clone()))
            } else {
                Cover::Event(entry.clone())
            }
        })
    }

    /// Drops the entries for values `<= value` (the host value has passed them).
    pub fn prune(&self, value: u64) {
        // The event references drop under the table's lock (they only take the event pool's lock,
        // which never waits on a table), so pruning allocates nothing.
        let mut table = lock(&self.table);
        let end = table.partition_point(|e| e.value <= value);
        table.drain(..end);
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
        let Some(entry) = self.covering(value) else { return false };
        let Some(shared) = self.scheduler.upgrade() else { return false };
        let reached_otherwise = || semaphore.check_fast(value).is_some();
        let Some(status) = shared.model.host_wait(entry.event.event(), deadline, &reached_otherwise) else {
            return false;
        };
        drop(entry.event);
        shared.retire_from_waiter(entry.queue, entry.producer.id, status);
        true
    }
}
