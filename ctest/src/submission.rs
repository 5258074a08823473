//! Submissions: wait and signal lists on queue operations. Empty lists, wait-before-signal, chains
//! across queues, fan-out and fan-in, hundreds of submissions in flight or pending, foreign
//! semaphores and buffers, bad signal values, and the hang report.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hal::{BufferBinding, BufferParams, CommandBufferMode, Semaphore, StatusCode};

use crate::check::{CaseResult, Context, expect_code};
use crate::context::{Cx, LONG, ramp, sv};
use crate::kernels::{ELEMENTWISE_WORKGROUP, Kernel};
use crate::{ensure, ensure_eq};

/// An execute with no waits and no signals runs (seen by polling its output).
pub(crate) fn execute_empty_lists(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(16)?;
    buffer.write(0, &[0; 16]).ctx("clear")?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.fill(&buffer, 0, 16, 0x42u8).ctx("fill")?;
    cb.end().ctx("end")?;
    cx.queue(0).execute(&[], &cb, &[]).ctx("execute with empty lists")?;
    let deadline = Instant::now() + LONG;
    while cx.bytes(&buffer)? != vec![0x42; 16] {
        ensure!(Instant::now() < deadline, "the command buffer never ran\n{}", cx.device().report());
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Operations with only a signal list signal it.
pub(crate) fn signal_only(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    cx.queue(0).barrier(&[], &[sv(&s, 1)]).ctx("barrier")?;
    cx.wait(&s, 1)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.end().ctx("end")?;
    cx.queue(1).execute(&[], &cb, &[sv(&s, 2)]).ctx("execute")?;
    cx.wait(&s, 2)?;
    cx.queue(0).barrier(&[], &[sv(&s, 100)]).ctx("barrier to 100")?;
    cx.wait(&s, 100)?;
    cx.expect_value(&s, 100, "after a signal to 100")
}

/// Work submitted before the host signals its wait is held, then runs when the host signals.
pub(crate) fn wait_before_signal_host(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(16)?;
    buffer.write(0, &[0; 16]).ctx("clear")?;
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).fill(&[sv(&gate, 1)], &buffer, 0, 16, 0x77u8, &[sv(&done, 1)]).ctx("fill")?;
    cx.still_pending(&done, 1, "before the host signal")?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 16], "buffer before the host signal");
    gate.signal(1).ctx("host signal")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0x77; 16], "buffer after the host signal");
    Ok(())
}

/// A wait for 3 is released by a host signal to 7, not by one to 2.
pub(crate) fn wait_before_signal_beyond(cx: &Cx) -> CaseResult {
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).barrier(&[sv(&gate, 3)], &[sv(&done, 1)]).ctx("barrier")?;
    gate.signal(2).ctx("signal(2)")?;
    cx.still_pending(&done, 1, "with the wait at 2 of 3")?;
    gate.signal(7).ctx("signal(7)")?;
    cx.wait(&done, 1)
}

/// A wait already reached at submission does not hold the work.
pub(crate) fn wait_already_reached(cx: &Cx) -> CaseResult {
    let (gate, done) = (cx.sem(5)?, cx.sem(0)?);
    let buffer = cx.host_buffer(8)?;
    cx.queue(0).fill(&[sv(&gate, 3), sv(&gate, 5)], &buffer, 0, 8, 1u8, &[sv(&done, 1)]).ctx("fill")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![1; 8], "buffer");
    Ok(())
}

/// Several waits (signalled by the host in any order) and several signals on one operation.
pub(crate) fn several_waits_and_signals(cx: &Cx) -> CaseResult {
    let waits: Vec<Semaphore> = (0..3).map(|_| cx.sem(0)).collect::<Result<_, _>>()?;
    let signals: Vec<Semaphore> = (0..3).map(|_| cx.sem(10)).collect::<Result<_, _>>()?;
    let wait_list: Vec<_> = waits.iter().map(|s| sv(s, 2)).collect();
    let signal_list: Vec<_> = signals.iter().enumerate().map(|(i, s)| sv(s, 11 + i as u64)).collect();
    cx.queue(0).barrier(&wait_list, &signal_list).ctx("barrier")?;
    waits[2].signal(2).ctx("signal")?;
    waits[0].signal(5).ctx("signal")?;
    cx.still_pending(&signals[0], 11, "with one wait open")?;
    waits[1].signal(2).ctx("signal")?;
    for (i, s) in signals.iter().enumerate() {
        cx.wait(s, 11 + i as u64)?;
        cx.expect_value(s, 11 + i as u64, "signalled value")?;
    }
    Ok(())
}

