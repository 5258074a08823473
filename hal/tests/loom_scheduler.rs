//! Loom models of the scheduler's races, over a stream model whose streams run work inline and whose
//! events complete when recorded (loom cannot run real device threads). Completion is driven by the
//! model's threads through `poll_completions`.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p timeline-hal --release --target-dir target-loom --test loom_scheduler`
#![cfg(loom)]

use std::sync::Arc;

use hal::driver::scheduler::Scheduler;
use hal::driver::stream_model::{StreamModel, Work};
use hal::driver::{HostCall, QueueOp, Submission};
use hal::{DeviceId, Error, HostCallFlags, Result, Semaphore, SemaphoreValue as SV, Timeout};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Streams that run work at enqueue; events are complete once recorded.
struct InlineStreams {
    /// Work run so far (shared, so that a host call can look).
    ran: Arc<AtomicUsize>,
    /// Whether barriers run on the issuing thread where their queue is idle, as cpu-sim runs light
    /// work (`StreamModel::run_at_issue`).
    barriers_at_issue: bool,
    /// Whether barriers retire at submission where they can (the queue-local fast path, as
    /// cpu-sim's and CUDA's empty work does: `StreamModel::retires_at_submission`).
    quiet_barriers: AtomicBool,
}

struct InlineEvent {
    /// How many times it was recorded (each record reuses the pooled event).
    records: AtomicUsize,
}

impl StreamModel for InlineStreams {
    type Stream = ();
    type Event = InlineEvent;

    /// Two schedulers of this model wait on each other's events (the cross-device model below).
    const SHARES_EVENTS_ACROSS_DEVICES: bool = true;

    fn create_stream(&self, _queue: usize) -> Result<()> {
        Ok(())
    }
    fn create_event(&self) -> Result<InlineEvent> {
        Ok(InlineEvent { records: AtomicUsize::new(0) })
    }
    fn record_event(&self, event: &InlineEvent, _stream: &()) -> Result<()> {
        event.records.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn wait_event(&self, _stream: &(), event: &InlineEvent) -> Result<()> {
        assert!(event.records.load(Ordering::Relaxed) > 0, "stream waited on a never-recorded event");
        Ok(())
    }
    fn query_event(&self, _event: &InlineEvent) -> Result<bool> {
        Ok(true)
    }
    fn synchronize_event(&self, _event: &InlineEvent) -> Result<()> {
        Ok(())
    }
    fn enqueue(&self, _stream: &(), work: &Arc<Work>) -> Result<()> {
        if let Some(fault) = work.upstream_fault() {
            work.fault.set(fault);
        }
        self.ran.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn synchronize_stream(&self, _stream: &()) -> Result<()> {
        Ok(())
    }
    fn light_at_issue(&self, work: &Work) -> bool {
        self.barriers_at_issue && matches!(work.op, QueueOp::Barrier)
    }
    fn run_at_issue(&self, _work: &Arc<Work>) {
        self.ran.fetch_add(1, Ordering::Relaxed);
    }
    fn retires_at_submission(&self, op: &QueueOp) -> bool {
        self.quiet_barriers.load(Ordering::Relaxed) && matches!(op, QueueOp::Barrier)
    }
}

fn scheduler(queues: usize) -> Arc<Scheduler<InlineStreams>> {
    scheduler_with(queues, false)
}

/// A scheduler whose barriers run on the issuing thread where their queue is idle.
fn scheduler_at_issue(queues: usize) -> Arc<Scheduler<InlineStreams>> {
    scheduler_with(queues, true)
}

fn scheduler_with(queues: usize, barriers_at_issue: bool) -> Arc<Scheduler<InlineStreams>> {
    let model =
        InlineStreams { ran: Arc::new(AtomicUsize::new(0)), barriers_at_issue, quiet_barriers: AtomicBool::new(false) };
    Arc::new(Scheduler::new(DeviceId::next(), model, queues).unwrap())
}

fn builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder
}

/// Stack for the model's threads. Loom runs each on a coroutine whose default stack (32 KiB) is far
/// below a real thread's; a retirement that retires a producer on another device first nests two
/// retirements, and with a submission's per-wait records inline that passes 32 KiB.
const THREAD_STACK: usize = 1 << 18;

/// `loom::thread::spawn` with [`THREAD_STACK`].
fn spawn<F: FnOnce() + Send + 'static>(f: F) -> loom::thread::JoinHandle<()> {
    loom::thread::Builder::new().stack_size(THREAD_STACK).spawn(f).expect("spawn a model thread")
}

