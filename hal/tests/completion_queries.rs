//! How many event queries a retirement pass makes (each is a driver call that takes a lock the
//! submitting threads' launches need on CUDA), over a stream model whose events complete when the
//! test says so. The queue's completion thread is held at its gate, so only the test's
//! `poll_completions` retires.
#![cfg(not(loom))]

use std::sync::atomic::Ordering;
use std::time::Duration;

use hal::driver::QueueOp;
use hal::{SemaphoreValue as SV, Timeout};

#[path = "support/manual_streams.rs"]
mod manual_streams;
use manual_streams::scheduler;

#[test]
fn a_pass_asks_the_newest_events_first_and_stops_at_a_pending_newest() {
    let s = scheduler(1);
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
    let s = scheduler(1);
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
