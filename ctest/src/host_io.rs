//! Host I/O and names: typed writes and reads (`bytemuck` plain-old-data values), a `Readback`
//! that is waited on or awaited and fails with its read's cause instead of leaving a waiter
//! hanging, and labels that name semaphores, buffers, command buffers and executables in errors
//! and in `Device::report`.

use std::future::{Future, IntoFuture};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use hal::{BufferParams, CommandBufferMode, Error, Semaphore, StatusCode, Timeout};

use crate::check::{CaseError, CaseResult, Context, expect_code};
use crate::context::{Cx, LONG, SHORT, drop_in_time, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

/// Runs `future` to completion on this thread (a waker that unparks it), for at most `limit`.
fn block_on<F: Future>(future: F, limit: Duration) -> Result<F::Output, CaseError> {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut future = pin!(future);
    let deadline = Instant::now() + limit;
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut TaskContext::from_waker(&waker)) {
            return Ok(output);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        ensure!(!left.is_zero(), "the future was not ready within {limit:?}");
        std::thread::park_timeout(left);
    }
}

/// A read held behind a wait is not ready (an immediate wait is `DeadlineExceeded`, `take` gives
/// nothing); once the wait is reached, the typed values written before it come back.
pub(crate) fn readback_waits_for_its_read(cx: &Cx) -> CaseResult {
    let (queue, gate) = (cx.queue(0), cx.sem(0)?);
    let buffer = cx.device_buffer(16)?;
    let values = [1.5f32, -2.25, 1e-3, 4096.0];
    queue.write_values(&[sv(&gate, 1)], &buffer, 0, &values, &[sv(&gate, 2)]).ctx("write_values")?;
    let readback = queue.read(&[sv(&gate, 2)], &buffer, 4, 12, &[]).ctx("read")?;
    std::thread::sleep(SHORT);
    ensure!(!readback.is_ready(), "a read held behind an unreached wait is ready");
    ensure!(readback.take().is_none(), "a held read handed over bytes");
    expect_code(readback.wait(Timeout::Immediate), StatusCode::DeadlineExceeded, "an immediate wait")?;
    gate.signal(1).ctx("release the write")?;
    let back = readback.wait_as::<f32>(Timeout::After(LONG)).ctx("wait_as")?;
    ensure_eq!(back, values[1..], "values read back");
    Ok(())
}

/// `.await` on a readback (and its `wait_async` future) gives the bytes without a runtime.
pub(crate) fn readback_is_awaitable(cx: &Cx) -> CaseResult {
    let (queue, gate) = (cx.queue(0), cx.sem(0)?);
    let buffer = cx.host_buffer_u32(&[7, 8, 9, 10])?;
    let readback = queue.read(&[sv(&gate, 1)], &buffer, 0, 16, &[]).ctx("read")?;
    let signaller = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            std::thread::sleep(SHORT);
            gate.signal(1)
        })
    };
    let bytes = block_on(readback.clone().into_future(), LONG)?.ctx("awaited readback")?;
    signaller.join().map_err(|_| CaseError::Fail("the signalling thread panicked".into()))?.ctx("signal")?;
    ensure_eq!(bytemuck::pod_collect_to_vec::<u8, u32>(&bytes), vec![7, 8, 9, 10], "awaited bytes");
    let again = block_on(readback.wait_async(), LONG)?;
    expect_code(again, StatusCode::FailedPrecondition, "awaiting bytes already handed over")?;
    Ok(())
}

