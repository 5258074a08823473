//! The semaphore's blocking and async layers through the public `Semaphore` API. The pure state has
//! its own tests in `core.rs`; races are model-checked in `hal/tests/loom_semaphore.rs`.
#![cfg(not(loom))]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use super::{Registration, Semaphore, SemaphoreValue, TimepointListener, WaitMode, wait_semaphores};
use crate::error::{Error, Result, StatusCode};
use crate::timeout::Timeout;

/// Long enough that a correct wait never reaches it, short enough that a lost wake-up fails the test.
const GENEROUS: Timeout = Timeout::After(Duration::from_secs(10));

/// Counts how often a task was woken.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl CountingWaker {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A listener that records every notification and names itself in reports.
#[derive(Default)]
struct RecordingListener(Mutex<Vec<(u64, Result<()>)>>);

impl TimepointListener for RecordingListener {
    fn notify(&self, tag: u64, outcome: Result<()>) {
        self.0.lock().unwrap().push((tag, outcome));
    }

    fn describe(&self, tag: u64) -> String {
        format!("queue 1 action {tag}")
    }
}

impl RecordingListener {
    fn calls(&self) -> Vec<(u64, Result<()>)> {
        self.0.lock().unwrap().clone()
    }
}

/// Blocks until `semaphore` has `count` registered timepoints, so a test knows its waiters are parked.
fn wait_for_pending(semaphore: &Semaphore, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while semaphore.pending_count() != count {
        assert!(Instant::now() < deadline, "never saw {count} waiters: {}", semaphore.report());
        thread::sleep(Duration::from_millis(1));
    }
}

fn spawn_wait(semaphore: &Semaphore, value: u64, timeout: Timeout) -> thread::JoinHandle<Result<()>> {
    let semaphore = semaphore.clone();
    thread::spawn(move || semaphore.wait(value, timeout))
}

fn poll_once<F: Future + Unpin>(future: &mut F, waker: &Arc<CountingWaker>) -> Poll<F::Output> {
    let waker = Waker::from(waker.clone());
    Pin::new(future).poll(&mut Context::from_waker(&waker))
}

#[test]
fn query_after_create_returns_the_initial_value() {
    let a = Semaphore::new(0);
    let b = Semaphore::new(7);
    assert_eq!(a.query().unwrap(), 0);
    assert_eq!(b.query().unwrap(), 7);
    assert_ne!(a.id(), b.id(), "every semaphore has its own id");
    assert!(a.same_as(&a.clone()) && !a.same_as(&b));
    assert_eq!(a.pending_count(), 0);
    assert_eq!(a.owner(), None);
}

#[test]
fn signal_raises_the_value() {
    let sem = Semaphore::new(0);
    sem.signal(1).unwrap();
    assert_eq!(sem.query().unwrap(), 1);
    sem.signal(5).unwrap();
    assert_eq!(sem.query().unwrap(), 5, "a signal may skip values");
    sem.signal(u64::MAX).unwrap();
    assert_eq!(sem.query().unwrap(), u64::MAX);
}

#[test]
fn signal_down_or_equal_is_refused_and_changes_nothing() {
    let sem = Semaphore::new(5);
    let listener = Arc::new(RecordingListener::default());
    let Registration::Pending(_) = sem.register(6, listener.clone(), 0) else { panic!("6 is not reached") };
    for value in [5, 3, 0] {
        let err = sem.signal(value).unwrap_err();
        assert_eq!(err.code(), StatusCode::FailedPrecondition);
        assert_eq!(
            err.message(),
            format!("semaphore {}: signal to {value} but value is already 5; values must increase", sem.id())
        );
        assert_eq!(sem.query().unwrap(), 5);
    }
    assert_eq!(sem.pending_count(), 1, "a refused signal resolves nothing");
    assert!(listener.calls().is_empty());
    sem.signal(6).unwrap();
    assert_eq!(listener.calls(), vec![(0, Ok(()))]);
}

#[test]
fn failure_is_returned_by_query_wait_and_signal_and_the_first_is_kept() {
    let sem = Semaphore::new(3);
    sem.fail(Error::data_loss("kernel trapped"));
    sem.fail(Error::aborted("second failure"));
    let first = Error::data_loss("kernel trapped");
    assert_eq!(sem.query().unwrap_err(), first);
    assert_eq!(sem.signal(10).unwrap_err(), first);
    assert_eq!(sem.wait(4, Timeout::Infinite).unwrap_err(), first, "never hangs on a failed semaphore");
    assert_eq!(sem.wait(4, Timeout::Immediate).unwrap_err(), first, "a poll reports the failure, not a timeout");
    assert_eq!(sem.wait(1, Timeout::Immediate).unwrap_err(), first, "even for a value reached before the failure");
    let listener = Arc::new(RecordingListener::default());
    assert!(matches!(sem.register(5, listener.clone(), 0), Registration::Resolved(Err(e)) if e == first));
    assert!(listener.calls().is_empty());
    assert_eq!(sem.pending_count(), 0);
    assert!(sem.report().contains("failed (DATA_LOSS: kernel trapped) at value 3"), "{}", sem.report());
}

