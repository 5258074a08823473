//! A stream model for scheduler tests: work "completes" in record order up to a point the test
//! sets, queries are counted, enqueues can be made to fail, and the completion threads are held at a
//! gate so that only the test's `poll_completions` retires (until the gate opens at teardown).
//! Shared by the scheduler tests through `#[path]`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use hal::driver::QueueOp;
use hal::driver::scheduler::Scheduler;
use hal::driver::stream_model::{StreamModel, Work};
use hal::{DeviceId, Error, Result};

/// One stream whose work completes in order up to a point the test sets.
pub struct ManualStreams {
    /// Records so far; record number `n` completes once `completed >= n`.
    recorded: AtomicU64,
    completed: AtomicU64,
    /// When set, every query reports this fault (a sticky device fault).
    pub fault: AtomicBool,
    /// When set, every enqueue fails (after the stream-waits the scheduler enqueued before it).
    pub fail_enqueue: AtomicBool,
    /// When set, every record fails.
    pub fail_record: AtomicBool,
    queries: AtomicUsize,
    /// Calls of `enqueue`, `complete` and `discard`: the methods that are handed a `Work`.
    work_calls: AtomicUsize,
    /// Whether the scheduler may leave marks open (`StreamModel::leaves_marks_open`); off unless a
    /// test turns it on, so that each submission records its own event.
    pub open_marks: AtomicBool,
    /// Holds the completion thread in `await_completion` until teardown.
    gate: (Mutex<bool>, Condvar),
    /// When set (before the first submission), the completion thread does not stop at the gate: it
    /// polls every 100 us, asking `taken_over` before each query, as a polling GPU backend does.
    pub polling: AtomicBool,
    /// Queries made on the scheduler's completion threads.
    completion_queries: AtomicUsize,
    /// When set, a barrier whose waits are reached retires at submission on an idle queue, its
    /// stream call made there (`StreamModel::run_at_submission`, which fails while
    /// `fail_enqueue` is set), as CUDA's allocas do.
    pub barriers_run_at_submission: AtomicBool,
    /// Calls of `run_at_submission`.
    runs_at_submission: AtomicUsize,
    /// While set, `enqueue` blocks (its issue holding the queue's issue lock) until it is cleared;
    /// `enqueues_held` counts the enqueues that blocked so far.
    hold_enqueues: (Mutex<bool>, Condvar),
    enqueues_held: AtomicUsize,
    /// Microseconds every enqueue sleeps (its issue holding the queue's issue lock); 0: none.
    pub enqueue_sleep_us: AtomicU64,
}

pub struct ManualEvent {
    /// The record number of the latest record.
    record: AtomicU64,
}

impl ManualStreams {
    pub fn complete_up_to(&self, record: u64) {
        self.completed.store(record, Ordering::SeqCst);
    }

    /// Events recorded so far.
    #[allow(dead_code)] // not every test counts records
    pub fn records(&self) -> u64 {
        self.recorded.load(Ordering::SeqCst)
    }

    #[allow(dead_code)] // not every test counts queries
    pub fn take_queries(&self) -> usize {
        self.queries.swap(0, Ordering::SeqCst)
    }

    /// Queries made on completion threads since the last call.
    #[allow(dead_code)] // not every test counts them
    pub fn take_completion_queries(&self) -> usize {
        self.completion_queries.swap(0, Ordering::SeqCst)
    }

    /// Calls so far of `run_at_submission`.
    #[allow(dead_code)] // not every test counts them
    pub fn runs_at_submission(&self) -> usize {
        self.runs_at_submission.load(Ordering::SeqCst)
    }

    /// Calls so far of the methods that are handed a `Work` (`enqueue`, `complete`, `discard`).
    #[allow(dead_code)] // not every test counts them
    pub fn work_calls(&self) -> usize {
        self.work_calls.load(Ordering::SeqCst)
    }

    /// Completes everything and lets the completion threads run (teardown).
    pub fn open_gate(&self) {
        self.complete_up_to(u64::MAX);
        self.release_completion_threads();
        self.hold_enqueues(false);
    }

    /// Makes every enqueue from now on block until this is called with `false`.
    #[allow(dead_code)] // not every test holds enqueues
    pub fn hold_enqueues(&self, hold: bool) {
        *self.hold_enqueues.0.lock().unwrap_or_else(|p| p.into_inner()) = hold;
        self.hold_enqueues.1.notify_all();
    }

    /// Enqueues that blocked in [`hold_enqueues`](Self::hold_enqueues) so far.
    #[allow(dead_code)] // not every test holds enqueues
    pub fn enqueues_held(&self) -> usize {
        self.enqueues_held.load(Ordering::SeqCst)
    }

    /// Lets the completion threads wait for (and retire) work as it completes.
    pub fn release_completion_threads(&self) {
        *self.gate.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.gate.1.notify_all();
    }
}

impl StreamModel for ManualStreams {
    type Stream = ();
    type Event = ManualEvent;

