//! Loom models of the semaphore's races: signal, fail, cancel and multi-waits against the blocking
//! and async waits. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p timeline-hal --release --test loom_semaphore`.
//!
//! Loom has no model of time (`Condvar::wait_timeout` never times out), so the models use only
//! `Timeout::Infinite` and `Timeout::Immediate`; timeouts are tested in the ordinary tests.
#![cfg(loom)]

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use hal::driver::SemaphoreExt;
use hal::driver::timeline::Registration;
use hal::{Error, Result, Semaphore, SemaphoreValue, StatusCode, Timeout, WaitMode, wait_semaphores};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

/// The preemption bound when `LOOM_MAX_PREEMPTIONS` does not set one: enough for the races here
/// (each needs one or two context switches at the wrong moment) while keeping CI fast.
const DEFAULT_PREEMPTIONS: usize = 3;

/// Explores every interleaving of `f` (up to the preemption bound) and prints how many there were.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    let bound = *builder.preemption_bound.get_or_insert(DEFAULT_PREEMPTIONS);
    // Plain std: counting the model's runs is outside what loom explores.
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    builder.check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    println!("{name}: {} interleavings (preemption bound {bound})", runs.load(std::sync::atomic::Ordering::Relaxed));
}

/// Counts notifications; the listener a driver's queued action would be.
#[derive(Default)]
struct CountingListener {
    ok: AtomicUsize,
    failed: AtomicUsize,
}

impl hal::driver::timeline::TimepointListener for CountingListener {
    fn notify(&self, _tag: u64, outcome: Result<()>) {
        match outcome {
            Ok(()) => self.ok.fetch_add(1, Ordering::SeqCst),
            Err(_) => self.failed.fetch_add(1, Ordering::SeqCst),
        };
    }
}

/// Counts wake-ups of an async task.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn loom_signal_races_blocking_wait_and_the_waiter_always_wakes() {
    model("loom_signal_races_blocking_wait_and_the_waiter_always_wakes", || {
        let sem = Semaphore::new(0);
        let signaller = {
            let sem = sem.clone();
            thread::spawn(move || sem.signal(1))
        };
        // A lost wake-up here deadlocks, which loom reports.
        sem.wait(1, Timeout::Infinite).unwrap();
        signaller.join().unwrap().unwrap();
        assert_eq!(sem.query().unwrap(), 1);
        assert_eq!(sem.pending_count(), 0);
    });
}

#[test]
fn loom_fail_races_blocking_waits_and_ok_only_for_values_reached_before() {
    model("loom_fail_races_blocking_waits_and_ok_only_for_values_reached_before", || {
        let sem = Semaphore::new(0);
        let failer = {
            let sem = sem.clone();
            thread::spawn(move || {
                sem.signal(1).unwrap();
                sem.fail(Error::aborted("queue 0 faulted"));
            })
        };
        let reached_waiter = {
            let sem = sem.clone();
            thread::spawn(move || sem.wait(1, Timeout::Infinite))
        };
        // 2 is never reached: only the failure can end this wait.
        assert_eq!(sem.wait(2, Timeout::Infinite).unwrap_err(), Error::aborted("queue 0 faulted"));
        match reached_waiter.join().unwrap() {
            Ok(()) => {}
            Err(e) => assert_eq!(e, Error::aborted("queue 0 faulted")),
        }
        failer.join().unwrap();
        assert_eq!(sem.query().unwrap_err(), Error::aborted("queue 0 faulted"));
        assert_eq!(sem.pending_count(), 0);
    });
}

#[test]
fn loom_racing_signals_never_move_the_value_backwards() {
    model("loom_racing_signals_never_move_the_value_backwards", || {
        let sem = Semaphore::new(0);
        let signal_to = |value| {
            let sem = sem.clone();
            thread::spawn(move || sem.signal(value))
        };
        let to_one = signal_to(1);
        let to_two = signal_to(2);
        let reader = {
            let sem = sem.clone();
            thread::spawn(move || {
                let first = sem.query().unwrap();
                let polled = sem.wait(first, Timeout::Immediate);
                let second = sem.query().unwrap();
                assert!(polled.is_ok(), "a value seen once stays reached");
                assert!(first <= second, "value went from {first} back to {second}");
                assert!(first <= 2 && second <= 2);
            })
        };
        let one = to_one.join().unwrap();
        to_two.join().unwrap().expect("2 is above every value the semaphore can hold");
        reader.join().unwrap();
        if let Err(e) = one {
            assert_eq!(e.code(), StatusCode::FailedPrecondition, "only a lost race refuses 1: {e}");
        }
        assert_eq!(sem.query().unwrap(), 2);
    });
}

