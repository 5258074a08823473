//! Timeline semaphores: the whole host-side contract on the driver's semaphores. Query, signal up
//! and down, failure (sticky, waking every waiter), waits with every kind of timeout, wait-all and
//! wait-any lists, many threads, and the async wait.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hal::driver::SemaphoreExt;
use hal::{Error, Semaphore, StatusCode, Timeout, WaitMode, wait_semaphores};

use crate::check::{CaseError, CaseResult, Context, expect_code, expect_same_status};
use crate::context::{Cx, LONG, SHORT, sv};
use crate::{ensure, ensure_eq};

/// A wait on another thread.
fn spawn_wait(s: &Semaphore, value: u64, timeout: Timeout) -> JoinHandle<hal::Result<()>> {
    let s = s.clone();
    std::thread::spawn(move || s.wait(value, timeout))
}

/// Joins a waiter thread (which must use a bounded timeout).
fn join<T>(handle: JoinHandle<T>) -> Result<T, CaseError> {
    handle.join().map_err(|_| CaseError::Fail("a waiter thread panicked".into()))
}

/// Semaphores of the case's device.
fn sems(cx: &Cx, count: usize) -> Result<Vec<Semaphore>, CaseError> {
    (0..count).map(|_| cx.sem(0)).collect()
}

/// A new semaphore reads its initial value.
pub(crate) fn query_after_create(cx: &Cx) -> CaseResult {
    cx.expect_value(&cx.sem(0)?, 0, "created at 0")?;
    cx.expect_value(&cx.sem(5)?, 5, "created at 5")
}

/// Signals move the value up, to exactly the value signalled.
pub(crate) fn signal_up(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    for value in [1, 2, 10, 11, 1000] {
        s.signal(value).ctx(format!("signal({value})"))?;
        cx.expect_value(&s, value, "after signal")?;
    }
    Ok(())
}

/// A signal to the current value is `FailedPrecondition` and changes nothing.
pub(crate) fn signal_same_value_refused(cx: &Cx) -> CaseResult {
    let s = cx.sem(5)?;
    let e = expect_code(s.signal(5), StatusCode::FailedPrecondition, "signal(5) at 5")?;
    ensure!(e.message().contains(&s.id().to_string()), "the error does not name semaphore {}: {e}", s.id());
    cx.expect_value(&s, 5, "after a refused signal")
}

/// A signal below the current value is `FailedPrecondition` and changes nothing.
pub(crate) fn signal_down_refused(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    s.signal(10).ctx("signal(10)")?;
    expect_code(s.signal(3), StatusCode::FailedPrecondition, "signal(3) at 10")?;
    expect_code(s.signal(0), StatusCode::FailedPrecondition, "signal(0) at 10")?;
    cx.expect_value(&s, 10, "after refused signals")?;
    s.signal(11).ctx("signal(11) after refusals")
}

/// The largest value can be signalled; nothing goes beyond it.
pub(crate) fn signal_to_max(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    s.signal(u64::MAX).ctx("signal(u64::MAX)")?;
    cx.expect_value(&s, u64::MAX, "after signal(u64::MAX)")?;
    expect_code(s.signal(u64::MAX), StatusCode::FailedPrecondition, "signal(u64::MAX) again")?;
    s.wait(u64::MAX, Timeout::Immediate).ctx("wait(u64::MAX)")
}

/// After `fail`, `query` returns that failure (code and message).
pub(crate) fn fail_then_query(cx: &Cx) -> CaseResult {
    let s = cx.sem(3)?;
    let cause = Error::data_loss("ctest: broken on purpose");
    s.fail(cause.clone());
    let e = expect_code(s.query(), StatusCode::DataLoss, "query after fail")?;
    expect_same_status(&e, &cause, "query after fail")
}

/// After `fail`, waits for any value (reached before or not) return the failure at once.
pub(crate) fn fail_then_wait(cx: &Cx) -> CaseResult {
    let s = cx.sem(3)?;
    let cause = Error::aborted("ctest: broken on purpose");
    s.fail(cause.clone());
    for value in [1, 3, 4, 100] {
        for timeout in [Timeout::Immediate, Timeout::After(LONG), Timeout::Infinite] {
            let start = Instant::now();
            let e = expect_code(s.wait(value, timeout), StatusCode::Aborted, &format!("wait({value}, {timeout:?})"))?;
            expect_same_status(&e, &cause, "wait after fail")?;
            ensure!(start.elapsed() < Duration::from_secs(1), "wait on a failed semaphore blocked");
        }
    }
    Ok(())
}