/// A chain through every queue, each step waiting on the previous one's signal.
fn chain(cx: &Cx, reverse: bool) -> CaseResult {
    let queues = cx.device().queue_count().max(4);
    let buffers: Vec<hal::Buffer> = (0..=queues).map(|_| cx.host_buffer(64)).collect::<Result<_, _>>()?;
    let data = ramp(11, 64);
    buffers[0].write(0, &data).ctx("write")?;
    for b in &buffers[1..] {
        b.write(0, &[0; 64]).ctx("clear")?;
    }
    let s = cx.sem(0)?;
    let mut order: Vec<usize> = (0..queues).collect();
    if reverse {
        order.reverse();
    }
    for i in order {
        let q = cx.queue(i);
        q.copy(&[sv(&s, i as u64)], &buffers[i], 0, &buffers[i + 1], 0, 64, &[sv(&s, i as u64 + 1)])
            .ctx(format!("copy on queue {i}"))?;
    }
    cx.wait(&s, queues as u64)?;
    ensure_eq!(cx.bytes(&buffers[queues])?, data, "bytes at the end of the chain");
    Ok(())
}

/// A chain across queues, submitted in order.
pub(crate) fn chain_across_queues(cx: &Cx) -> CaseResult {
    chain(cx, false)
}

/// A chain across queues, submitted last step first (every step but the first waits before its
/// signal exists).
pub(crate) fn chain_across_queues_reversed(cx: &Cx) -> CaseResult {
    chain(cx, true)
}

/// One producer, eight consumers on every queue, one join.
pub(crate) fn fan_out_fan_in(cx: &Cx) -> CaseResult {
    let source = cx.host_buffer(8 * 64)?;
    let target = cx.host_buffer(8 * 64)?;
    target.write(0, &[0; 512]).ctx("clear")?;
    let produced = cx.sem(0)?;
    let consumed: Vec<Semaphore> = (0..8).map(|_| cx.sem(0)).collect::<Result<_, _>>()?;
    let joined = cx.sem(0)?;
    // The join and the consumers are submitted before the producer.
    let join_waits: Vec<_> = consumed.iter().map(|s| sv(s, 1)).collect();
    cx.queue(3).barrier(&join_waits, &[sv(&joined, 1)]).ctx("join barrier")?;
    for (i, s) in consumed.iter().enumerate() {
        let at = i as u64 * 64;
        cx.queue(i).copy(&[sv(&produced, 1)], &source, at, &target, at, 64, &[sv(s, 1)]).ctx("consumer copy")?;
    }
    cx.queue(0).write(&[], &source, 0, ramp(1, 512), &[sv(&produced, 1)]).ctx("producer write")?;
    cx.wait(&joined, 1)?;
    ensure_eq!(cx.bytes(&target)?, ramp(1, 512), "fanned-in bytes");
    Ok(())
}

/// 300 dependent dispatches in flight across the queues at once.
pub(crate) fn hundreds_in_flight(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::MultiEntry)?;
    let add = exe.entry_point("add_u32").ctx("add_u32")?;
    let data = cx.host_buffer_u32(&[0; 64])?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.dispatch(&exe, add, [64 / ELEMENTWISE_WORKGROUP, 1, 1], &[1], &[BufferBinding::whole(&data)]).ctx("dispatch")?;
    cb.end().ctx("end")?;
    let s = cx.sem(0)?;
    for i in 0..300u64 {
        cx.queue(i as usize).execute(&[sv(&s, i)], &cb, &[sv(&s, i + 1)]).ctx(format!("execute {i}"))?;
    }
    cx.wait(&s, 300)?;
    ensure_eq!(cx.words(&data)?, vec![300; 64], "after 300 dependent +1");
    Ok(())
}