/// `wait_as_async::<T>()` awaits typed values. A length that is not a whole number of `T`s is
/// refused at the first poll, while the read is still held, and takes nothing: a fitting type
/// awaited afterwards gets the values.
pub(crate) fn readback_is_awaitable_as_values(cx: &Cx) -> CaseResult {
    let (queue, gate) = (cx.queue(0), cx.sem(0)?);
    let buffer = cx.host_buffer_u32(&[7, 8, 9])?;
    let readback = queue.read(&[sv(&gate, 1)], &buffer, 0, 12, &[]).ctx("read")?;
    let mut refused = pin!(readback.wait_as_async::<u64>());
    match refused.as_mut().poll(&mut TaskContext::from_waker(Waker::noop())) {
        Poll::Ready(outcome) => {
            let err = expect_code(outcome, StatusCode::InvalidArgument, "12 bytes as u64s")?;
            ensure!(err.message().contains("12 bytes"), "the refusal does not name the length: {err}");
        }
        Poll::Pending => return Err(CaseError::Fail("12 bytes as u64s: pending instead of refused".into())),
    }
    ensure!(!readback.is_ready(), "a read held behind an unreached wait is ready");
    gate.signal(1).ctx("release the read")?;
    let values = block_on(readback.wait_as_async::<u32>(), LONG)?.ctx("awaited u32s")?;
    ensure_eq!(values, vec![7, 8, 9], "awaited values");
    expect_code(readback.wait(Timeout::Immediate), StatusCode::FailedPrecondition, "a wait after the hand-over")?;
    Ok(())
}

/// A read whose wait failed never runs; its readback fails with that wait's failure (with or
/// without signals of its own), and its signals carry it too.
pub(crate) fn readback_of_a_failed_read_reports_its_cause(cx: &Cx) -> CaseResult {
    let (queue, gate, done) = (cx.queue(0), cx.sem(0)?, cx.sem(0)?);
    let buffer = cx.host_buffer(64)?;
    let with_signal = queue.read(&[sv(&gate, 1)], &buffer, 0, 64, &[sv(&done, 1)]).ctx("read with a signal")?;
    let without = queue.read(&[sv(&gate, 1)], &buffer, 0, 64, &[]).ctx("read without signals")?;
    gate.fail(Error::data_loss("upstream kernel trapped"));
    for (readback, what) in [(&with_signal, "read with a signal"), (&without, "read without signals")] {
        let err = expect_code(readback.wait(Timeout::After(LONG)), StatusCode::DataLoss, what)?;
        ensure!(err.message().contains("upstream kernel trapped"), "{what}: the cause is lost: {err}");
        ensure!(err.message().contains(&format!("{buffer}")), "{what}: the error does not name the read: {err}");
    }
    cx.wait_failed(&done, 1, StatusCode::DataLoss)?;
    Ok(())
}

/// A read whose wait fails and other work that fails the read's signal semaphore race: the
/// semaphore keeps one of the two failures, and the readback fails with that one (never the other),
/// decided by the time the semaphore's waiters wake.
pub(crate) fn readback_agrees_with_its_signal_when_failures_race(cx: &Cx) -> CaseResult {
    const ROUNDS: usize = 200;
    let buffer = cx.host_buffer(64)?;
    let (read_queue, other_queue) = (cx.queue(0), cx.queue(1));
    let start = std::sync::Barrier::new(2);
    for round in 0..ROUNDS {
        let (read_gate, other_gate, done) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
        let readback = read_queue.read(&[sv(&read_gate, 1)], &buffer, 0, 64, &[sv(&done, 1)]).ctx("held read")?;
        other_queue.barrier(&[sv(&other_gate, 1)], &[sv(&done, 2)]).ctx("held barrier")?;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                start.wait();
                other_gate.fail(Error::aborted("the other work's gate failed"));
            });
            start.wait();
            read_gate.fail(Error::data_loss("the read's gate failed"));
        });
        let signal = match done.wait(1, Timeout::After(LONG)) {
            Err(e) => e,
            Ok(()) => return Err(CaseError::Fail(format!("round {round}: the signal was reached"))),
        };
        ensure!(readback.is_ready(), "round {round}: the signal failed ({signal}) before the readback was decided");
        let err = match readback.wait(Timeout::Immediate) {
            Err(e) => e,
            Ok(_) => return Err(CaseError::Fail(format!("round {round}: the failed read handed over bytes"))),
        };
        ensure!(
            err.code() == signal.code(),
            "round {round}: the readback failed with {err}, but its signal semaphore with {signal}"
        );
    }
    Ok(())
}

