//! Timestamps of the values a semaphore reaches, as the host sees them.
//!
//! A [`SemaphoreProbe`] hangs a timepoint listener on each value it watches
//! ([`hal::Semaphore::register`]); the thread that signals the value (a queue's completion thread)
//! notifies it right after the signal, so the timestamp is when the submission that signals that
//! value completed, host-side. Each notification is also a `tracing` event (target
//! [`SEMAPHORE_TARGET`], fields `semaphore`, `label`, `value`), which the trace layer turns into a
//! counter track per semaphore.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hal::semaphore::{Registration, TimepointListener};
use hal::{Result, Semaphore};

/// The `tracing` target of the events a probe emits when a value is reached.
pub const SEMAPHORE_TARGET: &str = "tools::semaphore";

/// Records when each watched value of one semaphore (among `first..=last`) was reached.
///
/// Watch a value right before submitting the work that signals it ([`SemaphoreProbe::watch`]): a
/// semaphore keeps its waiting timepoints in a sorted list, so watching thousands of future values at
/// once would make every signal slower.
#[derive(Clone)]
pub struct SemaphoreProbe {
    semaphore: Semaphore,
    listener: Arc<ProbeListener>,
}

struct ProbeListener {
    semaphore: u64,
    label: Arc<str>,
    epoch: Instant,
    first: u64,
    /// Per value, nanoseconds since `epoch` plus one when reached; 0 while not reached.
    reached: Vec<AtomicU64>,
    failed: AtomicBool,
}

impl SemaphoreProbe {
    /// A probe for values `first..=last` of `semaphore`, watching none yet; times are measured from
    /// `epoch`. `label` names the semaphore in traces ("queue 0 timeline").
    pub fn new(semaphore: &Semaphore, label: &str, first: u64, last: u64, epoch: Instant) -> SemaphoreProbe {
        let count = last.saturating_sub(first).saturating_add(1) as usize;
        let listener = Arc::new(ProbeListener {
            semaphore: semaphore.id(),
            label: Arc::from(label),
            epoch,
            first,
            reached: (0..count).map(|_| AtomicU64::new(0)).collect(),
            failed: AtomicBool::new(false),
        });
        SemaphoreProbe { semaphore: semaphore.clone(), listener }
    }

    /// Watches `value`: it is stamped when the semaphore reaches it (now, if it already has).
    pub fn watch(&self, value: u64) {
        match self.semaphore.register(value, self.listener.clone(), value) {
            Registration::Resolved(outcome) => self.listener.notify(value, outcome),
            Registration::Pending(_) => {}
        }
    }

    /// When `value` was reached (since the epoch), or `None` if it has not been (or is not watched).
    pub fn reached_at(&self, value: u64) -> Option<Duration> {
        let index = value.checked_sub(self.listener.first)? as usize;
        match self.listener.reached.get(index)?.load(Ordering::Acquire) {
            0 => None,
            stamp => Some(Duration::from_nanos(stamp - 1)),
        }
    }

    /// Whether the semaphore failed while watched.
    pub fn failed(&self) -> bool {
        self.listener.failed.load(Ordering::Acquire)
    }

    /// The watched semaphore's id.
    pub fn semaphore_id(&self) -> u64 {
        self.listener.semaphore
    }
}

impl TimepointListener for ProbeListener {
    fn notify(&self, tag: u64, outcome: Result<()>) {
        let nanos = self.epoch.elapsed().as_nanos().min(u128::from(u64::MAX - 1)) as u64;
        match outcome {
            Ok(()) => {
                if let Some(slot) = tag.checked_sub(self.first).and_then(|i| self.reached.get(i as usize)) {
                    slot.store(nanos + 1, Ordering::Release);
                }
                tracing::trace!(target: SEMAPHORE_TARGET, semaphore = self.semaphore, label = &*self.label, value = tag);
            }
            Err(status) => {
                // A failure resolves every watched value at once: report it once.
                if !self.failed.swap(true, Ordering::AcqRel) {
                    tracing::trace!(
                        target: SEMAPHORE_TARGET,
                        semaphore = self.semaphore,
                        label = &*self.label,
                        failed = %status
                    );
                }
            }
        }
    }

    fn describe(&self, tag: u64) -> String {
        format!("timing probe '{}' (value {tag})", self.label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_values_as_they_are_signalled() {
        let epoch = Instant::now();
        let sem = Semaphore::new(1);
        let probe = SemaphoreProbe::new(&sem, "test", 1, 3, epoch);
        (1..=3).for_each(|v| probe.watch(v));
        assert!(probe.reached_at(1).is_some(), "already reached at watch time");
        assert!(probe.reached_at(2).is_none());
        sem.signal(3).unwrap();
        let (two, three) = (probe.reached_at(2).unwrap(), probe.reached_at(3).unwrap());
        assert!(two >= probe.reached_at(1).unwrap() && three >= two);
        assert!(probe.reached_at(4).is_none() && probe.reached_at(0).is_none(), "outside the watched range");
        assert!(!probe.failed());
        assert_eq!(sem.pending_count(), 0, "every timepoint resolved");
    }

    #[test]
    fn records_failure() {
        let sem = Semaphore::new(0);
        let probe = SemaphoreProbe::new(&sem, "test", 1, 2, Instant::now());
        probe.watch(1);
        sem.fail(hal::Error::aborted("boom"));
        assert!(probe.failed());
        assert!(probe.reached_at(1).is_none());
    }
}
