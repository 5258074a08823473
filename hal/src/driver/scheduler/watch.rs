//! Host waiters take an event over from the completion thread.
//!
//! A host thread that waits for a semaphore value polls the event covering it and retires the work
//! itself once it completes (`SemaphoreEvents::assist_wait`). Meanwhile the queue's completion
//! thread would poll the same event: two threads querying one event gain nothing, and on CUDA each
//! query takes a driver lock that the waiting thread's queries and the submitting thread's next
//! launch need too (`docs/decisions.md#host-waiter-takes-the-event-over`). So the waiter publishes the
//! event it polls on its queue's [`Watch`], and the completion thread, while that is the event it
//! awaits, queries nothing and waits until the work retires or the waiter lets go.
//!
//! Only the very event is taken over: a waiter for a later value never holds up the retirement of
//! earlier work, whose signals other threads may be waiting to see.

use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// How long a completion thread whose event a host waiter took over yields between looks before
/// it sleeps between them: a waiter usually retires the work within a round trip.
const YIELD_FOR: Duration = Duration::from_micros(50);

/// How long it sleeps between looks after that.
const SLEEP: Duration = Duration::from_micros(50);

/// Per queue: the event a host waiter polls, and how far retirement has come. Written by waiters
/// and retiring threads, read by the completion thread (a line of its own in the queue's slot).
#[derive(Default)]
pub(super) struct Watch {
    /// The address of the event a host waiter polls now (0: none). With two waiters on one queue
    /// the later one's; when one lets go the completion thread may poll again, which costs only
    /// the contention this avoids.
    event: AtomicUsize,
    /// Entries popped off the queue's in-flight FIFO so far, counted under its lock. The FIFO pops
    /// only at its front, so a completion thread that read the front and this count together
    /// knows that front has been retired once the count moved. (Submission ids cannot tell this:
    /// a queue may issue, and so retire, a later submission before an earlier one whose waits
    /// resolved later.)
    popped: AtomicU64,
}

/// The key a [`Watch`] knows an event by: its address (stable while anyone holds the event).
pub(super) fn event_key<E>(event: &E) -> usize {
    std::ptr::from_ref(event).addr()
}

impl Watch {
    /// Publishes that this thread polls `event` until the returned guard drops.
    pub(super) fn watch(&self, event: usize) -> Watching<'_> {
        self.event.store(event, Ordering::Release);
        Watching { watch: self, event }
    }

    /// Counts an entry popped off the in-flight FIFO (under its lock).
    pub(super) fn popped(&self) {
        self.popped_many(1);
    }

    /// Counts `count` entries popped off the in-flight FIFO at once (under its lock).
    pub(super) fn popped_many(&self, count: usize) {
        let count = u64::try_from(count).unwrap_or(u64::MAX);
        self.popped.store(self.popped.load(Ordering::Relaxed).wrapping_add(count), Ordering::Release);
    }

    /// Entries popped so far (read under the FIFO's lock together with its front).
    pub(super) fn pops(&self) -> u64 {
        self.popped.load(Ordering::Acquire)
    }

    /// Whether the front that was read when `pops` entries had been popped, whose mark is `event`,
    /// is in another thread's hands: it has been retired, or a host waiter polls its event.
    pub(super) fn taken_over(&self, pops: u64, event: usize) -> bool {
        self.popped.load(Ordering::Acquire) != pops || self.event.load(Ordering::Acquire) == event
    }

    /// Waits, querying nothing, while a host waiter polls `event` and the front read at `pops` has
    /// not been retired: yields at first, then sleeps. Returns once it was retired or the waiter
    /// let go (a deadline passed, or the value was reached another way); the completion thread
    /// then reads its queue's front again. Teardown needs nothing else: the waiter's event
    /// completes as the stream drains.
    pub(super) fn wait_while_watched(&self, pops: u64, event: usize) {
        let start = Instant::now();
        while self.event.load(Ordering::Acquire) == event && self.popped.load(Ordering::Acquire) == pops {
            if start.elapsed() < YIELD_FOR {
                crate::sync::yield_now();
            } else {
                std::thread::sleep(SLEEP);
            }
        }
    }
}

/// A host waiter's hold on an event (see [`Watch::watch`]); lets go when dropped.
pub(super) struct Watching<'a> {
    watch: &'a Watch,
    event: usize,
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        // Only if no later waiter published another event meanwhile.
        let _ = self.watch.event.compare_exchange(self.event, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_taken_over_while_watched_and_once_its_entry_popped() {
        let watch = Watch::default();
        let pops = watch.pops();
        assert!(!watch.taken_over(pops, 0x100));
        {
            let _held = watch.watch(0x100);
            assert!(watch.taken_over(pops, 0x100));
            // Another event of the queue (earlier work) stays the completion thread's.
            assert!(!watch.taken_over(pops, 0x200));
        }
        assert!(!watch.taken_over(pops, 0x100), "the guard lets go");
        watch.popped();
        assert!(watch.taken_over(pops, 0x100) && watch.taken_over(pops, 0x300));
        assert!(!watch.taken_over(watch.pops(), 0x100), "the next front is not");
    }

    #[test]
    fn a_later_waiter_keeps_its_hold_when_an_earlier_one_lets_go() {
        let watch = Watch::default();
        let first = watch.watch(0x100);
        let second = watch.watch(0x200);
        drop(first);
        assert!(watch.taken_over(0, 0x200));
        drop(second);
        assert!(!watch.taken_over(0, 0x200));
    }

    #[test]
    fn waiting_ends_when_the_entry_pops_or_the_waiter_lets_go() {
        let watch = Watch::default();
        std::thread::scope(|scope| {
            let _held = watch.watch(0x100);
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(2));
                watch.popped();
            });
            watch.wait_while_watched(0, 0x100);
            assert_eq!(watch.pops(), 1);
        });
        std::thread::scope(|scope| {
            let held = watch.watch(0x100);
            scope.spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                drop(held);
            });
            watch.wait_while_watched(1, 0x100);
            assert!(!watch.taken_over(1, 0x100));
        });
    }
}
