//! Failure: a failed wait fails the work behind it (which does not run) with the same status, down
//! whole chains and across queues and devices; a faulting kernel fails exactly its signals, and the
//! device keeps working.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hal::{BufferBinding, BufferParams, CommandBuffer, CommandBufferMode, Error, StatusCode, Timeout, WaitMode};

use crate::check::{CaseResult, Context, FAULT_CODES, expect_code, expect_one_of, expect_same_status};
use crate::context::{Cx, LONG, SHORT, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

fn cleared(cx: &Cx, size: u64) -> Result<hal::Buffer, crate::CaseError> {
    let buffer = cx.host_buffer(size)?;
    buffer.write(0, &vec![0; size as usize]).ctx("clear")?;
    Ok(buffer)
}

/// A one-shot command buffer running the fault kernel.
fn fault_command_buffer(cx: &Cx) -> Result<CommandBuffer, crate::CaseError> {
    let exe = cx.load(Kernel::Fault)?;
    let scratch = cx.host_buffer(64)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.dispatch(&exe, 0, [1, 1, 1], &[], &[BufferBinding::whole(&scratch)]).ctx("dispatch fault")?;
    cb.end().ctx("end")?;
    Ok(cb)
}

/// A one-shot command buffer filling `buffer` with `value` through the fill kernel.
fn fill_command_buffer(cx: &Cx, buffer: &hal::Buffer, value: u32) -> Result<CommandBuffer, crate::CaseError> {
    let exe = cx.load(Kernel::FillU32)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.dispatch(&exe, 0, [1, 1, 1], &[value], &[BufferBinding::range(buffer, 0, 256)]).ctx("dispatch fill")?;
    cb.end().ctx("end")?;
    Ok(cb)
}

/// A wait that fails after submission fails the work's signals with its status; the work never runs.
pub(crate) fn failed_wait_fails_dependants(cx: &Cx) -> CaseResult {
    let buffer = cleared(cx, 256)?;
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    let cb = fill_command_buffer(cx, &buffer, 5)?;
    cx.queue(0).execute(&[sv(&gate, 1)], &cb, &[sv(&done, 1)]).ctx("execute")?;
    cx.queue(1).fill(&[sv(&gate, 1)], &buffer, 0, 256, 9, 1, &[sv(&done, 2)]).ctx("fill")?;
    let cause = Error::data_loss("ctest: upstream broke");
    gate.fail(cause.clone());
    let e = cx.wait_failed(&done, 1, StatusCode::DataLoss)?;
    expect_same_status(&e, &cause, "the dependants' signal")?;
    std::thread::sleep(SHORT);
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 256], "buffer (no dependant ran)");
    Ok(())
}

/// A wait already failed at submission: the call may refuse with the failure or accept; either
/// way the signals fail with that status and nothing runs.
pub(crate) fn failed_before_submission(cx: &Cx) -> CaseResult {
    let buffer = cleared(cx, 256)?;
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    let cause = Error::cancelled("ctest: broken before the submission");
    gate.fail(cause.clone());
    let cb = fill_command_buffer(cx, &buffer, 5)?;
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let submissions: [(&str, hal::Result<()>); 3] = [
        ("execute", cx.queue(0).execute(&[sv(&gate, 1)], &cb, &[sv(&done, 1)])),
        ("fill", cx.queue(1).fill(&[sv(&gate, 1)], &buffer, 0, 8, 1, 1, &[sv(&done, 2)])),
        (
            "host_call",
            cx.queue(2).host_call(
                &[sv(&gate, 1)],
                move || {
                    flag.store(true, Ordering::SeqCst);
                    Ok(())
                },
                &[sv(&done, 3)],
            ),
        ),
    ];
    for (op, result) in submissions {
        if let Err(e) = result {
            expect_same_status(&e, &cause, &format!("{op} waiting on a failed semaphore"))?;
        }
    }
    let e = cx.wait_failed(&done, 1, StatusCode::Cancelled)?;
    expect_same_status(&e, &cause, "signal of work behind a failed wait")?;
    std::thread::sleep(SHORT);
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 256], "buffer");
    ensure!(!ran.load(Ordering::SeqCst), "the host call ran");
    Ok(())
}

/// A failure travels down a chain across queues: every link fails with the status, none runs.
pub(crate) fn failure_propagates_down_chain(cx: &Cx) -> CaseResult {
    let buffer = cleared(cx, 64)?;
    let gate = cx.sem(0)?;
    let links: Vec<hal::Semaphore> = (0..4).map(|_| cx.sem(0)).collect::<Result<_, _>>()?;
    let mut previous = sv(&gate, 1);
    for (i, link) in links.iter().enumerate() {
        let at = i as u64 * 16;
        cx.queue(i).fill(&[previous], &buffer, at, 16, 0xFF, 1, &[sv(link, 1)]).ctx(format!("link {i}"))?;
        previous = sv(link, 1);
    }
    let cause = Error::aborted("ctest: the head of the chain broke");
    gate.fail(cause.clone());
    for (i, link) in links.iter().enumerate() {
        let e = cx.wait_failed(link, 1, StatusCode::Aborted)?;
        expect_same_status(&e, &cause, &format!("link {i}"))?;
    }
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 64], "buffer (no link ran)");
    Ok(())
}