/// A thread that retires what has completed on `queue` (a completion thread's pass).
fn spawn_retirer(s: &Arc<Scheduler<InlineStreams>>, queue: usize) -> loom::thread::JoinHandle<()> {
    let s = s.clone();
    spawn(move || {
        s.poll_completions(queue);
    })
}

/// A thread that submits a barrier on `queue` signalling `signal` to 1.
fn spawn_barrier(s: &Arc<Scheduler<InlineStreams>>, queue: usize, signal: &Semaphore) -> loom::thread::JoinHandle<()> {
    let (s, signal) = (s.clone(), signal.clone());
    spawn(move || s.submit(queue, QueueOp::Barrier, &[], &[SV::new(&signal, 1)]).unwrap())
}

/// Retires everything on every queue; returns when nothing is in flight.
fn drain(s: &Scheduler<InlineStreams>, queues: usize) {
    for q in 0..queues {
        s.poll_completions(q);
    }
}

fn assert_idle(s: &Scheduler<InlineStreams>) {
    let usage = s.resource_usage();
    assert!(usage.is_idle(), "not idle: {usage}\n{}", s.report());
}

/// The last wait of a held action is satisfied on one thread while another thread submits it.
#[test]
fn loom_last_wait_satisfied_while_submitting() {
    builder().check(|| last_wait_satisfied_while_submitting(false));
}

/// The same with a barrier that may retire at submission (the queue-local fast path): whether its
/// wait is reached when it looks or released later, it signals exactly once.
#[test]
fn loom_last_wait_satisfied_while_submitting_quiet_work() {
    builder().check(|| last_wait_satisfied_while_submitting(true));
}

fn last_wait_satisfied_while_submitting(quiet: bool) {
    let s = scheduler(1);
    s.model().quiet_barriers.store(quiet, Ordering::Relaxed);
    let gate = s.create_semaphore(0);
    let done = s.create_semaphore(0);
    let signaller = {
        let gate = gate.clone();
        spawn(move || gate.signal(1).unwrap())
    };
    s.submit(0, QueueOp::Barrier, &[SV::new(&gate, 1)], &[SV::new(&done, 1)]).unwrap();
    signaller.join().unwrap();
    drain(&s, 1);
    assert_eq!(done.query().unwrap(), 1, "released exactly once and completed");
    let ran = s.model().ran.load(Ordering::Relaxed);
    // Quiet work that retired at submission ran nothing on the stream.
    assert!(ran == 1 || (quiet && ran == 0), "ran {ran} times");
    assert_idle(&s);
}

/// A barrier that may retire at submission is submitted while an earlier barrier of its queue is in
/// flight and a completion pass retires it: it never applies its signal before the earlier one's
/// (a watcher that sees the later signal sees the earlier), and both land once.
#[test]
fn loom_quiet_submission_keeps_queue_order_against_retirement() {
    builder().check(|| {
        let s = scheduler(1);
        let (earlier, later) = (s.create_semaphore(0), s.create_semaphore(0));
        s.submit(0, QueueOp::Barrier, &[], &[SV::new(&earlier, 1)]).unwrap();
        s.model().quiet_barriers.store(true, Ordering::Relaxed);
        let retirer = spawn_retirer(&s, 0);
        let watcher = {
            let (earlier, later) = (earlier.clone(), later.clone());
            spawn(move || {
                if later.query().unwrap() == 1 {
                    assert_eq!(earlier.query().unwrap(), 1, "the later barrier signalled first");
                }
            })
        };
        s.submit(0, QueueOp::Barrier, &[], &[SV::new(&later, 1)]).unwrap();
        retirer.join().unwrap();
        watcher.join().unwrap();
        drain(&s, 1);
        drain(&s, 1);
        assert_eq!((earlier.query().unwrap(), later.query().unwrap()), (1, 1));
        let ran = s.model().ran.load(Ordering::Relaxed);
        assert!(ran == 1 || ran == 2, "the later barrier ran on the stream or retired at submission: {ran}");
        assert_idle(&s);
    });
}