/// After `fail`, signals return the failure and the semaphore stays failed.
pub(crate) fn fail_then_signal(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    s.fail(Error::cancelled("ctest: broken on purpose"));
    expect_code(s.signal(1), StatusCode::Cancelled, "signal after fail")?;
    expect_code(s.signal(u64::MAX), StatusCode::Cancelled, "signal(u64::MAX) after fail")?;
    expect_code(s.query(), StatusCode::Cancelled, "query after signals")?;
    Ok(())
}

/// A second failure is ignored: the first status stays.
pub(crate) fn fail_twice_keeps_first(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    s.fail(Error::data_loss("ctest: first"));
    s.fail(Error::internal("ctest: second"));
    let e = expect_code(s.query(), StatusCode::DataLoss, "query after two failures")?;
    ensure!(e.message().contains("first"), "the first failure was not kept: {e}");
    Ok(())
}

/// Any status given to `fail` comes back unchanged.
pub(crate) fn fail_keeps_any_status(cx: &Cx) -> CaseResult {
    for cause in [
        Error::aborted("ctest: a"),
        Error::cancelled("ctest: b"),
        Error::internal("ctest: c"),
        Error::resource_exhausted("ctest: d"),
        Error::unavailable("ctest: e"),
    ] {
        let s = cx.sem(0)?;
        s.fail(cause.clone());
        let e = s.wait(1, Timeout::Immediate).err().ok_or("wait succeeded on a failed semaphore")?;
        expect_same_status(&e, &cause, "wait after fail")?;
    }
    Ok(())
}

/// A thread blocked in a wait is woken by `fail` with the failure.
pub(crate) fn fail_wakes_waiters(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let waiters: Vec<_> = (0..4).map(|i| spawn_wait(&s, 1 + i, Timeout::After(LONG))).collect();
    std::thread::sleep(SHORT);
    let start = Instant::now();
    s.fail(Error::data_loss("ctest: broken while waited on"));
    for waiter in waiters {
        expect_code(join(waiter)?, StatusCode::DataLoss, "a blocked wait")?;
    }
    ensure!(start.elapsed() < LONG / 2, "waiters were not woken by fail (took {:?})", start.elapsed());
    Ok(())
}

/// A wait for a reached value returns at once, whatever the timeout.
pub(crate) fn wait_reached(cx: &Cx) -> CaseResult {
    let s = cx.sem(5)?;
    for value in [0, 1, 5] {
        for timeout in [Timeout::Immediate, Timeout::After(Duration::ZERO), Timeout::After(LONG), Timeout::Infinite] {
            s.wait(value, timeout).ctx(format!("wait({value}, {timeout:?}) at 5"))?;
        }
    }
    cx.device().wait_semaphores(WaitMode::All, &[sv(&s, 5)], Timeout::Immediate).ctx("device wait at 5")
}

/// An immediate timeout on an unreached value is `DeadlineExceeded` without blocking.
pub(crate) fn wait_immediate_timeout(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let start = Instant::now();
    expect_code(s.wait(1, Timeout::Immediate), StatusCode::DeadlineExceeded, "wait(1, Immediate)")?;
    expect_code(s.wait(1, Timeout::After(Duration::ZERO)), StatusCode::DeadlineExceeded, "wait(1, After(0))")?;
    ensure!(start.elapsed() < Duration::from_millis(500), "a poll blocked for {:?}", start.elapsed());
    cx.expect_value(&s, 0, "after polls")
}

/// A relative timeout waits about that long, then `DeadlineExceeded`.
pub(crate) fn wait_relative_timeout(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let start = Instant::now();
    expect_code(s.wait(1, Timeout::After(Duration::from_millis(50))), StatusCode::DeadlineExceeded, "wait 50 ms")?;
    let took = start.elapsed();
    ensure!(took >= Duration::from_millis(50), "returned after {took:?}, before the 50 ms timeout");
    ensure!(took < Duration::from_secs(2), "returned after {took:?}, long after the 50 ms timeout");
    Ok(())
}

/// An absolute deadline waits until then, then `DeadlineExceeded`; one already passed is a poll.
pub(crate) fn wait_absolute_timeout(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let start = Instant::now();
    let deadline = start + Duration::from_millis(50);
    expect_code(s.wait(1, Timeout::At(deadline)), StatusCode::DeadlineExceeded, "wait until now + 50 ms")?;
    ensure!(Instant::now() >= deadline, "returned before the deadline");
    ensure!(start.elapsed() < Duration::from_secs(2), "returned long after the deadline ({:?})", start.elapsed());
    let passed = Instant::now();
    std::thread::sleep(Duration::from_millis(2));
    let start = Instant::now();
    expect_code(s.wait(1, Timeout::At(passed)), StatusCode::DeadlineExceeded, "wait until a passed instant")?;
    ensure!(start.elapsed() < Duration::from_millis(500), "a passed deadline blocked for {:?}", start.elapsed());
    Ok(())
}

