//! Stream marks: how the point where a submission's work ends on its queue's stream is marked.
//!
//! Recording an event costs a driver call (and on CUDA a driver lock that launches on other threads
//! need), and nothing may ever observe most of them: in a dependent chain on one queue, each
//! submission waits on the previous one in stream order, and only the completion thread looks at
//! the events. So a submission issued while its queue already has work in flight is left *open*:
//! it records nothing, and shares a [`Seal`] with the other open submissions after the queue's last
//! record. The next event recorded on the stream (by a later submission, or on demand) is after all
//! of them, so it fills the seal and marks every one of them.
//!
//! A seal is filled on demand by whoever needs its event: a stream of another queue that waits on
//! one of its values (`Scheduler::submit`, a pending action), a host thread that waits for one
//! (`assist_wait`), and the completion thread once an open submission is the oldest in flight.
//! An issue also records (and fills the open seal) every [`RECORD_EVERY`]-th submission, when the
//! queue was idle (someone probably waits for this very submission: no trip through another thread
//! for it), and when the completion thread asked for a record (`QueueSlot::seal_wanted`).
//!
//! Seals are reused: the last [`SealHandle`] to go empties its seal and gives it to its queue's
//! spares, from which the next run of open submissions takes it (see [`SPARE_SEALS`]).
//!
//! Invariant: a seal that is still open is the one in its queue's issuer cache (`IssuerCache::open`):
//! every record on the stream fills that seal and starts a new one only for later submissions. So
//! open submissions are always the newest in flight, and sealing takes the issue lock.

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::event_pool::EventRef;
use super::{IssuerCache, Shared};
use crate::driver::stream_model::StreamModel;
use crate::error::{Error, Result};
use crate::sync::atomic::Ordering;
use crate::sync::{Mutex, lock, try_lock};

/// At the latest every this many submissions of a busy queue, an issue records an event anyway: a
/// seal never spans more work than this, so its submissions retire (and release what they hold)
/// in bounded batches.
pub(crate) const RECORD_EVERY: u32 = 16;

/// How many unused seals a queue keeps at most: a new run of open submissions takes one of them
/// instead of allocating. A queue keeps as many as were ever in use at once (a seal marks up to
/// [`RECORD_EVERY`] submissions, so about one per that many in flight), up to this, so a steady
/// stream of submissions allocates no seals however deep its pipeline; the most it keeps is a few
/// tens of kilobytes.
const SPARE_SEALS: usize = 1024;

/// How long a completion thread whose oldest submission is open watches for the issue holding the
/// queue's issue lock to let go (or to fill the seal) before it blocks on the lock. A submitting
/// thread that issues back to back holds the lock for a few microseconds at a time.
const SEAL_WATCH: Duration = Duration::from_micros(20);

/// Where a submission's work ends on its stream.
pub(crate) enum StreamMark<M: StreamModel> {
    /// An event recorded right after the work (or a later one that nothing else was put before).
    Recorded(EventRef<M>),
    /// The event the next record on the stream puts after the work (see the module docs).
    Open(SealHandle<M>),
}

/// The event shared by consecutive open submissions of one queue, once recorded.
pub(crate) struct Seal<M: StreamModel> {
    queue: usize,
    state: Mutex<SealState<M>>,
    /// Where the last handle gives the seal back.
    spares: Weak<SealSpares<M>>,
}

/// A queue's unused seals, emptied (see [`SealHandle`]).
pub(crate) struct SealSpares<M: StreamModel>(Mutex<Vec<Arc<Seal<M>>>>);

impl<M: StreamModel> SealSpares<M> {
    /// No seals yet.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(SealSpares(Mutex::new(Vec::new())))
    }
}

/// A reference to a seal. The last one to go empties the seal (its event goes back to the pool
/// then, as it did when seals were freed) and gives it to its queue's spares, if they hold fewer
/// than [`SPARE_SEALS`] and their lock is free: it never waits there, so dropping a mark takes no
/// lock anyone waits on.
pub(crate) struct SealHandle<M: StreamModel>(ManuallyDrop<Arc<Seal<M>>>);

impl<M: StreamModel> Deref for SealHandle<M> {
    type Target = Seal<M>;
    fn deref(&self) -> &Seal<M> {
        &self.0
    }
}

