//! Failure: a failed wait fails the work behind it (which does not run) with the same status, down
//! whole chains and across queues and devices; a faulting kernel fails exactly its signals, and the
//! device keeps working.
//!
//! On a driver whose faults are sticky ([`crate::Fixture::with_sticky_faults`], CUDA) the fault cases
//! that need the device to go on after a fault check the sticky contract instead (see [`sticky`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hal::{BufferBinding, BufferParams, CommandBuffer, CommandBufferMode, Error, StatusCode, Timeout, WaitMode};

use crate::check::{CaseError, CaseResult, Context, FAULT_CODES, expect_code, expect_one_of, expect_same_status};
use crate::context::{Cx, LONG, SHORT, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

/// Checks `e` is a fault status (`Aborted` or `DataLoss`) that names the device error when the
/// fixture declares what such a name contains ([`crate::Fixture::with_fault_marker`]).
fn expect_fault(cx: &Cx, e: &Error, what: &str) -> CaseResult {
    expect_one_of::<()>(Err(e.clone()), FAULT_CODES, what)?;
    if let Some(marker) = cx.fixture().fault_marker() {
        ensure!(e.message().contains(marker), "{what}: the status does not name the device error ('{marker}'): {e}");
    }
    Ok(())
}

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

/// The three pieces of most fault cases: a faulting command buffer, a cleared 256-byte buffer and a
/// command buffer that fills it with `value`.
fn fault_and_fill(cx: &Cx, value: u32) -> Result<(CommandBuffer, hal::Buffer, CommandBuffer), crate::CaseError> {
    let fault = fault_command_buffer(cx)?;
    let buffer = cleared(cx, 256)?;
    let fill = fill_command_buffer(cx, &buffer, value)?;
    Ok((fault, buffer, fill))
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
    cx.queue(1).fill(&[sv(&gate, 1)], &buffer, 0, 256, 9u8, &[sv(&done, 2)]).ctx("fill")?;
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
        ("fill", cx.queue(1).fill(&[sv(&gate, 1)], &buffer, 0, 8, 1u8, &[sv(&done, 2)])),
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
        cx.queue(i).fill(&[previous], &buffer, at, 16, 0xFFu8, &[sv(link, 1)]).ctx(format!("link {i}"))?;
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
        cx.queue(q).fill(&[], &buffer, 0, 16, q as u8 + 1, &[sv(&done, 1)]).ctx(format!("fill on queue {q}"))?;
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
    if cx.fixture().faults_are_sticky() {
        return sticky::variant(cx, sticky::fault_fails_exactly_its_signals);
    }
    let (fault, buffer, fill) = fault_and_fill(cx, 0x1234)?;
    let (s1, s2, ok, untouched) = (cx.sem(0)?, cx.sem(2)?, cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).execute(&[], &fault, &[sv(&s1, 1), sv(&s2, 3)]).ctx("execute fault")?;
    cx.queue(1).execute(&[], &fill, &[sv(&ok, 1)]).ctx("execute independent fill")?;
    let e1 = cx.wait_any_failure(&s1, 1)?;
    expect_fault(cx, &e1, "first signal of the faulting work")?;
    let e2 = cx.wait_any_failure(&s2, 3)?;
    ensure_eq!(e2.code(), e1.code(), "second signal's status");
    cx.wait(&ok, 1)?;
    ensure_eq!(cx.words(&buffer)?, vec![0x1234; 64], "the independent fill");
    cx.expect_value(&untouched, 0, "a semaphore no one signals")
}

/// Work waiting on a faulting kernel's signal fails with the same status and does not run.
pub(crate) fn fault_fails_dependants(cx: &Cx) -> CaseResult {
    if cx.fixture().faults_are_sticky() {
        return sticky::variant(cx, sticky::fault_fails_dependants);
    }
    let (fault, buffer, fill) = fault_and_fill(cx, 0x99)?;
    let (s, t) = (cx.sem(0)?, cx.sem(0)?);
    // Submitted before the fault: held on the host until the fault's signal resolves.
    cx.queue(1).execute(&[sv(&s, 1)], &fill, &[sv(&t, 1)]).ctx("dependent execute")?;
    cx.queue(0).execute(&[], &fault, &[sv(&s, 1)]).ctx("execute fault")?;
    let cause = cx.wait_any_failure(&s, 1)?;
    expect_fault(cx, &cause, "the fault's signal")?;
    let e = cx.wait_any_failure(&t, 1)?;
    expect_same_status(&e, &cause, "the dependant's signal")?;
    ensure_eq!(cx.words(&buffer)?, vec![0; 64], "buffer (the dependant did not run)");
    Ok(())
}

/// Work chained device-side right behind a faulting kernel (submitted after it) fails too.
pub(crate) fn fault_fails_chained_dependants(cx: &Cx) -> CaseResult {
    if cx.fixture().faults_are_sticky() {
        return sticky::variant(cx, sticky::fault_fails_chained_dependants);
    }
    let (fault, buffer, fill) = fault_and_fill(cx, 0x98)?;
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
    if cx.fixture().faults_are_sticky() {
        return sticky::variant(cx, sticky::device_after_fault);
    }
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
    if cx.fixture().faults_are_sticky() {
        return sticky::variant(cx, sticky::repeated_faults);
    }
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

/// Waits for `semaphore` to fail with the status of `cause`; reaching `value` instead is a failure
/// that says so.
pub(crate) fn expect_carried_failure(
    cx: &Cx,
    semaphore: &hal::Semaphore,
    value: u64,
    cause: &Error,
    what: &str,
) -> CaseResult {
    match semaphore.wait(value, Timeout::After(LONG)) {
        Ok(()) => Err(CaseError::Fail(format!(
            "{what}: semaphore {} reached {value} (success) although the work waited on a semaphore that failed \
             with '{cause}' before that work completed",
            semaphore.id()
        ))),
        Err(e) if e.code() == StatusCode::DeadlineExceeded => Err(CaseError::Fail(format!(
            "{what}: semaphore {} neither reached {value} nor failed: {e}\n{}",
            semaphore.id(),
            cx.device().report()
        ))),
        Err(e) => expect_same_status(&e, cause, what),
    }
}

/// The host fails `s` while the work that waits on it is queued and held: its producer on queue 0
/// waits on a host semaphore not yet signalled, a dependant on queue 1 waits on `s`, and a second
/// dependant on queue 2 waits on the first. Both dependants fail with `s`'s status and do not run;
/// the producer, released afterwards, runs (its own wait did not fail) and leaves `s` failed.
pub(crate) fn fail_with_dependants_held(cx: &Cx) -> CaseResult {
    let hold = hal::Semaphore::new(0);
    let (s, t, u, produced) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    let (source, target) = (cleared(cx, 64)?, cleared(cx, 64)?);
    cx.queue(0).fill(&[sv(&hold, 1)], &source, 0, 64, 0xAAu8, &[sv(&s, 1), sv(&produced, 1)]).ctx("producer")?;
    cx.queue(1).fill(&[sv(&s, 1)], &target, 0, 64, 0xBBu8, &[sv(&t, 1)]).ctx("dependant")?;
    cx.queue(2).barrier(&[sv(&t, 1)], &[sv(&u, 1)]).ctx("transitive dependant")?;
    cx.still_pending(&t, 1, "the dependant before anything happens")?;
    let cause = Error::data_loss("ctest: s failed while its dependants were queued");
    s.fail(cause.clone());
    expect_carried_failure(cx, &t, 1, &cause, "the dependant's signal")?;
    expect_carried_failure(cx, &u, 1, &cause, "the transitive dependant's signal")?;
    hold.signal(1).ctx("release the producer")?;
    cx.wait(&produced, 1)?;
    ensure_eq!(cx.bytes(&source)?, vec![0xAA; 64], "the producer's bytes (its wait did not fail)");
    ensure_eq!(cx.bytes(&target)?, vec![0; 64], "the dependant's target (it must not run)");
    let e = expect_code(s.query(), StatusCode::DataLoss, "s after its producer completed")?;
    expect_same_status(&e, &cause, "s after its producer completed")
}

/// The host fails `s` while its producer (large fills on queue 0) is still running on the device
/// and the work that waits on it is already issued device-side (a fill on queue 1 waiting on the
/// producer's event, and a barrier on queue 2 waiting on that fill's). Every signal of work that
/// waited on `s`, directly or transitively, must carry `s`'s failure, never success.
///
/// (Once, the issued dependant still signalled success: "Failing a semaphore does not stop queued
/// work".) The producer itself either completes (a GPU cannot stop launched work) or, where the
/// driver can stop work whose signals all failed, is cancelled: both are accepted.
pub(crate) fn fail_with_dependants_issued(cx: &Cx) -> CaseResult {
    const SIZE: u64 = 32 << 20;
    let busy = cx.device_buffer(SIZE)?;
    let target = cleared(cx, 64)?;
    // The producer must still be running when the host fails `s`: if the device was faster, run
    // again with four times the work.
    for fills in [4u32, 16, 64] {
        let producer = cx.command_buffer(CommandBufferMode::OneShot)?;
        for i in 0..fills {
            producer.fill(&busy, 0, SIZE, i as u8).ctx("record a fill")?;
        }
        producer.end().ctx("end")?;
        let (s, t, u, producer_done) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
        // `producer_done` first: a driver applying signals in list order reaches it before `s`.
        let signals = [sv(&producer_done, 1), sv(&s, 1)];
        cx.queue(0).execute(&[], &producer, &signals).ctx("producer")?;
        cx.queue(1).fill(&[sv(&s, 1)], &target, 0, 64, 0xBBu8, &[sv(&t, 1)]).ctx("dependant")?;
        cx.queue(2).barrier(&[sv(&t, 1)], &[sv(&u, 1)]).ctx("transitive dependant")?;
        let cause = Error::data_loss("ctest: s failed while its producer was running");
        let before = s.query().ctx("query s")?;
        if before == 0 {
            s.fail(cause.clone());
        }
        // Only a failure that certainly came before the producer completed decides the case.
        if before != 0 || producer_done.query().ctx("query producer_done")? != 0 {
            cx.wait(&producer_done, 1)?;
            let _ = u.wait(1, Timeout::After(LONG));
            continue;
        }
        cx.note(format!("s failed while {fills} fills of 32 MiB ran"));
        expect_carried_failure(cx, &t, 1, &cause, "the issued dependant's signal")?;
        expect_carried_failure(cx, &u, 1, &cause, "the issued transitive dependant's signal")?;
        // `producer_done` had not failed, so the producer is not cancelled: it completes.
        cx.wait(&producer_done, 1)?;
        let e = expect_code(s.query(), StatusCode::DataLoss, "s after its producer completed")?;
        return expect_same_status(&e, &cause, "s after its producer completed");
    }
    crate::check::skip("the device ran 64 fills of 32 MiB before the host could fail the semaphore; not checked")
}

/// The fault cases on a driver whose faults are sticky ([`crate::Fixture::with_sticky_faults`]): a
/// fault poisons the whole device (on CUDA, the GPU's context for the rest of the process), so "the
/// device keeps working after a fault" cannot hold, and is not pretended. What these variants check
/// instead (the sticky contract):
/// - the faulting submission's signals fail with a fault status (`Aborted` or `DataLoss`) naming
///   the device error, and nothing else is failed by it that was not submitted to the device;
/// - work depending on the fault fails with the same code, also naming the device error, and does
///   not run (its message may be its own observation of the sticky error rather than the
///   producer's: on a poisoned device every stream reports the fault by itself);
/// - work right behind the fault and every later device submission on every queue fails with a
///   status within [`LONG`] (refused at the call, or its signals failed): none hangs, none
///   completes, and the process does not abort;
/// - the device's pools come back to idle, staging memory of the work caught by the fault included.
///
/// Each variant says that it ran: a note beside PASS, or a failure message starting with
/// `sticky-fault variant:`.
pub(crate) mod sticky {
    use hal::Semaphore;

    use super::*;
    use crate::runner::{IDLE_LIMIT, check_idle};

    /// Runs a sticky variant; what it saw becomes the case's note.
    pub(crate) fn variant(cx: &Cx, run: fn(&Cx) -> Result<String, CaseError>) -> CaseResult {
        match run(cx) {
            Ok(seen) => {
                cx.note(format!("sticky-fault variant: {seen}"));
                Ok(())
            }
            Err(CaseError::Fail(message)) => Err(CaseError::Fail(format!("sticky-fault variant: {message}"))),
            Err(skip) => Err(skip),
        }
    }

    /// A submission caught by a sticky fault: refused at the call, or its signal fails within
    /// [`LONG`] (reaching the value fails the case). Returns the status.
    fn expect_failure(
        cx: &Cx,
        what: &str,
        submitted: hal::Result<()>,
        signal: &Semaphore,
        value: u64,
    ) -> Result<Error, CaseError> {
        match submitted {
            Err(refused) => Ok(refused),
            Ok(()) => cx.wait_any_failure(signal, value).map_err(|e| match e {
                CaseError::Fail(message) => CaseError::Fail(format!("{what}: {message}")),
                skip => skip,
            }),
        }
    }

    /// A dependant's status: the fault's code, naming the device error. Says whether it carries the
    /// fault's own message or the device's sticky error as the dependant's stream saw it.
    fn same_fault(cx: &Cx, seen: &Error, cause: &Error, what: &str) -> Result<&'static str, CaseError> {
        ensure_eq!(seen.code(), cause.code(), "{what}: status code (the fault's is '{cause}', got '{seen}')");
        expect_fault(cx, seen, what)?;
        Ok(if seen.message().contains(cause.message()) {
            "with the fault's status"
        } else {
            "with the same code and device error, as its own stream saw it"
        })
    }

    fn idle(cx: &Cx, what: &str) -> CaseResult {
        match check_idle(std::slice::from_ref(cx.device()), IDLE_LIMIT) {
            None => Ok(()),
            Some(leak) => Err(CaseError::Fail(format!("{what}: not idle: {leak}"))),
        }
    }

    /// The fault fails exactly its own signals; independent work submitted beside it shares the
    /// poisoned device, so it completes (if it ran before the fault) or fails with a fault status.
    pub(crate) fn fault_fails_exactly_its_signals(cx: &Cx) -> Result<String, CaseError> {
        let (fault, buffer, fill) = fault_and_fill(cx, 0x1234)?;
        let (s1, s2, ok, untouched) = (cx.sem(0)?, cx.sem(2)?, cx.sem(0)?, cx.sem(0)?);
        cx.queue(0).execute(&[], &fault, &[sv(&s1, 1), sv(&s2, 3)]).ctx("execute fault")?;
        cx.queue(1).execute(&[], &fill, &[sv(&ok, 1)]).ctx("execute independent fill")?;
        let e1 = cx.wait_any_failure(&s1, 1)?;
        expect_fault(cx, &e1, "first signal of the faulting work")?;
        let e2 = cx.wait_any_failure(&s2, 3)?;
        expect_same_status(&e2, &e1, "second signal of the faulting work")?;
        let independent = match ok.wait(1, Timeout::After(LONG)) {
            Ok(()) => {
                ensure_eq!(cx.words(&buffer)?, vec![0x1234; 64], "the independent fill (completed)");
                "completed before the fault"
            }
            Err(e) if e.code() == StatusCode::DeadlineExceeded => {
                return Err(CaseError::Fail(format!(
                    "the independent fill neither completed nor failed: {e}\n{}",
                    cx.device().report()
                )));
            }
            Err(e) => {
                expect_fault(cx, &e, "the independent fill, failed by the sticky fault")?;
                "failed with the sticky fault"
            }
        };
        cx.expect_value(&untouched, 0, "a semaphore no one signals")?;
        idle(cx, "after the fault")?;
        Ok(format!("the fault failed exactly its 2 signals ({e1}); the independent fill beside it {independent}"))
    }

    /// A dependant held on the host until the fault's signal is enqueued fails with the fault's
    /// code and does not run.
    pub(crate) fn fault_fails_dependants(cx: &Cx) -> Result<String, CaseError> {
        dependant(cx, true)
    }

    /// A dependant submitted after the fault (chained device-side) fails with the fault's code
    /// and does not run.
    pub(crate) fn fault_fails_chained_dependants(cx: &Cx) -> Result<String, CaseError> {
        dependant(cx, false)
    }

    fn dependant(cx: &Cx, submitted_first: bool) -> Result<String, CaseError> {
        let (fault, buffer, fill) = fault_and_fill(cx, 0x99)?;
        let (s, t) = (cx.sem(0)?, cx.sem(0)?);
        if submitted_first {
            cx.queue(1).execute(&[sv(&s, 1)], &fill, &[sv(&t, 1)]).ctx("dependent execute")?;
            cx.queue(0).execute(&[], &fault, &[sv(&s, 1)]).ctx("execute fault")?;
        } else {
            cx.queue(0).execute(&[], &fault, &[sv(&s, 1)]).ctx("execute fault")?;
            cx.queue(1).execute(&[sv(&s, 1)], &fill, &[sv(&t, 1)]).ctx("dependent execute")?;
        }
        let cause = cx.wait_any_failure(&s, 1)?;
        expect_fault(cx, &cause, "the fault's signal")?;
        let e = cx.wait_any_failure(&t, 1)?;
        let how = same_fault(cx, &e, &cause, "the dependant's signal")?;
        ensure_eq!(cx.words(&buffer)?, vec![0; 64], "buffer (the dependant did not run)");
        idle(cx, "after the fault")?;
        Ok(format!("the fault failed its signal ({cause}); the dependant failed {how} ({e}) and did not run"))
    }

    /// After the fault: staged transfers right behind it on its queue, and a dispatch and a fill on
    /// every queue, all fail within the bound and none runs; the pools return to idle.
    pub(crate) fn device_after_fault(cx: &Cx) -> Result<String, CaseError> {
        // Everything the later work needs is made first: a poisoned device may refuse allocations
        // and executable loads as well.
        let fault = fault_command_buffer(cx)?;
        let queues = cx.device().queue_count();
        let mut later = Vec::with_capacity(queues);
        for q in 0..queues {
            let buffer = cleared(cx, 256)?;
            let fill = fill_command_buffer(cx, &buffer, q as u32 + 7)?;
            later.push((buffer, fill));
        }
        let staged = cleared(cx, 64)?;
        let (s, wrote, read) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
        let q0 = cx.queue(0);
        let start = std::time::Instant::now();
        q0.execute(&[], &fault, &[sv(&s, 1)]).ctx("execute fault")?;
        // Right behind the fault on its queue (enqueued before the fault shows, most likely): a
        // write and a read through the driver's staging memory, which must come back to its pool.
        let write = q0.write(&[], &staged, 0, vec![0xAB; 64], &[sv(&wrote, 1)]);
        let (read_submitted, back) = match q0.read(&[], &staged, 0, 64, &[sv(&read, 1)]) {
            Ok(back) => (Ok(()), Some(back)),
            Err(e) => (Err(e), None),
        };
        let cause = cx.wait_any_failure(&s, 1)?;
        let seen_after = start.elapsed();
        expect_fault(cx, &cause, "the fault's signal")?;
        expect_failure(cx, "a queue write behind the fault", write, &wrote, 1)?;
        expect_failure(cx, "a queue read behind the fault", read_submitted, &read, 1)?;
        ensure!(back.is_none_or(|b| b.take().is_none()), "a read behind the fault produced bytes");
        ensure_eq!(cx.bytes(&staged)?, vec![0; 64], "buffer written behind the fault");
        let mut example = None;
        for (q, (buffer, fill)) in later.iter().enumerate() {
            let (done, filled) = (cx.sem(0)?, cx.sem(0)?);
            let executed = cx.queue(q).execute(&[], fill, &[sv(&done, 1)]);
            let e = expect_failure(cx, &format!("a dispatch on queue {q} after the fault"), executed, &done, 1)?;
            let queued = cx.queue(q).fill(&[], buffer, 0, 256, 0xEEu8, &[sv(&filled, 1)]);
            expect_failure(cx, &format!("a queue fill on queue {q} after the fault"), queued, &filled, 1)?;
            ensure_eq!(cx.words(buffer)?, vec![0; 64], "queue {q}'s buffer (nothing runs after the fault)");
            example.get_or_insert(e);
        }
        idle(cx, "after the fault and the work that failed behind it")?;
        let example = example.map_or_else(String::new, |e| format!(" (e.g. {e})"));
        Ok(format!(
            "the fault failed its signal after {seen_after:?} ({cause}); the write and read behind it and a \
             dispatch and a fill on each of {queues} queue(s) afterwards failed{example}; nothing ran; pools idle"
        ))
    }

    /// Twenty faults in a row, each followed by a fill on its queue: the first fault poisons the
    /// device; every fault and fill fails within the bound instead of hanging, and none runs.
    pub(crate) fn repeated_faults(cx: &Cx) -> Result<String, CaseError> {
        let buffer = cleared(cx, 256)?;
        let mut rounds = Vec::with_capacity(20);
        for round in 0..20u32 {
            rounds.push((fault_command_buffer(cx)?, fill_command_buffer(cx, &buffer, round + 1)?));
        }
        let mut first = None;
        for (round, (fault, fill)) in rounds.iter().enumerate() {
            let (bad, good) = (cx.sem(0)?, cx.sem(0)?);
            let q = cx.queue(round);
            let faulted = q.execute(&[], fault, &[sv(&bad, 1)]);
            let filled = q.execute(&[], fill, &[sv(&good, 1)]);
            let e = expect_failure(cx, &format!("round {round}'s fault"), faulted, &bad, 1)?;
            if round == 0 {
                expect_fault(cx, &e, "the first fault's signal")?;
            }
            first.get_or_insert(e);
            expect_failure(cx, &format!("round {round}'s fill, behind a fault"), filled, &good, 1)?;
        }
        ensure_eq!(cx.words(&buffer)?, vec![0; 64], "buffer (no fill runs on the poisoned device)");
        idle(cx, "after 20 faults")?;
        let first = first.map_or_else(String::new, |e| e.to_string());
        Ok(format!(
            "the first fault failed its signal ({first}); all 20 faults and the fills behind them failed, none ran; pools idle"
        ))
    }
}
