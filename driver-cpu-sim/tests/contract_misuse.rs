//! Regression tests for the misuse findings of issue 14 (a hostile but fair embedder), one or more
//! per finding, named after it. Each runs under a watchdog, so a hang fails with a message instead
//! of stalling the suite, and the tests run one at a time (they count the process's threads).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use hal::{
    BufferParams, CommandBufferMode, EntryPointInfo, ExecutableSource, HostCallFlags, NativeEntryPoint,
    NativeInvocation, Semaphore, SemaphoreValue as SV, StatusCode, Timeout,
};

/// One test at a time: they count threads and time waits.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `body` on its own thread and fails if it does not finish within `limit`.
fn within(limit: Duration, what: &str, body: impl FnOnce() + Send + 'static) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (done_tx, done_rx) = mpsc::channel();
    let runner = std::thread::spawn(move || {
        body();
        let _ = done_tx.send(());
    });
    match done_rx.recv_timeout(limit) {
        Ok(()) => runner.join().expect("test body"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = runner.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: still running after {limit:?} (a hang)"),
    }
}

fn device() -> hal::Device {
    driver_cpu_sim::create_device().expect("cpu-sim device")
}

/// The names of this process's threads (Linux; truncated to 15 bytes by the kernel).
fn thread_names() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect()
}

/// Threads the HAL and cpu-sim started (completion, host-call, stream and workgroup threads), to
/// check a dropped device leaves none behind. The test harness's own threads do not count.
fn thread_count() -> usize {
    thread_names().iter().filter(|name| name.starts_with("hal-") || name.starts_with("cpu-sim-")).count()
}

/// Waits up to five seconds (a loaded machine) for the HAL's thread count to come back to `baseline`.
fn assert_threads_back_to(baseline: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while thread_count() > baseline && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        thread_count() <= baseline,
        "{what}: {} HAL threads left, {baseline} before: {:?}",
        thread_count(),
        thread_names()
    );
}

/// A native executable whose one entry point sleeps `per_workgroup` in every workgroup.
fn sleeper(device: &hal::Device, per_workgroup: Duration) -> hal::Executable {
    let entry = NativeEntryPoint {
        info: EntryPointInfo::new("sleep", 1, 0, 0),
        kernel: Arc::new(move |_: &NativeInvocation<'_>| {
            std::thread::sleep(per_workgroup);
            Ok(())
        }),
    };
    device.load_executable(&ExecutableSource::Native(vec![entry])).expect("load")
}

fn sleeping_commands(device: &hal::Device, per_workgroup: Duration, workgroups: u32) -> hal::CommandBuffer {
    let kernels = sleeper(device, per_workgroup);
    let commands = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    commands.dispatch(&kernels, 0, [workgroups, 1, 1], &[], &[]).unwrap();
    commands.end().unwrap();
    commands
}

const SHORT: Duration = Duration::from_secs(5);

#[test]
fn finding_1_last_handles_dropped_with_cross_queue_work_in_flight_never_deadlock() {
    within(Duration::from_secs(60), "finding 1", || {
        let baseline = thread_count();
        for round in 0..20 {
            let device = device();
            let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
            let (s0, s1) = (device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap());
            let commands = sleeping_commands(&device, Duration::from_micros(200), 4);
            q0.execute(&[], &commands, &[]).unwrap();
            q0.barrier(&[], &[SV::new(&s0, 1)]).unwrap();
            q1.barrier(&[SV::new(&s0, 1)], &[SV::new(&s1, 1)]).unwrap();
            drop((device, q0, q1, commands));
            let start = Instant::now();
            let outcome = s1.wait(1, Timeout::After(SHORT));
            assert!(start.elapsed() < SHORT + Duration::from_millis(100), "round {round}: wait overshot");
            // Either the work ran before teardown or teardown cancelled it: never a hang.
            if let Err(e) = outcome {
                assert_eq!(e.code(), StatusCode::Cancelled, "round {round}: {e}");
            }
        }
        assert_threads_back_to(baseline, "finding 1");
    });
}