impl<M: StreamModel> Clone for SealHandle<M> {
    fn clone(&self) -> Self {
        SealHandle(ManuallyDrop::new(Arc::clone(&self.0)))
    }
}

impl<M: StreamModel> Drop for SealHandle<M> {
    fn drop(&mut self) {
        // SAFETY: the `Arc` is taken out once, here, and the handle is gone after this.
        let mut seal = unsafe { ManuallyDrop::take(&mut self.0) };
        let Some(only) = Arc::get_mut(&mut seal) else { return };
        // Nothing else refers to the seal: no one can be reading its state.
        *lock(&only.state) = SealState::Open;
        let Some(spares) = only.spares.upgrade() else { return };
        if let Some(mut kept) = try_lock(&spares.0)
            && kept.len() < SPARE_SEALS
        {
            kept.push(seal);
        }
    }
}

impl<M: StreamModel> SealHandle<M> {
    /// Whether this is the seal's only handle.
    fn is_only(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }
}

enum SealState<M: StreamModel> {
    Open,
    Recorded(EventRef<M>),
    /// The record failed: the stream can run nothing more (a device fault), and every submission
    /// the seal marks fails with this.
    Failed(Error),
}

impl<M: StreamModel> Clone for StreamMark<M> {
    fn clone(&self) -> Self {
        match self {
            StreamMark::Recorded(event) => StreamMark::Recorded(event.clone()),
            StreamMark::Open(seal) => StreamMark::Open(seal.clone()),
        }
    }
}

impl<M: StreamModel> Seal<M> {
    /// An open seal of `queue`: one of `spares` (the queue's), or a new one where none is left.
    pub(crate) fn take(queue: usize, spares: &Arc<SealSpares<M>>) -> SealHandle<M> {
        let spare = lock(&spares.0).pop();
        let seal = spare.unwrap_or_else(|| {
            Arc::new(Seal { queue, state: Mutex::new(SealState::Open), spares: Arc::downgrade(spares) })
        });
        SealHandle(ManuallyDrop::new(seal))
    }

    /// The recorded event, the failure, or `None` while open.
    fn outcome(&self) -> Option<Result<EventRef<M>>> {
        match &*lock(&self.state) {
            SealState::Open => None,
            SealState::Recorded(event) => Some(Ok(event.clone())),
            SealState::Failed(status) => Some(Err(status.clone())),
        }
    }

    /// Fills the seal with the event just recorded after its submissions, or with the failure.
    pub(crate) fn fill(&self, outcome: Result<EventRef<M>>) {
        *lock(&self.state) = match outcome {
            Ok(event) => SealState::Recorded(event),
            Err(status) => SealState::Failed(status),
        };
    }
}

impl<M: StreamModel> StreamMark<M> {
    /// The event, if one is recorded (a failed seal counts as recorded: its outcome is known).
    pub(crate) fn recorded(&self) -> Option<Result<EventRef<M>>> {
        match self {
            StreamMark::Recorded(event) => Some(Ok(event.clone())),
            StreamMark::Open(seal) => seal.outcome(),
        }
    }

    /// Whether an event marks this point now (cheaper than [`recorded`](Self::recorded)).
    pub(crate) fn is_recorded(&self) -> bool {
        match self {
            StreamMark::Recorded(_) => true,
            StreamMark::Open(seal) => !matches!(*lock(&seal.state), SealState::Open),
        }
    }

    /// Whether this mark holds the only reference to an event (see `IssuerCache::cached_events`).
    pub(crate) fn holds_sole_event(&self) -> bool {
        match self {
            StreamMark::Recorded(event) => event.is_sole_reference(),
            StreamMark::Open(seal) => {
                seal.is_only() && matches!(&*lock(&seal.state), SealState::Recorded(event) if event.is_sole_reference())
            }
        }
    }

