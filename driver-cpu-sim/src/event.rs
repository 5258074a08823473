//! cpu-sim events: a completion point with CUDA's semantics. Each record bumps the event's epoch and
//! queues a marker on the stream; the stream's worker marks the epoch complete when it gets there. A
//! wait or synchronize targets the latest epoch recorded at the time of the call. An event also
//! counts the stream waits enqueued on it that have not run, so a record can tell whether it breaks
//! the stream model's rules (see `stream_rules`).

use hal::driver::{lock, wait, wait_timeout};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a stream worker waiting on another stream's event watches it before it sleeps: waking a
/// sleeping worker can cost more than a short step of work (a two-queue stencil pays it once per
/// step), and watching (politely, yielding the core) catches the event as it completes.
const WATCH: Duration = Duration::from_micros(200);

/// Numbers events for messages (0 is never used).
static NEXT_EVENT: AtomicU64 = AtomicU64::new(1);

/// A cpu-sim event. Cheap to clone; clones are the same event.
#[derive(Clone)]
pub struct CpuEvent {
    pub(crate) inner: Arc<EventState>,
}

pub(crate) struct EventState {
    /// Process-unique, for messages.
    id: u64,
    epochs: Mutex<Epochs>,
    completed: Condvar,
    /// `Epochs::completed`, readable without the lock (for watching waiters).
    completed_epoch: AtomicU64,
    /// Stream waits enqueued on a record of this event that their stream has not run yet:
    /// incremented under the `epochs` lock when one is enqueued, decremented by the stream worker
    /// once it is past the wait (without the lock).
    pending_waits: AtomicUsize,
}

#[derive(Default, Clone, Copy)]
struct Epochs {
    recorded: u64,
    completed: u64,
    /// The stream of the latest record (0: never recorded), so a wait by that same stream, already
    /// ordered behind the capture, can be skipped (as `driver-cuda` does).
    recorded_on: usize,
    /// Threads blocked in `wait_for`: `complete` notifies (a system call) only when there are some.
    waiters: usize,
    /// The latest epoch a stream wait was enqueued on (0: none), for messages.
    waited: u64,
}

/// What a new record of an event replaced: what the stream model's rules ask of it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NewRecord {
    /// The epoch of the new record.
    pub(crate) epoch: u64,
    /// The previous record had not completed.
    pub(crate) previous_running: bool,
    /// Stream waits enqueued on earlier records that have not run yet.
    pub(crate) pending_waits: usize,
    /// The latest epoch a stream wait was enqueued on.
    pub(crate) waited: u64,
}

impl NewRecord {
    /// Whether the record breaks a rule (the rare path).
    pub(crate) fn breaks_rules(&self) -> bool {
        self.previous_running || self.pending_waits > 0
    }
}

/// What a stream wait on an event has to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitTarget {
    /// The event was never recorded: nothing (CUDA's rule, and a broken stream-model rule).
    NeverRecorded,
    /// Its latest record was on the waiting stream itself: nothing, the stream runs in order.
    SameStream,
    /// Wait for this epoch (counted in `pending_waits` until the stream calls `wait_passed`).
    Epoch(u64),
}

impl EventState {
    fn new() -> Self {
        EventState {
            id: NEXT_EVENT.fetch_add(1, Ordering::Relaxed),
            epochs: Mutex::default(),
            completed: Condvar::new(),
            completed_epoch: AtomicU64::new(0),
            pending_waits: AtomicUsize::new(0),
        }
    }

    /// The event's number, for messages.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    fn epochs(&self) -> MutexGuard<'_, Epochs> {
        lock(&self.epochs)
    }

    /// Starts a new capture; the stream completes it when it reaches the new record's epoch's
    /// marker. `stream` is the recording stream's id (non-zero, see `recorded_on`).
    pub(crate) fn begin_record(&self, stream: usize) -> NewRecord {
        let mut epochs = self.epochs();
        let previous_running = epochs.completed < epochs.recorded;
        // Acquire: a stream that passed its wait decremented before it ran anything after the wait,
        // so a record ordered after that work sees the decrement.
        let pending_waits = self.pending_waits.load(Ordering::Acquire);
        epochs.recorded += 1;
        epochs.recorded_on = stream;
        NewRecord { epoch: epochs.recorded, previous_running, pending_waits, waited: epochs.waited }
    }

    /// What a wait by stream `stream` (its id) has to wait for; an epoch to wait for is counted as a
    /// pending wait from now on.
    pub(crate) fn begin_wait(&self, stream: usize) -> WaitTarget {
        let mut epochs = self.epochs();
        if epochs.recorded == 0 {
            WaitTarget::NeverRecorded
        } else if epochs.recorded_on == stream {
            WaitTarget::SameStream
        } else {
            self.pending_waits.fetch_add(1, Ordering::Relaxed);
            epochs.waited = epochs.recorded;
            WaitTarget::Epoch(epochs.recorded)
        }
    }

    /// A stream is past a wait that [`begin_wait`](Self::begin_wait) counted.
    pub(crate) fn wait_passed(&self) {
        self.pending_waits.fetch_sub(1, Ordering::Release);
    }

    /// The stream reached the marker of `epoch`.
    pub(crate) fn complete(&self, epoch: u64) {
        let mut epochs = self.epochs();
        if epoch > epochs.completed {
            epochs.completed = epoch;
            self.completed_epoch.store(epoch, Ordering::Release);
        }
        let waiters = epochs.waiters;
        drop(epochs);
        if waiters > 0 {
            self.completed.notify_all();
        }
    }

    /// The latest recorded epoch (0: never recorded) and the stream that recorded it.
    pub(crate) fn latest(&self) -> (u64, usize) {
        let epochs = self.epochs();
        (epochs.recorded, epochs.recorded_on)
    }

    /// Blocks until `epoch` is complete.
    pub(crate) fn wait_for(&self, epoch: u64) {
        self.wait_until(epoch, None);
    }

    /// Blocks until `epoch` is complete, watching it for up to [`WATCH`] first, yielding the core
    /// to any other ready thread between looks. For stream workers, which wait on events that
    /// another stream is about to reach; completion threads and host waiters keep sleeping at once.
    pub(crate) fn watch_then_wait_for(&self, epoch: u64) {
        let started = Instant::now();
        while self.completed_epoch.load(Ordering::Acquire) < epoch {
            if started.elapsed() >= WATCH {
                self.wait_until(epoch, None);
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Blocks until `epoch` is complete or `deadline` passes; whether it completed.
    pub(crate) fn wait_until(&self, epoch: u64, deadline: Option<Instant>) -> bool {
        let mut epochs = self.epochs();
        while epochs.completed < epoch {
            epochs.waiters += 1;
            epochs = match deadline {
                None => wait(&self.completed, epochs),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        epochs.waiters -= 1;
                        return false;
                    }
                    wait_timeout(&self.completed, epochs, left).0
                }
            };
            epochs.waiters -= 1;
        }
        true
    }

    /// Whether the latest capture completed (a never-recorded event counts as complete, as in CUDA).
    pub(crate) fn is_complete(&self) -> bool {
        let epochs = self.epochs();
        epochs.completed >= epochs.recorded
    }
}