/// Waits with a deadline on device work still in flight (a chain of large fills): each returns
/// by its deadline (`DeadlineExceeded`) or with the value reached, never much later; the chain then
/// completes, and the timed-out waits leave nothing registered.
pub(crate) fn deadline_wait_on_inflight_work(cx: &Cx) -> CaseResult {
    const BYTES: u64 = 4 << 20;
    const STEPS: u64 = 24;
    let target = cx.device_buffer(BYTES)?;
    let cb = cx.command_buffer(hal::CommandBufferMode::Reusable)?;
    for pattern in 0..16u32 {
        cb.fill(&target, 0, BYTES, pattern).ctx("record fill")?;
    }
    cb.end().ctx("end")?;
    let s = cx.sem(0)?;
    let q = cx.queue(0);
    for step in 0..STEPS {
        q.execute(&[sv(&s, step)], &cb, &[sv(&s, step + 1)]).ctx(format!("execute {step}"))?;
    }
    let (mut timed_out, start) = (0, Instant::now());
    loop {
        let asked = Instant::now();
        let deadline = asked + Duration::from_micros(300);
        match s.wait(STEPS, Timeout::At(deadline)) {
            Ok(()) => break,
            Err(e) if e.code() == StatusCode::DeadlineExceeded => timed_out += 1,
            Err(e) => return Err(CaseError::Fail(format!("wait with a deadline failed: {e}"))),
        }
        let late = Instant::now().saturating_duration_since(deadline);
        ensure!(late < Duration::from_millis(200), "a wait returned {late:?} after its deadline");
        ensure!(start.elapsed() < LONG, "the chain did not complete in {LONG:?} ({timed_out} waits timed out)");
    }
    let took = start.elapsed();
    cx.note(format!("{timed_out} waits of 300 us timed out before the chain completed in {took:?}"));
    // A wait that ignored its deadline would have blocked until the chain completed.
    ensure!(timed_out > 0 || took < Duration::from_millis(20), "no wait timed out, yet the chain took {took:?}");
    cx.expect_value(&s, STEPS, "after the chain")?;
    ensure_eq!(s.pending_count(), 0, "timepoints left after timed-out waits");
    Ok(())
}

/// A wait is released by a signal from another thread.
pub(crate) fn wait_signalled_later(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let waiter = spawn_wait(&s, 1, Timeout::After(LONG));
    std::thread::sleep(SHORT);
    s.signal(1).ctx("signal(1)")?;
    join(waiter)?.ctx("wait(1) signalled later")
}

/// A wait for 5 is released by a signal to 10 (beyond it).
pub(crate) fn wait_signalled_beyond(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let waiter = spawn_wait(&s, 5, Timeout::After(LONG));
    std::thread::sleep(SHORT);
    s.signal(10).ctx("signal(10)")?;
    join(waiter)?.ctx("wait(5) after signal(10)")?;
    cx.expect_value(&s, 10, "after signal(10)")
}

/// An infinite wait is released by a signal.
pub(crate) fn wait_infinite_signalled(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let signaller = {
        let s = s.clone();
        std::thread::spawn(move || {
            std::thread::sleep(SHORT);
            s.signal(2)
        })
    };
    s.wait(2, Timeout::Infinite).ctx("wait(2, Infinite)")?;
    join(signaller)?.ctx("signal(2)")
}

/// A wait below the signalled value is released; one above it stays blocked.
pub(crate) fn signal_wakes_only_reached(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let low = spawn_wait(&s, 5, Timeout::After(LONG));
    let high = spawn_wait(&s, 10, Timeout::After(LONG));
    std::thread::sleep(SHORT);
    s.signal(7).ctx("signal(7)")?;
    join(low)?.ctx("wait(5) after signal(7)")?;
    std::thread::sleep(SHORT);
    ensure!(!high.is_finished(), "wait(10) returned after signal(7)");
    s.signal(10).ctx("signal(10)")?;
    join(high)?.ctx("wait(10) after signal(10)")
}

