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
use manual_streams::{Tested, scheduler};

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

/// Two queues: a producer on queue 1 signals `produced` to 1, a dependant on queue 0 waits for it
/// and signals `consumed` to 1. Returns the scheduler and the two semaphores.
fn producer_and_dependant() -> (Tested, hal::Semaphore, hal::Semaphore) {
    let s = scheduler(2);
    let (produced, consumed) = (s.create_semaphore(0), s.create_semaphore(0));
    s.submit(1, QueueOp::Barrier, &[], &[SV::new(&produced, 1)]).unwrap();
    s.submit(0, QueueOp::Barrier, &[SV::new(&produced, 1)], &[SV::new(&consumed, 1)]).unwrap();
    (s, produced, consumed)
}

/// A dependant on another queue whose mark completed retires its producer first without asking the
/// producer's event: its stream waited on that event before its own work, so the producer completed.
#[test]
fn a_completed_dependant_retires_its_producer_without_querying_it() {
    let (s, produced, consumed) = producer_and_dependant();
    let model = s.model();
    model.complete_up_to(u64::MAX);
    model.take_queries();
    assert_eq!(s.poll_completions(0), 1);
    assert_eq!(model.take_queries(), 1, "the dependant's own event, not the producer's");
    assert_eq!(produced.query().unwrap(), 1, "the producer retired first");
    assert_eq!(consumed.query().unwrap(), 1);
    assert_eq!(s.poll_completions(1), 0, "nothing left on the producer's queue");
    model.open_gate();
}

/// A dependant whose own event reports a fault proves nothing about its producer: the producer's
/// queue is retired by asking its events, as before (here the sticky fault fails both).
#[test]
fn a_faulted_dependant_asks_its_producers_events() {
    let (s, produced, consumed) = producer_and_dependant();
    let model = s.model();
    model.fault.store(true, Ordering::SeqCst);
    model.take_queries();
    assert_eq!(s.poll_completions(0), 1);
    assert_eq!(model.take_queries(), 2, "the dependant's event, then the producer's");
    assert!(produced.query().is_err(), "the producer's query found the fault");
    assert!(consumed.query().is_err());
    model.open_gate();
}

/// A host thread that waits for a value polls the event itself: while it does, the completion
/// thread queries nothing (on CUDA each query takes a driver lock the waiter and the next launch
/// need), and the waiter retires the work. Without a waiter the completion thread polls as before.
#[test]
fn the_completion_thread_leaves_an_event_a_host_waiter_polls_alone() {
    let s = scheduler(1);
    let model = s.model();
    model.polling.store(true, Ordering::SeqCst);
    let done = s.create_semaphore(0);
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, 1)]).unwrap();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| done.wait(1, Timeout::After(Duration::from_secs(10))));
        // Let the waiter start polling, then count.
        std::thread::sleep(Duration::from_millis(20));
        model.take_completion_queries();
        model.take_queries();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(model.take_completion_queries(), 0, "the completion thread queried a watched event");
        assert!(model.take_queries() > 0, "the waiter polls");
        model.complete_up_to(1);
        waiter.join().unwrap().unwrap();
    });
    assert_eq!(done.query().unwrap(), 1);

    // Nobody waits: the completion thread polls and retires.
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, 2)]).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    assert!(model.take_completion_queries() > 0, "the completion thread polls when nobody watches");
    model.complete_up_to(2);
    assert!(reaches(&done, 2), "the completion thread retired it");

    // A waiter whose deadline passes lets go: the completion thread polls again and retires.
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, 3)]).unwrap();
    let waited = done.wait(3, Timeout::After(Duration::from_millis(20)));
    assert_eq!(waited.map_err(|e| e.code()), Err(hal::StatusCode::DeadlineExceeded));
    model.complete_up_to(3);
    assert!(reaches(&done, 3), "the completion thread took the event back from a waiter that let go");
}

/// Whether `semaphore` reaches `value` within 5 s, watched without waiting on it (a wait would
/// retire the work itself).
fn reaches(semaphore: &hal::Semaphore, value: u64) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while semaphore.query().unwrap() < value && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    semaphore.query().unwrap() >= value
}

/// A queue may issue a later submission before an earlier one whose wait resolves later: the
/// completion thread must still retire the earlier one when it becomes the front, nobody waiting
/// on the host.
#[test]
fn work_issued_after_a_later_submission_retired_still_retires() {
    let s = scheduler(1);
    let model = s.model();
    model.polling.store(true, Ordering::SeqCst);
    let gate = s.create_semaphore(0);
    let done = s.create_semaphore(0);
    let other = s.create_semaphore(0);
    s.submit(0, QueueOp::Barrier, &[SV::new(&gate, 1)], &[SV::new(&done, 1)]).unwrap();
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&other, 1)]).unwrap();
    model.complete_up_to(u64::MAX);
    assert!(reaches(&other, 1), "the later submission retires first");
    gate.signal(1).unwrap();
    assert!(reaches(&done, 1), "the earlier one, issued last, retires too");
}

