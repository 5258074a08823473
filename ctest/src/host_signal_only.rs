//! Semaphores only the host signals (`SemaphoreFlags::HOST_SIGNAL_ONLY`): queues refuse to signal
//! them; work waiting on them runs once the host's signal comes, wherever the driver holds it meanwhile
//! (on the host, or on the device as the Vulkan driver does); a failure or a dropped device fails
//! that work's signals, and nothing hangs.

use hal::{CommandBufferMode, Error, Semaphore, SemaphoreFlags, StatusCode, Timeout};

use crate::check::{CaseError, CaseResult, Context, expect_code, expect_same_status};
use crate::context::{Cx, LONG, drop_in_time, sv};
use crate::failure::expect_carried_failure;
use crate::{ensure, ensure_eq};

/// A semaphore of the case's device that only the host signals.
fn gate(cx: &Cx, initial: u64) -> Result<Semaphore, CaseError> {
    let gate =
        cx.device().create_semaphore_with(initial, SemaphoreFlags::HOST_SIGNAL_ONLY).ctx("create_semaphore_with")?;
    ensure!(gate.is_host_signal_only(), "created with HOST_SIGNAL_ONLY, but the semaphore says it is not");
    ensure_eq!(gate.flags(), SemaphoreFlags::HOST_SIGNAL_ONLY, "the semaphore's flags");
    cx.expect_value(&gate, initial, "a new host-signalled semaphore")?;
    Ok(gate)
}

/// Every queue operation that would signal it is refused with `InvalidArgument` naming it, and has
/// no effect: the other signals of the list are not signalled, nothing runs. A host semaphore made
/// with the flag is refused the same way; the host signals both as usual.
pub(crate) fn queue_signals_refused(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(16)?;
    buffer.write(0, &[0; 16]).ctx("clear")?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.fill(&buffer, 0, 16, 0x5Au8).ctx("record a fill")?;
    cb.end().ctx("end")?;
    for s in [gate(cx, 0)?, Semaphore::with_flags(0, SemaphoreFlags::HOST_SIGNAL_ONLY)] {
        let other = cx.sem(0)?;
        let q = cx.queue(0);
        let signals = [sv(&other, 1), sv(&s, 1)];
        let attempts = [
            ("barrier", q.barrier(&[], &signals)),
            ("fill", q.fill(&[], &buffer, 0, 16, 0xA5u8, &signals)),
            ("execute", q.execute(&[], &cb, &signals)),
            ("host_call", q.host_call(&[], || Ok(()), &signals)),
        ];
        for (what, result) in attempts {
            let e = expect_code(result, StatusCode::InvalidArgument, &format!("a {what} that signals {s}"))?;
            ensure!(e.message().contains(&s.id().to_string()), "the refusal does not name semaphore {}: {e}", s.id());
        }
        cx.still_pending(&other, 1, "the other signal of refused operations")?;
        ensure_eq!(cx.bytes(&buffer)?, vec![0; 16], "the buffer after refused operations");
        s.signal(3).ctx("host signal")?;
        cx.expect_value(&s, 3, "after the host's signal")?;
        expect_code(s.signal(3), StatusCode::FailedPrecondition, "a second host signal to 3")?;
    }
    Ok(())
}

/// Work waiting on it runs only once the host signals the value it waits for (or a larger one):
/// a command buffer, a fill and a barrier, on every queue.
pub(crate) fn host_signal_releases_waiting_work(cx: &Cx) -> CaseResult {
    let gate = gate(cx, 0)?;
    let buffer = cx.host_buffer(16)?;
    buffer.write(0, &[0; 16]).ctx("clear")?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.fill(&buffer, 0, 8, 0x11u8).ctx("record a fill")?;
    cb.end().ctx("end")?;
    let (executed, filled) = (cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).execute(&[sv(&gate, 1)], &cb, &[sv(&executed, 1)]).ctx("execute")?;
    let last = cx.device().queue_count() - 1;
    cx.queue(last).fill(&[sv(&gate, 3)], &buffer, 8, 8, 0x22u8, &[sv(&filled, 1)]).ctx("fill")?;
    let joined: Vec<Semaphore> = (0..cx.device().queue_count()).map(|_| cx.sem(0)).collect::<Result<_, _>>()?;
    for (queue, done) in joined.iter().enumerate() {
        cx.queue(queue).barrier(&[sv(&gate, 5)], &[sv(done, 1)]).ctx(format!("barrier on queue {queue}"))?;
    }
    cx.still_pending(&executed, 1, "the execute before the host's signal")?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 16], "the buffer before the host's signal");
    gate.signal(1).ctx("signal(1)")?;
    cx.wait(&executed, 1)?;
    cx.still_pending(&filled, 1, "the fill waiting for 3 with the semaphore at 1")?;
    gate.signal(4).ctx("signal(4)")?;
    cx.wait(&filled, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, [[0x11; 8], [0x22; 8]].concat(), "the buffer after both signals");
    cx.still_pending(&joined[0], 1, "the barriers waiting for 5 with the semaphore at 4")?;
    gate.signal(u64::MAX).ctx("signal(u64::MAX)")?;
    for done in &joined {
        cx.wait(done, 1)?;
    }
    Ok(())
}