#[test]
fn finding_1_last_device_clone_in_a_host_call_closure() {
    within(Duration::from_secs(30), "finding 1 (host call)", || {
        let baseline = thread_count();
        for round in 0..10 {
            let device = device();
            let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
            let done = Semaphore::new(0);
            let (s2, s3) = (device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap());
            let kept = device.clone();
            q1.host_call_with(
                &[],
                move || {
                    // Let the work behind the call complete on the device first.
                    std::thread::sleep(Duration::from_millis(30));
                    let _ = kept.info();
                    drop(kept);
                    Ok(())
                },
                &[SV::new(&done, 1)],
                HostCallFlags::NON_BLOCKING,
            )
            .unwrap();
            // Work behind the call on its queue, and a dependant on another queue.
            q1.barrier(&[], &[SV::new(&s2, 1)]).unwrap();
            q0.barrier(&[SV::new(&s2, 1)], &[SV::new(&s3, 1)]).unwrap();
            drop((device, q0, q1));
            // The closure held the last device reference; it drops on the thread that ran it.
            done.wait(1, Timeout::After(SHORT)).unwrap_or_else(|e| panic!("round {round}: {e}"));
            if let Err(e) = s3.wait(1, Timeout::After(SHORT)) {
                assert_eq!(e.code(), StatusCode::Cancelled, "round {round}: {e}");
            }
        }
        assert_threads_back_to(baseline, "finding 1 (host call)");
    });
}

#[test]
fn finding_2a_host_call_waits_on_its_own_queue() {
    within(Duration::from_secs(20), "finding 2a", || {
        let device = device();
        let q0 = device.queue(0).unwrap();
        let inner = device.create_semaphore(0).unwrap();
        let outer = Semaphore::new(0);
        let (queue, sem) = (q0.clone(), inner.clone());
        let (tx, rx) = mpsc::channel();
        q0.host_call(
            &[],
            move || {
                queue.barrier(&[], &[SV::new(&sem, 1)])?;
                let waited = sem.wait(1, Timeout::After(Duration::from_millis(500)));
                let _ = tx.send(waited.clone());
                waited
            },
            &[SV::new(&outer, 1)],
        )
        .unwrap();
        outer.wait(1, Timeout::After(SHORT)).unwrap();
        rx.recv_timeout(SHORT).unwrap().expect("a host call may submit to its own queue and wait for it");
        // The queue keeps working.
        let after = device.create_semaphore(0).unwrap();
        q0.barrier(&[], &[SV::new(&after, 1)]).unwrap();
        after.wait(1, Timeout::After(SHORT)).unwrap();
    });
}

#[test]
fn finding_2b_timed_wait_returns_by_its_deadline_while_a_host_call_runs() {
    within(Duration::from_secs(20), "finding 2b", || {
        let device = device();
        let q0 = device.queue(0).unwrap();
        let buffer = device.allocate_buffer(BufferParams::host_visible(), 64).unwrap();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        q0.host_call(
            &[],
            move || {
                let _ = release_rx.recv_timeout(Duration::from_secs(10));
                Ok(())
            },
            &[],
        )
        .unwrap();
        // Device-semaphore and host-semaphore waits on work of the busy queue.
        let device_sem = device.create_semaphore(0).unwrap();
        let host_sem = Semaphore::new(0);
        q0.fill(&[], &buffer, 0, 64, 1, 1, &[SV::new(&device_sem, 1), SV::new(&host_sem, 1)]).unwrap();
        for sem in [&device_sem, &host_sem] {
            let asked = Duration::from_millis(300);
            let start = Instant::now();
            let err = sem.wait(1, Timeout::After(asked)).unwrap_err();
            let took = start.elapsed();
            assert_eq!(err.code(), StatusCode::DeadlineExceeded);
            assert!(took < asked + Duration::from_millis(50), "asked {asked:?}, returned after {took:?}");
        }
        release_tx.send(()).unwrap();
        device_sem.wait(1, Timeout::After(SHORT)).unwrap();
    });
}

#[test]
fn finding_2c_a_user_deadlock_is_named_by_the_report() {
    within(Duration::from_secs(20), "finding 2c", || {
        let device = device();
        let q0 = device.queue(0).unwrap();
        let never = Semaphore::new(0);
        let (sem, started) = (never.clone(), Arc::new(AtomicBool::new(false)));
        let flag = started.clone();
        q0.host_call(
            &[],
            move || {
                flag.store(true, Ordering::SeqCst);
                sem.wait(1, Timeout::Infinite)
            },
            &[],
        )
        .unwrap();
        let behind = device.create_semaphore(0).unwrap();
        q0.barrier(&[], &[SV::new(&behind, 1)]).unwrap();
        while !started.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let report = device.report();
        assert!(report.contains("host call") && report.contains("running"), "report: {report}");
        assert!(report.contains("returns"), "the barrier held behind the call is named: {report}");
        never.signal(1).unwrap();
        behind.wait(1, Timeout::After(SHORT)).unwrap();
    });
}

#[test]
fn finding_3_held_execute_is_cancelled_when_the_device_drops() {
    within(Duration::from_secs(20), "finding 3", || {
        let baseline = thread_count();
        let device = device();
        let q0 = device.queue(0).unwrap();
        let gate = Semaphore::new(0);
        let done = device.create_semaphore(0).unwrap();
        let commands = sleeping_commands(&device, Duration::ZERO, 1);
        q0.execute(&[SV::new(&gate, 1)], &commands, &[SV::new(&done, 1)]).unwrap();
        drop((device, q0, commands));
        let err = done.wait(1, Timeout::After(Duration::from_secs(2))).unwrap_err();
        assert_eq!(err.code(), StatusCode::Cancelled, "{err}");
        assert_threads_back_to(baseline, "finding 3");
    });
}