/// 1000 submissions pending on one another (submitted last first), released in one cascade when
/// the host opens the gate: the release must not recurse once per link.
pub(crate) fn pending_cascade(cx: &Cx) -> CaseResult {
    let n = 1000u64;
    let gate = cx.sem(0)?;
    let s = cx.sem(0)?;
    let buffer = cx.host_buffer(n * 4)?;
    buffer.write(0, &vec![0; n as usize * 4]).ctx("clear")?;
    for i in (0..n).rev() {
        let waits = [sv(&gate, 1), sv(&s, i)];
        cx.queue(i as usize).fill(&waits, &buffer, i * 4, 4, i as u32 + 1, &[sv(&s, i + 1)]).ctx("fill")?;
    }
    cx.still_pending(&s, 1, "before the gate opens")?;
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&s, n)?;
    ensure_eq!(cx.words(&buffer)?, (1..=n as u32).collect::<Vec<u32>>(), "each fill ran");
    Ok(())
}

/// Submitting never blocks on device progress: 200 held submissions are accepted quickly.
pub(crate) fn submission_does_not_block(cx: &Cx) -> CaseResult {
    let (gate, s) = (cx.sem(0)?, cx.sem(0)?);
    let buffer = cx.host_buffer(4)?;
    let start = Instant::now();
    for i in 0..200u64 {
        let waits = [sv(&gate, 1), sv(&s, i)];
        cx.queue(i as usize).fill(&waits, &buffer, 0, 4, i as u32, &[sv(&s, i + 1)]).ctx("fill")?;
    }
    let took = start.elapsed();
    ensure!(took < Duration::from_secs(2), "200 held submissions took {took:?} to submit");
    cx.still_pending(&s, 1, "before the gate opens")?;
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&s, 200)?;
    ensure_eq!(cx.words(&buffer)?, vec![199], "last fill wins");
    Ok(())
}

/// A host semaphore (owned by no device) in a wait list and in a signal list.
pub(crate) fn host_semaphores_in_lists(cx: &Cx) -> CaseResult {
    let (gate, done) = (Semaphore::new(0), Semaphore::new(0));
    let buffer = cx.host_buffer(8)?;
    cx.queue(0).fill(&[sv(&gate, 1)], &buffer, 0, 8, 3u8, &[sv(&done, 1)]).ctx("fill")?;
    cx.still_pending(&done, 1, "before the host semaphore is signalled")?;
    gate.signal(1).ctx("signal")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![3; 8], "buffer");
    Ok(())
}

/// A semaphore of another device, signalled by that device's queue, gates work here.
pub(crate) fn other_device_semaphore_wait(cx: &Cx) -> CaseResult {
    let other = cx.other_device()?;
    let (gate, theirs) = (cx.sem(0)?, other.create_semaphore(0).ctx("semaphore on the other device")?);
    let done = cx.sem(0)?;
    let buffer = cx.host_buffer(8)?;
    cx.queue(0).fill(&[sv(&theirs, 1)], &buffer, 0, 8, 9u8, &[sv(&done, 1)]).ctx("fill waiting on the other")?;
    other.queue(0).ctx("queue")?.barrier(&[sv(&gate, 1)], &[sv(&theirs, 1)]).ctx("barrier on the other")?;
    cx.still_pending(&done, 1, "before the other device signals")?;
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![9; 8], "buffer");
    Ok(())
}

/// A signal value not ahead of its semaphore is `InvalidArgument` for every operation, and nothing
/// changes: no other signal of the list, no bytes, no host call.
pub(crate) fn signal_not_ahead_refused(cx: &Cx) -> CaseResult {
    let behind = cx.sem(5)?;
    let ahead = cx.sem(0)?;
    let buffer = cx.host_buffer(16)?;
    let other = cx.host_buffer(16)?;
    buffer.write(0, &[0; 16]).ctx("clear")?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.fill(&buffer, 0, 16, 1u8).ctx("fill")?;
    cb.end().ctx("end")?;
    let ran = Arc::new(AtomicBool::new(false));
    let q = cx.queue(0);
    let code = StatusCode::InvalidArgument;
    for value in [5, 4, 0] {
        let signals = [sv(&ahead, 1), sv(&behind, value)];
        let what = |op: &str| format!("{op} signalling {value} at 5");
        expect_code(q.execute(&[], &cb, &signals), code, &what("execute"))?;
        expect_code(q.fill(&[], &buffer, 0, 16, 1u8, &signals), code, &what("fill"))?;
        expect_code(q.update(&[], &buffer, 0, &[1; 4], &signals), code, &what("update"))?;
        expect_code(q.copy(&[], &other, 0, &buffer, 0, 16, &signals), code, &what("copy"))?;
        expect_code(q.write(&[], &buffer, 0, vec![1u8; 4], &signals), code, &what("write"))?;
        expect_code(q.read(&[], &buffer, 0, 4, &signals), code, &what("read"))?;
        expect_code(q.barrier(&[], &signals), code, &what("barrier"))?;
        expect_code(q.alloca(&[], BufferParams::device_local(), 64, &signals), code, &what("alloca"))?;
        let flag = ran.clone();
        let call = move || {
            flag.store(true, Ordering::SeqCst);
            Ok(())
        };
        expect_code(q.host_call(&[], call, &signals), code, &what("host_call"))?;
    }
    cx.still_pending(&ahead, 1, "the other signal of refused submissions")?;
    cx.expect_value(&behind, 5, "the semaphore behind")?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 16], "buffer after refused submissions");
    ensure!(!ran.load(Ordering::SeqCst), "a refused host call ran");
    let done = cx.sem(0)?;
    q.execute(&[], &cb, &[sv(&done, 1)]).ctx("the one-shot command buffer is still unused")?;
    cx.wait(&done, 1)
}