/// Waits that time out leave nothing registered on the semaphores.
pub(crate) fn timeout_leaves_no_timepoints(cx: &Cx) -> CaseResult {
    let (a, b) = (cx.sem(0)?, cx.sem(0)?);
    let short = Timeout::After(Duration::from_millis(5));
    expect_code(a.wait(1, short), StatusCode::DeadlineExceeded, "single wait")?;
    let list = [sv(&a, 1), sv(&b, 1)];
    expect_code(wait_semaphores(WaitMode::All, &list, short), StatusCode::DeadlineExceeded, "wait-all")?;
    expect_code(wait_semaphores(WaitMode::Any, &list, short), StatusCode::DeadlineExceeded, "wait-any")?;
    b.signal(1).ctx("signal b")?;
    expect_code(wait_semaphores(WaitMode::All, &list, short), StatusCode::DeadlineExceeded, "wait-all, one reached")?;
    ensure_eq!((a.pending_count(), b.pending_count()), (0, 0), "timepoints left after timed-out waits");
    Ok(())
}

/// Wait-all with one entry unreached times out (immediately and after a delay).
pub(crate) fn wait_all_not_all_signalled(cx: &Cx) -> CaseResult {
    let s = sems(cx, 3)?;
    s[0].signal(1).ctx("signal")?;
    s[2].signal(1).ctx("signal")?;
    let list = [sv(&s[0], 1), sv(&s[1], 1), sv(&s[2], 1)];
    expect_code(wait_semaphores(WaitMode::All, &list, Timeout::Immediate), StatusCode::DeadlineExceeded, "poll")?;
    let e = expect_code(
        wait_semaphores(WaitMode::All, &list, Timeout::After(Duration::from_millis(20))),
        StatusCode::DeadlineExceeded,
        "wait-all 20 ms",
    )?;
    ensure!(e.message().contains(&s[1].id().to_string()), "the timeout does not name the unreached semaphore: {e}");
    Ok(())
}

/// Wait-all returns when every entry is reached, by signals from several threads.
pub(crate) fn wait_all_signalled_later(cx: &Cx) -> CaseResult {
    let s = sems(cx, 4)?;
    let list: Vec<_> = s.iter().enumerate().map(|(i, s)| sv(s, i as u64 + 1)).collect();
    let waiter = {
        let list = list.clone();
        std::thread::spawn(move || wait_semaphores(WaitMode::All, &list, Timeout::After(LONG)))
    };
    let signallers: Vec<_> = s
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = s.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(5 * i as u64));
                s.signal(i as u64 + 1)
            })
        })
        .collect();
    for signaller in signallers {
        join(signaller)?.ctx("signal")?;
    }
    join(waiter)?.ctx("wait-all")?;
    wait_semaphores(WaitMode::All, &list, Timeout::Immediate).ctx("wait-all when all reached")
}

/// Wait-any returns when one entry is reached.
pub(crate) fn wait_any(cx: &Cx) -> CaseResult {
    let s = sems(cx, 3)?;
    let list = [sv(&s[0], 1), sv(&s[1], 1), sv(&s[2], 1)];
    expect_code(wait_semaphores(WaitMode::Any, &list, Timeout::Immediate), StatusCode::DeadlineExceeded, "none")?;
    let waiter = {
        let list = list.clone();
        std::thread::spawn(move || wait_semaphores(WaitMode::Any, &list, Timeout::After(LONG)))
    };
    std::thread::sleep(SHORT);
    s[1].signal(1).ctx("signal the second")?;
    join(waiter)?.ctx("wait-any after one signal")?;
    wait_semaphores(WaitMode::Any, &list, Timeout::Immediate).ctx("wait-any with one reached")?;
    cx.expect_value(&s[0], 0, "the other entries")
}

/// Wait-all with a failed entry returns that failure (at once, and when it fails while waiting).
pub(crate) fn wait_all_with_failure(cx: &Cx) -> CaseResult {
    let s = sems(cx, 3)?;
    let list = [sv(&s[0], 1), sv(&s[1], 1), sv(&s[2], 1)];
    let waiter = {
        let list = list.clone();
        std::thread::spawn(move || wait_semaphores(WaitMode::All, &list, Timeout::After(LONG)))
    };
    std::thread::sleep(SHORT);
    s[0].signal(1).ctx("signal the first")?;
    let cause = Error::data_loss("ctest: entry 2 broke");
    s[2].fail(cause.clone());
    let e = expect_code(join(waiter)?, StatusCode::DataLoss, "blocked wait-all")?;
    expect_same_status(&e, &cause, "blocked wait-all")?;
    let e = expect_code(wait_semaphores(WaitMode::All, &list, Timeout::Immediate), StatusCode::DataLoss, "poll")?;
    expect_same_status(&e, &cause, "wait-all poll")
}

