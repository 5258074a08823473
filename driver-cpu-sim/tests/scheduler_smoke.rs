//! End-to-end checks of the shared scheduler on the cpu-sim device: ordering through semaphores,
//! wait-before-signal, cross-queue chains, failure propagation and the hang report.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hal::{
    BufferBinding, BufferParams, CommandBufferMode, EntryPointInfo, ExecutableSource, NativeEntryPoint,
    NativeInvocation, SemaphoreValue as SV, StatusCode, Timeout,
};

fn device() -> hal::Device {
    driver_cpu_sim::create_device().expect("cpu-sim device")
}

const T: Timeout = Timeout::After(Duration::from_secs(10));

#[test]
fn fill_then_copy_across_queues_in_semaphore_order() {
    let device = device();
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let a = device.allocate_buffer(BufferParams::host_visible(), 64).unwrap();
    let b = device.allocate_buffer(BufferParams::host_visible(), 64).unwrap();
    let s = device.create_semaphore(0).unwrap();
    // Submitted first, runs second: the copy waits for the fill on the other queue.
    q1.copy(&[SV::new(&s, 1)], &a, 0, &b, 0, 64, &[SV::new(&s, 2)]).unwrap();
    q0.fill(&[], &a, 0, 64, 0x1234_5678u32, &[SV::new(&s, 1)]).unwrap();
    s.wait(2, T).unwrap();
    let bytes = b.read_to_vec().unwrap();
    assert_eq!(&bytes[..4], &0x1234_5678u32.to_le_bytes());
    device.resource_usage();
}

#[test]
fn wait_before_signal_is_held_then_released_by_the_host() {
    let device = device();
    let q = device.queue(0).unwrap();
    let buf = device.allocate_buffer(BufferParams::host_visible(), 8).unwrap();
    let gate = device.create_semaphore(0).unwrap();
    let done = device.create_semaphore(0).unwrap();
    q.fill(&[SV::new(&gate, 5)], &buf, 0, 8, 7u8, &[SV::new(&done, 1)]).unwrap();
    assert!(done.wait(1, Timeout::After(Duration::from_millis(50))).is_err(), "must be held");
    let report = device.report();
    assert!(report.contains(&format!("semaphore {} >= 5", gate.id())), "report names the wait: {report}");
    gate.signal(5).unwrap();
    done.wait(1, T).unwrap();
    assert_eq!(buf.read_to_vec().unwrap(), vec![7; 8]);
}

#[test]
fn failed_wait_fails_signals_without_running() {
    let device = device();
    let q = device.queue(0).unwrap();
    let buf = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    let gate = device.create_semaphore(0).unwrap();
    let done = device.create_semaphore(0).unwrap();
    q.fill(&[SV::new(&gate, 1)], &buf, 0, 4, 9u8, &[SV::new(&done, 1)]).unwrap();
    gate.fail(hal::Error::data_loss("upstream broke"));
    let err = done.wait(1, T).unwrap_err();
    assert_eq!(err.code(), StatusCode::DataLoss);
    assert_eq!(buf.read_to_vec().unwrap(), vec![0; 4], "the fill never ran");
}

