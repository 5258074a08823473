//! With `CpuSimOptions::with_light_work_at_issue`, light work on an idle queue runs on the
//! submitting thread (`StreamModel::run_at_issue`): it is done, its signal applied, when the call
//! returns. Without it (the default) everything but small allocas and deallocas (the last test)
//! goes through the stream. Work whose cost is not known yet, and work
//! behind other work of its queue, still goes through the stream in order; a failure found at issue
//! fails the signal as a stream's would.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use hal::driver::Driver;

use hal::{
    BufferBinding, BufferParams, CommandBuffer, CommandBufferMode, Device, EntryPointInfo, ExecutableSource,
    NativeEntryPoint, NativeInvocation, SemaphoreValue as SV, StatusCode, Timeout,
};

const T: Timeout = Timeout::After(Duration::from_secs(30));

/// A one-workgroup command buffer whose kernel adds 1 to word 0 of `data` and records the thread it
/// ran on in `ran_on`; it spins first while `hold` is set, and fails while `fail` is set.
fn recording_command_buffer(
    device: &Device,
    data: &hal::Buffer,
    ran_on: &Arc<Mutex<Vec<ThreadId>>>,
    hold: &Arc<AtomicBool>,
    fail: &Arc<AtomicBool>,
) -> CommandBuffer {
    let (ran_on, hold, fail) = (ran_on.clone(), hold.clone(), fail.clone());
    let kernel = Arc::new(move |inv: &NativeInvocation<'_>| -> Result<(), String> {
        while hold.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        ran_on.lock().map_err(|e| e.to_string())?.push(std::thread::current().id());
        if fail.load(Ordering::Acquire) {
            return Err("deliberate failure".into());
        }
        let v = inv.bindings[0].load_u32(0).ok_or("out of range")?;
        if inv.bindings[0].store_u32(0, v + 1) { Ok(()) } else { Err("store outside the binding".into()) }
    });
    let entry = NativeEntryPoint::new(EntryPointInfo::new("bump", 1, 1, 0), kernel);
    let executable = device.load_executable(&ExecutableSource::Native(vec![entry])).unwrap();
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    cb.dispatch(&executable, 0, [1, 1, 1], &[], &[BufferBinding::whole(data)]).unwrap();
    cb.end().unwrap();
    cb
}

struct Setup {
    device: Device,
    data: hal::Buffer,
    cb: CommandBuffer,
    ran_on: Arc<Mutex<Vec<ThreadId>>>,
    hold: Arc<AtomicBool>,
    fail: Arc<AtomicBool>,
}

fn device(at_issue: bool) -> Device {
    let options = driver_cpu_sim::CpuSimOptions::default().with_light_work_at_issue(at_issue);
    driver_cpu_sim::CpuSimDriver::with_options(options).create_device(0).unwrap()
}

fn setup() -> Setup {
    let device = device(true);
    let data = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    let (ran_on, hold, fail) = (Arc::default(), Arc::default(), Arc::default());
    let cb = recording_command_buffer(&device, &data, &ran_on, &hold, &fail);
    Setup { device, data, cb, ran_on, hold, fail }
}

fn last_thread(ran_on: &Mutex<Vec<ThreadId>>) -> ThreadId {
    *ran_on.lock().unwrap().last().expect("the kernel ran")
}

/// Executes `s.cb` on `queue`, signalling `done` 1, 2, ..., each waited for, until one runs on this
/// thread; returns the value it signalled. The first goes to the stream: its entry point was never
/// timed. The next may too, where the completion thread still holds the queue's retiring lock as
/// it tells the waiter of the one before: then the queue does not count as idle.
fn first_run_at_issue(s: &Setup, queue: &hal::Queue, done: &hal::Semaphore) -> u64 {
    let here = std::thread::current().id();
    queue.execute(&[], &s.cb, &[SV::new(done, 1)]).unwrap();
    done.wait(1, T).unwrap();
    assert_ne!(last_thread(&s.ran_on), here, "an entry point never timed runs on the stream's thread");
    for value in 2..=50u64 {
        queue.execute(&[SV::new(done, value - 1)], &s.cb, &[SV::new(done, value)]).unwrap();
        done.wait(value, T).unwrap();
        if last_thread(&s.ran_on) == here {
            return value;
        }
    }
    panic!("49 light executes on an idle queue, none ran on the submitting thread");
}

