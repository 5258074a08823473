//! What a hostile but fair embedder does, in the checks only cpu-sim can make: no HAL thread left
//! after teardown, a user deadlock named by the report, huge native dispatches stopped,
//! behind-the-value signals counted, host calls released together. The driver-independent checks
//! are ctest's `misuse` cases, run on every driver. Each test runs under a watchdog, so a hang fails with a message
//! instead of stalling the suite, and the tests run one at a time (they count the process's threads).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use hal::driver::lock;
use hal::{
    CommandBufferMode, EntryPointInfo, ExecutableSource, HostCallFlags, NativeEntryPoint, NativeInvocation, Semaphore,
    SemaphoreValue as SV, StatusCode, Timeout,
};

/// One test at a time: they count threads and time waits.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `body` on its own thread and fails if it does not finish within `limit`.
fn within(limit: Duration, what: &str, body: impl FnOnce() + Send + 'static) {
    let _serial = lock(&SERIAL);
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

/// Waits up to five seconds (a loaded machine) for the HAL's thread count to come back to `baseline`
/// and stay there for three readings in a row: listing `/proc/self/task` while other threads exit
/// can skip a thread that is still alive, so one low reading proves nothing.
fn assert_threads_back_to(baseline: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut low_readings = 0;
    while low_readings < 3 && Instant::now() < deadline {
        low_readings = if thread_count() <= baseline { low_readings + 1 } else { 0 };
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
    let entry = NativeEntryPoint::new(
        EntryPointInfo::new("sleep", 1, 0, 0),
        Arc::new(move |_: &NativeInvocation<'_>| {
            std::thread::sleep(per_workgroup);
            Ok(())
        }),
    );
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

/// A device dropped with work in flight across queues and work held
/// behind a gate leaves none of its threads behind. ctest's `misuse` cases check the outcomes (no
/// deadlock, `Cancelled`) on every driver.
#[test]
fn teardown_with_work_in_flight_leaves_no_hal_thread() {
    within(Duration::from_secs(60), "teardown with work in flight", || {
        let baseline = thread_count();
        for round in 0..20 {
            let device = device();
            let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
            let (s0, s1) = (device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap());
            let gate = Semaphore::new(0);
            let commands = sleeping_commands(&device, Duration::from_micros(200), 4);
            let held = sleeping_commands(&device, Duration::ZERO, 1);
            q0.execute(&[], &commands, &[]).unwrap();
            q0.barrier(&[], &[SV::new(&s0, 1)]).unwrap();
            q1.barrier(&[SV::new(&s0, 1)], &[SV::new(&s1, 1)]).unwrap();
            q1.execute(&[SV::new(&gate, 1)], &held, &[SV::new(&s1, 2)]).unwrap();
            drop((device, q0, q1, commands, held));
            let err = s1.wait(2, Timeout::After(SHORT)).unwrap_err();
            assert_eq!(err.code(), StatusCode::Cancelled, "round {round}: {err}");
        }
        assert_threads_back_to(baseline, "teardown with work in flight");
    });
}

/// A host call's closure that holds the last clone of its device drops it on the host-call thread:
/// the device tears down from there, and none of its threads is left behind.
#[test]
fn last_device_clone_dropped_in_a_host_call_leaves_no_hal_thread() {
    within(Duration::from_secs(30), "last device clone in a host call", || {
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
                HostCallFlags::NON_BLOCKING,
                &[SV::new(&done, 1)],
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
        assert_threads_back_to(baseline, "last device clone in a host call");
    });
}

#[test]
fn a_user_deadlock_is_named_by_the_report() {
    within(Duration::from_secs(20), "user deadlock report", || {
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

/// A device running a dispatch of 2^31-1 workgroups of 1 ms each on queue 0 (within the per-axis
/// limits, and millennia of work) that signals the returned semaphore to 1.
fn huge_dispatch_running() -> (hal::Device, hal::Queue, Semaphore, hal::CommandBuffer) {
    let device = device();
    let q0 = device.queue(0).unwrap();
    let s = device.create_semaphore(0).unwrap();
    let huge = sleeping_commands(&device, Duration::from_millis(1), i32::MAX as u32);
    q0.execute(&[], &huge, &[SV::new(&s, 1)]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    (device, q0, s, huge)
}

#[test]
fn failing_every_signal_of_a_huge_dispatch_stops_it() {
    within(Duration::from_secs(20), "huge dispatch, signals failed", || {
        let (device, q0, s, _huge) = huge_dispatch_running();
        s.fail(hal::Error::aborted("nobody wants it any more"));
        // The queue is free again soon: later work completes.
        let after = device.create_semaphore(0).unwrap();
        q0.barrier(&[], &[SV::new(&after, 1)]).unwrap();
        after.wait(1, Timeout::After(SHORT)).expect("the dispatch stopped");
    });
}

#[test]
fn dropping_the_device_stops_a_huge_dispatch() {
    within(Duration::from_secs(20), "huge dispatch, device dropped", || {
        let (device, q0, s, huge) = huge_dispatch_running();
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
                HostCallFlags::NON_BLOCKING,
                &[SV::new(&done, 1)],
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