/// Completion of the signalling submission races a new submission that waits on its value: the new
/// one either chains on the published event or sees the value reached; never lost, never early.
#[test]
fn loom_completion_races_new_submission() {
    builder().check(|| {
        let s = scheduler(2);
        let a = s.create_semaphore(0);
        let b = s.create_semaphore(0);
        s.submit(0, QueueOp::Barrier, &[], &[SV::new(&a, 1)]).unwrap();
        let retirer = spawn_retirer(&s, 0);
        s.submit(1, QueueOp::Barrier, &[SV::new(&a, 1)], &[SV::new(&b, 1)]).unwrap();
        retirer.join().unwrap();
        drain(&s, 2);
        assert_eq!(a.query().unwrap(), 1);
        assert_eq!(b.query().unwrap(), 1);
        assert_idle(&s);
    });
}

/// The last reference of a published event drops (its submission retires and prunes the table)
/// while another submission takes the event for a stream-wait and a third acquires a pooled event:
/// no event returns to the pool twice or while referenced.
#[test]
fn loom_event_release_races_new_stream_wait() {
    builder().check(|| {
        let s = scheduler(2);
        let a = s.create_semaphore(0);
        let b = s.create_semaphore(0);
        let c = s.create_semaphore(0);
        s.submit(0, QueueOp::Barrier, &[], &[SV::new(&a, 1)]).unwrap();
        let retirer = spawn_retirer(&s, 0);
        let fresh = spawn_barrier(&s, 0, &c);
        s.submit(1, QueueOp::Barrier, &[SV::new(&a, 1)], &[SV::new(&b, 1)]).unwrap();
        retirer.join().unwrap();
        fresh.join().unwrap();
        drain(&s, 2);
        assert_eq!(b.query().unwrap(), 1);
        assert_eq!(c.query().unwrap(), 1);
        let usage = s.resource_usage();
        let events = usage.pools.iter().find(|p| p.name == "events").unwrap();
        assert_eq!(events.in_use, 0, "{usage}");
        assert!(events.created <= 3, "{usage}");
        assert_idle(&s);
    });
}

/// A failed wait racing the submission: the dependant never runs and its signal fails with the
/// same status, whichever side wins.
#[test]
fn loom_failure_races_submission() {
    builder().check(|| {
        let s = scheduler(1);
        let gate = s.create_semaphore(0);
        let done = s.create_semaphore(0);
        let failer = {
            let gate = gate.clone();
            spawn(move || gate.fail(hal::Error::aborted("upstream")))
        };
        s.submit(0, QueueOp::Barrier, &[SV::new(&gate, 1)], &[SV::new(&done, 1)]).unwrap();
        failer.join().unwrap();
        drain(&s, 1);
        let err = done.wait(1, Timeout::Immediate).unwrap_err();
        assert_eq!(err.code(), hal::StatusCode::Aborted);
        assert_eq!(s.model().ran.load(Ordering::Relaxed), 0, "never ran");
        assert_idle(&s);
    });
}