#[test]
fn failure_wakes_a_blocked_waiter_with_its_status() {
    let sem = Semaphore::new(0);
    let waiter = spawn_wait(&sem, 1, GENEROUS);
    wait_for_pending(&sem, 1);
    sem.fail(Error::aborted("queue 2 faulted"));
    assert_eq!(waiter.join().unwrap().unwrap_err(), Error::aborted("queue 2 faulted"));
    assert_eq!(sem.pending_count(), 0);
}

#[test]
fn wait_for_a_reached_value_returns_at_once() {
    let sem = Semaphore::new(3);
    for value in [0, 2, 3] {
        sem.wait(value, Timeout::Immediate).unwrap();
        sem.wait(value, Timeout::Infinite).unwrap();
    }
    assert_eq!(sem.pending_count(), 0, "a reached wait registers nothing");
}

#[test]
fn immediate_timeout_on_an_unreached_value_is_deadline_exceeded_naming_the_semaphore() {
    let sem = Semaphore::new(1);
    for timeout in [Timeout::Immediate, Timeout::After(Duration::ZERO)] {
        let start = Instant::now();
        let err = sem.wait(4, timeout).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(1), "a poll does not block");
        assert_eq!(err.code(), StatusCode::DeadlineExceeded);
        assert_eq!(err.message(), format!("semaphore {}: wait for 4 timed out at value 1", sem.id()));
    }
    assert_eq!(sem.pending_count(), 0);
}

#[test]
fn relative_timeout_waits_about_that_long() {
    let sem = Semaphore::new(0);
    let start = Instant::now();
    let err = sem.wait(1, Timeout::After(Duration::from_millis(20))).unwrap_err();
    let elapsed = start.elapsed();
    assert_eq!(err.code(), StatusCode::DeadlineExceeded);
    assert!(elapsed >= Duration::from_millis(20) && elapsed < Duration::from_secs(2), "waited {elapsed:?}");
    assert_eq!(sem.pending_count(), 0, "a timed-out waiter cancels its timepoint");
}

#[test]
fn absolute_timeout_waits_until_the_instant() {
    let sem = Semaphore::new(0);
    let start = Instant::now();
    let err = sem.wait(1, Timeout::At(start + Duration::from_millis(20))).unwrap_err();
    let elapsed = start.elapsed();
    assert_eq!(err.code(), StatusCode::DeadlineExceeded);
    assert!(elapsed >= Duration::from_millis(20) && elapsed < Duration::from_secs(2), "waited {elapsed:?}");
    assert_eq!(sem.pending_count(), 0);

    // An instant already passed times out without waiting.
    let err = sem.wait(1, Timeout::At(start)).unwrap_err();
    assert_eq!(err.code(), StatusCode::DeadlineExceeded);
    assert_eq!(sem.pending_count(), 0);
}

#[test]
fn wait_returns_when_signalled_beyond_the_value() {
    let sem = Semaphore::new(0);
    let waiter = spawn_wait(&sem, 3, GENEROUS);
    wait_for_pending(&sem, 1);
    sem.signal(2).unwrap();
    assert_eq!(sem.pending_count(), 1, "2 does not satisfy a wait for 3");
    assert!(!waiter.is_finished());
    sem.signal(10).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(sem.query().unwrap(), 10);
    assert_eq!(sem.pending_count(), 0);
}

#[test]
fn registered_timepoints_are_notified_once_or_cancelled() {
    let sem = Semaphore::new(1);
    let listener = Arc::new(RecordingListener::default());
    assert!(matches!(sem.register(1, listener.clone(), 0), Registration::Resolved(Ok(()))));
    let Registration::Pending(cancelled) = sem.register(2, listener.clone(), 1) else { panic!() };
    let Registration::Pending(kept) = sem.register(3, listener.clone(), 2) else { panic!() };
    assert_eq!(sem.pending_count(), 2);
    assert!(sem.cancel(cancelled));
    assert!(!sem.cancel(cancelled), "a second cancel finds nothing");
    sem.signal(5).unwrap();
    assert_eq!(listener.calls(), vec![(2, Ok(()))], "only the kept timepoint hears the signal");
    assert!(!sem.cancel(kept), "already resolved");
    assert_eq!(sem.pending_count(), 0);
}

