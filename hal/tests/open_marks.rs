//! Open stream marks (the scheduler's `seal` module): submissions issued while their queue is busy
//! record no event of their own; one record later on the stream marks them all, made when something
//! observes them (the completion thread, a host waiter, a stream of another queue) or at the latest
//! every 16th submission. Over a stream model that counts records and completes work when the test
//! says so; the completion threads are held at a gate unless a test lets them go.
#![cfg(not(loom))]

use std::sync::atomic::Ordering;
use std::time::Duration;

use hal::driver::QueueOp;
use hal::{SemaphoreValue as SV, Timeout};

#[path = "support/manual_streams.rs"]
mod manual_streams;
#[path = "support/splitmix.rs"]
mod splitmix;
use manual_streams::{Tested, scheduler};

const SECOND: Timeout = Timeout::After(Duration::from_secs(5));

/// A scheduler whose model lets marks stay open (or not).
fn with_open_marks(queues: usize, open: bool) -> Tested {
    let s = scheduler(queues);
    s.model().open_marks.store(open, Ordering::SeqCst);
    s
}

/// Submits `count` barriers on queue 0 signalling `done` = 1..=count.
fn barriers(s: &Tested, done: &hal::Semaphore, count: u64) {
    for value in 1..=count {
        s.submit(0, QueueOp::Barrier, &[], &[SV::new(done, value)]).unwrap();
    }
}

#[test]
fn a_busy_queue_records_once_every_sixteen_submissions_and_the_retirement_seals_the_rest() {
    let s = with_open_marks(1, true);
    let done = s.create_semaphore(0);
    barriers(&s, &done, 41);
    // The first finds the queue idle and records; then every 16th records and marks the 15 before.
    assert_eq!(s.model().records(), 3, "records at submissions 1, 17 and 33");
    s.model().complete_up_to(3);
    assert_eq!(s.poll_completions(0), 33, "everything up to the last record retires");
    assert_eq!(done.query().unwrap(), 33);
    // The eight after it are open: retiring seals them with one record, which completes later.
    assert_eq!(s.poll_completions(0), 0);
    assert_eq!(s.model().records(), 4);
    s.model().complete_up_to(4);
    assert_eq!(s.poll_completions(0), 8);
    assert_eq!(done.query().unwrap(), 41);
}

#[test]
fn without_open_marks_every_submission_records() {
    let s = with_open_marks(1, false);
    let done = s.create_semaphore(0);
    barriers(&s, &done, 41);
    assert_eq!(s.model().records(), 41);
    s.model().complete_up_to(41);
    assert_eq!(s.poll_completions(0), 41);
}

#[test]
fn a_host_waiter_seals_the_open_mark_it_waits_for() {
    let s = with_open_marks(1, true);
    let done = s.create_semaphore(0);
    barriers(&s, &done, 3);
    assert_eq!(s.model().records(), 1, "2 and 3 are open");
    let waiter = {
        let done = done.clone();
        std::thread::spawn(move || done.wait(2, SECOND))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while s.model().records() < 2 {
        assert!(std::time::Instant::now() < deadline, "the waiter never recorded the event it waits for");
        std::thread::sleep(Duration::from_millis(1));
    }
    // (This model's host waits cannot take a deadline: the completion thread retires.)
    s.model().complete_up_to(2);
    s.model().release_completion_threads();
    waiter.join().unwrap().unwrap();
    done.wait(3, SECOND).unwrap();
    assert_eq!(s.model().records(), 2, "the waiter's seal marks 3 too");
}

#[test]
fn a_wait_on_another_queue_seals_the_open_mark_and_issues_at_once() {
    let s = with_open_marks(2, true);
    let first = s.create_semaphore(0);
    let produced = s.create_semaphore(0);
    let consumed = s.create_semaphore(0);
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&first, 1)]).unwrap();
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&produced, 1)]).unwrap();
    assert_eq!(s.model().records(), 1, "the producer is open");
    s.submit(1, QueueOp::Barrier, &[SV::new(&produced, 1)], &[SV::new(&consumed, 1)]).unwrap();
    // Sealed for the stream-wait (record 2), then the consumer's own record (3); nothing held.
    assert_eq!(s.model().records(), 3);
    let pending = s.resource_usage().pools.into_iter().find(|p| p.name == "pending actions").unwrap();
    assert_eq!(pending.in_use, 0, "the consumer was issued, not held");
    s.model().complete_up_to(3);
    assert_eq!(s.poll_completions(0), 2);
    assert_eq!(s.poll_completions(1), 1);
    assert_eq!(consumed.query().unwrap(), 1);
}

#[test]
fn signals_of_a_semaphore_another_queue_waits_on_record_at_issue_from_then_on() {
    let s = with_open_marks(2, true);
    let busy = s.create_semaphore(0);
    let produced = s.create_semaphore(0);
    let other = s.create_semaphore(0);
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&busy, 1)]).unwrap();
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&produced, 1)]).unwrap();
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&other, 1)]).unwrap();
    assert_eq!(s.model().records(), 1, "both left open while nobody waits elsewhere");
    s.submit(1, QueueOp::Barrier, &[SV::new(&produced, 1)], &[]).unwrap();
    assert_eq!(s.model().records(), 3, "the seal, then the waiter's own record");
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&produced, 2)]).unwrap();
    assert_eq!(s.model().records(), 4, "`produced` is waited on elsewhere now: its signal records at issue");
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&other, 2)]).unwrap();
    assert_eq!(s.model().records(), 4, "`other` is not: left open");
}