/// Wait-any where nothing is reached and an entry fails returns that failure.
pub(crate) fn wait_any_with_failure(cx: &Cx) -> CaseResult {
    let s = sems(cx, 2)?;
    let list = [sv(&s[0], 1), sv(&s[1], 1)];
    let waiter = {
        let list = list.clone();
        std::thread::spawn(move || wait_semaphores(WaitMode::Any, &list, Timeout::After(LONG)))
    };
    std::thread::sleep(SHORT);
    s[1].fail(Error::aborted("ctest: entry 1 broke"));
    expect_code(join(waiter)?, StatusCode::Aborted, "blocked wait-any")?;
    Ok(())
}

/// Empty lists are satisfied at once in both modes, whatever the timeout.
pub(crate) fn empty_lists(cx: &Cx) -> CaseResult {
    for mode in [WaitMode::All, WaitMode::Any] {
        for timeout in [Timeout::Immediate, Timeout::After(LONG), Timeout::Infinite] {
            wait_semaphores(mode, &[], timeout).ctx(format!("{mode:?} on [] with {timeout:?}"))?;
            cx.device().wait_semaphores(mode, &[], timeout).ctx(format!("device {mode:?} on []"))?;
        }
    }
    Ok(())
}

/// One-entry lists behave as single waits; the same semaphore twice in a list needs both values.
pub(crate) fn single_and_duplicate_entries(cx: &Cx) -> CaseResult {
    let a = cx.sem(0)?;
    for mode in [WaitMode::All, WaitMode::Any] {
        expect_code(
            wait_semaphores(mode, &[sv(&a, 1)], Timeout::Immediate),
            StatusCode::DeadlineExceeded,
            "one entry",
        )?;
    }
    let list = [sv(&a, 1), sv(&a, 2)];
    a.signal(1).ctx("signal(1)")?;
    expect_code(
        wait_semaphores(WaitMode::All, &list, Timeout::Immediate),
        StatusCode::DeadlineExceeded,
        "[a>=1, a>=2] at 1",
    )?;
    wait_semaphores(WaitMode::Any, &list, Timeout::Immediate).ctx("any of [a>=1, a>=2] at 1")?;
    a.signal(2).ctx("signal(2)")?;
    wait_semaphores(WaitMode::All, &list, Timeout::Immediate).ctx("[a>=1, a>=2] at 2")
}

/// Two threads hand a timeline back and forth 500 times.
pub(crate) fn ping_pong_threads(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let rounds = 500u64;
    let pong = {
        let s = s.clone();
        std::thread::spawn(move || -> hal::Result<()> {
            for i in 0..rounds {
                s.wait(2 * i + 1, Timeout::After(LONG))?;
                s.signal(2 * i + 2)?;
            }
            Ok(())
        })
    };
    for i in 0..rounds {
        s.signal(2 * i + 1).ctx(format!("ping {i}"))?;
        s.wait(2 * i + 2, Timeout::After(LONG)).ctx(format!("pong {i}"))?;
    }
    join(pong)?.ctx("pong thread")?;
    cx.expect_value(&s, 2 * rounds, "after the ping-pong")
}

/// Sixteen threads waiting on one value are all released by one signal.
pub(crate) fn many_threads_one_value(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let start = Arc::new(Barrier::new(17));
    let waiters: Vec<_> = (0..16)
        .map(|_| {
            let (s, start) = (s.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                s.wait(1, Timeout::After(LONG))
            })
        })
        .collect();
    start.wait();
    std::thread::sleep(SHORT);
    s.signal(1).ctx("signal(1)")?;
    for (i, waiter) in waiters.into_iter().enumerate() {
        join(waiter)?.ctx(format!("waiter {i}"))?;
    }
    ensure_eq!(s.pending_count(), 0, "timepoints left");
    Ok(())
}

/// Threads waiting on values 1..=16 are released in step as the value climbs, never early.
pub(crate) fn many_threads_many_values(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let waiters: Vec<_> = (1..=16u64)
        .map(|v| {
            let s = s.clone();
            std::thread::spawn(move || -> hal::Result<u64> {
                s.wait(v, Timeout::After(LONG))?;
                s.query()
            })
        })
        .collect();
    std::thread::sleep(SHORT);
    for v in 1..=16 {
        s.signal(v).ctx(format!("signal({v})"))?;
    }
    for (i, waiter) in waiters.into_iter().enumerate() {
        let seen = join(waiter)?.ctx(format!("waiter for {}", i + 1))?;
        ensure!(seen > i as u64, "waiter for {} woke at value {seen}", i + 1);
    }
    Ok(())
}