/// A failed semaphore in a signal list refuses the submission with its failure; nothing runs.
pub(crate) fn signal_failed_semaphore_refused(cx: &Cx) -> CaseResult {
    let broken = cx.sem(0)?;
    broken.fail(hal::Error::data_loss("ctest: broken before the submission"));
    let buffer = cx.host_buffer(8)?;
    buffer.write(0, &[0; 8]).ctx("clear")?;
    let result = cx.queue(0).fill(&[], &buffer, 0, 8, 1u8, &[sv(&broken, 1)]);
    expect_code(result, StatusCode::DataLoss, "fill signalling a failed semaphore")?;
    std::thread::sleep(crate::SHORT);
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 8], "buffer");
    Ok(())
}

/// Buffers of another device are refused (`InvalidArgument`) by every queue operation but a copy
/// (the `multi_device` area copies between devices); nothing is signalled.
pub(crate) fn other_device_buffer_refused(cx: &Cx) -> CaseResult {
    let other = cx.other_device()?;
    let foreign = other.allocate_buffer(BufferParams::host_visible(), 64).ctx("allocate on the other device")?;
    let done = cx.sem(0)?;
    let q = cx.queue(0);
    let signals = [sv(&done, 1)];
    let code = StatusCode::InvalidArgument;
    expect_code(q.fill(&[], &foreign, 0, 4, 1u32, &signals), code, "fill")?;
    expect_code(q.update(&[], &foreign, 0, &[1], &signals), code, "update")?;
    expect_code(q.write(&[], &foreign, 0, vec![1u8; 4], &signals), code, "write")?;
    expect_code(q.read(&[], &foreign, 0, 4, &signals), code, "read")?;
    expect_code(q.dealloca(&[], &foreign, &signals), code, "dealloca")?;
    cx.still_pending(&done, 1, "after refused submissions")
}

/// The hang report names a wait no one has signalled (`semaphore <id> >= <value>`), until it is.
pub(crate) fn hang_report_names_wait(cx: &Cx) -> CaseResult {
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    let buffer = cx.host_buffer(8)?;
    cx.queue(0).fill(&[sv(&gate, 42)], &buffer, 0, 8, 1u8, &[sv(&done, 1)]).ctx("fill")?;
    let needle = format!("semaphore {} >= 42", gate.id());
    let report = cx.device().report();
    ensure!(report.contains(&needle), "the report lacks '{needle}':\n{report}");
    gate.signal(42).ctx("signal")?;
    cx.wait(&done, 1)?;
    let deadline = Instant::now() + LONG;
    while cx.device().report().contains(&needle) {
        ensure!(Instant::now() < deadline, "the report still names the released wait:\n{}", cx.device().report());
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Signals of one semaphore from successive operations on one queue arrive in order.
pub(crate) fn same_queue_timeline(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let buffer = cx.host_buffer(4)?;
    for i in 0..20u64 {
        cx.queue(0).fill(&[sv(&s, i)], &buffer, 0, 4, i as u32, &[sv(&s, i + 1)]).ctx("fill")?;
    }
    for i in 1..=20 {
        cx.wait(&s, i)?;
    }
    ensure_eq!(cx.words(&buffer)?, vec![19], "last fill wins");
    Ok(())
}

/// A wait on a value that an operation on another queue signals, submitted afterwards.
pub(crate) fn wait_on_later_submission(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let buffer = cx.host_buffer(8)?;
    buffer.write(0, &[0; 8]).ctx("clear")?;
    cx.queue(0).fill(&[sv(&s, 1)], &buffer, 0, 8, 2u8, &[sv(&s, 2)]).ctx("second step")?;
    cx.queue(1).fill(&[], &buffer, 0, 8, 1u8, &[sv(&s, 1)]).ctx("first step")?;
    cx.wait(&s, 2)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![2; 8], "second step ran last");
    Ok(())
}

/// `flush` is accepted on every queue, with work held and in flight.
pub(crate) fn flush_every_queue(cx: &Cx) -> CaseResult {
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).barrier(&[sv(&gate, 1)], &[sv(&done, 1)]).ctx("barrier")?;
    for q in 0..cx.device().queue_count() {
        cx.queue(q).flush().ctx(format!("flush queue {q}"))?;
    }
    gate.signal(1).ctx("signal")?;
    cx.wait(&done, 1)
}

