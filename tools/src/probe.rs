//! Timestamps of the values a semaphore reaches, as the host sees them.
//!
//! A [`SemaphoreProbe`] hangs a timepoint listener on each value it watches
//! ([`hal::Semaphore::register`]); the thread that signals the value (a queue's completion thread)
//! notifies it right after the signal, so the timestamp is when the submission that signals that
//! value completed, host-side. Each notification is also a `tracing` event (target
//! [`SEMAPHORE_TARGET`], fields `semaphore`, `label`, `value`), which the trace layer turns into a
//! counter track per semaphore.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hal::driver::SemaphoreExt;
use hal::driver::timeline::{Registration, TimepointListener};
use hal::{Result, Semaphore};

/// The `tracing` target of the events a probe emits when a value is reached.
pub const SEMAPHORE_TARGET: &str = "tools::semaphore";

/// Most values a probe keeps stamps for at once (8 bytes each): a value watched further than this
/// above the first kept one is not stamped, rather than growing the probe without bound.
pub const MAX_KEPT: usize = 1 << 26;

/// Records when each watched value of one semaphore was reached.
///
/// Watch a value right before submitting the work that signals it ([`SemaphoreProbe::watch`]): a
/// semaphore keeps its waiting timepoints in a sorted list, so watching thousands of future values at
/// once would make every signal slower. The probe keeps one stamp per value from the lowest not
/// forgotten ([`SemaphoreProbe::forget_below`]) to the highest watched, growing as values are
/// watched: watch values close together, and forget the ones no longer needed.
#[derive(Clone)]
pub struct SemaphoreProbe {
    semaphore: Semaphore,
    listener: Arc<ProbeListener>,
}

struct ProbeListener {
    semaphore: u64,
    label: Arc<str>,
    epoch: Instant,
    stamps: Mutex<Stamps>,
    failed: AtomicBool,
    /// The highest value reported as a trace event so far.
    reported: AtomicU64,
}

/// Stamps of consecutive values: `times[i]` is value `first + i`'s time in nanoseconds since the
/// epoch plus one, or 0 while not reached.
struct Stamps {
    first: u64,
    times: VecDeque<u64>,
}

impl Stamps {
    /// The slot of `value`, if it is kept.
    fn slot(&mut self, value: u64) -> Option<&mut u64> {
        let index = usize::try_from(value.checked_sub(self.first)?).ok()?;
        self.times.get_mut(index)
    }

    /// Stamps `value` at `stamp`, or earlier: a higher value already stamped was reached after this
    /// one. (Listeners of one semaphore may be told out of order: the HAL tells those woken by one
    /// retirement after it, and another thread's retirement of a later value may be told first.)
    /// Returns whether the value is kept.
    fn stamp(&mut self, value: u64, stamp: u64) -> bool {
        let Some(index) = value.checked_sub(self.first).and_then(|i| usize::try_from(i).ok()) else { return false };
        if index >= self.times.len() {
            return false;
        }
        let later = self.times.iter().skip(index + 1).filter(|&&t| t != 0).min().copied();
        self.times[index] = later.map_or(stamp, |later| later.min(stamp));
        true
    }
}

impl SemaphoreProbe {
    /// A probe of `semaphore`'s values from `first` on, watching none yet; times are measured from
    /// `epoch`. The semaphore's own label names it in traces when it has one, `label` otherwise.
    pub fn new(semaphore: &Semaphore, label: &str, first: u64, epoch: Instant) -> SemaphoreProbe {
        let listener = Arc::new(ProbeListener {
            semaphore: semaphore.id(),
            label: Arc::from(semaphore.label().unwrap_or(label)),
            epoch,
            stamps: Mutex::new(Stamps { first, times: VecDeque::new() }),
            failed: AtomicBool::new(false),
            reported: AtomicU64::new(0),
        });
        SemaphoreProbe { semaphore: semaphore.clone(), listener }
    }

    /// Watches `value`: it is stamped when the semaphore reaches it (now, if it already has). A value
    /// below the probe's first kept value, or [`MAX_KEPT`] or more above it, is not stamped.
    pub fn watch(&self, value: u64) {
        {
            // Room first, and the lock released before registering: a value already reached
            // notifies on this thread.
            let mut stamps = self.listener.stamps();
            let wanted = value.checked_sub(stamps.first).and_then(|i| usize::try_from(i).ok()).map(|i| i + 1);
            if let Some(wanted) = wanted.filter(|&w| w <= MAX_KEPT && w > stamps.times.len()) {
                stamps.times.resize(wanted, 0);
            }
        }
        match self.semaphore.register(value, self.listener.clone(), value) {
            Registration::Resolved(outcome) => self.listener.notify(value, outcome),
            Registration::Pending(_) => {}
        }
    }

