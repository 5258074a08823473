//! Misuse: what a hostile but fair embedder does, one case per behaviour the HAL must keep: last
//! handles dropped with cross-queue work in flight, host calls that wait on their own queue,
//! deadlines while a host call runs, held work cancelled at teardown, panicking wakers, host-call
//! ordering, failing a semaphore under issued work, a single wait woken by the host. The
//! cpu-sim-only checks (threads left behind, huge native dispatches) are in
//! `driver-cpu-sim/tests/contract_misuse.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context as TaskContext, Wake, Waker};
use std::time::{Duration, Instant};

use hal::driver::SemaphoreExt;
use hal::{CommandBuffer, CommandBufferMode, Device, Error, HostCallFlags, Semaphore, StatusCode, Timeout};

use crate::check::{CaseError, CaseResult, Context, expect_code};
use crate::context::{Cx, LONG, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

/// A one-shot command buffer of `device` that keeps it busy for about `us` microseconds.
fn sleeping(cx: &Cx, device: &Device, us: u32) -> Result<CommandBuffer, CaseError> {
    let exe = cx.load_on(device, Kernel::Sleep)?;
    let commands = device.create_command_buffer(CommandBufferMode::OneShot).ctx("create_command_buffer")?;
    commands.dispatch(&exe, 0, [1, 1, 1], &[us], &[]).ctx("dispatch sleep_us")?;
    commands.end().ctx("end")?;
    Ok(commands)
}

/// The last handles of a device dropped while work chained across two queues is in
/// flight never deadlock: the chain completes or is cancelled, within the wait's timeout.
pub(crate) fn last_handles_dropped_with_cross_queue_work_in_flight_never_deadlock(cx: &Cx) -> CaseResult {
    for round in 0..10 {
        let device = cx.fixture().create_device().ctx("create a device to drop")?;
        let (q0, q1) = (device.queue(0).ctx("queue 0")?, device.queue(1 % device.queue_count()).ctx("queue 1")?);
        let (s0, s1) = (device.create_semaphore(0).ctx("semaphore")?, device.create_semaphore(0).ctx("semaphore")?);
        let commands = sleeping(cx, &device, 200)?;
        q0.execute(&[], &commands, &[]).ctx("execute")?;
        q0.barrier(&[], &[sv(&s0, 1)]).ctx("barrier on queue 0")?;
        q1.barrier(&[sv(&s0, 1)], &[sv(&s1, 1)]).ctx("barrier on queue 1")?;
        drop((device, q0, q1, commands));
        let start = Instant::now();
        let outcome = s1.wait(1, Timeout::After(LONG));
        ensure!(start.elapsed() < LONG + Duration::from_millis(100), "round {round}: wait overshot its timeout");
        // Either the work ran before teardown or teardown cancelled it: never a hang.
        if let Err(e) = outcome {
            ensure_eq!(e.code(), StatusCode::Cancelled, "round {round}: {e}");
        }
    }
    Ok(())
}

/// A host call may submit to its own queue and wait for that work; the queue keeps
/// working afterwards.
pub(crate) fn host_call_waits_on_its_own_queue(cx: &Cx) -> CaseResult {
    let q0 = cx.queue(0);
    let (inner, outer) = (cx.sem(0)?, Semaphore::new(0));
    let (queue, sem) = (q0.clone(), inner.clone());
    let (tx, rx) = mpsc::channel();
    q0.host_call(
        &[],
        move || {
            queue.barrier(&[], &[sv(&sem, 1)])?;
            let waited = sem.wait(1, Timeout::After(Duration::from_millis(500)));
            let _ = tx.send(waited.clone());
            waited
        },
        &[sv(&outer, 1)],
    )
    .ctx("host_call")?;
    cx.wait(&outer, 1)?;
    let waited = rx.recv_timeout(LONG).map_err(|e| format!("the host call reported nothing: {e}"))?;
    waited.ctx("a host call may submit to its own queue and wait for it")?;
    let after = cx.sem(0)?;
    q0.barrier(&[], &[sv(&after, 1)]).ctx("barrier after the host call")?;
    cx.wait(&after, 1)
}

/// A timed wait on work queued behind a running host call returns by its deadline, for
/// a device semaphore and a host semaphore alike.
pub(crate) fn timed_wait_returns_by_its_deadline_while_a_host_call_runs(cx: &Cx) -> CaseResult {
    let q0 = cx.queue(0);
    let buffer = cx.device_buffer(1 << 20)?;
    let (release_tx, release_rx) = mpsc::channel::<()>();
    q0.host_call(
        &[],
        move || {
            let _ = release_rx.recv_timeout(Duration::from_secs(10));
            Ok(())
        },
        &[],
    )
    .ctx("host_call")?;
    let (device_sem, host_sem) = (cx.sem(0)?, Semaphore::new(0));
    q0.fill(&[], &buffer, 0, 1 << 20, 1u8, &[sv(&device_sem, 1), sv(&host_sem, 1)]).ctx("fill")?;
    for (sem, kind) in [(&device_sem, "device"), (&host_sem, "host")] {
        let asked = Duration::from_millis(300);
        let start = Instant::now();
        expect_code(sem.wait(1, Timeout::After(asked)), StatusCode::DeadlineExceeded, &format!("{kind} semaphore"))?;
        let took = start.elapsed();
        // A margin for a loaded machine running cases side by side; the bug overshot by seconds.
        ensure!(
            took < asked + Duration::from_millis(150),
            "{kind} semaphore: asked {asked:?}, returned after {took:?}"
        );
    }
    release_tx.send(()).map_err(|_| "the host call ended before it was released")?;
    cx.wait(&device_sem, 1)
}

/// An execute held behind a semaphore no one signals is cancelled when its device drops.
pub(crate) fn held_execute_is_cancelled_when_the_device_drops(cx: &Cx) -> CaseResult {
    let device = cx.fixture().create_device().ctx("create a device to drop")?;
    let q0 = device.queue(0).ctx("queue 0")?;
    let (gate, done) = (Semaphore::new(0), device.create_semaphore(0).ctx("semaphore")?);
    let commands = sleeping(cx, &device, 0)?;
    q0.execute(&[sv(&gate, 1)], &commands, &[sv(&done, 1)]).ctx("held execute")?;
    drop((device, q0, commands));
    expect_code(done.wait(1, Timeout::After(Duration::from_secs(2))), StatusCode::Cancelled, "the held execute")?;
    Ok(())
}

/// A waker that panics when woken.
struct Bomb;

impl Wake for Bomb {
    fn wake(self: Arc<Self>) {
        panic!("waker exploded (expected by the ctest case)");
    }
}

/// Polls `future` once with a panicking waker; it must be pending.
fn arm_bomb(future: &mut std::pin::Pin<Box<hal::WaitFuture>>) -> CaseResult {
    let waker = Waker::from(Arc::new(Bomb));
    let pending = std::future::Future::poll(future.as_mut(), &mut TaskContext::from_waker(&waker)).is_pending();
    ensure!(pending, "an async wait on an unreached value is ready");
    Ok(())
}

/// A waker that panics does not stop delivery: another waiter on the same host semaphore
/// still wakes, and the device's completion keeps completing later work.
pub(crate) fn a_panicking_waker_does_not_stop_delivery(cx: &Cx) -> CaseResult {
    let host = Semaphore::new(0);
    let mut bomb = Box::pin(host.wait_async(1));
    arm_bomb(&mut bomb)?;
    let other = {
        let host = host.clone();
        std::thread::spawn(move || host.wait(1, Timeout::After(LONG)))
    };
    let deadline = Instant::now() + LONG;
    while host.pending_count() < 2 {
        ensure!(Instant::now() < deadline, "the second waiter never registered");
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = host.signal(1);
    other.join().map_err(|_| "the second waiter panicked")?.ctx("the second waiter wakes")?;

    let q0 = cx.queue(0);
    let s = cx.sem(0)?;
    let mut bomb = Box::pin(s.wait_async(1));
    arm_bomb(&mut bomb)?;
    q0.barrier(&[], &[sv(&s, 1)]).ctx("barrier signalling 1")?;
    q0.barrier(&[], &[sv(&s, 2)]).ctx("barrier signalling 2")?;
    cx.wait(&s, 2)
}

/// Work queued after a host call starts only after the call returns; with
/// `NON_BLOCKING` it may run alongside (here it has, by the time the call reads).
fn host_call_then_fill(cx: &Cx, flags: HostCallFlags, expected: usize) -> CaseResult {
    let q0 = cx.queue(0);
    let buffer = cx.host_buffer(4)?;
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let (view, record) = (buffer.clone(), seen.clone());
    let called = Semaphore::new(0);
    q0.host_call_with(
        &[],
        move || {
            std::thread::sleep(Duration::from_millis(100));
            let bytes = view.read_to_vec()?;
            record.store(usize::from(bytes[0]), Ordering::SeqCst);
            Ok(())
        },
        flags,
        &[sv(&called, 1)],
    )
    .ctx("host_call_with")?;
    let filled = cx.sem(0)?;
    q0.fill(&[], &buffer, 0, 4, 0xABu8, &[sv(&filled, 1)]).ctx("fill")?;
    cx.wait(&filled, 1)?;
    cx.wait(&called, 1)?;
    ensure_eq!(seen.load(Ordering::SeqCst), expected, "what the {flags:?} host call saw");
    Ok(())
}

/// Blocking host call: the fill queued behind it has not run when it reads.
pub(crate) fn later_work_on_the_queue_starts_after_the_host_call_returns(cx: &Cx) -> CaseResult {
    host_call_then_fill(cx, HostCallFlags::empty(), 0)
}

/// `NON_BLOCKING` host call: the fill behind it runs while it sleeps.
pub(crate) fn non_blocking_host_call_lets_later_work_run(cx: &Cx) -> CaseResult {
    host_call_then_fill(cx, HostCallFlags::NON_BLOCKING, 0xAB)
}

/// Failing a semaphore fails work already issued device-side that waits on it.
pub(crate) fn failing_a_semaphore_fails_issued_work_that_waits_on_it(cx: &Cx) -> CaseResult {
    let (q0, q1) = (cx.queue(0), cx.queue(1));
    let (s, t) = (cx.sem(0)?, cx.sem(0)?);
    let buffer = cx.device_buffer(4096)?;
    let slow = sleeping(cx, cx.device(), 200_000)?;
    q0.execute(&[], &slow, &[sv(&s, 1)]).ctx("slow execute")?;
    // Issued at once: the wait is covered by q0's event.
    q1.fill(&[sv(&s, 1)], &buffer, 0, 4096, 3u8, &[sv(&t, 1)]).ctx("fill waiting on s")?;
    s.fail(Error::aborted("the host gave up on s"));
    let err = cx.wait_failed(&t, 1, StatusCode::Aborted)?;
    ensure!(err.message().contains("gave up"), "t's failure is not s's: {err}");
    Ok(())
}

/// A single wait for 3 wakes when the host signals 3, while device work that signals 5
/// still runs.
pub(crate) fn a_single_wait_wakes_when_the_host_reaches_the_value(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let slow = sleeping(cx, cx.device(), 600_000)?;
    cx.queue(0).execute(&[], &slow, &[sv(&s, 5)]).ctx("slow execute")?;
    let waiter = {
        let s = s.clone();
        std::thread::spawn(move || s.wait(3, Timeout::After(LONG)).map(|()| Instant::now()))
    };
    std::thread::sleep(Duration::from_millis(50));
    let signalled = Instant::now();
    s.signal(3).ctx("host signal to 3")?;
    let woke = waiter.join().map_err(|_| "the waiter panicked")?.ctx("wait for 3")?;
    let latency = woke.saturating_duration_since(signalled);
    cx.note(format!("woke {latency:?} after the host signal"));
    // A margin for a loaded machine, well below the device work's length (a wait that wakes only
    // when the device work ends fails).
    ensure!(latency < Duration::from_millis(200), "woke {latency:?} after the host signal");
    cx.wait(&s, 5)
}