/// Eight threads in simultaneous wait-all and wait-any on overlapping lists of four semaphores.
pub(crate) fn simultaneous_multi_waits(cx: &Cx) -> CaseResult {
    let s = sems(cx, 4)?;
    let waiters: Vec<_> = (0..8usize)
        .map(|t| {
            let list: Vec<_> = (0..3).map(|k| sv(&s[(t + k) % 4], (t as u64 % 3) + 1)).collect();
            let mode = if t % 2 == 0 { WaitMode::All } else { WaitMode::Any };
            std::thread::spawn(move || wait_semaphores(mode, &list, Timeout::After(LONG)))
        })
        .collect();
    std::thread::sleep(SHORT);
    for value in 1..=3 {
        for sem in &s {
            sem.signal(value).ctx("signal")?;
        }
    }
    for (t, waiter) in waiters.into_iter().enumerate() {
        join(waiter)?.ctx(format!("waiter {t}"))?;
    }
    for sem in &s {
        ensure_eq!(sem.pending_count(), 0, "timepoints left on semaphore {}", sem.id());
    }
    Ok(())
}

/// Concurrent signallers: refused signals change nothing and the value observed never goes down.
pub(crate) fn concurrent_signals_monotonic(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || -> Result<(), String> {
            let mut last = 0;
            while !stop.load(Ordering::Relaxed) {
                let now = s.query().map_err(|e| e.to_string())?;
                if now < last {
                    return Err(format!("value went down from {last} to {now}"));
                }
                last = now;
            }
            Ok(())
        })
    };
    let signallers: Vec<_> = (0..4u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || -> hal::Result<()> {
                for k in 0..500u64 {
                    match s.signal(1 + t + 4 * k) {
                        Ok(()) => {}
                        Err(e) if e.code() == StatusCode::FailedPrecondition => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            })
        })
        .collect();
    for signaller in signallers {
        join(signaller)?.ctx("signaller")?;
    }
    stop.store(true, Ordering::Relaxed);
    join(watcher)?.map_err(CaseError::Fail)?;
    let last = s.query().ctx("query")?;
    ensure_eq!(last, 2000, "final value (the largest signal always succeeds)");
    Ok(())
}

/// Signalling one semaphore leaves others alone; clones share one state.
pub(crate) fn semaphores_independent(cx: &Cx) -> CaseResult {
    let (a, b) = (cx.sem(0)?, cx.sem(0)?);
    ensure!(a.id() != b.id() && !a.same_as(&b), "two semaphores are the same");
    a.signal(4).ctx("signal a")?;
    cx.expect_value(&b, 0, "b after signalling a")?;
    let clone = a.clone();
    ensure!(clone.same_as(&a), "a clone is another semaphore");
    clone.signal(6).ctx("signal through the clone")?;
    cx.expect_value(&a, 6, "a after signalling its clone")
}

/// Host semaphores (`Semaphore::new`, no device) follow the same contract.
pub(crate) fn host_semaphore_contract(cx: &Cx) -> CaseResult {
    let s = Semaphore::new(2);
    cx.expect_value(&s, 2, "created at 2")?;
    expect_code(s.signal(2), StatusCode::FailedPrecondition, "signal(2) at 2")?;
    let waiter = spawn_wait(&s, 3, Timeout::After(LONG));
    std::thread::sleep(SHORT);
    s.signal(3).ctx("signal(3)")?;
    join(waiter)?.ctx("wait(3)")?;
    expect_code(s.wait(4, Timeout::Immediate), StatusCode::DeadlineExceeded, "wait(4) at 3")?;
    s.fail(Error::aborted("ctest: host semaphore broke"));
    expect_code(s.wait(4, Timeout::Infinite), StatusCode::Aborted, "wait after fail")?;
    expect_code(s.signal(5), StatusCode::Aborted, "signal after fail")?;
    Ok(())
}

/// A waker that counts its wake-ups and unparks the thread that made it.
struct CountingWaker {
    wakes: AtomicUsize,
    thread: std::thread::Thread,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let counter = Arc::new(CountingWaker { wakes: AtomicUsize::new(0), thread: std::thread::current() });
    (counter.clone(), Waker::from(counter))
}

fn poll<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut TaskContext::from_waker(waker))
}

