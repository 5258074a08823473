//! How many event queries a retirement pass makes (each is a driver call that takes a lock the
//! submitting threads' launches need on CUDA), over a stream model whose events complete when the
//! test says so. The queue's completion thread is held at its gate, so only the test's
//! `poll_completions` retires.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use hal::driver::QueueOp;
use hal::scheduler::Scheduler;
use hal::stream_model::{StreamModel, Work};
use hal::{DeviceId, Error, Result, SemaphoreValue as SV, Timeout};

/// One stream whose work completes in order up to a point the test sets.
struct ManualStreams {
    /// Records so far; record number `n` completes once `completed >= n`.
    recorded: AtomicU64,
    completed: AtomicU64,
    /// When set, every query reports this fault (a sticky device fault).
    fault: AtomicBool,
    queries: AtomicUsize,
    /// Holds the completion thread in `await_completion` until teardown.
    gate: (Mutex<bool>, Condvar),
}

struct ManualEvent {
    /// The record number of the latest record.
    record: AtomicU64,
}

impl ManualStreams {
    fn complete_up_to(&self, record: u64) {
        self.completed.store(record, Ordering::SeqCst);
    }

    fn take_queries(&self) -> usize {
        self.queries.swap(0, Ordering::SeqCst)
    }

    fn open_gate(&self) {
        self.complete_up_to(u64::MAX);
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
        event.record.store(self.recorded.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
        Ok(())
    }
    fn wait_event(&self, _stream: &(), _event: &ManualEvent) -> Result<()> {
        Ok(())
    }
    fn query_event(&self, event: &ManualEvent) -> Result<bool> {
        self.queries.fetch_add(1, Ordering::SeqCst);
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
    fn await_completion(&self, _stream: &(), event: &ManualEvent) -> Result<()> {
        let mut open = self.gate.0.lock().unwrap();
        while !*open {
            open = self.gate.1.wait(open).unwrap();
        }
        drop(open);
        self.synchronize_event(event)
    }
    fn enqueue(&self, _stream: &(), _work: &Arc<Work>) -> Result<()> {
        Ok(())
    }
    fn synchronize_stream(&self, _stream: &()) -> Result<()> {
        Ok(())
    }
}

/// The scheduler under test. Dropping it (also when an assertion fails) first lets its completion
/// thread through the gate, so a failing test fails instead of hanging in the scheduler's teardown.
struct Tested(Scheduler<ManualStreams>);

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

fn scheduler() -> Tested {
    let model = ManualStreams {
        recorded: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        fault: AtomicBool::new(false),
        queries: AtomicUsize::new(0),
        gate: (Mutex::new(false), Condvar::new()),
    };
    Tested(Scheduler::new(DeviceId::next(), model, 1).unwrap())
}

#[test]
fn a_pass_asks_the_newest_events_first_and_stops_at_a_pending_newest() {
    let s = scheduler();
    let done = s.create_semaphore(0);
    for value in 1..=10 {
        s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, value)]).unwrap();
    }
    let model = s.model();
    model.take_queries();

    // Nothing completed: newest pending, second-newest pending, front pending.
    assert_eq!(s.poll_completions(0), 0);
    assert_eq!(model.take_queries(), 3, "newest, second-newest, front");

    // All but the newest completed: two queries retire nine submissions.
    model.complete_up_to(9);
    assert_eq!(s.poll_completions(0), 9);
    assert_eq!(model.take_queries(), 2, "newest (pending), then second-newest (done); never the newest again");
    assert_eq!(done.query().unwrap(), 9);

    // A burst: five more, all completed with the last one: one query retires six.
    for value in 11..=15 {
        s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, value)]).unwrap();
    }
    model.take_queries();
    model.complete_up_to(15);
    assert_eq!(s.poll_completions(0), 6);
    assert_eq!(model.take_queries(), 1, "the newest covers everything");
    assert_eq!(done.query().unwrap(), 15);

    // The GPU far behind: newest and second-newest pending, then the front one by one.
    for value in 16..=20 {
        s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, value)]).unwrap();
    }
    model.take_queries();
    model.complete_up_to(17);
    assert_eq!(s.poll_completions(0), 2);
    assert_eq!(model.take_queries(), 5, "newest, second, then the front three times (done, done, pending)");
    assert_eq!(done.query().unwrap(), 17);

    model.open_gate();
    done.wait(20, Timeout::After(Duration::from_secs(5))).unwrap();
}

#[test]
fn a_fault_found_by_any_query_fails_the_front() {
    let s = scheduler();
    let done = s.create_semaphore(0);
    for value in 1..=4 {
        s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, value)]).unwrap();
    }
    let model = s.model();
    model.fault.store(true, Ordering::SeqCst);
    assert!(s.poll_completions(0) >= 1, "the faulted front retires");
    let failure = done.query().unwrap_err();
    assert!(failure.message().contains("manual fault"), "{failure}");
    model.open_gate();
}