#[test]
fn loom_cancel_races_signal_and_the_listener_hears_once_or_never() {
    model("loom_cancel_races_signal_and_the_listener_hears_once_or_never", || {
        let sem = Semaphore::new(0);
        let listener = Arc::new(CountingListener::default());
        let Registration::Pending(id) = sem.register(1, listener.clone(), 7) else {
            panic!("1 is not reached yet");
        };
        let signaller = {
            let sem = sem.clone();
            thread::spawn(move || sem.signal(1))
        };
        // What a timed-out waiter does.
        let cancelled = sem.cancel(id);
        signaller.join().unwrap().unwrap();
        let heard = listener.ok.load(Ordering::SeqCst);
        assert_eq!(listener.failed.load(Ordering::SeqCst), 0);
        if cancelled {
            assert_eq!(heard, 0, "a cancelled timepoint was notified");
        } else {
            assert_eq!(heard, 1, "a resolved timepoint must be notified exactly once");
        }
        assert_eq!(sem.pending_count(), 0);
    });
}

#[test]
fn loom_cancel_races_signal_and_fail_and_the_listener_hears_once_or_never() {
    model("loom_cancel_races_signal_and_fail_and_the_listener_hears_once_or_never", || {
        let sem = Semaphore::new(0);
        let listener = Arc::new(CountingListener::default());
        let Registration::Pending(id) = sem.register(2, listener.clone(), 7) else {
            panic!("2 is not reached yet");
        };
        let signaller = {
            let sem = sem.clone();
            thread::spawn(move || {
                let _ = sem.signal(1);
                sem.signal(2)
            })
        };
        let failer = {
            let sem = sem.clone();
            thread::spawn(move || sem.fail(Error::data_loss("kernel trapped")))
        };
        let cancelled = sem.cancel(id);
        let signalled = signaller.join().unwrap();
        failer.join().unwrap();
        let heard = (listener.ok.load(Ordering::SeqCst), listener.failed.load(Ordering::SeqCst));
        if cancelled {
            assert_eq!(heard, (0, 0), "a cancelled timepoint was notified");
        } else if signalled.is_ok() {
            assert_eq!(heard, (1, 0), "the signal to 2 came before the failure and resolved it once");
        } else {
            assert_eq!(heard, (0, 1), "the failure resolved it once");
        }
        assert_eq!(sem.pending_count(), 0);
        assert_eq!(sem.query().unwrap_err(), Error::data_loss("kernel trapped"));
    });
}

#[test]
fn loom_wait_any_over_two_racing_signals_returns_and_leaves_no_timepoint() {
    model("loom_wait_any_over_two_racing_signals_returns_and_leaves_no_timepoint", || {
        let a = Semaphore::new(0);
        let b = Semaphore::new(0);
        let signallers: Vec<_> = [&a, &b]
            .into_iter()
            .map(|sem| {
                let sem = sem.clone();
                thread::spawn(move || sem.signal(1))
            })
            .collect();
        let list = [SemaphoreValue::new(&a, 1), SemaphoreValue::new(&b, 1)];
        wait_semaphores(WaitMode::Any, &list, Timeout::Infinite).unwrap();
        assert!(a.query().unwrap() == 1 || b.query().unwrap() == 1, "returned before either was signalled");
        // The wait cancels what it registered before returning, whether or not the signals came.
        assert_eq!(a.pending_count() + b.pending_count(), 0);
        for signaller in signallers {
            signaller.join().unwrap().unwrap();
        }
        assert_eq!(a.pending_count() + b.pending_count(), 0);
    });
}

#[test]
fn loom_wait_all_over_a_signal_and_a_failure_returns_the_failure() {
    model("loom_wait_all_over_a_signal_and_a_failure_returns_the_failure", || {
        let a = Semaphore::new(0);
        let b = Semaphore::new(0);
        let signaller = {
            let a = a.clone();
            thread::spawn(move || a.signal(1))
        };
        let failer = {
            let b = b.clone();
            thread::spawn(move || b.fail(Error::data_loss("kernel trapped")))
        };
        let list = [SemaphoreValue::new(&a, 1), SemaphoreValue::new(&b, 1)];
        let err = wait_semaphores(WaitMode::All, &list, Timeout::Infinite).unwrap_err();
        assert_eq!(err, Error::data_loss("kernel trapped"));
        assert_eq!(a.pending_count() + b.pending_count(), 0);
        signaller.join().unwrap().unwrap();
        failer.join().unwrap();
    });
}