/// Many values in a row: each submission waits for the next value, and each signal releases
/// exactly its own submission (a chain as a host-paced producer drives it).
pub(crate) fn host_paced_chain(cx: &Cx) -> CaseResult {
    let gate = gate(cx, 0)?;
    let done = cx.sem(0)?;
    let queue = cx.queue(0);
    for round in 1..=64u64 {
        queue.barrier(&[sv(&gate, round)], &[sv(&done, round)]).ctx(format!("barrier {round}"))?;
        if round % 16 == 0 {
            cx.still_pending(&done, round, "a barrier before its signal")?;
        }
        gate.signal(round).ctx(format!("signal({round})"))?;
        cx.wait(&done, round)?;
    }
    Ok(())
}

/// Waits for `done >= 1` while work waits for `gate`; if it does not come, signals the gate so
/// nothing stays held, and fails naming `what`.
fn expect_done_before_signal(cx: &Cx, gate: &Semaphore, done: &Semaphore, what: &str) -> CaseResult {
    if let Err(e) = done.wait(1, Timeout::After(LONG)) {
        let report = cx.device().report();
        let _ = gate.signal(u64::MAX);
        return Err(CaseError::Fail(format!("{what} did not complete before the host's signal: {e}\n{report}")));
    }
    Ok(())
}

/// Work waiting on it holds back nothing else on its queue: later work with no waits, and later
/// work waiting for a smaller value the host signals first, complete while it still waits (a
/// host whose signal comes only after that later work must never hang).
pub(crate) fn later_work_on_its_queue_is_not_held(cx: &Cx) -> CaseResult {
    let gate = gate(cx, 0)?;
    let buffer = cx.host_buffer(16)?;
    buffer.write(0, &[0; 16]).ctx("clear")?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.fill(&buffer, 0, 8, 0x33u8).ctx("record a fill")?;
    cb.end().ctx("end")?;
    for queue in 0..cx.device().queue_count() {
        let q = cx.queue(queue);
        let (waiting, later, smaller) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
        let base = gate.query().ctx("query")?;
        q.execute(&[sv(&gate, base + 2)], &cb, &[sv(&waiting, 1)]).ctx(format!("execute on queue {queue}"))?;
        q.fill(&[], &buffer, 8, 8, 0x44u8, &[sv(&later, 1)]).ctx(format!("later fill on queue {queue}"))?;
        expect_done_before_signal(cx, &gate, &later, &format!("a fill with no waits after it on queue {queue}"))?;
        q.barrier(&[sv(&gate, base + 1)], &[sv(&smaller, 1)]).ctx(format!("barrier on queue {queue}"))?;
        gate.signal(base + 1).ctx("signal the smaller value")?;
        expect_done_before_signal(
            cx,
            &gate,
            &smaller,
            &format!("a barrier waiting for a smaller value on queue {queue}"),
        )?;
        cx.still_pending(&waiting, 1, "the execute before its value")?;
        gate.signal(base + 2).ctx("signal its value")?;
        cx.wait(&waiting, 1)?;
    }
    ensure_eq!(cx.bytes(&buffer)?, [[0x33; 8], [0x44; 8]].concat(), "the buffer");
    Ok(())
}

/// Work chained on work that waits on it (through another semaphore, on another queue) holds back
/// nothing else either: work after it on that queue, and on the first queue, completes first.
pub(crate) fn chained_work_holds_no_queue(cx: &Cx) -> CaseResult {
    let gate = gate(cx, 0)?;
    let last = cx.device().queue_count() - 1;
    let (first, chained, after_first, after_chained) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).barrier(&[sv(&gate, 1)], &[sv(&first, 1)]).ctx("barrier waiting on the semaphore")?;
    let buffer = cx.host_buffer(16)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.fill(&buffer, 0, 16, 0x55u8).ctx("record a fill")?;
    cb.end().ctx("end")?;
    cx.queue(last).execute(&[sv(&first, 1)], &cb, &[sv(&chained, 1)]).ctx("execute chained on it")?;
    cx.queue(last).barrier(&[], &[sv(&after_chained, 1)]).ctx("barrier after the chained execute")?;
    cx.queue(0).barrier(&[], &[sv(&after_first, 1)]).ctx("barrier after the waiting one")?;
    expect_done_before_signal(
        cx,
        &gate,
        &after_chained,
        &format!("a barrier after the chained execute (queue {last})"),
    )?;
    expect_done_before_signal(cx, &gate, &after_first, "a barrier after the waiting one (queue 0)")?;
    cx.still_pending(&chained, 1, "the chained execute before the host's signal")?;
    gate.signal(1).ctx("signal(1)")?;
    cx.wait(&chained, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0x55; 16], "the buffer after the chained execute");
    Ok(())
}