#[test]
fn faulting_kernel_fails_its_signals_and_downstream_but_not_other_work() {
    let device = device();
    let kernels = ExecutableSource::Native(vec![
        NativeEntryPoint::new(
            EntryPointInfo::new("fault", 1, 1, 0),
            Arc::new(|_inv: &NativeInvocation<'_>| Err("trap on purpose".to_string())),
        ),
        NativeEntryPoint::new(
            EntryPointInfo::new("write_one", 1, 1, 0),
            Arc::new(|inv: &NativeInvocation<'_>| {
                if !inv.bindings[0].store_u32(0, 1) {
                    return Err("store outside the binding".to_string());
                }
                Ok(())
            }),
        ),
    ]);
    let exe = device.load_executable(&kernels).unwrap();
    let buf = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    let other = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    let fault_cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    fault_cb.dispatch(&exe, 0, [1, 1, 1], &[], &[BufferBinding::whole(&buf)]).unwrap();
    fault_cb.end().unwrap();
    let after_cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    after_cb.dispatch(&exe, 1, [1, 1, 1], &[], &[BufferBinding::whole(&buf)]).unwrap();
    after_cb.end().unwrap();
    let other_cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    other_cb.dispatch(&exe, 1, [1, 1, 1], &[], &[BufferBinding::whole(&other)]).unwrap();
    other_cb.end().unwrap();

    let s = device.create_semaphore(0).unwrap();
    let t = device.create_semaphore(0).unwrap();
    let u = device.create_semaphore(0).unwrap();
    let q0 = device.queue(0).unwrap();
    let q1 = device.queue(1).unwrap();
    q0.execute(&[], &fault_cb, &[SV::new(&s, 1)]).unwrap();
    // Chained device-side on the faulting work's event: must not run.
    q1.execute(&[SV::new(&s, 1)], &after_cb, &[SV::new(&t, 1)]).unwrap();
    q0.execute(&[], &other_cb, &[SV::new(&u, 1)]).unwrap();
    let e = s.wait(1, T).unwrap_err();
    assert_eq!(e.code(), StatusCode::Aborted, "{e}");
    assert!(e.message().contains("trap on purpose"), "{e}");
    assert_eq!(t.wait(1, T).unwrap_err().code(), StatusCode::Aborted);
    u.wait(1, T).unwrap();
    assert_eq!(buf.read_to_vec().unwrap(), vec![0; 4], "downstream of the fault did not run");
    assert_eq!(other.read_to_vec().unwrap(), 1u32.to_le_bytes().to_vec(), "other work kept going");
}