/// One failed wait among several reached ones fails the work.
pub(crate) fn one_failed_wait_of_several(cx: &Cx) -> CaseResult {
    let (a, b, c, done) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).barrier(&[sv(&a, 1), sv(&b, 1), sv(&c, 1)], &[sv(&done, 1)]).ctx("barrier")?;
    a.signal(1).ctx("signal a")?;
    c.signal(1).ctx("signal c")?;
    b.fail(Error::internal("ctest: b broke"));
    cx.wait_failed(&done, 1, StatusCode::Internal).map(drop)
}

/// Host threads waiting on the signal of work behind a failed wait see the failure.
pub(crate) fn failure_reaches_host_waiters(cx: &Cx) -> CaseResult {
    let (gate, done, other) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).barrier(&[sv(&gate, 1)], &[sv(&done, 1)]).ctx("barrier")?;
    let list = vec![sv(&done, 1), sv(&other, 1)];
    let waiter = std::thread::spawn(move || hal::wait_semaphores(WaitMode::Any, &list, Timeout::After(LONG)));
    std::thread::sleep(SHORT);
    gate.fail(Error::data_loss("ctest: broke under a waiter"));
    let result = waiter.join().map_err(|_| "waiter panicked")?;
    expect_code(result, StatusCode::DataLoss, "wait-any on the failed work's signal")?;
    cx.expect_value(&other, 0, "an unrelated semaphore")
}

/// A failure on one queue does not stop other queues, or later independent work on the same queue.
pub(crate) fn failure_does_not_stop_other_work(cx: &Cx) -> CaseResult {
    let (gate, failed) = (cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).barrier(&[sv(&gate, 1)], &[sv(&failed, 1)]).ctx("barrier behind the gate")?;
    gate.fail(Error::aborted("ctest: broke"));
    cx.wait_failed(&failed, 1, StatusCode::Aborted)?;
    for q in 0..cx.device().queue_count() {
        let buffer = cleared(cx, 16)?;
        let done = cx.sem(0)?;
        cx.queue(q).fill(&[], &buffer, 0, 16, q as u32 + 1, 1, &[sv(&done, 1)]).ctx(format!("fill on queue {q}"))?;
        cx.wait(&done, 1)?;
        ensure_eq!(cx.bytes(&buffer)?, vec![q as u8 + 1; 16], "queue {q}'s buffer");
    }
    Ok(())
}

/// Failing a wait semaphore after the work completed changes nothing for that work.
pub(crate) fn failure_after_completion_is_harmless(cx: &Cx) -> CaseResult {
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).barrier(&[sv(&gate, 1)], &[sv(&done, 1)]).ctx("barrier")?;
    gate.signal(1).ctx("signal")?;
    cx.wait(&done, 1)?;
    gate.fail(Error::aborted("ctest: broke after the work"));
    cx.expect_value(&done, 1, "signal of the completed work")
}

/// Work behind a failed semaphore of another device fails with its status.
pub(crate) fn failure_across_devices(cx: &Cx) -> CaseResult {
    let other = cx.other_device()?;
    let theirs = other.create_semaphore(0).ctx("semaphore on the other device")?;
    let done = cx.sem(0)?;
    cx.queue(0).barrier(&[sv(&theirs, 1)], &[sv(&done, 1)]).ctx("barrier")?;
    theirs.fail(Error::unavailable("ctest: the other device went away"));
    cx.wait_failed(&done, 1, StatusCode::Unavailable).map(drop)
}

/// Alloca behind a failed wait fails its signal; the dealloca and reads behind it fail too.
pub(crate) fn failed_alloca_chain(cx: &Cx) -> CaseResult {
    let (gate, s) = (cx.sem(0)?, cx.sem(0)?);
    let q = cx.queue(0);
    let buffer = q.alloca(&[sv(&gate, 1)], BufferParams::device_local(), 64, &[sv(&s, 1)]).ctx("alloca")?;
    let back = q.read(&[sv(&s, 1)], &buffer, 0, 64, &[sv(&s, 2)]).ctx("read")?;
    q.dealloca(&[sv(&s, 2)], &buffer, &[sv(&s, 3)]).ctx("dealloca")?;
    gate.fail(Error::resource_exhausted("ctest: no memory upstream"));
    cx.wait_failed(&s, 3, StatusCode::ResourceExhausted)?;
    ensure!(back.take().is_none(), "a read behind a failed alloca produced bytes");
    Ok(())
}