#[test]
fn a_wait_held_on_a_value_not_yet_issued_seals_when_its_producer_is_issued() {
    let s = with_open_marks(2, true);
    let gate = hal::Semaphore::new(0);
    let first = s.create_semaphore(0);
    let produced = s.create_semaphore(0);
    let consumed = s.create_semaphore(0);
    // The consumer is held: nothing signals `produced` yet.
    s.submit(1, QueueOp::Barrier, &[SV::new(&produced, 1)], &[SV::new(&consumed, 1)]).unwrap();
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&first, 1)]).unwrap();
    s.submit(0, QueueOp::Barrier, &[SV::new(&gate, 1)], &[SV::new(&produced, 1)]).unwrap();
    assert_eq!(s.model().records(), 1);
    // Releasing the producer issues it open; its publication resolves the consumer, which seals it.
    gate.signal(1).unwrap();
    assert_eq!(s.model().records(), 3, "the seal for the consumer's stream-wait, then its own record");
    s.model().complete_up_to(3);
    s.poll_completions(0);
    s.poll_completions(1);
    assert_eq!(consumed.query().unwrap(), 1);
}

#[test]
fn the_completion_thread_seals_what_it_reaches() {
    let s = with_open_marks(1, true);
    let done = s.create_semaphore(0);
    s.model().release_completion_threads();
    barriers(&s, &done, 100);
    s.model().complete_up_to(u64::MAX);
    done.wait(100, SECOND).unwrap();
    assert!(s.model().records() < 100, "{} records for 100 submissions", s.model().records());
}

#[test]
fn a_seal_that_cannot_record_fails_the_submissions_it_marks() {
    let s = with_open_marks(1, true);
    let done = s.create_semaphore(0);
    barriers(&s, &done, 4);
    s.model().complete_up_to(1);
    s.model().fail_record.store(true, Ordering::SeqCst);
    assert_eq!(s.poll_completions(0), 4, "the recorded one retires, the three open ones fail");
    let failure = done.query().unwrap_err();
    assert!(failure.message().contains("manual record failure"), "{failure}");
}

/// The seed of [`random_slow_issues_never_stall_the_completion_threads`]: `HAL_SEAL_STRESS_SEED`,
/// or the clock.
fn stress_seed() -> u64 {
    match std::env::var("HAL_SEAL_STRESS_SEED") {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("HAL_SEAL_STRESS_SEED={text:?} is not a u64")),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64),
    }
}

#[test]
fn random_slow_issues_never_stall_the_completion_threads() {
    // Four threads chain barriers on two queues whose marks stay open; the seed makes some issues
    // hold the issue lock for tens of microseconds (as a launch waiting on CUDA's lock does) and
    // some submissions be waited for on the host at once. The completion threads, retiring as work
    // completes, keep meeting open fronts whose issue lock a slow issue holds: each must get its
    // seal (by the slow issue's record or its own) and every chain must reach its end.
    let seed = stress_seed();
    let s = with_open_marks(2, true);
    let model = s.model();
    model.polling.store(true, Ordering::SeqCst);
    model.complete_up_to(u64::MAX);
    model.release_completion_threads();
    const LINKS: u64 = 300;
    let outcome = std::thread::scope(|scope| {
        let chains: Vec<_> = (0..4u64)
            .map(|thread| {
                let s = &s;
                scope.spawn(move || -> Result<(), String> {
                    let mut rng = splitmix::Rng::fork(seed, thread);
                    let queue = (thread % 2) as usize;
                    let chain = s.create_semaphore(0);
                    for value in 1..=LINKS {
                        let sleep = if rng.below(3) == 0 { 30 + rng.below(120) } else { 0 };
                        s.model().enqueue_sleep_us.store(sleep, Ordering::SeqCst);
                        s.submit(queue, QueueOp::Barrier, &[SV::new(&chain, value - 1)], &[SV::new(&chain, value)])
                            .map_err(|e| format!("thread {thread} submission {value}: {e}"))?;
                        if rng.below(16) == 0 {
                            chain.wait(value, SECOND).map_err(|e| format!("thread {thread} host wait {value}: {e}"))?;
                        }
                    }
                    chain.wait(LINKS, SECOND).map_err(|e| format!("thread {thread} end of its chain: {e}"))
                })
            })
            .collect();
        chains
            .into_iter()
            .map(|c| c.join().unwrap_or_else(|_| Err("a chain panicked".into())))
            .collect::<Result<Vec<_>, _>>()
    });
    model.enqueue_sleep_us.store(0, Ordering::SeqCst);
    if let Err(failure) = outcome {
        panic!("seed {seed} (replay with HAL_SEAL_STRESS_SEED={seed}): {failure}");
    }
    assert!(model.records() < 4 * LINKS, "seed {seed}: {} records for {} submissions", model.records(), 4 * LINKS);
}