/// Across devices: device B's submission waits, on the device, on device A's event (A's semaphore),
/// and the two devices' completion threads retire concurrently. Whenever B's signal is visible, A's
/// producer has already retired (its signal applied), because B's retirement retires A's producer
/// first through A's scheduler; both devices end idle, every event back in its own pool.
#[test]
fn loom_cross_device_producer_retires_first() {
    builder().check(|| {
        let (a, b) = (scheduler(1), scheduler(1));
        let produced = a.create_semaphore(0);
        let consumed = b.create_semaphore(0);
        a.submit(0, QueueOp::Barrier, &[], &[SV::new(&produced, 1)]).unwrap();
        b.submit(0, QueueOp::Barrier, &[SV::new(&produced, 1)], &[SV::new(&consumed, 1)]).unwrap();
        assert_eq!(
            b.resource_usage().pools.iter().find(|p| p.name == "pending actions").unwrap().in_use,
            0,
            "the wait on A's semaphore was covered by A's event, not held for the host"
        );
        let a_retirer = spawn_retirer(&a, 0);
        let b_retirer = {
            let (b, produced, consumed) = (b.clone(), produced.clone(), consumed.clone());
            spawn(move || {
                b.poll_completions(0);
                if consumed.query().unwrap() == 1 {
                    assert_eq!(produced.query().unwrap(), 1, "B's signal is visible before A's producer retired");
                }
            })
        };
        a_retirer.join().unwrap();
        b_retirer.join().unwrap();
        drain(&a, 1);
        drain(&b, 1);
        assert_eq!((produced.query().unwrap(), consumed.query().unwrap()), (1, 1));
        assert_idle(&a);
        assert_idle(&b);
    });
}

/// An open mark (a submission issued behind another, recording nothing) is sealed by three racing
/// parties: the retirement of its queue, a stream of another queue that waits on its value, and the
/// next issue on its own queue (whose record fills it). Exactly one record fills it, no stream waits
/// on an unrecorded event (the model asserts that), and every signal arrives.
#[test]
fn loom_open_mark_sealed_by_racing_retirement_wait_and_issue() {
    builder().check(|| open_mark_sealed_by_racing_retirement_wait_and_issue(scheduler(2)));
}

/// The same race where barriers run on the issuing thread when their queue is idle: the work that
/// runs at issue and the work that goes to the stream keep their order, every signal lands once.
#[test]
fn loom_work_run_at_issue_races_retirement_wait_and_issue() {
    builder().check(|| open_mark_sealed_by_racing_retirement_wait_and_issue(scheduler_at_issue(2)));
}

fn open_mark_sealed_by_racing_retirement_wait_and_issue(s: Arc<Scheduler<InlineStreams>>) {
    let first = s.create_semaphore(0);
    let produced = s.create_semaphore(0);
    let consumed = s.create_semaphore(0);
    let next = s.create_semaphore(0);
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&first, 1)]).unwrap();
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&produced, 1)]).unwrap();
    let retirer = spawn_retirer(&s, 0);
    let issuer = spawn_barrier(&s, 0, &next);
    s.submit(1, QueueOp::Barrier, &[SV::new(&produced, 1)], &[SV::new(&consumed, 1)]).unwrap();
    retirer.join().unwrap();
    issuer.join().unwrap();
    drain(&s, 2);
    drain(&s, 2);
    assert_eq!(produced.query().unwrap(), 1);
    assert_eq!(consumed.query().unwrap(), 1);
    assert_eq!(next.query().unwrap(), 1);
    let usage = s.resource_usage();
    let events = usage.pools.iter().find(|p| p.name == "events").unwrap();
    assert_eq!(events.in_use, 0, "{usage}");
    assert_idle(&s);
}

/// On queue 0 of a one-queue scheduler: a barrier signalling `signal` submitted on one thread
/// while another retires, then everything drained (twice: a host call that retires may issue more).
fn barrier_while_retiring(s: &Arc<Scheduler<InlineStreams>>, signal: &Semaphore) {
    let submitter = spawn_barrier(s, 0, signal);
    let retirer = spawn_retirer(s, 0);
    submitter.join().unwrap();
    retirer.join().unwrap();
    drain(s, 1);
    drain(s, 1);
}