/// A faulting kernel fails exactly its own signal semaphores with a fault status; concurrent
/// independent work and other semaphores are untouched.
pub(crate) fn fault_fails_exactly_its_signals(cx: &Cx) -> CaseResult {
    let fault = fault_command_buffer(cx)?;
    let buffer = cleared(cx, 256)?;
    let fill = fill_command_buffer(cx, &buffer, 0x1234)?;
    let (s1, s2, ok, untouched) = (cx.sem(0)?, cx.sem(2)?, cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).execute(&[], &fault, &[sv(&s1, 1), sv(&s2, 3)]).ctx("execute fault")?;
    cx.queue(1).execute(&[], &fill, &[sv(&ok, 1)]).ctx("execute independent fill")?;
    let e1 = cx.wait_any_failure(&s1, 1)?;
    expect_one_of::<()>(Err(e1.clone()), FAULT_CODES, "first signal of the faulting work")?;
    let e2 = cx.wait_any_failure(&s2, 3)?;
    ensure_eq!(e2.code(), e1.code(), "second signal's status");
    cx.wait(&ok, 1)?;
    ensure_eq!(cx.words(&buffer)?, vec![0x1234; 64], "the independent fill");
    cx.expect_value(&untouched, 0, "a semaphore no one signals")
}

/// Work waiting on a faulting kernel's signal fails with the same status and does not run.
pub(crate) fn fault_fails_dependants(cx: &Cx) -> CaseResult {
    let fault = fault_command_buffer(cx)?;
    let buffer = cleared(cx, 256)?;
    let fill = fill_command_buffer(cx, &buffer, 0x99)?;
    let (s, t) = (cx.sem(0)?, cx.sem(0)?);
    // Submitted before the fault: held on the host until the fault's signal resolves.
    cx.queue(1).execute(&[sv(&s, 1)], &fill, &[sv(&t, 1)]).ctx("dependent execute")?;
    cx.queue(0).execute(&[], &fault, &[sv(&s, 1)]).ctx("execute fault")?;
    let cause = cx.wait_any_failure(&s, 1)?;
    expect_one_of::<()>(Err(cause.clone()), FAULT_CODES, "the fault's signal")?;
    let e = cx.wait_any_failure(&t, 1)?;
    expect_same_status(&e, &cause, "the dependant's signal")?;
    ensure_eq!(cx.words(&buffer)?, vec![0; 64], "buffer (the dependant did not run)");
    Ok(())
}

/// Work chained device-side right behind a faulting kernel (submitted after it) fails too.
pub(crate) fn fault_fails_chained_dependants(cx: &Cx) -> CaseResult {
    let fault = fault_command_buffer(cx)?;
    let buffer = cleared(cx, 256)?;
    let fill = fill_command_buffer(cx, &buffer, 0x98)?;
    let (s, t) = (cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).execute(&[], &fault, &[sv(&s, 1)]).ctx("execute fault")?;
    cx.queue(1).execute(&[sv(&s, 1)], &fill, &[sv(&t, 1)]).ctx("dependent execute")?;
    let cause = cx.wait_any_failure(&s, 1)?;
    let e = cx.wait_any_failure(&t, 1)?;
    expect_same_status(&e, &cause, "the dependant's signal")?;
    ensure_eq!(cx.words(&buffer)?, vec![0; 64], "buffer (the dependant did not run)");
    Ok(())
}

/// After a fault the device keeps working: dispatches on the faulting queue and on the others.
pub(crate) fn device_works_after_fault(cx: &Cx) -> CaseResult {
    let fault = fault_command_buffer(cx)?;
    let s = cx.sem(0)?;
    cx.queue(0).execute(&[], &fault, &[sv(&s, 1)]).ctx("execute fault")?;
    cx.wait_any_failure(&s, 1)?;
    for q in 0..cx.device().queue_count() {
        let buffer = cleared(cx, 256)?;
        let fill = fill_command_buffer(cx, &buffer, q as u32 + 7)?;
        let done = cx.sem(0)?;
        cx.queue(q).execute(&[], &fill, &[sv(&done, 1)]).ctx(format!("execute on queue {q}"))?;
        cx.wait(&done, 1)?;
        ensure_eq!(cx.words(&buffer)?, vec![q as u32 + 7; 64], "queue {q}'s buffer after the fault");
    }
    Ok(())
}

/// Twenty faults in a row, interleaved with good work: each fault fails only its own signal.
pub(crate) fn repeated_faults(cx: &Cx) -> CaseResult {
    let buffer = cleared(cx, 256)?;
    for round in 0..20u32 {
        let fault = fault_command_buffer(cx)?;
        let fill = fill_command_buffer(cx, &buffer, round)?;
        let (bad, good) = (cx.sem(0)?, cx.sem(0)?);
        cx.queue(round as usize).execute(&[], &fault, &[sv(&bad, 1)]).ctx("execute fault")?;
        cx.queue(round as usize).execute(&[], &fill, &[sv(&good, 1)]).ctx("execute fill")?;
        cx.wait_any_failure(&bad, 1)?;
        cx.wait(&good, 1)?;
        ensure_eq!(cx.words(&buffer)?[0], round, "round {round}'s fill");
    }
    Ok(())
}