/// Signals are applied only after the work: a waiter sees the whole of a 16 MiB fill.
pub(crate) fn signal_after_work(cx: &Cx) -> CaseResult {
    let size = 16u64 << 20;
    let buffer = cx.host_buffer(size)?;
    for round in 1..=3u32 {
        let done = cx.sem(0)?;
        cx.queue(round as usize).fill(&[], &buffer, 0, size, round, &[sv(&done, 1)]).ctx("fill")?;
        cx.wait(&done, 1)?;
        let mut tail = [0u8; 4];
        buffer.read(size - 4, &mut tail).ctx("read of the last word")?;
        ensure_eq!(u32::from_le_bytes(tail), round, "last word once the fill's signal is reached (round {round})");
    }
    Ok(())
}

/// A device wait for `s >= 3` submitted first (held: nothing is recorded yet), then work on another
/// queue that will signal `s = 5`, itself held on a gate: opening the gate runs the producer, and the
/// larger signal releases the waiter, which sees the producer's bytes.
pub(crate) fn wait_released_by_larger_signal_held(cx: &Cx) -> CaseResult {
    let (gate, s, done) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    let data = cx.device_buffer(4096)?;
    let target = cx.host_buffer(4096)?;
    target.write(0, &[0; 4096]).ctx("clear")?;
    cx.queue(1).copy(&[sv(&s, 3)], &data, 0, &target, 0, 4096, &[sv(&done, 1)]).ctx("copy waiting on s >= 3")?;
    cx.queue(0).fill(&[sv(&gate, 1)], &data, 0, 4096, 0x5Au8, &[sv(&s, 5)]).ctx("fill signalling s = 5")?;
    cx.still_pending(&done, 1, "the waiter before the producer runs")?;
    cx.expect_value(&s, 0, "s before the gate opens")?;
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&done, 1)?;
    cx.expect_value(&s, 5, "s after the producer")?;
    ensure_eq!(cx.bytes(&target)?, vec![0x5A; 4096], "bytes the waiter copied");
    Ok(())
}

/// A device wait for `s >= 3` submitted after the producers are on the device: `s = 2` (a large
/// fill of 0x11), then `s = 5` (a large fill of 0x22). The wait must use the signal of the smallest
/// recorded value >= 3 (5), never the one of 2: its copy sees only the second fill's bytes.
pub(crate) fn wait_covered_by_larger_signal_issued(cx: &Cx) -> CaseResult {
    const SIZE: u64 = 16 << 20;
    let data = cx.device_buffer(SIZE)?;
    let target = cx.host_buffer(SIZE)?;
    let (s, done) = (cx.sem(0)?, cx.sem(0)?);
    let q = cx.queue(0);
    q.fill(&[], &data, 0, SIZE, 0x1111_1111u32, &[sv(&s, 2)]).ctx("fill signalling s = 2")?;
    q.fill(&[sv(&s, 2)], &data, 0, SIZE, 0x2222_2222u32, &[sv(&s, 5)]).ctx("fill signalling s = 5")?;
    cx.queue(1).copy(&[sv(&s, 3)], &data, 0, &target, 0, SIZE, &[sv(&done, 1)]).ctx("copy waiting on s >= 3")?;
    cx.wait(&done, 1)?;
    cx.expect_value(&s, 5, "s after both fills")?;
    let bytes = cx.bytes(&target)?;
    if bytes != vec![0x22; SIZE as usize]
        && let Some(at) = bytes.iter().position(|&b| b != 0x22)
    {
        return Err(format!(
            "the copy waiting on s >= 3 saw byte {:#04x} at {at}: it ran before the fill signalling s = 5 \
             finished (it used the signal of s = 2?)",
            bytes[at]
        )
        .into());
    }
    Ok(())
}