/// A blocking host call holds later work of its queue until it returns: work submitted on another
/// thread once the call is admitted is issued only after the call returned, whichever thread
/// retires the call, and then runs.
#[test]
fn loom_work_behind_a_blocking_host_call_waits_for_its_return() {
    builder().check(|| {
        let s = scheduler(1);
        let (called, after) = (Semaphore::new(0), Semaphore::new(0));
        let ran = s.model().ran.clone();
        let call = HostCall::new(
            move || match ran.load(Ordering::Relaxed) {
                0 => Ok(()),
                n => Err(Error::internal(format!("{n} submission(s) behind the call ran before it returned"))),
            },
            HostCallFlags::empty(),
        );
        s.submit(0, Submission::HostCall(call), &[], &[SV::new(&called, 1)]).unwrap();
        barrier_while_retiring(&s, &after);
        assert_eq!(called.query().unwrap(), 1, "the call returned before the work behind it ran");
        assert_eq!(after.query().unwrap(), 1, "the held work ran once the call returned");
        assert_eq!(s.model().ran.load(Ordering::Relaxed), 1);
        assert_idle(&s);
    });
}

/// Work a blocking host call submits to its own queue is part of the call: it is not held behind
/// the call (which may wait for it), while other work submitted meanwhile is.
#[test]
fn loom_a_host_call_is_not_held_behind_itself() {
    builder().check(|| {
        let s = scheduler(1);
        let (inner, outer, called) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
        let submitted_inside = {
            let (s, inner) = (std::sync::Arc::downgrade(&s), inner.clone());
            HostCall::new(
                move || {
                    let s = s.upgrade().ok_or_else(|| Error::internal("scheduler gone"))?;
                    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&inner, 1)])?;
                    match s.model().ran.load(Ordering::Relaxed) {
                        1 => Ok(()),
                        n => Err(Error::internal(format!("{n} submissions ran when the call's own had been issued"))),
                    }
                },
                HostCallFlags::empty(),
            )
        };
        s.submit(0, Submission::HostCall(submitted_inside), &[], &[SV::new(&called, 1)]).unwrap();
        barrier_while_retiring(&s, &outer);
        assert_eq!(called.query().unwrap(), 1, "the call's own work issued while it ran, nothing else did");
        assert_eq!(inner.query().unwrap(), 1, "the call's own work ran");
        assert_eq!(outer.query().unwrap(), 1, "the work behind the call ran after it");
        assert_idle(&s);
    });
}

/// A blocking host call still waiting for its wait holds later work of its queue whose waits
/// include that wait: the later work is submitted on one thread while another reaches the wait,
/// so it may be admitted before the call or after; either way it runs only after the call returned.
#[test]
fn loom_work_whose_waits_include_a_waiting_calls_waits_for_its_return() {
    builder().check(|| {
        let s = scheduler(1);
        let (gate, called, after) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
        let ran = s.model().ran.clone();
        let call = HostCall::new(
            move || match ran.load(Ordering::Relaxed) {
                0 => Ok(()),
                n => Err(Error::internal(format!("{n} submission(s) behind the call ran before it returned"))),
            },
            HostCallFlags::empty(),
        );
        s.submit(0, Submission::HostCall(call), &[SV::new(&gate, 1)], &[SV::new(&called, 1)]).unwrap();
        let submitter = {
            let (s, gate, after) = (s.clone(), gate.clone(), after.clone());
            spawn(move || s.submit(0, QueueOp::Barrier, &[SV::new(&gate, 1)], &[SV::new(&after, 1)]).unwrap())
        };
        gate.signal(1).unwrap();
        submitter.join().unwrap();
        drain(&s, 1);
        drain(&s, 1);
        assert_eq!(called.query().unwrap(), 1, "the call returned before the work behind it ran");
        assert_eq!(after.query().unwrap(), 1, "the held work ran once the call returned");
        assert_idle(&s);
    });
}
