//! The queue-local fast path for work with a stream call (`StreamModel::run_at_submission`, what
//! CUDA's allocas and deallocas take): on an idle queue with its waits reached, the call is made on
//! the submitting thread and the signals are applied there, or failed with the call's error; with
//! work in flight, or a wait not reached, the submission goes the general way.
#![cfg(not(loom))]

use std::sync::atomic::Ordering;
use std::time::Duration;

use hal::driver::QueueOp;
use hal::{SemaphoreValue as SV, StatusCode, Timeout};

#[path = "support/manual_streams.rs"]
mod manual_streams;
use manual_streams::scheduler;

#[test]
fn an_idle_queue_runs_the_call_at_submission_and_applies_the_signals() {
    let s = scheduler(1);
    let model = s.model();
    model.barriers_run_at_submission.store(true, Ordering::SeqCst);
    let sem = s.create_semaphore(0);
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&sem, 1)]).unwrap();
    assert_eq!(sem.query().unwrap(), 1, "signalled when the submission returned");
    assert_eq!(model.runs_at_submission(), 1);
    assert_eq!((model.work_calls(), model.records()), (0, 0), "no work item, no event");
    // A reached wait keeps it on the fast path.
    s.submit(0, QueueOp::Barrier, &[SV::new(&sem, 1)], &[SV::new(&sem, 2)]).unwrap();
    assert_eq!(sem.query().unwrap(), 2);
    assert_eq!(model.runs_at_submission(), 2);
}

#[test]
fn a_failed_call_fails_the_signals_with_its_error_and_the_queue() {
    let s = scheduler(1);
    let model = s.model();
    model.barriers_run_at_submission.store(true, Ordering::SeqCst);
    model.fail_enqueue.store(true, Ordering::SeqCst);
    let sem = s.create_semaphore(0);
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&sem, 1)]).unwrap();
    let failure = sem.query().unwrap_err();
    assert_eq!(failure.code(), StatusCode::ResourceExhausted, "{failure}");
    assert!(failure.message().contains("manual run-at-submission failure"), "{failure}");
    assert!(failure.message().contains("queue 0"), "{failure}");
    assert_eq!(model.work_calls(), 0);
}

#[test]
fn work_in_flight_or_an_unreached_wait_sends_it_the_general_way() {
    let s = scheduler(1);
    let model = s.model();
    let sem = s.create_semaphore(0);
    // Something in flight (the completion threads are held: nothing retires on its own).
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&sem, 1)]).unwrap();
    model.barriers_run_at_submission.store(true, Ordering::SeqCst);
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&sem, 2)]).unwrap();
    assert_eq!(model.runs_at_submission(), 0, "behind work in flight it is enqueued");
    assert_eq!(sem.query().unwrap(), 0);
    model.complete_up_to(u64::MAX);
    while s.poll_completions(0) > 0 {}
    assert_eq!(sem.query().unwrap(), 2);
    // A wait not reached yet: held, then issued the general way once it is.
    let gate = s.create_semaphore(0);
    s.submit(0, QueueOp::Barrier, &[SV::new(&gate, 1)], &[SV::new(&sem, 3)]).unwrap();
    assert_eq!(model.runs_at_submission(), 0);
    gate.signal(1).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while sem.query().unwrap() < 3 {
        s.poll_completions(0);
        assert!(std::time::Instant::now() < deadline, "the held barrier did not complete: {}", s.report());
        std::thread::yield_now();
    }
    assert_eq!(model.runs_at_submission(), 0);
    sem.wait(3, Timeout::After(Duration::from_secs(1))).unwrap();
}