/// Randomized: host waiters (some with deadlines that pass) and polling completion threads share
/// two queues' events while the device completes in random steps. Every wait with a long deadline
/// must succeed, and every value must be reached in the end, whoever retired it. The seed is in
/// every failure message; `HAL_STRESS_SEED` replays one.
#[test]
fn waiters_and_completion_threads_share_events_without_losing_any() {
    let seed: u64 = std::env::var("HAL_STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    let next = |state: &mut u64| {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    };
    let s = scheduler(2);
    let model = s.model();
    model.polling.store(true, Ordering::SeqCst);
    let semaphores = [s.create_semaphore(0), s.create_semaphore(0)];
    let per_queue = 100u64;
    for value in 1..=per_queue {
        for (queue, semaphore) in semaphores.iter().enumerate() {
            s.submit(queue, QueueOp::Barrier, &[], &[SV::new(semaphore, value)]).unwrap();
        }
    }
    let records = model.records();
    std::thread::scope(|scope| {
        for waiter in 0..4u64 {
            let semaphores = &semaphores;
            scope.spawn(move || {
                let mut state = seed.wrapping_add(waiter.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
                for _ in 0..20 {
                    let queue = (next(&mut state) % 2) as usize;
                    let value = next(&mut state) % per_queue + 1;
                    if next(&mut state) % 3 == 0 {
                        // A short deadline: it may pass, and the waiter lets go of the event.
                        let _ = semaphores[queue].wait(value, Timeout::After(Duration::from_micros(300)));
                    } else {
                        let waited = semaphores[queue].wait(value, Timeout::After(Duration::from_secs(10)));
                        assert!(waited.is_ok(), "seed {seed}: wait for {value} on queue {queue}: {waited:?}");
                    }
                }
            });
        }
        let mut state = seed | 1;
        let mut completed = 0;
        while completed < records {
            completed = (completed + next(&mut state) % 8 + 1).min(records);
            model.complete_up_to(completed);
            std::thread::sleep(Duration::from_micros(next(&mut state) % 400));
        }
    });
    for (queue, semaphore) in semaphores.iter().enumerate() {
        assert!(reaches(semaphore, per_queue), "seed {seed}: queue {queue} stopped at {:?}", semaphore.query());
    }
}

#[test]
fn a_burst_retired_in_one_pass_applies_every_signal_and_lets_go_of_every_event() {
    let s = scheduler(1);
    // More semaphores than a batch keeps prunes for, so some are pruned at once and some at the
    // batch's end; more submissions than one batch takes off the queue.
    let done = s.create_semaphore(0);
    let each: Vec<hal::Semaphore> = (0..6).map(|_| s.create_semaphore(0)).collect();
    let count = 40u64;
    for i in 0..count {
        let own = &each[(i % 6) as usize];
        let signals = [SV::new(&done, i + 1), SV::new(own, i / 6 + 1)];
        s.submit(0, QueueOp::Barrier, &[], &signals).unwrap();
    }
    let model = s.model();
    model.take_queries();
    model.complete_up_to(model.records());
    let retired = s.poll_completions(0);
    assert!(
        retired + 1 >= count as usize,
        "one pass retires the burst (the first may have retired at issue): {retired}"
    );
    assert!(model.take_queries() <= 2, "the newest event covers the burst");
    assert_eq!(done.query().unwrap(), count);
    for (k, own) in each.iter().enumerate() {
        let last = (0..count).filter(|i| i % 6 == k as u64).map(|i| i / 6 + 1).max().unwrap();
        assert_eq!(own.query().unwrap(), last, "semaphore {k}");
    }
    // The queue's completion thread may have taken the front's event before the burst retired
    // here, and holds it at the model's gate: let it through, and wait (bounded) for it to let go.
    model.open_gate();
    let in_use = |usage: &hal::ResourceUsage, name: &str| {
        usage.pools.iter().find(|p| p.name == name).map_or(usize::MAX, |p| p.in_use)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut usage = s.resource_usage();
    while (in_use(&usage, "events") != 0 || in_use(&usage, "in-flight submissions") != 0)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
        usage = s.resource_usage();
    }
    assert_eq!(in_use(&usage, "in-flight submissions"), 0, "{usage}");
    assert_eq!(in_use(&usage, "events"), 0, "every published event was pruned: {usage}");
}
