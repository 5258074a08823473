//! Resolving a submission's waits, written once for both places that do it: `Scheduler::submit`
//! (every wait, at submission) and a pending action (one wait, when its timepoint resolves).
//!
//! A wait is reached on the host, covered by a device event (the dispatch stream will wait on it,
//! or, when the event is on the waiting queue's own stream, stream order already runs the work
//! after it), failed, or still open.

use smallvec::SmallVec;

use super::Shared;
use super::event_pool::EventRef;
use super::event_semaphore::{Cover, Producer, SemaphoreEvents};
use crate::driver::stream_model::{PerWait, StreamModel};
use crate::error::Error;
use crate::semaphore::SemaphoreValue;

/// What device events cover a submission's waits: collected while its waits resolve, used when it
/// is issued.
pub(crate) struct Covers<M: StreamModel> {
    /// The covered (not reached) waits: if one fails before it is reached, the signals carry that
    /// failure (see `InFlight::waited`).
    pub(crate) waited: PerWait<SemaphoreValue>,
    /// The events the dispatch stream waits on.
    pub(crate) events: PerWait<EventRef<M>>,
    /// The work those events (or stream order) follow.
    pub(crate) upstream: PerWait<Producer<M>>,
}

impl<M: StreamModel> Default for Covers<M> {
    fn default() -> Self {
        Covers { waited: SmallVec::new(), events: SmallVec::new(), upstream: SmallVec::new() }
    }
}

impl<M: StreamModel> Covers<M> {
    /// Adds what `other` covers.
    pub(crate) fn extend(&mut self, other: Covers<M>) {
        self.waited.extend(other.waited);
        self.events.extend(other.events);
        self.upstream.extend(other.upstream);
    }
}

/// How one wait stands.
pub(crate) enum WaitStatus {
    /// Its value is reached on the host.
    Reached,
    /// A device event (or stream order) covers it: noted in the [`Covers`].
    Covered,
    /// Neither reached nor covered yet.
    Open,
    /// The event that would cover it cannot be sealed (its stream faulted): the producer's
    /// retirement fails the semaphore.
    Unsealable(Error),
    /// Its semaphore failed.
    Failed(Error),
}

/// The readiness of every wait of a list, in order, once none has failed.
pub(crate) type Readiness = PerWait<bool>;

impl<M: StreamModel> Covers<M> {
    /// Resolves every wait of `queue`'s submission: which are ready (reached or covered), or the
    /// first failure. `host_only` work (a host call) is never covered by a device event.
    pub(crate) fn resolve_waits(
        &mut self,
        shared: &Shared<M>,
        queue: usize,
        waits: &[SemaphoreValue],
        host_only: bool,
    ) -> Result<Readiness, Error> {
        let mut ready = Readiness::with_capacity(waits.len());
        for wait in waits {
            match self.resolve_wait(shared, queue, wait, host_only) {
                WaitStatus::Reached | WaitStatus::Covered => ready.push(true),
                // Held: a timepoint on the semaphore resolves it later (an unsealable event's
                // producer fails the semaphore when it retires).
                WaitStatus::Open | WaitStatus::Unsealable(_) => ready.push(false),
                WaitStatus::Failed(status) => return Err(status),
            }
        }
        Ok(ready)
    }

    /// Resolves one wait of `queue`'s submission, noting the event that covers it, if any.
    pub(crate) fn resolve_wait(
        &mut self,
        shared: &Shared<M>,
        queue: usize,
        wait: &SemaphoreValue,
        host_only: bool,
    ) -> WaitStatus {
        match wait.semaphore.query() {
            Err(status) => return WaitStatus::Failed(status),
            Ok(value) if value >= wait.value => return WaitStatus::Reached,
            Ok(_) if host_only => return WaitStatus::Open,
            Ok(_) => {}
        }
        let Some(table) = SemaphoreEvents::<M>::of(&wait.semaphore, shared.device) else { return WaitStatus::Open };
        match table.cover(wait.value, shared.device, queue, M::CHECKS_UPSTREAM_FAULTS) {
            Some(Cover::InStreamOrder(producer)) => {
                self.waited.push(wait.clone());
                if let Some(producer) = producer {
                    self.upstream.push(Producer::local(producer));
                }
                WaitStatus::Covered
            }
            // An open mark is sealed now: a stream of this device is going to wait on it.
            Some(Cover::Event(entry, scheduler)) => match entry.event.sealed_for(shared, scheduler.as_ref()) {
                Ok(event) => {
                    self.waited.push(wait.clone());
                    self.events.push(event);
                    self.upstream.push(Producer { work: entry.producer, scheduler });
                    WaitStatus::Covered
                }
                Err(status) => WaitStatus::Unsealable(status),
            },
            None => WaitStatus::Open,
        }
    }
}