/// A waker that panics when woken.
fn panicking_waker() -> std::task::Waker {
    struct Bomb;
    impl std::task::Wake for Bomb {
        fn wake(self: Arc<Self>) {
            panic!("waker exploded (expected by the test)");
        }
    }
    std::task::Waker::from(Arc::new(Bomb))
}

fn poll_once(future: &mut std::pin::Pin<Box<hal::WaitFuture>>, waker: &std::task::Waker) {
    let mut cx = std::task::Context::from_waker(waker);
    assert!(std::future::Future::poll(future.as_mut(), &mut cx).is_pending());
}

#[test]
fn finding_4_a_panicking_waker_does_not_stop_delivery() {
    within(Duration::from_secs(20), "finding 4", || {
        // Host semaphore: a host waiter on the same value still wakes.
        let host = Semaphore::new(0);
        let mut bomb = Box::pin(host.wait_async(1));
        poll_once(&mut bomb, &panicking_waker());
        let other = {
            let host = host.clone();
            std::thread::spawn(move || host.wait(1, Timeout::After(SHORT)))
        };
        while host.pending_count() < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = host.signal(1);
        other.join().unwrap().expect("the second waiter wakes");

        // Device semaphore: the completion thread survives and later work completes.
        let device = device();
        let q0 = device.queue(0).unwrap();
        let s = device.create_semaphore(0).unwrap();
        let mut bomb = Box::pin(s.wait_async(1));
        poll_once(&mut bomb, &panicking_waker());
        q0.barrier(&[], &[SV::new(&s, 1)]).unwrap();
        q0.barrier(&[], &[SV::new(&s, 2)]).unwrap();
        s.wait(2, Timeout::After(SHORT)).expect("the queue keeps completing work");
    });
}

#[test]
fn finding_5_later_work_on_the_queue_starts_after_the_host_call_returns() {
    within(Duration::from_secs(20), "finding 5", || {
        for (flags, blocking) in [(HostCallFlags::empty(), true), (HostCallFlags::NON_BLOCKING, false)] {
            let device = device();
            let q0 = device.queue(0).unwrap();
            let buffer = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
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
                &[SV::new(&called, 1)],
                flags,
            )
            .unwrap();
            let filled = device.create_semaphore(0).unwrap();
            q0.fill(&[], &buffer, 0, 4, 0xAB, 1, &[SV::new(&filled, 1)]).unwrap();
            filled.wait(1, Timeout::After(SHORT)).unwrap();
            called.wait(1, Timeout::After(SHORT)).unwrap();
            let expected = if blocking { 0 } else { 0xAB };
            assert_eq!(seen.load(Ordering::SeqCst), expected, "blocking {blocking}: what the call saw");
        }
    });
}

#[test]
fn finding_6_failing_a_semaphore_fails_issued_work_that_waits_on_it() {
    within(Duration::from_secs(20), "finding 6", || {
        let device = device();
        let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
        let s = device.create_semaphore(0).unwrap();
        let t = device.create_semaphore(0).unwrap();
        let buffer = device.allocate_buffer(BufferParams::host_visible(), 16).unwrap();
        let slow = sleeping_commands(&device, Duration::from_millis(200), 1);
        q0.execute(&[], &slow, &[SV::new(&s, 1)]).unwrap();
        // Issued at once: the wait is covered by q0's event.
        q1.fill(&[SV::new(&s, 1)], &buffer, 0, 16, 3, 1, &[SV::new(&t, 1)]).unwrap();
        s.fail(hal::Error::aborted("the host gave up on s"));
        let err = t.wait(1, Timeout::After(SHORT)).unwrap_err();
        assert_eq!(err.code(), StatusCode::Aborted, "{err}");
        assert!(err.message().contains("gave up"), "{err}");
    });
}