/// An async wait for a reached value is ready on its first poll.
pub(crate) fn async_wait_reached(cx: &Cx) -> CaseResult {
    let s = cx.sem(3)?;
    let (_, waker) = counting_waker();
    let mut future = s.wait_async(3);
    match poll(&mut future, &waker) {
        Poll::Ready(result) => result.ctx("wait_async(3) at 3"),
        Poll::Pending => Err("wait_async for a reached value is pending".into()),
    }
}

/// An async wait is pending, its waker is called by a signal from another thread, then it is ready.
pub(crate) fn async_wait_signalled(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let (counter, waker) = counting_waker();
    let mut future = s.wait_async(2);
    ensure!(poll(&mut future, &waker).is_pending(), "wait_async(2) at 0 is ready");
    ensure!(s.pending_count() >= 1, "a pending async wait registered nothing");
    let signaller = {
        let s = s.clone();
        std::thread::spawn(move || {
            std::thread::sleep(SHORT);
            s.signal(5)
        })
    };
    let deadline = Instant::now() + LONG;
    while counter.wakes.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::park_timeout(Duration::from_millis(10));
    }
    join(signaller)?.ctx("signal(5)")?;
    ensure!(counter.wakes.load(Ordering::SeqCst) > 0, "the waker was never called");
    match poll(&mut future, &waker) {
        Poll::Ready(result) => result.ctx("wait_async(2) after signal(5)"),
        Poll::Pending => Err("woken but still pending".into()),
    }
}

/// An async wait resolves with the failure when the semaphore fails.
pub(crate) fn async_wait_failure(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let (counter, waker) = counting_waker();
    let mut future = s.wait_async(1);
    ensure!(poll(&mut future, &waker).is_pending(), "wait_async(1) at 0 is ready");
    s.fail(Error::data_loss("ctest: broken under an async wait"));
    ensure!(counter.wakes.load(Ordering::SeqCst) > 0, "fail did not wake the task");
    match poll(&mut future, &waker) {
        Poll::Ready(result) => expect_code(result, StatusCode::DataLoss, "async wait after fail").map(drop),
        Poll::Pending => Err("still pending after fail".into()),
    }
}

/// Dropping a pending async wait leaves nothing registered.
pub(crate) fn async_wait_dropped(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let (_, waker) = counting_waker();
    let mut future = s.wait_async(1);
    ensure!(poll(&mut future, &waker).is_pending(), "wait_async(1) at 0 is ready");
    drop(future);
    ensure_eq!(s.pending_count(), 0, "timepoints after dropping a pending async wait");
    s.signal(1).ctx("signal after the drop")
}

/// Many async waits on different values resolve as the value passes each.
pub(crate) fn async_wait_many(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let (counter, waker) = counting_waker();
    let mut futures: Vec<_> = (1..=32).map(|v| s.wait_async(v)).collect();
    for f in &mut futures {
        ensure!(poll(f, &waker).is_pending(), "an async wait is ready at 0");
    }
    s.signal(16).ctx("signal(16)")?;
    ensure!(counter.wakes.load(Ordering::SeqCst) >= 1, "signal(16) woke nothing");
    for (i, f) in futures.iter_mut().enumerate() {
        let ready = poll(f, &waker).is_ready();
        ensure_eq!(ready, i < 16, "wait_async({}) ready at 16", i + 1);
    }
    s.signal(32).ctx("signal(32)")?;
    for (i, f) in futures.iter_mut().enumerate().skip(16) {
        ensure!(poll(f, &waker).is_ready(), "wait_async({}) pending at 32", i + 1);
    }
    Ok(())
}

/// Checks a waiter thread is still blocked (for [`SHORT`]).
fn still_waiting<T>(waiter: &JoinHandle<T>, what: &str) -> crate::CaseResult {
    std::thread::sleep(SHORT);
    ensure!(!waiter.is_finished(), "{what}: the wait returned too early");
    Ok(())
}