    fn create_stream(&self, _queue: usize) -> Result<()> {
        Ok(())
    }
    fn create_event(&self) -> Result<ManualEvent> {
        Ok(ManualEvent { record: AtomicU64::new(0) })
    }
    fn record_event(&self, event: &ManualEvent, _stream: &()) -> Result<()> {
        if self.fail_record.load(Ordering::SeqCst) {
            return Err(Error::data_loss("manual record failure"));
        }
        event.record.store(self.recorded.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
        Ok(())
    }
    fn wait_event(&self, _stream: &(), _event: &ManualEvent) -> Result<()> {
        Ok(())
    }
    fn query_event(&self, event: &ManualEvent) -> Result<bool> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        if std::thread::current().name().is_some_and(|name| name.starts_with("hal-completion")) {
            self.completion_queries.fetch_add(1, Ordering::SeqCst);
        }
        if self.fault.load(Ordering::SeqCst) {
            return Err(Error::data_loss("manual fault"));
        }
        Ok(event.record.load(Ordering::SeqCst) <= self.completed.load(Ordering::SeqCst))
    }
    fn synchronize_event(&self, event: &ManualEvent) -> Result<()> {
        while !self.query_event(event)? {
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(())
    }
    fn await_completion(&self, _stream: &(), event: &ManualEvent, taken_over: &dyn Fn() -> bool) -> Option<Result<()>> {
        if self.polling.load(Ordering::SeqCst) {
            loop {
                if taken_over() {
                    return None;
                }
                match self.query_event(event) {
                    Ok(true) => return Some(Ok(())),
                    Ok(false) => std::thread::sleep(Duration::from_micros(100)),
                    Err(fault) => return Some(Err(fault)),
                }
            }
        }
        let mut open = self.gate.0.lock().unwrap();
        while !*open {
            open = self.gate.1.wait(open).unwrap();
        }
        drop(open);
        Some(self.synchronize_event(event))
    }
    fn host_wait(
        &self,
        event: &ManualEvent,
        deadline: Option<std::time::Instant>,
        stop: &dyn Fn() -> bool,
    ) -> Option<Result<()>> {
        if !self.polling.load(Ordering::SeqCst) {
            return match deadline {
                None if !stop() => Some(self.synchronize_event(event)),
                _ => None,
            };
        }
        // As a polling GPU backend waits: queries until the deadline, asking `stop` between them.
        loop {
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) || stop() {
                return None;
            }
            match self.query_event(event) {
                Ok(true) => return Some(Ok(())),
                Ok(false) => std::thread::sleep(Duration::from_micros(100)),
                Err(fault) => return Some(Err(fault)),
            }
        }
    }
    fn enqueue(&self, _stream: &(), _work: &Arc<Work>) -> Result<()> {
        self.work_calls.fetch_add(1, Ordering::SeqCst);
        let mut held = self.hold_enqueues.0.lock().unwrap_or_else(|p| p.into_inner());
        if *held {
            self.enqueues_held.fetch_add(1, Ordering::SeqCst);
            while *held {
                held = self.hold_enqueues.1.wait(held).unwrap_or_else(|p| p.into_inner());
            }
        }
        drop(held);
        let sleep = self.enqueue_sleep_us.load(Ordering::SeqCst);
        if sleep > 0 {
            std::thread::sleep(Duration::from_micros(sleep));
        }
        if self.fail_enqueue.load(Ordering::SeqCst) {
            return Err(Error::resource_exhausted("manual enqueue failure"));
        }
        Ok(())
    }
    fn synchronize_stream(&self, _stream: &()) -> Result<()> {
        Ok(())
    }
    fn leaves_marks_open(&self) -> bool {
        self.open_marks.load(Ordering::SeqCst)
    }
    fn complete(&self, _work: &Work) -> Result<()> {
        self.work_calls.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn retires_at_submission(&self, op: &QueueOp) -> bool {
        self.barriers_run_at_submission.load(Ordering::SeqCst) && matches!(op, QueueOp::Barrier)
    }
    fn run_at_submission(&self, _stream: &(), _op: &QueueOp) -> Result<()> {
        self.runs_at_submission.fetch_add(1, Ordering::SeqCst);
        if self.fail_enqueue.load(Ordering::SeqCst) {
            return Err(Error::resource_exhausted("manual run-at-submission failure"));
        }
        Ok(())
    }
    fn discard(&self, _work: &Work) {
        self.work_calls.fetch_add(1, Ordering::SeqCst);
    }
}

/// The scheduler under test. Dropping it (also when an assertion fails) first lets its completion
/// thread through the gate, so a failing test fails instead of hanging in the scheduler's teardown.
pub struct Tested(pub Scheduler<ManualStreams>);

impl std::ops::Deref for Tested {
    type Target = Scheduler<ManualStreams>;

    fn deref(&self) -> &Scheduler<ManualStreams> {
        &self.0
    }
}

impl Drop for Tested {
    fn drop(&mut self) {
        self.0.model().open_gate();
    }
}

/// A scheduler of `queues` queues over a fresh model.
pub fn scheduler(queues: usize) -> Tested {
    let model = ManualStreams {
        recorded: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        fault: AtomicBool::new(false),
        fail_enqueue: AtomicBool::new(false),
        fail_record: AtomicBool::new(false),
        queries: AtomicUsize::new(0),
        work_calls: AtomicUsize::new(0),
        open_marks: AtomicBool::new(false),
        gate: (Mutex::new(false), Condvar::new()),
        polling: AtomicBool::new(false),
        completion_queries: AtomicUsize::new(0),
        barriers_run_at_submission: AtomicBool::new(false),
        runs_at_submission: AtomicUsize::new(0),
        hold_enqueues: (Mutex::new(false), Condvar::new()),
        enqueues_held: AtomicUsize::new(0),
        enqueue_sleep_us: AtomicU64::new(0),
    };
    Tested(Scheduler::new(DeviceId::next(), model, queues).unwrap())
}