    /// When `value` was reached (since the epoch), or `None` if it has not been (or is not kept).
    pub fn reached_at(&self, value: u64) -> Option<Duration> {
        match *self.listener.stamps().slot(value)? {
            0 => None,
            stamp => Some(Duration::from_nanos(stamp - 1)),
        }
    }

    /// Drops the stamps of values below `value`, which [`reached_at`](Self::reached_at) no longer
    /// answers; a long run calls it as it goes, so the probe keeps only the values still in use.
    pub fn forget_below(&self, value: u64) {
        let mut stamps = self.listener.stamps();
        if value <= stamps.first {
            return;
        }
        let gone = usize::try_from(value - stamps.first).map_or(usize::MAX, |n| n.min(stamps.times.len()));
        stamps.times.drain(..gone);
        stamps.first = value;
    }

    /// The lowest value whose stamp the probe keeps (values below it were forgotten, or precede the
    /// probe).
    pub fn first_kept(&self) -> u64 {
        self.listener.stamps().first
    }

    /// How many values' stamps the probe keeps now (reached or not).
    pub fn kept(&self) -> usize {
        self.listener.stamps().times.len()
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

impl ProbeListener {
    fn stamps(&self) -> MutexGuard<'_, Stamps> {
        // Whole-value stores only: a poisoned lock still holds consistent stamps.
        self.stamps.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl TimepointListener for ProbeListener {
    fn notify(&self, tag: u64, outcome: Result<()>) {
        let nanos = self.epoch.elapsed().as_nanos().min(u128::from(u64::MAX - 1)) as u64;
        match outcome {
            Ok(()) => {
                self.stamps().stamp(tag, nanos + 1);
                // A value below one already reported adds nothing to the counter track (values only
                // grow), and reporting it would make the track step back.
                if self.reported.fetch_max(tag, Ordering::AcqRel) < tag {
                    tracing::trace!(target: SEMAPHORE_TARGET, semaphore = self.semaphore, label = &*self.label, value = tag);
                }
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
    fn a_value_told_after_a_higher_one_is_stamped_no_later_than_it() {
        let mut stamps = Stamps { first: 1, times: VecDeque::from(vec![0; 4]) };
        assert!(stamps.stamp(3, 100));
        assert!(stamps.stamp(2, 250), "told late: capped by the higher value's stamp");
        assert_eq!(stamps.times, VecDeque::from(vec![0, 100, 100, 0]));
        assert!(stamps.stamp(1, 50), "told early enough: its own time");
        assert_eq!(stamps.times[0], 50);
        assert!(!stamps.stamp(9, 1), "not kept");
    }

    #[test]
    fn stamps_values_as_they_are_signalled() {
        let epoch = Instant::now();
        let sem = Semaphore::new(1);
        let probe = SemaphoreProbe::new(&sem, "test", 1, epoch);
        (1..=3).for_each(|v| probe.watch(v));
        assert!(probe.reached_at(1).is_some(), "already reached at watch time");
        assert!(probe.reached_at(2).is_none());
        sem.signal(3).unwrap();
        let (two, three) = (probe.reached_at(2).unwrap(), probe.reached_at(3).unwrap());
        assert!(two >= probe.reached_at(1).unwrap() && three >= two);
        assert!(probe.reached_at(4).is_none() && probe.reached_at(0).is_none(), "outside the watched range");
        assert_eq!(probe.kept(), 3);
        assert!(!probe.failed());
        assert_eq!(sem.pending_count(), 0, "every timepoint resolved");
    }

    #[test]
    fn records_failure() {
        let sem = Semaphore::new(0);
        let probe = SemaphoreProbe::new(&sem, "test", 1, Instant::now());
        probe.watch(1);
        sem.fail(hal::Error::aborted("boom"));
        assert!(probe.failed());
        assert!(probe.reached_at(1).is_none());
    }

    #[test]
    fn keeps_only_the_values_not_forgotten() {
        let sem = Semaphore::new(0);
        let probe = SemaphoreProbe::new(&sem, "test", 1, Instant::now());
        probe.watch(u64::MAX);
        probe.watch(1 + MAX_KEPT as u64);
        assert_eq!(probe.kept(), 0, "far values are not kept, and not allocated for");
        for value in 1..=1000 {
            probe.watch(value);
            sem.signal(value).unwrap();
            probe.forget_below(value.saturating_sub(3).max(1));
            assert!(probe.kept() <= 4, "kept {} at value {value}", probe.kept());
        }
        assert!(probe.reached_at(1000).is_some() && probe.reached_at(997).is_some());
        assert!(probe.reached_at(996).is_none(), "forgotten");
        probe.forget_below(2000);
        assert_eq!((probe.kept(), probe.first_kept()), (0, 2000));
        probe.watch(1500);
        assert_eq!(probe.kept(), 0, "below the first kept value: not stamped");
        probe.watch(2001);
        assert_eq!(probe.kept(), 2);
    }
}
