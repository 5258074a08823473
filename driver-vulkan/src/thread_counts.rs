//! Counts of what a device's host threads did: where submissions were issued, how long
//! `vkQueueSubmit` took, and how often a thread slept instead of watching. A diagnostic, read by
//! tests and the bench's examples (`driver_vulkan::host_thread_counts`): it tells a process whose
//! rounds run slow because its threads hand off through sleeps from one whose driver calls slow
//! down.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The counters, shared by a device's streams (relaxed atomics: each is a tally, read as a whole
/// only once the work is done).
#[derive(Default)]
pub(crate) struct ThreadCounters {
    issued_by_callers: AtomicU64,
    submit_calls: AtomicU64,
    submit_nanos: AtomicU64,
    queue_wait_nanos: AtomicU64,
    submit_thread_sleeps: AtomicU64,
    signal_wait_sleeps: AtomicU64,
    paused_watches: AtomicU64,
    cut_short_watches: AtomicU64,
    threads_kept_off_interrupts: AtomicU64,
}

/// What a device's host threads did so far, as [`crate::host_thread_counts`] reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostThreadCounts {
    /// Submissions issued on their submitters' threads rather than a submit thread.
    pub issued_by_callers: u64,
    /// `vkQueueSubmit` calls (one may carry several submissions).
    pub submit_calls: u64,
    /// Time spent inside those calls (the queue's lock already held).
    pub submit_time: Duration,
    /// Time spent waiting for the queue's lock before them.
    pub queue_wait: Duration,
    /// Times a submit thread found nothing to do after watching and slept.
    pub submit_thread_sleeps: u64,
    /// Times a submit thread slept until another stream issued the signal its next item waits on
    /// (counted on the device whose timeline it waited on, where HAL devices share a `VkDevice`).
    pub signal_wait_sleeps: u64,
    /// Times a submit thread slept at once, without watching, because late yields had shown the
    /// cores wanted elsewhere.
    pub paused_watches: u64,
    /// Watches (for the next item, or for another stream's signal, counted as the sleeps are) a
    /// yield that came back late cut short.
    pub cut_short_watches: u64,
    /// Submit threads that left the CPUs taking the GPU's interrupts out of their CPU sets.
    pub threads_kept_off_interrupts: u64,
}

impl HostThreadCounts {
    /// What happened between `earlier` (a snapshot of the same device) and this snapshot.
    pub fn since(&self, earlier: &HostThreadCounts) -> HostThreadCounts {
        self.zip(earlier, u64::saturating_sub, Duration::saturating_sub)
    }

    /// Both tallies together (the counts of several stretches summed).
    pub fn plus(&self, other: &HostThreadCounts) -> HostThreadCounts {
        self.zip(other, u64::saturating_add, Duration::saturating_add)
    }

    fn zip(
        &self,
        other: &HostThreadCounts,
        count: fn(u64, u64) -> u64,
        time: fn(Duration, Duration) -> Duration,
    ) -> HostThreadCounts {
        HostThreadCounts {
            issued_by_callers: count(self.issued_by_callers, other.issued_by_callers),
            submit_calls: count(self.submit_calls, other.submit_calls),
            submit_time: time(self.submit_time, other.submit_time),
            queue_wait: time(self.queue_wait, other.queue_wait),
            submit_thread_sleeps: count(self.submit_thread_sleeps, other.submit_thread_sleeps),
            signal_wait_sleeps: count(self.signal_wait_sleeps, other.signal_wait_sleeps),
            paused_watches: count(self.paused_watches, other.paused_watches),
            cut_short_watches: count(self.cut_short_watches, other.cut_short_watches),
            threads_kept_off_interrupts: count(self.threads_kept_off_interrupts, other.threads_kept_off_interrupts),
        }
    }
}

impl ThreadCounters {
    pub(crate) fn issued_by_caller(&self) {
        self.issued_by_callers.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn submitted(&self, took: Duration) {
        self.submit_calls.fetch_add(1, Ordering::Relaxed);
        self.submit_nanos.fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(crate) fn waited_for_queue(&self, took: Duration) {
        self.queue_wait_nanos.fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(crate) fn submit_thread_slept(&self) {
        self.submit_thread_sleeps.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn signal_wait_slept(&self) {
        self.signal_wait_sleeps.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn watch_paused(&self) {
        self.paused_watches.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn watch_cut_short(&self) {
        self.cut_short_watches.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn thread_kept_off_interrupts(&self) {
        self.threads_kept_off_interrupts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> HostThreadCounts {
        HostThreadCounts {
            issued_by_callers: self.issued_by_callers.load(Ordering::Relaxed),
            submit_calls: self.submit_calls.load(Ordering::Relaxed),
            submit_time: Duration::from_nanos(self.submit_nanos.load(Ordering::Relaxed)),
            queue_wait: Duration::from_nanos(self.queue_wait_nanos.load(Ordering::Relaxed)),
            submit_thread_sleeps: self.submit_thread_sleeps.load(Ordering::Relaxed),
            signal_wait_sleeps: self.signal_wait_sleeps.load(Ordering::Relaxed),
            paused_watches: self.paused_watches.load(Ordering::Relaxed),
            cut_short_watches: self.cut_short_watches.load(Ordering::Relaxed),
            threads_kept_off_interrupts: self.threads_kept_off_interrupts.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_holds_every_tally() {
        let counters = ThreadCounters::default();
        counters.issued_by_caller();
        counters.submitted(Duration::from_micros(3));
        counters.submitted(Duration::from_micros(4));
        counters.waited_for_queue(Duration::from_micros(2));
        counters.submit_thread_slept();
        counters.signal_wait_slept();
        counters.signal_wait_slept();
        counters.watch_paused();
        counters.watch_cut_short();
        counters.thread_kept_off_interrupts();
        assert_eq!(
            counters.snapshot(),
            HostThreadCounts {
                issued_by_callers: 1,
                submit_calls: 2,
                submit_time: Duration::from_micros(7),
                queue_wait: Duration::from_micros(2),
                submit_thread_sleeps: 1,
                signal_wait_sleeps: 2,
                paused_watches: 1,
                cut_short_watches: 1,
                threads_kept_off_interrupts: 1,
            }
        );
    }

    #[test]
    fn stretches_subtract_and_add() {
        let counters = ThreadCounters::default();
        counters.submitted(Duration::from_micros(3));
        let before = counters.snapshot();
        counters.submitted(Duration::from_micros(4));
        counters.signal_wait_slept();
        let stretch = counters.snapshot().since(&before);
        assert_eq!(
            (stretch.submit_calls, stretch.submit_time, stretch.signal_wait_sleeps),
            (1, Duration::from_micros(4), 1)
        );
        let twice = stretch.plus(&stretch);
        assert_eq!((twice.submit_calls, twice.submit_time, twice.signal_wait_sleeps), (2, Duration::from_micros(8), 2));
        let backwards = before.since(&counters.snapshot());
        assert_eq!(backwards, HostThreadCounts::default(), "saturates at zero, never wraps");
    }
}
