//! The misuse findings of issue 14 on a GPU: the scheduler is shared, so the probes that failed on
//! cpu-sim failed the same way on the H100 (`driver-cpu-sim/tests/contract_misuse.rs` has them all
//! on cpu-sim). Each test runs under a watchdog, so a hang fails with a message.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::*;
use hal::{CommandBufferMode, HostCallFlags, Semaphore, SemaphoreValue as SV, StatusCode, Timeout};

/// One test at a time: they time waits.
static SERIAL: Mutex<()> = Mutex::new(());

const SHORT: Duration = Duration::from_secs(5);

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

/// A one-shot command buffer that keeps the GPU busy for about `us` microseconds.
fn sleeping(device: &hal::Device, us: u32) -> Option<hal::CommandBuffer> {
    let exe = kernels(device)?;
    let commands = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    commands.dispatch(&exe, exe.entry_point("sleep_us").unwrap(), [1, 1, 1], &[us], &[]).unwrap();
    commands.end().unwrap();
    Some(commands)
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn finding_1_last_handles_dropped_with_cross_queue_work_in_flight_never_deadlock() {
    if !require_cuda() {
        return;
    }
    within(Duration::from_secs(120), "finding 1", || {
        for round in 0..10 {
            let device = device();
            let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
            let (s0, s1) = (device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap());
            let Some(commands) = sleeping(&device, 200) else { return };
            q0.execute(&[], &commands, &[]).unwrap();
            q0.barrier(&[], &[SV::new(&s0, 1)]).unwrap();
            q1.barrier(&[SV::new(&s0, 1)], &[SV::new(&s1, 1)]).unwrap();
            drop((device, q0, q1, commands));
            if let Err(e) = s1.wait(1, Timeout::After(SHORT)) {
                assert_eq!(e.code(), StatusCode::Cancelled, "round {round}: {e}");
            }
        }
    });
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn finding_2a_host_call_waits_on_its_own_queue() {
    if !require_cuda() {
        return;
    }
    within(Duration::from_secs(30), "finding 2a", || {
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
        let after = device.create_semaphore(0).unwrap();
        q0.barrier(&[], &[SV::new(&after, 1)]).unwrap();
        after.wait(1, Timeout::After(SHORT)).unwrap();
    });
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn finding_2b_timed_wait_returns_by_its_deadline_while_a_host_call_runs() {
    if !require_cuda() {
        return;
    }
    within(Duration::from_secs(30), "finding 2b", || {
        let device = device();
        let q0 = device.queue(0).unwrap();
        let buffer = device_buffer(&device, 1 << 20);
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
        let device_sem = device.create_semaphore(0).unwrap();
        let host_sem = Semaphore::new(0);
        q0.fill(&[], &buffer, 0, 1 << 20, 1, 1, &[SV::new(&device_sem, 1), SV::new(&host_sem, 1)]).unwrap();
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
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn finding_3_held_execute_is_cancelled_when_the_device_drops() {
    if !require_cuda() {
        return;
    }
    within(Duration::from_secs(30), "finding 3", || {
        let device = device();
        let q0 = device.queue(0).unwrap();
        let gate = Semaphore::new(0);
        let done = device.create_semaphore(0).unwrap();
        let buffer = device_buffer(&device, 4096);
        let commands = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
        commands.fill(&buffer, 0, 4096, 7, 1).unwrap();
        commands.end().unwrap();
        q0.execute(&[SV::new(&gate, 1)], &commands, &[SV::new(&done, 1)]).unwrap();
        drop((device, q0, commands, buffer));
        let err = done.wait(1, Timeout::After(Duration::from_secs(2))).unwrap_err();
        assert_eq!(err.code(), StatusCode::Cancelled, "{err}");
    });
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn finding_4_a_panicking_waker_does_not_stop_the_completion_thread() {
    if !require_cuda() {
        return;
    }
    struct Bomb;
    impl std::task::Wake for Bomb {
        fn wake(self: Arc<Self>) {
            panic!("waker exploded (expected by the test)");
        }
    }
    within(Duration::from_secs(30), "finding 4", || {
        let device = device();
        let q0 = device.queue(0).unwrap();
        let s = device.create_semaphore(0).unwrap();
        let mut bomb = Box::pin(s.wait_async(1));
        let waker = std::task::Waker::from(Arc::new(Bomb));
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(std::future::Future::poll(bomb.as_mut(), &mut cx).is_pending());
        q0.barrier(&[], &[SV::new(&s, 1)]).unwrap();
        q0.barrier(&[], &[SV::new(&s, 2)]).unwrap();
        s.wait(2, Timeout::After(SHORT)).expect("the queue keeps completing work");
    });
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn finding_5_later_work_on_the_queue_starts_after_the_host_call_returns() {
    if !require_cuda() {
        return;
    }
    within(Duration::from_secs(30), "finding 5", || {
        for (flags, blocking) in [(HostCallFlags::empty(), true), (HostCallFlags::NON_BLOCKING, false)] {
            let device = device();
            let q0 = device.queue(0).unwrap();
            let buffer = host_buffer(&device, 4);
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
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn finding_6_failing_a_semaphore_fails_issued_work_that_waits_on_it() {
    if !require_cuda() {
        return;
    }
    within(Duration::from_secs(30), "finding 6", || {
        let device = device();
        let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
        let (s, t) = (device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap());
        let buffer = device_buffer(&device, 4096);
        let Some(slow) = sleeping(&device, 200_000) else { return };
        q0.execute(&[], &slow, &[SV::new(&s, 1)]).unwrap();
        q1.fill(&[SV::new(&s, 1)], &buffer, 0, 4096, 3, 1, &[SV::new(&t, 1)]).unwrap();
        s.fail(hal::Error::aborted("the host gave up on s"));
        let err = t.wait(1, Timeout::After(SHORT)).unwrap_err();
        assert_eq!(err.code(), StatusCode::Aborted, "{err}");
        assert!(err.message().contains("gave up"), "{err}");
    });
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn finding_7_a_single_wait_wakes_when_the_host_reaches_the_value() {
    if !require_cuda() {
        return;
    }
    within(Duration::from_secs(30), "finding 7", || {
        let device = device();
        let q0 = device.queue(0).unwrap();
        let s = device.create_semaphore(0).unwrap();
        let Some(slow) = sleeping(&device, 600_000) else { return };
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
        let latency = waiter.join().unwrap().saturating_duration_since(signalled);
        println!("MEASURED: a wait(3) woke {latency:?} after the host signalled 3 (device work for 5 running)");
        assert!(latency < Duration::from_millis(50), "woke {latency:?} after the host signal");
        s.wait(5, Timeout::After(SHORT)).unwrap();
    });
}