#[test]
fn loom_async_wait_racing_signal_is_woken_or_ready() {
    model("loom_async_wait_racing_signal_is_woken_or_ready", || {
        let sem = Semaphore::new(0);
        let signaller = {
            let sem = sem.clone();
            thread::spawn(move || sem.signal(1))
        };
        let wakes = Arc::new(CountingWaker::default());
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut future = pin!(sem.wait_async(1));
        let first = future.as_mut().poll(&mut cx);
        signaller.join().unwrap().unwrap();
        match first {
            Poll::Ready(outcome) => {
                outcome.unwrap();
                assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
            }
            Poll::Pending => {
                // Without a wake-up an executor would never poll again: a lost wake-up is a hang.
                assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "the pending task must be woken exactly once");
                assert!(matches!(future.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
            }
        }
        assert_eq!(sem.pending_count(), 0);
    });
}

#[test]
fn loom_async_wait_racing_signal_wakes_the_latest_waker_once() {
    model("loom_async_wait_racing_signal_wakes_the_latest_waker_once", || {
        let sem = Semaphore::new(0);
        let signaller = {
            let sem = sem.clone();
            thread::spawn(move || sem.signal(1))
        };
        let (first, second) = (Arc::new(CountingWaker::default()), Arc::new(CountingWaker::default()));
        let (first_waker, second_waker) = (Waker::from(first.clone()), Waker::from(second.clone()));
        let mut future = pin!(sem.wait_async(1));
        // The task polls, then moves to another executor thread (a new waker) while the signal races.
        let polled_first = future.as_mut().poll(&mut Context::from_waker(&first_waker));
        let polled_second = match polled_first {
            Poll::Ready(outcome) => Some(outcome),
            Poll::Pending => match future.as_mut().poll(&mut Context::from_waker(&second_waker)) {
                Poll::Ready(outcome) => Some(outcome),
                Poll::Pending => None,
            },
        };
        signaller.join().unwrap().unwrap();
        let wakes = (first.0.load(Ordering::SeqCst), second.0.load(Ordering::SeqCst));
        match polled_second {
            Some(outcome) => {
                outcome.unwrap();
                assert!(wakes.0 + wakes.1 <= 1, "woken {wakes:?} for one signal");
                assert_eq!(wakes.1, 0, "the second waker was never left pending");
            }
            None => {
                assert_eq!(wakes, (0, 1), "a pending task must be woken once, through its latest waker");
                let last = future.as_mut().poll(&mut Context::from_waker(&second_waker));
                assert!(matches!(last, Poll::Ready(Ok(()))));
            }
        }
        assert_eq!(sem.pending_count(), 0);
    });
}

#[test]
fn loom_state_decided_with_a_failure_is_there_before_any_waiter_sees_it() {
    model("loom_state_decided_with_a_failure_is_there_before_any_waiter_sees_it", || {
        // What a read's readback is: state that must carry the semaphore's failure, decided by
        // `fail_deciding` while another failure races it for the semaphore (first one kept).
        const UNDECIDED: usize = usize::MAX;
        let (sem, decided) = (Semaphore::new(0), Arc::new(AtomicUsize::new(UNDECIDED)));
        let decider = {
            let (sem, decided) = (sem.clone(), decided.clone());
            thread::spawn(move || {
                sem.fail_deciding(Error::data_loss("the read's wait failed"), &mut |kept| {
                    decided.store(kept.code() as usize, Ordering::SeqCst);
                })
            })
        };
        let other = {
            let sem = sem.clone();
            thread::spawn(move || sem.fail(Error::aborted("other work failed the same semaphore")))
        };
        let seen = sem.wait(1, Timeout::Infinite).unwrap_err();
        let at_wake = decided.load(Ordering::SeqCst);
        if seen.code() == StatusCode::DataLoss {
            assert_eq!(at_wake, StatusCode::DataLoss as usize, "the waiter woke before the state was decided");
        }
        // The other failure may have been kept instead: once the decider ran, its state holds that.
        let kept = sem.query().unwrap_err();
        assert_eq!(seen.code(), kept.code(), "a waiter saw a failure the semaphore did not keep");
        decider.join().unwrap();
        other.join().unwrap();
        assert_eq!(decided.load(Ordering::SeqCst), kept.code() as usize, "decided with another failure");
    });
}