/// A read held behind a wait when its device goes away fails within the wait's timeout with the
/// status its signal gets (the device's teardown, `Cancelled`), not a generic one: a readback never
/// waits for bytes that cannot come, and says why.
pub(crate) fn readback_of_a_read_dropped_at_teardown_fails(cx: &Cx) -> CaseResult {
    let device = cx.fixture().create_device().ctx("create a device to drop")?;
    let queue = device.queue(0).ctx("queue 0")?;
    let buffer = device.allocate_buffer(BufferParams::host_visible(), 64).ctx("allocate")?;
    let (gate, done) = (Semaphore::new(0), Semaphore::new(0));
    let readback = queue.read(&[sv(&gate, 1)], &buffer, 0, 64, &[sv(&done, 1)]).ctx("held read")?;
    let unsignalled = queue.read(&[sv(&gate, 1)], &buffer, 0, 64, &[]).ctx("held read without signals")?;
    drop((queue, buffer));
    drop_in_time(device, "with held reads")?;
    let start = Instant::now();
    let outcome = readback.wait(Timeout::After(LONG));
    ensure!(start.elapsed() < LONG, "the readback of a dropped device's read waited out its timeout");
    let signal = expect_code(done.wait(1, Timeout::After(LONG)), StatusCode::Cancelled, "the held read's signal")?;
    let err = expect_code(outcome, StatusCode::Cancelled, "the held read's readback")?;
    ensure!(
        err.message().contains(signal.message()),
        "the readback lost its signal's cause: readback {err:?}, signal {signal:?}"
    );
    let err =
        expect_code(unsignalled.wait(Timeout::After(LONG)), StatusCode::Cancelled, "a held read without signals")?;
    ensure!(err.message().contains("destroyed"), "the readback does not say its device went away: {err}");
    Ok(())
}

/// A task waker that panics when a read completes is contained: the read's signal is applied, its
/// bytes stay there for a later wait, later work on its queue completes, and the device drops.
pub(crate) fn a_panicking_readback_waker_does_not_stop_its_queue(cx: &Cx) -> CaseResult {
    struct Bomb;
    impl Wake for Bomb {
        fn wake(self: Arc<Self>) {
            panic!("a task waker that panics (on purpose)");
        }
    }
    let device = cx.fixture().create_device().ctx("create a device to drop")?;
    let queue = device.queue(0).ctx("queue 0")?;
    let buffer = device.allocate_buffer(BufferParams::host_visible(), 16).ctx("allocate")?;
    buffer.write_values(0, &[5u32, 6, 7, 8]).ctx("write")?;
    let (gate, done) = (Semaphore::new(0), Semaphore::new(0));
    let readback = queue.read(&[sv(&gate, 1)], &buffer, 0, 16, &[sv(&done, 1)]).ctx("held read")?;
    let waker = Waker::from(Arc::new(Bomb));
    let mut future = readback.wait_async();
    let polled = std::pin::Pin::new(&mut future).poll(&mut TaskContext::from_waker(&waker));
    ensure!(polled.is_pending(), "a held read's future is ready");
    gate.signal(1).ctx("release the read")?;
    done.wait(1, Timeout::After(LONG)).ctx("the read's signal, behind the panicking waker")?;
    ensure_eq!(readback.wait_as::<u32>(Timeout::After(LONG)).ctx("the bytes")?, vec![5, 6, 7, 8], "bytes read");
    let later = Semaphore::new(0);
    for value in 1..=3 {
        queue.fill(&[], &buffer, 0, 16, value as u32, &[sv(&later, value)]).ctx("a later fill")?;
    }
    later.wait(3, Timeout::After(LONG)).ctx("later work on the queue of the panicking waker")?;
    drop((queue, buffer));
    drop_in_time(device, "after a panicking readback waker")
}