/// Whether the kernel ran on this thread during `call`: the thread it records, appended meanwhile.
fn ran_during_call(ran_on: &Mutex<Vec<ThreadId>>, call: impl FnOnce()) -> bool {
    let before = ran_on.lock().unwrap().len();
    call();
    let ran = ran_on.lock().unwrap();
    ran.len() > before && ran[before] == std::thread::current().id()
}

#[test]
fn light_work_on_an_idle_queue_runs_on_the_submitting_thread_and_is_done_when_the_call_returns() {
    let s = setup();
    let queue = s.device.queue(0).unwrap();
    let done = s.device.create_semaphore(0).unwrap();
    let first = first_run_at_issue(&s, &queue, &done);
    // Each execute that ran at the call is done, its signal applied, when the call returns. (One
    // may still go to the stream: a workgroup timed while the machine was busy can put the
    // estimate over the limit.)
    let mut at_issue = 0;
    for value in first + 1..=first + 20 {
        let submit = || queue.execute(&[SV::new(&done, value - 1)], &s.cb, &[SV::new(&done, value)]).unwrap();
        if ran_during_call(&s.ran_on, submit) {
            at_issue += 1;
            assert_eq!(done.query().unwrap(), value, "execute {value} ran at the call and was done when it returned");
        }
    }
    done.wait(first + 20, T).unwrap();
    let total = u32::try_from(first + 20).unwrap();
    assert_eq!(s.data.read_to_vec().unwrap(), total.to_le_bytes(), "every execute ran once");
    println!("{at_issue} of 20 executes ran at the call");
}

#[test]
fn by_default_light_work_goes_through_the_stream() {
    let device = device(false);
    let data = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    let (ran_on, hold, fail) = (Arc::default(), Arc::default(), Arc::default());
    let cb = recording_command_buffer(&device, &data, &ran_on, &hold, &fail);
    let queue = device.queue(0).unwrap();
    let done = device.create_semaphore(0).unwrap();
    for value in 1..=5u64 {
        queue.execute(&[SV::new(&done, value - 1)], &cb, &[SV::new(&done, value)]).unwrap();
        done.wait(value, T).unwrap();
        assert_ne!(last_thread(&ran_on), std::thread::current().id(), "execute {value} ran on the stream");
    }
}