/// Queue waits and signals at `u64::MAX` on device semaphores: a wait for `u64::MAX` submitted
/// first is released by device work signalling `u64::MAX` (held, then issued); a wait covered by
/// an issued signal of `u64::MAX` orders device-side; once at `u64::MAX` nothing can signal further
/// (a queue signal is `InvalidArgument`, a host signal `FailedPrecondition`) and the value stays.
pub(crate) fn queue_signal_and_wait_at_max(cx: &Cx) -> CaseResult {
    const SIZE: u64 = 4 << 20;
    let max = u64::MAX;
    let (gate, s, done) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    let data = cx.device_buffer(SIZE)?;
    let target = cx.host_buffer(SIZE)?;
    // Held: the wait for MAX comes first, the producer is behind a gate.
    cx.queue(1).copy(&[sv(&s, max)], &data, 0, &target, 0, SIZE, &[sv(&done, 1)]).ctx("copy waiting on MAX")?;
    cx.queue(0).fill(&[sv(&gate, 1)], &data, 0, SIZE, 0x4Du8, &[sv(&s, max)]).ctx("fill signalling MAX")?;
    cx.still_pending(&done, 1, "the wait for MAX before the producer")?;
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&done, 1)?;
    cx.expect_value(&s, max, "s after a queue signal of MAX")?;
    ensure!(cx.bytes(&target)? == vec![0x4D; SIZE as usize], "the copy behind the wait for MAX missed bytes");
    // Issued: the producer is on the device when the wait for MAX is submitted.
    let (t, done2) = (cx.sem(max - 2)?, cx.sem(0)?);
    let q = cx.queue(2);
    q.fill(&[], &data, 0, SIZE, 0x0102_0304u32, &[sv(&t, max - 1)]).ctx("fill signalling MAX - 1")?;
    q.fill(&[sv(&t, max - 1)], &data, 0, SIZE, 0x7E7E_7E7Eu32, &[sv(&t, max)]).ctx("fill signalling MAX")?;
    cx.queue(3).copy(&[sv(&t, max)], &data, 0, &target, 0, SIZE, &[sv(&done2, 1)]).ctx("copy waiting on MAX")?;
    cx.wait(&done2, 1)?;
    ensure!(cx.bytes(&target)? == vec![0x7E; SIZE as usize], "the copy covered by the signal of MAX ran early");
    // Nothing goes beyond MAX.
    let refused = cx.queue(0).barrier(&[], &[sv(&s, max)]);
    expect_code(refused, StatusCode::InvalidArgument, "a queue signal of MAX on a semaphore at MAX")?;
    expect_code(s.signal(max), StatusCode::FailedPrecondition, "a host signal of MAX on a semaphore at MAX")?;
    // Waits at MAX keep being reached.
    let done3 = cx.sem(0)?;
    cx.queue(1).barrier(&[sv(&s, max), sv(&t, max)], &[sv(&done3, 1)]).ctx("barrier waiting on MAX")?;
    cx.wait(&done3, 1)?;
    cx.expect_value(&s, max, "s at the end")?;
    cx.expect_value(&t, max, "t at the end")
}

/// 200 one-shot command buffers, each recorded, submitted and waited for in turn, alternating
/// queues: every cycle's fill is seen and its signal reached.
pub(crate) fn rapid_one_shot_cycles(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    let s = cx.sem(0)?;
    let start = Instant::now();
    for cycle in 0..200u32 {
        let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
        cb.fill(&buffer, 0, 64, cycle).ctx("fill")?;
        // Commands not separated by a barrier may run concurrently (a CUDA graph without an edge).
        cb.barrier().ctx("barrier")?;
        cb.update(&buffer, 4 * (cycle as u64 % 16), &(!cycle).to_le_bytes()).ctx("update")?;
        cb.end().ctx("end")?;
        let value = u64::from(cycle) + 1;
        cx.queue(cycle as usize).execute(&[], &cb, &[sv(&s, value)]).ctx(format!("execute {cycle}"))?;
        cx.wait(&s, value)?;
        let mut expected = vec![cycle; 16];
        expected[cycle as usize % 16] = !cycle;
        ensure_eq!(cx.words(&buffer)?, expected, "cycle {cycle}'s words");
    }
    cx.note(format!("200 cycles in {:?}", start.elapsed()));
    cx.expect_value(&s, 200, "after 200 cycles")
}