/// The bytes are handed over once: clones share them, a second `take` finds nothing and a later
/// `wait` is `FailedPrecondition`. A typed wait for a length that is not a whole number of values
/// is refused without taking the bytes: a plain wait still gets them.
pub(crate) fn readback_bytes_are_handed_over_once(cx: &Cx) -> CaseResult {
    let (queue, done) = (cx.queue(0), cx.sem(0)?);
    let buffer = cx.host_buffer_u32(&[1, 2, 3])?;
    let readback = queue.read(&[], &buffer, 0, 6, &[sv(&done, 1)]).ctx("read")?;
    let early = readback.clone();
    expect_code(early.wait_as::<u32>(Timeout::After(LONG)), StatusCode::InvalidArgument, "6 bytes as u32s, early")?;
    cx.wait(&done, 1)?;
    let clone = readback.clone();
    ensure!(clone.is_ready(), "the read signalled but its readback is not ready");
    let err = expect_code(clone.wait_as::<u32>(Timeout::Immediate), StatusCode::InvalidArgument, "6 bytes as u32s")?;
    ensure!(err.message().contains("6 bytes"), "the refusal does not name the length: {err}");
    ensure_eq!(
        clone.wait_as::<u16>(Timeout::Immediate).ctx("the same bytes as u16s")?,
        bytemuck::cast_slice::<u32, u16>(&[1, 2])[..3].to_vec(),
        "the bytes after refused typed waits"
    );
    ensure!(readback.take().is_none(), "a clone's wait handed the bytes over; they are still there");
    expect_code(readback.wait(Timeout::Immediate), StatusCode::FailedPrecondition, "a wait after the hand-over")?;
    let second = queue.read(&[], &buffer, 0, 8, &[sv(&done, 2)]).ctx("second read")?;
    cx.wait(&done, 2)?;
    ensure_eq!(second.take(), Some(bytemuck::cast_slice::<u32, u8>(&[1, 2]).to_vec()), "take");
    ensure!(second.take().is_none(), "a second take handed over bytes again");
    Ok(())
}

/// Typed values go in and out of mappable buffers and mappings as the bytes they are on the host.
pub(crate) fn typed_host_io_round_trips(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(32)?;
    let pairs = [[1.0f32, 2.0], [3.5, -4.5], [0.0, 1e9], [f32::MIN_POSITIVE, 7.0]];
    buffer.write_values(0, &pairs).ctx("write [f32; 2]s")?;
    ensure_eq!(buffer.read_as::<[f32; 2]>().ctx("read_as")?, pairs.to_vec(), "pairs");
    let mut middle = [0u64; 2];
    buffer.read_values(1, &mut middle).ctx("read u64s")?;
    ensure_eq!(bytemuck::cast_slice::<u64, [f32; 2]>(&middle), &pairs[1..3], "u64 view of the middle");
    let mut mapping = buffer.map(16, 16).ctx("map")?;
    mapping.write_values(1, &[9u32, 10, 11]).ctx("mapping write u32s")?;
    let mut words = [0u32; 4];
    mapping.read_values(0, &mut words).ctx("mapping read u32s")?;
    ensure_eq!(words, [0f32.to_bits(), 9, 10, 11], "mapping words");
    expect_code(
        mapping.write_values(1, &[1u64, 2]),
        StatusCode::OutOfRange,
        "u64 elements 1 and 2 of a 16-byte mapping",
    )?;
    drop(mapping);
    let odd = cx.host_buffer(6)?;
    expect_code(odd.read_as::<u32>(), StatusCode::InvalidArgument, "a 6-byte buffer as u32s")?;

    // Allocate and upload in one call; queue writes of typed values count in elements too.
    let device = cx.device();
    let uploaded = device.allocate_buffer_init(BufferParams::device_local(), &[1u16, 2, 3, 4]).ctx("upload u16s")?;
    ensure_eq!(uploaded.size(), 8, "an uploaded buffer's size");
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    queue.write_values(&[], &uploaded, 2, &[30u16], &[sv(&s, 1)]).ctx("queue write of u16 element 2")?;
    let back = queue.read(&[sv(&s, 1)], &uploaded, 0, 8, &[]).ctx("read")?;
    ensure_eq!(back.wait_as::<u16>(Timeout::After(LONG)).ctx("wait_as")?, [1, 2, 30, 4], "after the queue write");
    let past_any_offset = queue.write_values(&[], &uploaded, u64::MAX, &[1u16], &[sv(&s, 2)]);
    expect_code(past_any_offset, StatusCode::OutOfRange, "an element past any byte offset")?;
    let unwritable = BufferParams::new(hal::MemoryType::DEVICE_LOCAL, hal::BufferUsage::DISPATCH_STORAGE);
    match device.allocate_buffer_init(unwritable, &[1.0f32]) {
        Ok(_) => return Err(CaseError::Fail("an upload without TRANSFER_TARGET succeeded".into())),
        Err(refused) => {
            ensure_eq!(refused.code(), StatusCode::PermissionDenied, "upload without TRANSFER_TARGET");
            let flags = "needs usage TRANSFER_TARGET but was allocated with DISPATCH_STORAGE";
            ensure!(refused.message().contains(flags), "flags named as constants: {refused}");
        }
    }
    Ok(())
}