#[test]
fn light_work_behind_running_work_of_its_queue_waits_its_turn_on_the_stream() {
    let s = setup();
    let queue = s.device.queue(0).unwrap();
    let done = s.device.create_semaphore(0).unwrap();
    let other = s.device.create_semaphore(0).unwrap();
    queue.execute(&[], &s.cb, &[SV::new(&done, 1)]).unwrap();
    done.wait(1, T).unwrap();
    // A command buffer of a kernel never timed goes to the stream, where it holds the stream; the
    // light execute after it waits on nothing, but its queue is busy.
    let held = recording_command_buffer(&s.device, &s.data, &s.ran_on, &s.hold, &s.fail);
    s.hold.store(true, Ordering::Release);
    queue.execute(&[], &held, &[SV::new(&done, 2)]).unwrap();
    queue.execute(&[], &s.cb, &[SV::new(&other, 1)]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(other.query().unwrap(), 0, "work behind held work of its queue did not run at the call");
    s.hold.store(false, Ordering::Release);
    done.wait(2, T).unwrap();
    other.wait(1, T).unwrap();
    assert_ne!(last_thread(&s.ran_on), std::thread::current().id(), "it ran on the stream, in order");
    assert_eq!(s.data.read_to_vec().unwrap(), 3u32.to_le_bytes());
}

#[test]
fn light_work_that_fails_at_issue_fails_its_signal_and_later_work_still_runs() {
    let s = setup();
    let queue = s.device.queue(0).unwrap();
    let done = s.device.create_semaphore(0).unwrap();
    let first = first_run_at_issue(&s, &queue, &done);
    s.fail.store(true, Ordering::Release);
    // Until one fails at the call (one that went to the stream fails there, later).
    let mut failed_at_issue = None;
    for _ in 0..50 {
        let failed = s.device.create_semaphore(0).unwrap();
        let submit = || queue.execute(&[], &s.cb, &[SV::new(&failed, 1)]).unwrap();
        if ran_during_call(&s.ran_on, submit) {
            failed_at_issue = Some(failed);
            break;
        }
        assert!(failed.wait(1, T).is_err(), "a failing execute on the stream fails its signal");
    }
    let failed = failed_at_issue.expect("a failing execute ran at the call");
    let e = failed.wait(1, Timeout::Immediate).unwrap_err();
    assert_eq!(e.code(), StatusCode::Aborted, "{e}");
    assert!(e.message().contains("deliberate failure") && e.message().contains("bump"), "{e}");
    s.fail.store(false, Ordering::Release);
    queue.execute(&[], &s.cb, &[SV::new(&done, first + 1)]).unwrap();
    done.wait(first + 1, T).unwrap();
    let total = u32::try_from(first + 1).unwrap();
    assert_eq!(s.data.read_to_vec().unwrap(), total.to_le_bytes(), "the failed execute changed nothing");
}

#[test]
fn threads_on_their_own_queues_each_run_their_light_work_and_every_result_counts() {
    let device = device(true);
    let counters: Vec<_> = (0..4).map(|_| device.allocate_buffer(BufferParams::host_visible(), 4).unwrap()).collect();
    let (hold, fail) = (Arc::default(), Arc::default());
    let calls = Arc::new(AtomicU32::new(0));
    std::thread::scope(|scope| {
        for (q, data) in counters.iter().enumerate() {
            let (device, hold, fail, calls) = (&device, &hold, &fail, calls.clone());
            scope.spawn(move || {
                let ran_on = Arc::default();
                let cb = recording_command_buffer(device, data, &ran_on, hold, fail);
                let queue = device.queue(q % device.queue_count()).unwrap();
                let done = device.create_semaphore(0).unwrap();
                for value in 1..=500u64 {
                    queue.execute(&[SV::new(&done, value - 1)], &cb, &[SV::new(&done, value)]).unwrap();
                    calls.fetch_add(1, Ordering::Relaxed);
                }
                done.wait(500, T).unwrap();
            });
        }
    });
    assert_eq!(calls.load(Ordering::Relaxed), 2000);
    for (q, data) in counters.iter().enumerate() {
        assert_eq!(data.read_to_vec().unwrap(), 500u32.to_le_bytes(), "counter {q}");
    }
}

/// On the default device too, an alloca or dealloca of at most 64 KiB whose waits are reached on an
/// idle queue is made on the submitting thread (`StreamModel::run_at_submission`): its signal is
/// applied when the call returns. Behind held work it waits its turn, and a larger one goes through
/// the stream.
#[test]
fn small_allocas_on_an_idle_queue_are_done_at_submission() {
    let device = driver_cpu_sim::create_device().unwrap();
    let queue = device.queue(0).unwrap();
    let s = device.create_semaphore(0).unwrap();
    let sv = |value: u64| [SV::new(&s, value)];
    let small = queue.alloca(&[], BufferParams::device_local(), 4096, &sv(1)).unwrap();
    assert_eq!(s.query().unwrap(), 1, "a small alloca on an idle queue is done when the call returns");
    queue.fill(&sv(1), &small, 0, 4096, 5u32, &sv(2)).unwrap();
    let read = queue.read(&sv(2), &small, 0, 8, &sv(3)).unwrap();
    assert_eq!(read.wait_as::<u32>(T).unwrap(), vec![5, 5]);
    s.wait(3, T).unwrap();
    queue.dealloca(&sv(3), &small, &sv(4)).unwrap();
    assert_eq!(s.query().unwrap(), 4, "a small dealloca on an idle queue is done when the call returns");
    // Behind a wait not reached yet, it waits its turn.
    let gate = device.create_semaphore(0).unwrap();
    queue.barrier(&[SV::new(&gate, 1)], &sv(5)).unwrap();
    let held = queue.alloca(&sv(5), BufferParams::device_local(), 64, &sv(6)).unwrap();
    assert_eq!(s.query().unwrap(), 4, "an alloca behind held work ran early");
    gate.signal(1).unwrap();
    s.wait(6, T).unwrap();
    queue.dealloca(&sv(6), &held, &sv(7)).unwrap();
    s.wait(7, T).unwrap();
    // A large one commits on the stream thread, in order, all the same.
    let large = queue.alloca(&sv(7), BufferParams::device_local(), 8 << 20, &sv(8)).unwrap();
    queue.fill(&sv(8), &large, (8 << 20) - 4, 4, 9u32, &sv(9)).unwrap();
    let read = queue.read(&sv(9), &large, (8 << 20) - 4, 4, &sv(10)).unwrap();
    assert_eq!(read.wait_as::<u32>(T).unwrap(), vec![9]);
    queue.dealloca(&sv(10), &large, &sv(11)).unwrap();
    s.wait(11, T).unwrap();
}