/// Host calls and another device's queues wait for it too (on the host, where the driver cannot
/// wait on the device).
pub(crate) fn host_calls_and_other_devices_wait_for_it(cx: &Cx) -> CaseResult {
    let gate = gate(cx, 0)?;
    let other = cx.other_device()?;
    let (called, elsewhere) = (cx.sem(0)?, other.create_semaphore(0).ctx("semaphore on the other device")?);
    cx.queue(0).host_call(&[sv(&gate, 1)], || Ok(()), &[sv(&called, 1)]).ctx("host call")?;
    let other_queue = other.queue(0).ctx("the other device's queue 0")?;
    other_queue.barrier(&[sv(&gate, 2)], &[sv(&elsewhere, 1)]).ctx("barrier on the other device")?;
    cx.still_pending(&called, 1, "the host call before the signal")?;
    gate.signal(1).ctx("signal(1)")?;
    cx.wait(&called, 1)?;
    cx.still_pending(&elsewhere, 1, "the other device's barrier waiting for 2")?;
    gate.signal(2).ctx("signal(2)")?;
    cx.wait(&elsewhere, 1)
}

/// Failing it fails the signals of the work waiting on it, and of the work chained on that, with
/// its status; the queues stay usable.
pub(crate) fn failure_fails_waiting_work(cx: &Cx) -> CaseResult {
    let gate = gate(cx, 0)?;
    let buffer = cx.host_buffer(16)?;
    let (first, second) = (cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).fill(&[sv(&gate, 1)], &buffer, 0, 16, 1u8, &[sv(&first, 1)]).ctx("fill")?;
    let next = cx.device().queue_count().min(2) - 1;
    cx.queue(next).barrier(&[sv(&first, 1)], &[sv(&second, 1)]).ctx("chained barrier")?;
    cx.still_pending(&first, 1, "the fill before the failure")?;
    let cause = Error::aborted("ctest: the host gave up on the value");
    gate.fail(cause.clone());
    expect_carried_failure(cx, &first, 1, &cause, "the waiting fill's signal")?;
    expect_carried_failure(cx, &second, 1, &cause, "the chained barrier's signal")?;
    let e = expect_code(gate.signal(1), StatusCode::Aborted, "a host signal after the failure")?;
    expect_same_status(&e, &cause, "a host signal after the failure")?;
    let after = cx.sem(0)?;
    cx.queue(0).fill(&[], &buffer, 0, 16, 2u8, &[sv(&after, 1)]).ctx("a fill after the failure")?;
    cx.wait(&after, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![2; 16], "the buffer after a later fill");
    Ok(())
}

/// A device dropped while its queues wait for a value the host never signals returns, and the
/// waiting work's signals fail with `Cancelled`.
pub(crate) fn device_dropped_while_work_waits(cx: &Cx) -> CaseResult {
    let device = cx.fixture().create_device().ctx("create a device to drop")?;
    let gate = device.create_semaphore_with(0, SemaphoreFlags::HOST_SIGNAL_ONLY).ctx("create_semaphore_with")?;
    let buffer = device.allocate_buffer(hal::BufferParams::host_visible(), 64).ctx("buffer")?;
    let cb = device.create_command_buffer(CommandBufferMode::OneShot).ctx("command buffer")?;
    cb.fill(&buffer, 0, 64, 3u8).ctx("record a fill")?;
    cb.end().ctx("end")?;
    let dones: Vec<Semaphore> =
        (0..device.queue_count()).map(|_| device.create_semaphore(0)).collect::<hal::Result<_>>().ctx("semaphores")?;
    device.queue(0).ctx("queue 0")?.execute(&[sv(&gate, 1)], &cb, &[sv(&dones[0], 1)]).ctx("execute")?;
    for (queue, done) in dones.iter().enumerate().skip(1) {
        let q = device.queue(queue).ctx("queue")?;
        q.barrier(&[sv(&gate, queue as u64 + 1)], &[sv(done, 1)]).ctx("barrier")?;
    }
    drop(cb);
    drop_in_time(device, "with work waiting for a host-signalled value")?;
    for done in &dones {
        expect_code(done.wait(1, Timeout::After(LONG)), StatusCode::Cancelled, "the waiting work of a dropped device")?;
    }
    Ok(())
}