/// A semaphore named twice in one signal list is refused at the call (`InvalidArgument` naming the
/// semaphore and both values): one of the two signals would land behind the other. Nothing runs
/// or signals.
pub(crate) fn signal_twice_in_one_list_refused(cx: &Cx) -> CaseResult {
    let (s, other) = (cx.sem(0)?, cx.sem(0)?);
    let buffer = cx.host_buffer(8)?;
    buffer.write(0, &[0; 8]).ctx("clear")?;
    let q = cx.queue(0);
    for (a, b) in [(2, 1), (1, 1), (1, 2)] {
        let signals = [sv(&s, a), sv(&other, 1), sv(&s, b)];
        let result = q.fill(&[], &buffer, 0, 8, 7u8, &signals);
        let e = expect_code(result, StatusCode::InvalidArgument, &format!("fill signalling s to {a} and {b}"))?;
        ensure!(
            e.message().contains(&format!("semaphore {}", s.id())) && e.message().contains(&format!("{a} and to {b}")),
            "the error does not name semaphore {} and the values {a}, {b}: {e}",
            s.id()
        );
        expect_code(q.barrier(&[], &signals), StatusCode::InvalidArgument, "barrier")?;
    }
    cx.still_pending(&other, 1, "the other signal of refused submissions")?;
    cx.expect_value(&s, 0, "the semaphore named twice")?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 8], "buffer after refused fills");
    ensure_eq!(s.behind_signals(), 0, "signals behind the value");
    Ok(())
}

/// An operation that waits for `s >= w` and signals `s` to `w` or less would complete behind the
/// value it waited for: refused at the call (`InvalidArgument` naming the semaphore and the
/// values), whatever the operation. A signal above the wait is the ordinary timeline step.
pub(crate) fn signal_behind_own_wait_refused(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let buffer = cx.host_buffer(8)?;
    buffer.write(0, &[0; 8]).ctx("clear")?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.fill(&buffer, 0, 8, 1u8).ctx("fill")?;
    cb.end().ctx("end")?;
    let q = cx.queue(0);
    let code = StatusCode::InvalidArgument;
    for signal in [2, 1] {
        let (waits, signals) = ([sv(&s, 2)], [sv(&s, signal)]);
        let what = |op: &str| format!("{op} waiting for 2 and signalling {signal}");
        let e = expect_code(q.barrier(&waits, &signals), code, &what("barrier"))?;
        ensure!(
            e.message().contains(&format!("semaphore {} to {signal}", s.id())) && e.message().contains("value 2"),
            "the error does not name semaphore {}, the signal {signal} and the wait 2: {e}",
            s.id()
        );
        expect_code(q.execute(&waits, &cb, &signals), code, &what("execute"))?;
        expect_code(q.fill(&waits, &buffer, 0, 8, 1u8, &signals), code, &what("fill"))?;
        expect_code(q.write(&waits, &buffer, 0, vec![1u8; 4], &signals), code, &what("write"))?;
        expect_code(q.read(&waits, &buffer, 0, 4, &signals), code, &what("read"))?;
        expect_code(q.alloca(&waits, BufferParams::device_local(), 64, &signals), code, &what("alloca"))?;
        expect_code(q.host_call(&waits, || Ok(()), &signals), code, &what("host_call"))?;
    }
    s.signal(2).ctx("signal 2")?;
    std::thread::sleep(crate::SHORT);
    cx.expect_value(&s, 2, "after the refused submissions")?;
    ensure_eq!(s.behind_signals(), 0, "signals behind the value");
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 8], "buffer after refused submissions");
    q.execute(&[sv(&s, 2)], &cb, &[sv(&s, 3)]).ctx("the one-shot command buffer is still unused")?;
    cx.wait(&s, 3)
}