/// Wait-all on a list mixing device semaphores signalled by queue work (one on the device side
/// after a device wait), a device semaphore signalled by the host, and host semaphores (one
/// signalled by queue work, one by another thread): it returns only once every entry is reached,
/// whichever side reaches it (also through `Device::wait_semaphores`).
pub(crate) fn wait_all_mixed_device_and_host(cx: &Cx) -> CaseResult {
    let (gate, by_queue, by_host) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    let (host_by_queue, host_by_thread) = (Semaphore::new(0), Semaphore::new(0));
    cx.queue(0).barrier(&[sv(&gate, 1)], &[sv(&by_queue, 3)]).ctx("barrier signalling a device semaphore")?;
    cx.queue(1).barrier(&[sv(&by_queue, 3)], &[sv(&host_by_queue, 1)]).ctx("barrier signalling a host semaphore")?;
    let list = vec![sv(&by_queue, 3), sv(&by_host, 2), sv(&host_by_queue, 1), sv(&host_by_thread, 7)];
    let waiters: Vec<_> = [false, true]
        .into_iter()
        .map(|through_device| {
            let (list, device) = (list.clone(), cx.device().clone());
            std::thread::spawn(move || {
                if through_device {
                    device.wait_semaphores(WaitMode::All, &list, Timeout::After(LONG))
                } else {
                    wait_semaphores(WaitMode::All, &list, Timeout::After(LONG))
                }
            })
        })
        .collect();
    still_waiting(&waiters[0], "wait-all with nothing reached")?;
    by_host.signal(2).ctx("host signal of a device semaphore")?;
    still_waiting(&waiters[0], "wait-all with one of four reached")?;
    let signaller = {
        let s = host_by_thread.clone();
        std::thread::spawn(move || s.signal(7))
    };
    join(signaller)?.ctx("host semaphore signalled by another thread")?;
    still_waiting(&waiters[1], "wait-all with two of four reached")?;
    expect_code(wait_semaphores(WaitMode::All, &list, Timeout::Immediate), StatusCode::DeadlineExceeded, "poll")?;
    gate.signal(1).ctx("open the gate of the queue work")?;
    for waiter in waiters {
        join(waiter)?.ctx("wait-all once the queue work signalled")?;
    }
    cx.expect_value(&by_queue, 3, "the device semaphore signalled by a queue")?;
    ensure_eq!(host_by_queue.query().ctx("query")?, 1, "the host semaphore signalled by a queue");
    wait_semaphores(WaitMode::All, &list, Timeout::Immediate).ctx("wait-all when all reached")
}

/// Wait-any on lists mixing device and host semaphores: released by queue work signalling a device
/// semaphore (the host entries untouched), by another thread signalling a host semaphore (the queue
/// work still held), and by queue work signalling a host semaphore.
pub(crate) fn wait_any_mixed_device_and_host(cx: &Cx) -> CaseResult {
    let (gate_a, gate_b, gate_c) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    let (device_a, device_b) = (cx.sem(0)?, cx.sem(0)?);
    let (host_a, host_b, host_c) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    cx.queue(0).barrier(&[sv(&gate_a, 1)], &[sv(&device_a, 1)]).ctx("barrier a")?;
    cx.queue(1).barrier(&[sv(&gate_b, 1)], &[sv(&device_b, 1)]).ctx("barrier b")?;
    cx.queue(2).barrier(&[sv(&gate_c, 1)], &[sv(&host_c, 4)]).ctx("barrier c")?;
    let spawn_any = |list: Vec<hal::SemaphoreValue>| {
        std::thread::spawn(move || wait_semaphores(WaitMode::Any, &list, Timeout::After(LONG)))
    };
    // Released by the device side.
    let waiter = spawn_any(vec![sv(&host_a, 1), sv(&device_a, 1)]);
    still_waiting(&waiter, "wait-any before anything is signalled")?;
    gate_a.signal(1).ctx("open gate a")?;
    join(waiter)?.ctx("wait-any released by queue work")?;
    ensure_eq!(host_a.query().ctx("query")?, 0, "the host entry of the first list");
    // Released by the host side while the device entry is held.
    let waiter = spawn_any(vec![sv(&device_b, 1), sv(&host_b, 1)]);
    still_waiting(&waiter, "wait-any with its queue work held")?;
    let signaller = {
        let s = host_b.clone();
        std::thread::spawn(move || s.signal(1))
    };
    join(signaller)?.ctx("signal from another thread")?;
    join(waiter)?.ctx("wait-any released by a host thread")?;
    cx.expect_value(&device_b, 0, "the held device entry")?;
    // A host semaphore signalled by queue work.
    let waiter = spawn_any(vec![sv(&device_b, 1), sv(&host_c, 4)]);
    still_waiting(&waiter, "wait-any before the queue signals the host semaphore")?;
    gate_c.signal(1).ctx("open gate c")?;
    join(waiter)?.ctx("wait-any released by queue work signalling a host semaphore")?;
    cx.expect_value(&device_b, 0, "the held device entry")?;
    gate_b.signal(1).ctx("open gate b")?;
    cx.wait(&device_b, 1)
}