#[test]
fn a_timepoint_id_handed_to_another_semaphore_is_refused() {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    let listener = Arc::new(RecordingListener::default());
    let Registration::Pending(of_a) = a.register(1, listener.clone(), 0) else { panic!() };
    let Registration::Pending(_) = b.register(1, listener.clone(), 1) else { panic!() };
    assert!(!b.cancel(of_a), "b cancelled a timepoint by an id that a minted");
    assert_eq!((a.pending_count(), b.pending_count()), (1, 1), "neither semaphore lost its timepoint");
    b.signal(1).unwrap();
    a.signal(1).unwrap();
    assert_eq!(listener.calls().len(), 2, "both listeners heard their signal");
}

#[test]
fn wait_all_needs_every_value_and_any_needs_one() {
    let a = Semaphore::new(0);
    let b = Semaphore::new(0);
    a.signal(1).unwrap();
    let list = [SemaphoreValue::new(&a, 1), SemaphoreValue::new(&b, 2)];
    let err = wait_semaphores(WaitMode::All, &list, Timeout::Immediate).unwrap_err();
    assert_eq!(err.code(), StatusCode::DeadlineExceeded);
    assert_eq!(
        err.message(),
        format!(
            "wait-all on 2 semaphores timed out: semaphore {} at 1 (want 1), semaphore {} at 0 (want 2)",
            a.id(),
            b.id()
        )
    );
    wait_semaphores(WaitMode::Any, &list, Timeout::Immediate).unwrap();
    b.signal(2).unwrap();
    wait_semaphores(WaitMode::All, &list, Timeout::Immediate).unwrap();
}

#[test]
fn wait_all_blocks_until_the_last_value_is_signalled() {
    let sems: Vec<Semaphore> = (0..3).map(|_| Semaphore::new(0)).collect();
    let done = Arc::new(AtomicBool::new(false));
    let waiter = {
        let list: Vec<SemaphoreValue> = sems.iter().map(|s| SemaphoreValue::new(s, 1)).collect();
        let done = done.clone();
        thread::spawn(move || {
            let outcome = wait_semaphores(WaitMode::All, &list, GENEROUS);
            done.store(true, Ordering::SeqCst);
            outcome
        })
    };
    for sem in &sems {
        wait_for_pending(sem, 1);
    }
    sems[0].signal(1).unwrap();
    sems[2].signal(1).unwrap();
    thread::sleep(Duration::from_millis(20));
    assert!(!done.load(Ordering::SeqCst), "returned before every value was reached");
    sems[1].signal(1).unwrap();
    waiter.join().unwrap().unwrap();
    assert!(sems.iter().all(|s| s.pending_count() == 0));
}

#[test]
fn wait_any_returns_on_the_first_signal_and_cancels_the_rest() {
    let a = Semaphore::new(0);
    let b = Semaphore::new(0);
    let waiter = {
        let list = [SemaphoreValue::new(&a, 1), SemaphoreValue::new(&b, 1)];
        thread::spawn(move || wait_semaphores(WaitMode::Any, &list, GENEROUS))
    };
    wait_for_pending(&a, 1);
    wait_for_pending(&b, 1);
    b.signal(1).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(a.pending_count(), 0, "the unreached entry's timepoint is cancelled");
    assert_eq!(b.pending_count(), 0);
    assert_eq!(a.query().unwrap(), 0);
}

#[test]
fn wait_on_an_empty_list_is_satisfied() {
    for mode in [WaitMode::All, WaitMode::Any] {
        wait_semaphores(mode, &[], Timeout::Immediate).unwrap();
        wait_semaphores(mode, &[], Timeout::Infinite).unwrap();
    }
}

#[test]
fn wait_on_a_one_entry_list_behaves_as_a_single_wait() {
    let sem = Semaphore::new(0);
    let list = [SemaphoreValue::new(&sem, 1)];
    let err = wait_semaphores(WaitMode::Any, &list, Timeout::Immediate).unwrap_err();
    assert_eq!(err.message(), format!("semaphore {}: wait for 1 timed out at value 0", sem.id()));
    sem.signal(1).unwrap();
    wait_semaphores(WaitMode::All, &list, Timeout::Immediate).unwrap();
}

