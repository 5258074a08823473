//! The event pool: events are created on demand and reused, never destroyed while the device lives.
//!
//! An [`EventRef`] is a counted reference to a pooled event. The issuing submission, the semaphore
//! tables that publish it, and every submission whose stream waits on it each hold one; the event
//! goes back to the free list only when the last reference drops. Submissions drop theirs when they
//! retire, after their stream has passed the wait, so an event is never re-recorded while a pending
//! stream-wait may still observe it.

use std::sync::{Arc, Weak};

use crate::driver::stream_model::StreamModel;
use crate::error::Result;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{CachePadded, Mutex, lock, take_batch};

/// A pool of reusable events of one stream model.
pub struct EventPool<M: StreamModel> {
    /// Pushed by the thread that drops an event's last reference (usually a completion thread),
    /// popped by issuing threads.
    free: CachePadded<Mutex<Vec<Arc<PooledEvent<M>>>>>,
    /// Written only by the issuing thread that creates an event (rare once warm).
    created: CachePadded<AtomicUsize>,
}

/// An event and the count of references to it while it is out of the pool.
pub struct PooledEvent<M: StreamModel> {
    event: M::Event,
    refs: AtomicUsize,
    /// Where the event goes back. Weak, and held here rather than in every reference: cloning a
    /// reference then touches only this entry's cache line, not a count every thread shares.
    pool: Weak<EventPool<M>>,
}

/// Free events an issuer took from the pool in one batch (see `EventPool::acquire`).
pub struct EventCache<M: StreamModel> {
    free: Vec<Arc<PooledEvent<M>>>,
}

impl<M: StreamModel> EventCache<M> {
    /// An empty cache.
    pub fn new() -> Self {
        EventCache { free: Vec::new() }
    }

    /// Events in the cache.
    pub fn len(&self) -> usize {
        self.free.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }
}

impl<M: StreamModel> Default for EventCache<M> {
    fn default() -> Self {
        Self::new()
    }
}

/// A counted reference to a pooled event; the last one returns the event to the pool.
pub struct EventRef<M: StreamModel> {
    entry: Arc<PooledEvent<M>>,
}

impl<M: StreamModel> EventPool<M> {
    /// An empty pool.
    pub fn new() -> Arc<Self> {
        Arc::new(EventPool { free: CachePadded(Mutex::new(Vec::new())), created: CachePadded(AtomicUsize::new(0)) })
    }

    /// A free event from `cache`, which is refilled from the pool with up to `REFILL` events at a
    /// time; created through `model` when none is free. Allocation-free once warm.
    pub fn acquire(self: &Arc<Self>, cache: &mut EventCache<M>, model: &M) -> Result<EventRef<M>> {
        if cache.free.is_empty() {
            take_batch(&self.free, &mut cache.free, super::work_pool::REFILL);
        }
        let reused = cache.free.pop();
        let entry = match reused {
            Some(entry) => entry,
            None => {
                let event = model.create_event()?;
                self.created.fetch_add(1, Ordering::Relaxed);
                Arc::new(PooledEvent { event, refs: AtomicUsize::new(0), pool: Arc::downgrade(self) })
            }
        };
        entry.refs.store(1, Ordering::Relaxed);
        Ok(EventRef { entry })
    }

    /// Events out of the pool now: held by submissions or semaphores (events an issuer keeps in its
    /// cache do not count; `cached` says how many that is).
    pub fn in_use(&self, cached: usize) -> usize {
        // Read `free` first: an event created between the two reads counts as in use, never as a
        // negative count.
        let free = lock(&self.free).len();
        self.created().saturating_sub(free + cached)
    }

    /// Events created so far.
    pub fn created(&self) -> usize {
        self.created.load(Ordering::Relaxed)
    }
}

impl<M: StreamModel> EventRef<M> {
    /// The event.
    pub fn event(&self) -> &M::Event {
        &self.entry.event
    }

    /// Whether this is the only reference to its event (a snapshot: other holders may be dropping
    /// theirs right now).
    pub fn is_sole_reference(&self) -> bool {
        self.entry.refs.load(Ordering::Acquire) == 1
    }

    /// Whether two references name the same pooled event.
    pub fn same_as(&self, other: &EventRef<M>) -> bool {
        Arc::ptr_eq(&self.entry, &other.entry)
    }
}

impl<M: StreamModel> Clone for EventRef<M> {
    fn clone(&self) -> Self {
        self.entry.refs.fetch_add(1, Ordering::Relaxed);
        EventRef { entry: self.entry.clone() }
    }
}

impl<M: StreamModel> Drop for EventRef<M> {
    fn drop(&mut self) {
        // AcqRel: every use of the event by other holders happens before it is handed out again.
        if self.entry.refs.fetch_sub(1, Ordering::AcqRel) == 1
            && let Some(pool) = self.entry.pool.upgrade()
        {
            lock(&pool.free).push(self.entry.clone());
        }
        // With the pool gone (the device dropped), the event is destroyed with its last `Arc`.
    }
}