/// Labels name their objects in errors and in the device report; a label is set once, non-empty,
/// short and without control characters.
pub(crate) fn labels_name_objects_in_errors_and_reports(cx: &Cx) -> CaseResult {
    let (queue, gate) = (cx.queue(0), cx.sem(0)?);
    gate.set_label("inputs ready").ctx("label the semaphore")?;
    ensure_eq!(gate.label(), Some("inputs ready"), "semaphore label");
    ensure_eq!(format!("{gate}"), format!("semaphore {} 'inputs ready'", gate.id()), "semaphore name");
    expect_code(gate.set_label("again"), StatusCode::FailedPrecondition, "a second label")?;
    let unlabelled = cx.sem(0)?;
    expect_code(unlabelled.set_label(""), StatusCode::InvalidArgument, "an empty label")?;
    expect_code(unlabelled.set_label("a\nb"), StatusCode::InvalidArgument, "a label with a newline")?;
    expect_code(unlabelled.set_label("x".repeat(hal::MAX_LABEL_BYTES + 1)), StatusCode::InvalidArgument, "long")?;
    ensure_eq!(format!("{unlabelled}"), format!("semaphore {}", unlabelled.id()), "unlabelled name");

    let weights = cx.host_buffer(16)?;
    weights.set_label("weights").ctx("label the buffer")?;
    let err = expect_code(weights.map(8, 16).map(|_| ()), StatusCode::OutOfRange, "map past the end")?;
    ensure!(err.message().contains("'weights'"), "the buffer's error does not name it: {err}");

    let executable = cx.load(Kernel::FillU32)?;
    executable.set_label("fill kernels").ctx("label the executable")?;
    let err = expect_code(executable.entry_point("nope"), StatusCode::NotFound, "an unknown entry point")?;
    ensure!(err.message().contains("'fill kernels'"), "the executable's error does not name it: {err}");

    let step = cx.command_buffer(CommandBufferMode::Reusable)?;
    step.set_label("step").ctx("label the command buffer")?;
    let err = expect_code(queue.execute(&[], &step, &[]), StatusCode::FailedPrecondition, "execute before end")?;
    ensure!(err.message().contains("'step'"), "the command buffer's error does not name it: {err}");
    step.fill(&weights, 0, 16, 0u32).ctx("record a fill")?;
    step.end().ctx("end")?;
    let done = cx.sem(0)?;
    queue.execute(&[sv(&gate, 1)], &step, &[sv(&done, 1)]).ctx("held execute")?;
    let report = cx.device().report();
    gate.signal(1).ctx("release")?;
    cx.wait(&done, 1)?;
    ensure!(report.contains("'step'"), "the report does not name the held command buffer:\n{report}");
    ensure!(report.contains("'inputs ready'"), "the report does not name the awaited semaphore:\n{report}");
    Ok(())
}