#[test]
fn wait_list_returns_the_status_of_a_failed_member() {
    let a = Semaphore::new(1);
    let b = Semaphore::new(0);
    let c = Semaphore::new(0);
    b.fail(Error::aborted("queue 2 faulted"));
    let list = [SemaphoreValue::new(&a, 1), SemaphoreValue::new(&b, 1)];
    assert_eq!(
        wait_semaphores(WaitMode::All, &list, Timeout::Infinite).unwrap_err(),
        Error::aborted("queue 2 faulted")
    );
    let list = [SemaphoreValue::new(&c, 1), SemaphoreValue::new(&b, 1)];
    assert_eq!(
        wait_semaphores(WaitMode::Any, &list, Timeout::Immediate).unwrap_err(),
        Error::aborted("queue 2 faulted")
    );
    assert_eq!(
        wait_semaphores(WaitMode::Any, &list, Timeout::After(Duration::from_millis(20))).unwrap_err(),
        Error::aborted("queue 2 faulted")
    );
    assert_eq!(c.pending_count(), 0);
}

#[test]
fn a_member_failing_wakes_a_blocked_list_wait() {
    for mode in [WaitMode::All, WaitMode::Any] {
        let sems: Vec<Semaphore> = (0..3).map(|_| Semaphore::new(0)).collect();
        let waiter = {
            let list: Vec<SemaphoreValue> = sems.iter().map(|s| SemaphoreValue::new(s, 1)).collect();
            thread::spawn(move || wait_semaphores(mode, &list, GENEROUS))
        };
        for sem in &sems {
            wait_for_pending(sem, 1);
        }
        sems[1].fail(Error::data_loss(format!("{mode:?} member faulted")));
        assert_eq!(waiter.join().unwrap().unwrap_err(), Error::data_loss(format!("{mode:?} member faulted")));
        assert!(sems.iter().all(|s| s.pending_count() == 0), "{mode:?}: every timepoint is removed");
    }
}

#[test]
fn list_timeouts_remove_every_timepoint() {
    let sems: Vec<Semaphore> = (0..3).map(|_| Semaphore::new(0)).collect();
    sems[0].signal(1).unwrap();
    let list: Vec<SemaphoreValue> = sems.iter().map(|s| SemaphoreValue::new(s, 1)).collect();
    // `All` with one entry reached, `Any` with the reached one removed from the list.
    for (mode, list) in [(WaitMode::All, &list[..]), (WaitMode::Any, &list[1..])] {
        let start = Instant::now();
        let err = wait_semaphores(mode, list, Timeout::After(Duration::from_millis(20))).unwrap_err();
        let elapsed = start.elapsed();
        assert_eq!(err.code(), StatusCode::DeadlineExceeded, "{mode:?}");
        assert!(elapsed >= Duration::from_millis(20) && elapsed < Duration::from_secs(2), "waited {elapsed:?}");
        assert!(sems.iter().all(|s| s.pending_count() == 0), "{mode:?} left a timepoint behind");
    }
    let start = Instant::now();
    let deadline = Timeout::At(start + Duration::from_millis(20));
    assert_eq!(wait_semaphores(WaitMode::All, &list, deadline).unwrap_err().code(), StatusCode::DeadlineExceeded);
    assert!(start.elapsed() >= Duration::from_millis(20));
    assert!(sems.iter().all(|s| s.pending_count() == 0));
}

#[test]
fn many_threads_waiting_on_one_value_all_wake() {
    const WAITERS: usize = 16;
    let sem = Semaphore::new(0);
    let waiters: Vec<_> = (0..WAITERS).map(|_| spawn_wait(&sem, 5, GENEROUS)).collect();
    wait_for_pending(&sem, WAITERS);
    sem.signal(4).unwrap();
    assert_eq!(sem.pending_count(), WAITERS, "4 wakes nobody");
    sem.signal(5).unwrap();
    for waiter in waiters {
        waiter.join().unwrap().unwrap();
    }
    assert_eq!(sem.pending_count(), 0);
}

#[test]
fn ping_pong_between_two_threads() {
    const ROUNDS: u64 = 2_000;
    let ping = Semaphore::new(0);
    let pong = Semaphore::new(0);
    let partner = {
        let (ping, pong) = (ping.clone(), pong.clone());
        thread::spawn(move || -> Result<()> {
            for round in 1..=ROUNDS {
                ping.wait(round, GENEROUS)?;
                assert_eq!(pong.query()?, round - 1, "pong ran ahead");
                pong.signal(round)?;
            }
            Ok(())
        })
    };
    for round in 1..=ROUNDS {
        ping.signal(round).unwrap();
        pong.wait(round, GENEROUS).unwrap();
        assert_eq!(ping.query().unwrap(), round, "ping ran ahead");
    }
    partner.join().unwrap().unwrap();
    assert_eq!((ping.query().unwrap(), pong.query().unwrap()), (ROUNDS, ROUNDS));
    assert_eq!(ping.pending_count() + pong.pending_count(), 0);
}