#[test]
fn finding_7_a_single_wait_wakes_when_the_host_reaches_the_value() {
    within(Duration::from_secs(20), "finding 7", || {
        let device = device();
        let q0 = device.queue(0).unwrap();
        let s = device.create_semaphore(0).unwrap();
        let slow = sleeping_commands(&device, Duration::from_millis(600), 1);
        q0.execute(&[], &slow, &[SV::new(&s, 5)]).unwrap();
        let waiter = {
            let s = s.clone();
            std::thread::spawn(move || {
                s.wait(3, Timeout::After(SHORT)).unwrap();
                Instant::now()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        let signalled = Instant::now();
        s.signal(3).unwrap();
        let woke = waiter.join().unwrap();
        let latency = woke.saturating_duration_since(signalled);
        assert!(latency < Duration::from_millis(50), "woke {latency:?} after the host signal");
        s.wait(5, Timeout::After(SHORT)).unwrap();
    });
}

#[test]
fn finding_9_failing_every_signal_of_a_huge_dispatch_stops_it() {
    within(Duration::from_secs(20), "finding 9 (fail)", || {
        let device = device();
        let q0 = device.queue(0).unwrap();
        let s = device.create_semaphore(0).unwrap();
        // Within the per-axis limits, and millennia of work at 1 ms per workgroup.
        let huge = sleeping_commands(&device, Duration::from_millis(1), i32::MAX as u32);
        q0.execute(&[], &huge, &[SV::new(&s, 1)]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        s.fail(hal::Error::aborted("nobody wants it any more"));
        // The queue is free again soon: later work completes.
        let after = device.create_semaphore(0).unwrap();
        q0.barrier(&[], &[SV::new(&after, 1)]).unwrap();
        after.wait(1, Timeout::After(SHORT)).expect("the dispatch stopped");
    });
}

#[test]
fn finding_9_dropping_the_device_stops_a_huge_dispatch() {
    within(Duration::from_secs(20), "finding 9 (drop)", || {
        let device = device();
        let q0 = device.queue(0).unwrap();
        let s = device.create_semaphore(0).unwrap();
        let huge = sleeping_commands(&device, Duration::from_millis(1), i32::MAX as u32);
        q0.execute(&[], &huge, &[SV::new(&s, 1)]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let start = Instant::now();
        drop((device, q0, huge));
        assert!(start.elapsed() < Duration::from_secs(2), "drop took {:?}", start.elapsed());
        let err = s.wait(1, Timeout::After(SHORT)).unwrap_err();
        assert_eq!(err.code(), StatusCode::Cancelled, "{err}");
    });
}

#[test]
fn signals_completing_behind_the_value_are_counted_not_dropped_in_silence() {
    within(Duration::from_secs(20), "behind signals", || {
        let device = device();
        let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
        let (gate, c) = (Semaphore::new(0), device.create_semaphore(0).unwrap());
        // Two unordered submissions signal `c`: the later value completes first.
        q0.barrier(&[SV::new(&gate, 1)], &[SV::new(&c, 1)]).unwrap();
        q1.barrier(&[], &[SV::new(&c, 2)]).unwrap();
        c.wait(2, Timeout::After(SHORT)).unwrap();
        gate.signal(1).unwrap();
        let deadline = Instant::now() + SHORT;
        while c.behind_signals() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(c.behind_signals(), 1);
        assert!(c.report().contains("behind"), "{}", c.report());
        assert_eq!(c.query().unwrap(), 2, "values never go down");
    });
}

#[test]
fn host_calls_released_together_each_get_a_thread() {
    within(Duration::from_secs(60), "host calls released together", || {
        let device = device();
        let (q0, q2) = (device.queue(0).unwrap(), device.queue(2).unwrap());
        for round in 0..20 {
            // One idle host-call thread to start with.
            let warm = Semaphore::new(0);
            q0.host_call(&[], || Ok(()), &[SV::new(&warm, 1)]).unwrap();
            warm.wait(1, Timeout::After(SHORT)).unwrap();
            let gate = Semaphore::new(0);
            let (inner, done) = (device.create_semaphore(0).unwrap(), Semaphore::new(0));
            // A waits for a barrier on queue 2, which B's gate holds until B returns.
            let (target, sem) = (q2.clone(), inner.clone());
            q0.host_call_with(
                &[SV::new(&gate, 1)],
                move || {
                    target.barrier(&[], &[SV::new(&sem, 1)])?;
                    sem.wait(1, Timeout::After(Duration::from_secs(2)))
                },
                &[SV::new(&done, 1)],
                HostCallFlags::NON_BLOCKING,
            )
            .unwrap();
            q2.host_call(
                &[SV::new(&gate, 1)],
                || {
                    std::thread::sleep(Duration::from_millis(5));
                    Ok(())
                },
                &[SV::new(&done, 2)],
            )
            .unwrap();
            gate.signal(1).unwrap();
            done.wait(2, Timeout::After(SHORT)).unwrap_or_else(|e| panic!("round {round}: {e}"));
            let start = Instant::now();
            while done.query().map(|v| v < 1).unwrap_or(false) && start.elapsed() < SHORT {
                std::thread::sleep(Duration::from_millis(1));
            }
            // A's wait must have succeeded: it is never queued behind the call it waits for.
            assert!(done.query().is_ok(), "round {round}: {:?}", done.query());
        }
    });
}
