//! An issue that fails after its stream already took a wait on another queue's event must keep that
//! event out of the pool until the stream has passed the wait (never re-record an event a pending
//! stream-wait may observe), fail its signals, and leave nothing behind once the stream drains.
#![cfg(not(loom))]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hal::driver::QueueOp;
use hal::{SemaphoreValue as SV, StatusCode, Timeout};

#[path = "support/manual_streams.rs"]
mod manual_streams;
use manual_streams::scheduler;

fn events_in_use(usage: &hal::ResourceUsage) -> usize {
    usage.pools.iter().find(|p| p.name == "events").map_or(0, |p| p.in_use)
}

#[test]
fn a_failed_issue_keeps_its_wait_events_until_the_stream_passed_them() {
    let s = scheduler(2);
    let model = s.model();
    model.release_completion_threads();
    let produced = s.create_semaphore(0);
    let consumed = s.create_semaphore(0);
    // Record 1 on queue 0: the producer.
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&produced, 1)]).unwrap();
    // Queue 1's stream waits on the producer's event, then its enqueue fails: the fence is record 2.
    model.fail_enqueue.store(true, Ordering::SeqCst);
    s.submit(1, QueueOp::Barrier, &[SV::new(&produced, 1)], &[SV::new(&consumed, 1)]).unwrap();
    model.fail_enqueue.store(false, Ordering::SeqCst);
    let failure = consumed.query().unwrap_err();
    assert_eq!(failure.code(), StatusCode::ResourceExhausted, "{failure}");
    assert!(failure.message().contains("manual enqueue failure"), "{failure}");

    // The producer completes and retires (its completion thread lets go of the event before it
    // retires, its semaphore table when it does), but queue 1's stream has not passed its wait yet:
    // the event stays out of the pool, beside the fence.
    model.complete_up_to(1);
    produced.wait(1, Timeout::After(Duration::from_secs(5))).unwrap();
    let usage = s.resource_usage();
    assert_eq!(events_in_use(&usage), 2, "the waited-on event and the fence: {usage}");

    // Once the fence completes, both go back and nothing is left.
    model.complete_up_to(2);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.resource_usage().is_idle() {
        assert!(Instant::now() < deadline, "not idle: {}\n{}", s.resource_usage(), s.report());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(consumed.query().unwrap_err().code(), StatusCode::ResourceExhausted, "the failure stays");
}