#[test]
fn async_wait_is_woken_once_when_the_value_is_reached() {
    let sem = Semaphore::new(0);
    let waker = Arc::new(CountingWaker::default());
    let mut future = sem.wait_async(2);
    assert!(poll_once(&mut future, &waker).is_pending());
    assert_eq!(sem.pending_count(), 1);
    sem.signal(1).unwrap();
    assert_eq!(waker.count(), 0, "1 does not reach 2");
    assert!(poll_once(&mut future, &waker).is_pending());
    sem.signal(2).unwrap();
    assert_eq!(waker.count(), 1);
    assert!(matches!(poll_once(&mut future, &waker), Poll::Ready(Ok(()))));
    assert_eq!(sem.pending_count(), 0);
    sem.signal(3).unwrap();
    assert_eq!(waker.count(), 1, "woken exactly once");
}

#[test]
fn async_wait_on_a_reached_value_is_ready_at_the_first_poll() {
    let sem = Semaphore::new(4);
    let waker = Arc::new(CountingWaker::default());
    assert!(matches!(poll_once(&mut sem.wait_async(4), &waker), Poll::Ready(Ok(()))));
    assert_eq!(waker.count(), 0);
    assert_eq!(sem.pending_count(), 0);
}

#[test]
fn async_wait_wakes_the_waker_of_the_latest_poll() {
    let sem = Semaphore::new(0);
    let first = Arc::new(CountingWaker::default());
    let second = Arc::new(CountingWaker::default());
    let mut future = sem.wait_async(1);
    assert!(poll_once(&mut future, &first).is_pending());
    assert!(poll_once(&mut future, &second).is_pending());
    assert_eq!(sem.pending_count(), 1, "polling again does not register twice");
    sem.signal(1).unwrap();
    assert_eq!((first.count(), second.count()), (0, 1));
    assert!(matches!(poll_once(&mut future, &second), Poll::Ready(Ok(()))));
}

#[test]
fn dropping_an_async_wait_cancels_its_timepoint() {
    let sem = Semaphore::new(0);
    let waker = Arc::new(CountingWaker::default());
    let mut future = sem.wait_async(1);
    assert!(poll_once(&mut future, &waker).is_pending());
    assert_eq!(sem.pending_count(), 1);
    drop(future);
    assert_eq!(sem.pending_count(), 0);
    sem.signal(1).unwrap();
    assert_eq!(waker.count(), 0, "a dropped future is not woken");
}

#[test]
fn async_wait_on_a_failed_semaphore_resolves_to_the_failure() {
    let sem = Semaphore::new(0);
    let waker = Arc::new(CountingWaker::default());
    let mut future = sem.wait_async(1);
    assert!(poll_once(&mut future, &waker).is_pending());
    sem.fail(Error::data_loss("kernel trapped"));
    assert_eq!(waker.count(), 1);
    assert!(matches!(poll_once(&mut future, &waker), Poll::Ready(Err(e)) if e == Error::data_loss("kernel trapped")));
    assert_eq!(sem.pending_count(), 0);

    // Already failed before the first poll.
    let mut late = sem.wait_async(1);
    assert!(matches!(poll_once(&mut late, &waker), Poll::Ready(Err(e)) if e.code() == StatusCode::DataLoss));
    assert_eq!(sem.pending_count(), 0);
}

#[test]
fn report_names_the_value_and_every_waiter() {
    let sem = Semaphore::new(1);
    assert_eq!(sem.report(), format!("semaphore {}: value 1", sem.id()));
    let listener = Arc::new(RecordingListener::default());
    let Registration::Pending(_) = sem.register(5, listener, 42) else { panic!() };
    let host = spawn_wait(&sem, 3, GENEROUS);
    let waker = Arc::new(CountingWaker::default());
    let mut task = sem.wait_async(7);
    assert!(poll_once(&mut task, &waker).is_pending());
    wait_for_pending(&sem, 3);
    let report = sem.report();
    assert_eq!(
        report,
        format!(
            "semaphore {}: value 1; waiting: host thread (wait-all) wants 3, queue 1 action 42 wants 5, async task wants 7",
            sem.id()
        )
    );
    assert_eq!(format!("{sem:?}"), report, "Debug prints the report");
    sem.signal(7).unwrap();
    host.join().unwrap().unwrap();
    assert_eq!(sem.report(), format!("semaphore {}: value 7", sem.id()));
}