    /// The event, recording it now if the mark is still open. `producer` is the scheduler whose
    /// queue the mark is on; this takes that queue's issue lock, so the caller must hold no issue
    /// lock and no semaphore table lock (an issue publishes into tables under its issue lock). A
    /// retiring lock may be held: an issue only ever tries those.
    pub(crate) fn sealed(&self, producer: &Shared<M>) -> Result<EventRef<M>> {
        match self {
            StreamMark::Recorded(event) => Ok(event.clone()),
            StreamMark::Open(seal) => {
                if let Some(outcome) = seal.outcome() {
                    return outcome;
                }
                let slot = &producer.queues[seal.queue];
                let mut issuer = lock(&slot.issuer);
                producer.seal_locked(seal, &mut issuer)
            }
        }
    }
}

impl<M: StreamModel> StreamMark<M> {
    /// [`sealed`](Self::sealed) for a wait of `local`'s: the mark is on one of `local`'s queues, or,
    /// when `other` is given, on a queue of that (another device's) scheduler.
    /// Takes the mark: a recorded event moves out without touching its reference count (a line
    /// the completion thread shares).
    pub(crate) fn sealed_for(self, local: &Shared<M>, other: Option<&Weak<Shared<M>>>) -> Result<EventRef<M>> {
        if let StreamMark::Recorded(event) = self {
            return Ok(event);
        }
        match other {
            None => self.sealed(local),
            Some(weak) => match (self.recorded(), weak.upgrade()) {
                (Some(outcome), _) => outcome,
                (None, Some(owner)) => self.sealed(&owner),
                // A device's completion threads seal everything in flight before they exit.
                (None, None) => {
                    Err(Error::cancelled(format!("{}: the device that was to signal this wait is gone", local.device)))
                }
            },
        }
    }
}

impl<M: StreamModel> Shared<M> {
    /// Records an event on `queue`'s stream now, under its issue lock, and fills the queue's open
    /// seal with it: the event is after every submission issued so far.
    pub(super) fn record_now(&self, queue: usize, issuer: &mut IssuerCache<M>) -> Result<EventRef<M>> {
        let slot = &self.queues[queue];
        slot.seal_wanted.0.store(false, Ordering::Relaxed);
        issuer.unrecorded = 0;
        let recorded = self
            .events
            .acquire(&mut issuer.events, &self.model)
            .and_then(|event| self.model.record_event(event.event(), &slot.stream).map(|()| event));
        if let Some(open) = issuer.open.take() {
            open.fill(recorded.clone());
        }
        recorded
    }

    /// Fills `seal` (which is `issuer`'s open one unless another thread filled it since).
    fn seal_locked(&self, seal: &Seal<M>, issuer: &mut IssuerCache<M>) -> Result<EventRef<M>> {
        if let Some(outcome) = seal.outcome() {
            return outcome;
        }
        debug_assert!(issuer.open.as_deref().is_some_and(|open| std::ptr::eq(open, seal)));
        self.record_now(seal.queue, issuer)
    }

    /// The event a completion thread waits on for a submission marked `mark`. An open mark is
    /// sealed here if the queue's issue lock is free. While an issue holds it, the thread asks that
    /// issue (or the next) to record and watches for the seal for up to [`SEAL_WATCH`]: a completion
    /// thread blocking on the lock at once would make the submitting thread pay a wake-up system
    /// call when it lets go. An issue that keeps the lock longer is itself waiting (for a driver
    /// lock other threads' launches hold, or for a core), so the thread then blocks on the lock
    /// instead of keeping a core busy that the issue may need.
    pub(super) fn event_for_completion(&self, queue: usize, mark: &StreamMark<M>) -> Result<EventRef<M>> {
        let StreamMark::Open(seal) = mark else { return mark.sealed(self) };
        let slot = &self.queues[queue];
        let mut tries = 0u32;
        let mut watching_since: Option<Instant> = None;
        loop {
            if let Some(outcome) = seal.outcome() {
                return outcome;
            }
            if let Some(mut issuer) = try_lock(&slot.issuer) {
                return self.seal_locked(seal, &mut issuer);
            }
            slot.seal_wanted.0.store(true, Ordering::Relaxed);
            tries += 1;
            if tries < 64 {
                crate::sync::spin_hint();
                continue;
            }
            if watching_since.get_or_insert_with(Instant::now).elapsed() < SEAL_WATCH {
                crate::sync::yield_now();
                continue;
            }
            let mut issuer = lock(&slot.issuer);
            return self.seal_locked(seal, &mut issuer);
        }
    }
}