#[test]
fn dependent_chain_across_three_queues_and_pools_return_to_idle() {
    let device = device();
    let buf = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    let s = device.create_semaphore(0).unwrap();
    // Three rounds of 100 dependent submissions: the whole round is issued at once (each is covered
    // by the previous one's event), and later rounds reuse the first round's events.
    let n = 300u64;
    for i in 0..n {
        let q = device.queue((i % 3) as usize).unwrap();
        q.fill(&[SV::new(&s, i)], &buf, 0, 4, i as u32, &[SV::new(&s, i + 1)]).unwrap();
        if (i + 1) % 100 == 0 {
            s.wait(i + 1, T).unwrap();
            device_idle(&device);
        }
    }
    assert_eq!(buf.read_to_vec().unwrap(), ((n - 1) as u32).to_le_bytes().to_vec());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let usage = device.resource_usage();
        if usage.is_idle() {
            let events = usage.pools.iter().find(|p| p.name == "events").unwrap();
            // At most 100 in flight per round, plus free events an issuer took into its queue's
            // cache in a batch (up to 32 per queue) while another queue had to create some: far
            // below the 300 that no reuse across rounds would need.
            assert!(events.created <= 100 + 3 * 32, "events are reused across rounds: {usage}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not idle: {usage}\n{}", device.report());
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn device_idle(device: &hal::Device) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !device.resource_usage().is_idle() {
        assert!(std::time::Instant::now() < deadline, "not idle: {}", device.report());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn alloca_read_write_host_call_in_order() {
    let device = device();
    let q = device.queue(2).unwrap();
    let s = device.create_semaphore(0).unwrap();
    let buf = q.alloca(&[], BufferParams::device_local(), 16, &[SV::new(&s, 1)]).unwrap();
    q.write(&[SV::new(&s, 1)], &buf, 0, vec![5u8; 16], &[SV::new(&s, 2)]).unwrap();
    let back = q.read(&[SV::new(&s, 2)], &buf, 4, 8, &[SV::new(&s, 3)]).unwrap();
    let seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = seen.clone();
    q.host_call(
        &[SV::new(&s, 3)],
        move || {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        },
        &[SV::new(&s, 4)],
    )
    .unwrap();
    q.dealloca(&[SV::new(&s, 4)], &buf, &[SV::new(&s, 5)]).unwrap();
    s.wait(5, T).unwrap();
    assert_eq!(back.take().unwrap(), vec![5u8; 8]);
    assert!(seen.load(std::sync::atomic::Ordering::SeqCst));
}

/// A dependent chain striped over four queues with multi-workgroup dispatches, repeated: retirement
/// across queues (producers first) must neither hang nor deadlock, and a device dropped while its
/// last work retires must not join its own threads.
#[test]
fn chain_over_four_queues_with_dispatches_never_hangs() {
    for round in 0..15 {
        let device = device();
        let add = ExecutableSource::Native(vec![NativeEntryPoint::new(
            EntryPointInfo::new("add", 16, 1, 1),
            Arc::new(|inv: &NativeInvocation<'_>| {
                let base = inv.workgroup_id[0] as usize * 16;
                for i in base..base + 16 {
                    let v = inv.bindings[0].load_u32(i).ok_or("out of range")?;
                    if !inv.bindings[0].store_u32(i, v + inv.constants[0]) {
                        return Err(format!("store of element {i} outside the binding"));
                    }
                }
                Ok(())
            }),
        )]);
        let exe = device.load_executable(&add).unwrap();
        let data = device.allocate_buffer(BufferParams::host_visible(), 256).unwrap();
        let cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
        cb.dispatch(&exe, 0, [4, 1, 1], &[1], &[BufferBinding::whole(&data)]).unwrap();
        cb.end().unwrap();
        let s = device.create_semaphore(0).unwrap();
        for i in 0..300u64 {
            device.queue((i % 4) as usize).unwrap().execute(&[SV::new(&s, i)], &cb, &[SV::new(&s, i + 1)]).unwrap();
        }
        if let Err(e) = s.wait(300, T) {
            panic!("round {round}: {e}\n{}", device.report());
        }
        let words: Vec<u32> =
            data.read_to_vec().unwrap().chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(words, vec![300; 64], "round {round}");
    }
}

/// Completion threads sleep once a queue has been idle for a while (and only then need a wake-up from
/// the submitting thread): submissions arriving just before, around and well after that moment must
/// all be retired. Deadline waits do not retire work themselves, so each relies on the completion
/// thread noticing its submission.
#[test]
fn submissions_after_idle_gaps_wake_the_completion_thread() {
    let device = device();
    let queues: Vec<_> = (0..2).map(|i| device.queue(i).unwrap()).collect();
    let buf = device.allocate_buffer(BufferParams::host_visible(), 64).unwrap();
    let s = device.create_semaphore(0).unwrap();
    let gaps_us = [0u64, 10, 30, 45, 50, 55, 70, 100, 500, 2000];
    let mut value = 0u64;
    for round in 0..3 {
        for (i, &gap) in gaps_us.iter().enumerate() {
            std::thread::sleep(Duration::from_micros(gap));
            let queue = &queues[(round + i) % 2];
            queue.fill(&[SV::new(&s, value)], &buf, 0, 64, value as u32, &[SV::new(&s, value + 1)]).unwrap();
            value += 1;
            let started = std::time::Instant::now();
            s.wait(value, Timeout::After(Duration::from_secs(5)))
                .unwrap_or_else(|e| panic!("submission {value} after a {gap} us gap was not retired: {e}"));
            assert!(started.elapsed() < Duration::from_secs(1), "retired late after a {gap} us gap");
        }
    }
    assert_eq!(&buf.read_to_vec().unwrap()[..4], &(value as u32 - 1).to_le_bytes());
}

/// Events of `device`'s pool: (in use, created).
fn events(device: &hal::Device) -> (usize, usize) {
    let usage = device.resource_usage();
    let pool = usage.pools.iter().find(|p| p.name == "events").expect("an events pool");
    (pool.in_use, pool.created)
}

/// Barriers and executes of an empty command buffer put nothing on the stream: issued right after
/// device work, they share the event recorded after it instead of recording one each (200 such
/// submissions in flight behind a slow fill create no event), and their signals are reached only
/// once that work is done. Work that does run records its own event again.
#[test]
fn work_with_nothing_to_run_shares_the_last_event() {
    let device = device();
    let q = device.queue(0).unwrap();
    let big = device.allocate_buffer(BufferParams::host_visible(), 256 << 20).unwrap();
    let small = device.allocate_buffer(BufferParams::host_visible(), 64).unwrap();
    let empty = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    empty.barrier().unwrap();
    empty.end().unwrap();
    let (filled, barriers, executes, after) =
        (device.create_semaphore(0).unwrap(), hal::Semaphore::new(0), hal::Semaphore::new(0), hal::Semaphore::new(0));
    q.fill(&[], &big, 0, 256 << 20, 0x01u8, &[SV::new(&filled, 1)]).unwrap();
    let (_, created) = events(&device);
    for i in 1..=100 {
        q.barrier(&[], &[SV::new(&barriers, i)]).unwrap();
        q.execute(&[], &empty, &[SV::new(&executes, i)]).unwrap();
    }
    let (_, shared_created) = events(&device);
    q.fill(&[], &small, 0, 64, 0x02u8, &[SV::new(&after, 1)]).unwrap();
    let (_, fill_created) = events(&device);
    barriers.wait(100, T).unwrap();
    assert_eq!(filled.query().unwrap(), 1, "a barrier's signal was reached before the work it follows");
    executes.wait(100, T).unwrap();
    after.wait(1, T).unwrap();
    assert_eq!(small.read_to_vec().unwrap(), vec![0x02; 64]);
    // The fill took well over the time the 200 submissions took (256 MiB on the host), so any
    // event of theirs would still have been in flight: sharing is what kept the count.
    assert_eq!(shared_created, created, "200 submissions with nothing to run created events");
    assert!(fill_created <= created + 1, "the fill after them records its own event");
    eventually("no event in use once idle", || events(&device).0 == 0);
}

/// Polls `done` for up to 10 s.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A waker that records whether it was woken, and on which thread.
struct Recorder(std::sync::Mutex<Option<std::thread::ThreadId>>);

impl std::task::Wake for Recorder {
    fn wake(self: Arc<Self>) {
        *self.0.lock().unwrap() = Some(std::thread::current().id());
    }
}

/// On a queue whose earlier submissions have all retired, a barrier or an empty execute has
/// reached its stream point already: it retires on the submitting thread, which wakes the
/// semaphore's waiters before the call returns (the ordinary path wakes them from the queue's
/// completion thread, later); device work after it still runs in order.
#[test]
fn work_with_nothing_to_run_on_an_idle_queue_retires_at_issue() {
    let device = device();
    let q = device.queue(0).unwrap();
    let empty = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    empty.end().unwrap();
    let buf = device.allocate_buffer(BufferParams::host_visible(), 64).unwrap();
    let s = device.create_semaphore(0).unwrap();
    q.fill(&[], &buf, 0, 64, 0x03u8, &[SV::new(&s, 1)]).unwrap();
    s.wait(1, T).unwrap();
    // The completion thread may still hold the queue's retiring lock for a moment after the wait:
    // then the submission takes the ordinary path. Some of a few tries, spaced out, find it idle.
    let mut at_issue = 0;
    for value in 2..=21 {
        std::thread::sleep(Duration::from_millis(2));
        let recorder = Arc::new(Recorder(std::sync::Mutex::new(None)));
        let waker = std::task::Waker::from(recorder.clone());
        let mut future = std::pin::pin!(s.wait_async(value));
        let polled = future.as_mut().poll(&mut std::task::Context::from_waker(&waker));
        assert!(polled.is_pending(), "value {value} reached before its submission");
        if value % 2 == 0 {
            q.barrier(&[SV::new(&s, value - 1)], &[SV::new(&s, value)]).unwrap();
        } else {
            q.execute(&[SV::new(&s, value - 1)], &empty, &[SV::new(&s, value)]).unwrap();
        }
        if *recorder.0.lock().unwrap() == Some(std::thread::current().id()) {
            at_issue += 1;
        }
        s.wait(value, T).unwrap();
    }
    assert!(at_issue > 0, "no barrier or empty execute on the idle queue retired at issue");
    q.fill(&[SV::new(&s, 21)], &buf, 0, 64, 0x04u8, &[SV::new(&s, 22)]).unwrap();
    s.wait(22, T).unwrap();
    assert_eq!(buf.read_to_vec().unwrap(), vec![0x04; 64]);
    eventually("no event in use once idle", || events(&device).0 == 0);
}

/// A small grid of heavy workgroups (IREE's CPU executables tile a matmul into a few workgroups of
/// milliseconds each) runs on the workgroup pool once its first workgroup shows the rest is worth
/// it; a small grid of light workgroups stays on the stream thread.
#[test]
fn a_few_heavy_workgroups_spread_over_the_pool_and_light_ones_stay_inline() {
    let device = device();
    let threads = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let seen = threads.clone();
    let exe = device
        .load_executable(&ExecutableSource::Native(vec![NativeEntryPoint::new(
            EntryPointInfo::new("work", 1, 0, 1),
            Arc::new(move |inv: &NativeInvocation<'_>| {
                seen.lock().map_err(|_| "poisoned")?.insert(std::thread::current().id());
                std::thread::sleep(Duration::from_micros(u64::from(inv.constants[0])));
                Ok(())
            }),
        )]))
        .unwrap();
    let q = device.queue(0).unwrap();
    let s = device.create_semaphore(0).unwrap();
    let run = |micros: u32, workgroups: u32, value: u64| {
        let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
        cb.dispatch(&exe, 0, [workgroups, 1, 1], &[micros], &[]).unwrap();
        cb.end().unwrap();
        threads.lock().unwrap().clear();
        let started = std::time::Instant::now();
        q.execute(&[], &cb, &[SV::new(&s, value)]).unwrap();
        s.wait(value, T).unwrap();
        (threads.lock().unwrap().len(), started.elapsed())
    };
    // The hand-off rests on one timed workgroup, so a first workgroup preempted on a loaded machine
    // can send a light grid to the pool (a wake-up wasted, nothing wrong): one run in five on one
    // thread is enough.
    let light: Vec<usize> = (1..=5).map(|value| run(0, 16, value).0).collect();
    assert!(light.contains(&1), "16 empty workgroups never ran on the stream thread alone: {light:?} threads");
    let (heavy, took) = run(20_000, 8, 6);
    assert!(heavy > 1, "8 workgroups of 20 ms ran on one thread ({took:?})");
    assert!(took < Duration::from_millis(150), "8 workgroups of 20 ms took {took:?}: not spread");
}

/// An entry point whose workgroups were seen to be heavy sends its next small grid to the pool at
/// once: its first workgroup no longer runs alone while the other runners wait for its timing.
#[test]
fn a_heavy_entry_point_dispatched_again_starts_its_workgroups_together() {
    let device = device();
    let spans = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = spans.clone();
    let exe = device
        .load_executable(&ExecutableSource::Native(vec![NativeEntryPoint::new(
            EntryPointInfo::new("heavy", 1, 0, 0),
            Arc::new(move |inv: &NativeInvocation<'_>| {
                let start = std::time::Instant::now();
                std::thread::sleep(Duration::from_millis(30));
                seen.lock().map_err(|_| "poisoned")?.push((inv.workgroup_id[0], start, std::time::Instant::now()));
                Ok(())
            }),
        )]))
        .unwrap();
    let q = device.queue(0).unwrap();
    let s = device.create_semaphore(0).unwrap();
    // Whether a workgroup other than 0 started before workgroup 0 ended.
    let overlapped_first = |value: u64| {
        let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
        cb.dispatch(&exe, 0, [4, 1, 1], &[], &[]).unwrap();
        cb.end().unwrap();
        spans.lock().unwrap().clear();
        q.execute(&[], &cb, &[SV::new(&s, value)]).unwrap();
        s.wait(value, T).unwrap();
        let spans = spans.lock().unwrap();
        let first_end = spans.iter().find(|(id, ..)| *id == 0).map(|(.., end)| *end).unwrap();
        spans.iter().any(|(id, start, _)| *id != 0 && *start < first_end)
    };
    assert!(
        !overlapped_first(1),
        "the first grid of an entry point never timed ran its first workgroup alongside others"
    );
    // Its workgroups start together only once a pool thread has woken, which a loaded machine can
    // delay past a 30 ms workgroup (CI saw it once): one grid in three is enough; without the
    // estimate every grid runs its first workgroup alone.
    assert!(
        (2..=4).any(overlapped_first),
        "a heavy entry point's later grids timed their first workgroup alone again, three times"
    );
}