impl CpuEvent {
    /// A new, never-recorded event.
    pub fn new() -> Self {
        CpuEvent { inner: Arc::new(EventState::new()) }
    }
}

impl Default for CpuEvent {
    fn default() -> Self {
        CpuEvent::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_follow_cuda_semantics() {
        let event = CpuEvent::new();
        assert!(event.inner.is_complete(), "never recorded counts as complete");
        let first = event.inner.begin_record(1).epoch;
        let second = event.inner.begin_record(1).epoch;
        assert!(!event.inner.is_complete());
        event.inner.complete(first);
        assert!(!event.inner.is_complete(), "only the latest capture counts");
        event.inner.complete(second);
        assert!(event.inner.is_complete());
        event.inner.wait_for(second);
    }

    /// A record says what it replaced: a record still running, stream waits not run yet (counted
    /// only for waits by another stream than the recording one), and the epoch they wait on.
    #[test]
    fn a_record_reports_the_running_record_and_the_pending_waits_it_replaces() {
        let event = CpuEvent::new();
        assert_eq!(event.inner.begin_wait(5), WaitTarget::NeverRecorded);
        let first = event.inner.begin_record(1);
        assert!(!first.breaks_rules(), "the first record replaces nothing: {first:?}");
        assert_eq!(event.inner.begin_wait(1), WaitTarget::SameStream, "the recording stream is in order anyway");
        assert_eq!(event.inner.begin_wait(2), WaitTarget::Epoch(first.epoch));
        assert_eq!(event.inner.begin_wait(3), WaitTarget::Epoch(first.epoch));
        let second = event.inner.begin_record(1);
        assert!(second.previous_running && second.breaks_rules());
        assert_eq!((second.pending_waits, second.waited), (2, first.epoch));
        event.inner.complete(second.epoch);
        event.inner.wait_passed();
        event.inner.wait_passed();
        let third = event.inner.begin_record(1);
        assert!(!third.breaks_rules(), "completed, and both waits passed: {third:?}");
        assert_ne!(CpuEvent::new().inner.id(), event.inner.id(), "events are numbered apart");
    }

    /// A stream worker's wait returns once the event completes, whether that happens while it
    /// watches or after it went to sleep (and the sleeper is counted, so `complete` wakes it).
    #[test]
    fn a_watching_waiter_sees_completion_while_watching_and_after_sleeping() {
        for delay in [std::time::Duration::ZERO, WATCH * 20] {
            let event = CpuEvent::new();
            let epoch = event.inner.begin_record(3).epoch;
            let (done, finished) = std::sync::mpsc::channel();
            let waiter = {
                let event = event.clone();
                std::thread::spawn(move || {
                    event.inner.watch_then_wait_for(epoch);
                    let _ = done.send(());
                })
            };
            std::thread::sleep(delay);
            if !delay.is_zero() {
                // Past its watch the waiter sleeps (on a loaded machine it may take longer to get there).
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while event.inner.epochs().waiters != 1 {
                    assert!(std::time::Instant::now() < deadline, "past its watch, the waiter never slept");
                    std::thread::sleep(WATCH);
                }
            }
            assert!(finished.try_recv().is_err(), "returned before the event completed");
            event.inner.complete(epoch);
            finished.recv_timeout(std::time::Duration::from_secs(5)).expect("the waiter saw the completion");
            waiter.join().unwrap();
        }
    }

    #[test]
    fn a_waiter_blocked_before_completion_is_woken() {
        let event = CpuEvent::new();
        let epoch = event.inner.begin_record(7).epoch;
        assert_eq!(event.inner.latest(), (epoch, 7));
        let (done, woken) = std::sync::mpsc::channel();
        let waiter = {
            let event = event.clone();
            std::thread::spawn(move || {
                event.inner.wait_for(epoch);
                let _ = done.send(());
            })
        };
        // Let the waiter block (if it has not, `complete` finds no waiter and it returns at once).
        std::thread::sleep(std::time::Duration::from_millis(20));
        event.inner.complete(epoch);
        woken.recv_timeout(std::time::Duration::from_secs(5)).expect("the blocked waiter was woken");
        waiter.join().unwrap();
        assert_eq!(event.inner.epochs().waiters, 0);
    }
}
