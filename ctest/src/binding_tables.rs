//! Binding tables: a reusable command buffer records against binding slots (`BufferRef::slot`,
//! `BindingRef::slot`), and each `execute_with_bindings` passes the buffers for them.

use hal::{
    BindingRef, BufferBinding, BufferParams, BufferRef, BufferUsage, CommandBuffer, CommandBufferMode, StatusCode,
};

use crate::check::{CaseError, CaseResult, Context, expect_code};
use crate::context::{Cx, from_bytes, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

/// Records a "function" over three slots: `fill_u32(slot 0, value)`, then copy slot 0's first 64
/// bytes to slot 1, then fill slot 2's bytes 4..12 with 0x5A.
fn function(cx: &Cx, value: u32) -> Result<CommandBuffer, CaseError> {
    let fill = cx.load(Kernel::FillU32)?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.dispatch_refs(&fill, 0, [1, 1, 1], &[value], &[BindingRef::slot(0, 0, 256)]).ctx("dispatch on slot 0")?;
    cb.barrier().ctx("barrier")?;
    cb.copy(BufferRef::slot(0), 0, BufferRef::slot(1), 0, 64).ctx("copy slot 0 to slot 1")?;
    cb.fill(BufferRef::slot(2), 4, 8, 0x5Au8).ctx("fill slot 2")?;
    cb.end().ctx("end")?;
    Ok(cb)
}

/// One recorded command buffer runs with a new table each time; each execute's commands reach that
/// execute's buffers (and ranges inside them), and earlier tables' buffers keep their results.
pub(crate) fn table_entries_reach_dispatches_and_transfers(cx: &Cx) -> CaseResult {
    let cb = function(cx, 0x0B0B)?;
    ensure_eq!(cb.binding_slots(), 3, "binding slots");
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let mut calls = Vec::new();
    for call in 0..4u64 {
        let (a, b, c) = (cx.host_buffer(256)?, cx.host_buffer(128)?, cx.host_buffer(64)?);
        // Slot 1 is the second half of `b`; slot 2 is bytes 16.. of `c`.
        let table = [BufferBinding::whole(&a), BufferBinding::range(&b, 64, 64), BufferBinding::range(&c, 16, 48)];
        queue.execute_with_bindings(&[sv(&s, call)], &cb, &table, &[sv(&s, call + 1)]).ctx("execute")?;
        calls.push((a, b, c));
    }
    cx.wait(&s, 4)?;
    for (call, (a, b, c)) in calls.iter().enumerate() {
        ensure!(cx.words(a)?.iter().all(|&w| w == 0x0B0B), "call {call}: slot 0 not filled");
        let b = cx.bytes(b)?;
        ensure!(b[..64].iter().all(|&x| x == 0), "call {call}: bytes before slot 1 changed");
        ensure_eq!(crate::context::from_bytes(&b[64..]), vec![0x0B0B; 16], "call {call}: slot 1");
        let mut expected = vec![0u8; 64];
        expected[20..28].fill(0x5A);
        ensure_eq!(cx.bytes(c)?, expected, "call {call}: slot 2");
    }
    Ok(())
}

/// Executes of one command buffer with different tables overlap on several queues (held behind one
/// gate, released together) and each gets its own buffers.
pub(crate) fn overlapping_executes_with_different_tables(cx: &Cx) -> CaseResult {
    let cb = function(cx, 77)?;
    let gate = cx.sem(0)?;
    let mut calls = Vec::new();
    for q in 0..cx.device().queue_count().min(4) {
        let (a, b, c) = (cx.device_buffer(256)?, cx.device_buffer(64)?, cx.device_buffer(64)?);
        let table = [BufferBinding::whole(&a), BufferBinding::whole(&b), BufferBinding::whole(&c)];
        let done = cx.sem(0)?;
        cx.queue(q).execute_with_bindings(&[sv(&gate, 1)], &cb, &table, &[sv(&done, 1)]).ctx("held execute")?;
        calls.push((done, b));
    }
    gate.signal(1).ctx("release")?;
    for (q, (done, b)) in calls.iter().enumerate() {
        cx.wait(done, 1)?;
        let words = crate::context::from_bytes(&cx.queue_read(b, 0, 64)?);
        ensure_eq!(words, vec![77; 16], "queue {q}: slot 1");
    }
    Ok(())
}

/// The execute submitted last may be issued first: one held behind a gate on queue 0 runs after a
/// later one with another table on another queue has finished, and each reaches its own buffers
/// (a driver that updates one shared graph per execute must apply each execute's table at its own
/// launch, not at its submission).
pub(crate) fn executes_issued_out_of_order_keep_their_tables(cx: &Cx) -> CaseResult {
    let cb = function(cx, 0x1234)?;
    let gate = cx.sem(0)?;
    let (held_done, late_done) = (cx.sem(0)?, cx.sem(0)?);
    let call = |cx: &Cx| -> Result<_, CaseError> {
        Ok((zeroed_device_buffer(cx, 256)?, zeroed_device_buffer(cx, 64)?, zeroed_device_buffer(cx, 64)?))
    };
    let (held, late) = (call(cx)?, call(cx)?);
    let table = |(a, b, c): &(hal::Buffer, hal::Buffer, hal::Buffer)| {
        [BufferBinding::whole(a), BufferBinding::whole(b), BufferBinding::whole(c)]
    };
    cx.queue(0).execute_with_bindings(&[sv(&gate, 1)], &cb, &table(&held), &[sv(&held_done, 1)]).ctx("held")?;
    let other = cx.device().queue_count().min(2) - 1;
    cx.queue(other).execute_with_bindings(&[], &cb, &table(&late), &[sv(&late_done, 1)]).ctx("late")?;
    cx.wait(&late_done, 1)?;
    cx.still_pending(&held_done, 1, "the held execute")?;
    ensure_eq!(from_bytes(&cx.queue_read(&late.1, 0, 64)?), vec![0x1234; 16], "late execute's slot 1");
    ensure!(cx.queue_read(&held.1, 0, 64)?.iter().all(|&x| x == 0), "the held execute's slot 1 written early");
    gate.signal(1).ctx("release")?;
    cx.wait(&held_done, 1)?;
    for (name, (_, b, c)) in [("held", &held), ("late", &late)] {
        ensure_eq!(from_bytes(&cx.queue_read(b, 0, 64)?), vec![0x1234; 16], "{name} execute's slot 1");
        let mut expected = vec![0u8; 64];
        expected[4..12].fill(0x5A);
        ensure_eq!(cx.queue_read(c, 0, 64)?, expected, "{name} execute's slot 2");
    }
    Ok(())
}

/// Successive executes of one buffer take device-local, host-visible and `queue_alloca` buffers in
/// turn, and each reaches its own (a driver that prepared its graph for one memory kind must still
/// run the others).
pub(crate) fn tables_of_every_memory_kind(cx: &Cx) -> CaseResult {
    let cb = function(cx, 0xC0DE)?;
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let mut value = 0u64;
    for (call, kind) in ["device", "host", "transient", "device", "host"].iter().enumerate() {
        let mut make = |size: u64| -> Result<hal::Buffer, CaseError> {
            match *kind {
                "device" => zeroed_device_buffer(cx, size),
                "host" => cx.host_buffer(size),
                _ => {
                    value += 1;
                    let b = queue.alloca(&[sv(&s, value - 1)], BufferParams::device_local(), size, &[sv(&s, value)]);
                    b.ctx("alloca")
                }
            }
        };
        let (a, b, c) = (make(256)?, make(64)?, make(64)?);
        if *kind == "transient" {
            // Transient memory holds whatever was there: zero slot 2 first, like the others.
            queue.fill(&[sv(&s, value)], &c, 0, 64, 0u8, &[sv(&s, value + 1)]).ctx("zero slot 2")?;
            value += 1;
        }
        let table = [BufferBinding::whole(&a), BufferBinding::whole(&b), BufferBinding::whole(&c)];
        queue.execute_with_bindings(&[sv(&s, value)], &cb, &table, &[sv(&s, value + 1)]).ctx("execute")?;
        value += 1;
        cx.wait(&s, value)?;
        ensure_eq!(from_bytes(&cx.queue_read(&b, 0, 64)?), vec![0xC0DE; 16], "call {call} ({kind}): slot 1");
        let mut expected = vec![0u8; 64];
        expected[4..12].fill(0x5A);
        ensure_eq!(cx.queue_read(&c, 0, 64)?, expected, "call {call} ({kind}): slot 2");
    }
    Ok(())
}

/// Each execute's buffers are freed after it and new ones allocated for the next (an allocator
/// often hands out the freed addresses again): every execute reaches its own buffers. A driver that
/// reuses prepared work for a table must tell a new buffer at an old address from the old one.
pub(crate) fn tables_of_buffers_freed_and_reallocated(cx: &Cx) -> CaseResult {
    let cb = function(cx, 0xF00D)?;
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    for call in 0..8u64 {
        let (a, b, c) = (zeroed_device_buffer(cx, 256)?, zeroed_device_buffer(cx, 64)?, zeroed_device_buffer(cx, 64)?);
        let table = [BufferBinding::whole(&a), BufferBinding::whole(&b), BufferBinding::whole(&c)];
        queue.execute_with_bindings(&[sv(&s, call)], &cb, &table, &[sv(&s, call + 1)]).ctx("execute")?;
        cx.wait(&s, call + 1)?;
        ensure_eq!(from_bytes(&cx.queue_read(&b, 0, 64)?), vec![0xF00D; 16], "call {call}: slot 1");
        let mut expected = vec![0u8; 64];
        expected[4..12].fill(0x5A);
        ensure_eq!(cx.queue_read(&c, 0, 64)?, expected, "call {call}: slot 2");
    }
    Ok(())
}

/// A device-local buffer of `size` zero bytes (device memory starts undefined).
fn zeroed_device_buffer(cx: &Cx, size: u64) -> Result<hal::Buffer, CaseError> {
    let (buffer, zeroed) = (cx.device_buffer(size)?, cx.sem(0)?);
    cx.queue(0).fill(&[], &buffer, 0, size, 0u8, &[sv(&zeroed, 1)]).ctx("zero a device buffer")?;
    cx.wait(&zeroed, 1)?;
    Ok(buffer)
}

/// A table is checked before anything runs: executing a slotted buffer without a table, a table
/// with too few entries, a slot range past its entry, an entry past its buffer and an entry without
/// the usage its commands need are refused at the call, signal nothing and use up nothing.
pub(crate) fn bad_tables_refused_at_the_call(cx: &Cx) -> CaseResult {
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let one_shot = cx.command_buffer(CommandBufferMode::OneShot)?;
    one_shot.fill(BufferRef::slot(1), 0, 64, 1u32).ctx("record")?;
    one_shot.end().ctx("end")?;
    let (a, b) = (cx.host_buffer(64)?, cx.host_buffer(64)?);
    let e = expect_code(queue.execute(&[], &one_shot, &[sv(&s, 1)]), StatusCode::InvalidArgument, "no table")?;
    ensure!(e.message().contains("execute_with_bindings"), "the error does not say how: {e}");
    let short = [BufferBinding::whole(&a)];
    expect_code(
        queue.execute_with_bindings(&[], &one_shot, &short, &[sv(&s, 1)]),
        StatusCode::InvalidArgument,
        "short",
    )?;
    let narrow = [BufferBinding::whole(&a), BufferBinding::range(&b, 0, 32)];
    let e = expect_code(
        queue.execute_with_bindings(&[], &one_shot, &narrow, &[sv(&s, 1)]),
        StatusCode::OutOfRange,
        "narrow",
    )?;
    ensure!(e.message().contains("binding slot 1"), "the error does not name the slot: {e}");
    let past = [BufferBinding::whole(&a), BufferBinding::range(&b, 32, 64)];
    expect_code(queue.execute_with_bindings(&[], &one_shot, &past, &[sv(&s, 1)]), StatusCode::OutOfRange, "past")?;
    let no_transfer = cx.buffer(BufferParams::new(hal::MemoryType::HOST_LOCAL, BufferUsage::MAPPING), 64)?;
    let unusable = [BufferBinding::whole(&a), BufferBinding::whole(&no_transfer)];
    expect_code(
        queue.execute_with_bindings(&[], &one_shot, &unusable, &[sv(&s, 1)]),
        StatusCode::PermissionDenied,
        "no TRANSFER_TARGET",
    )?;
    ensure_eq!(s.query().ctx("query")?, 0, "a refused execute signalled");
    // The refusals used nothing up: the one-shot runs once with a good table.
    let good = [BufferBinding::whole(&a), BufferBinding::whole(&b)];
    queue.execute_with_bindings(&[], &one_shot, &good, &[sv(&s, 1)]).ctx("good table")?;
    cx.wait(&s, 1)?;
    ensure_eq!(cx.words(&b)?, vec![1; 16], "slot 1 filled");
    let again = queue.execute_with_bindings(&[], &one_shot, &good, &[sv(&s, 2)]);
    expect_code(again, StatusCode::FailedPrecondition, "a one-shot executed twice")?;
    Ok(())
}

/// Fixed buffers and slots mix in one command buffer; a buffer without slots ignores a table.
pub(crate) fn fixed_buffers_and_slots_mix(cx: &Cx) -> CaseResult {
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let fixed = cx.host_buffer_u32(&[5; 16])?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.copy(&fixed, 0, BufferRef::slot(0), 0, 64).ctx("copy fixed to slot 0")?;
    cb.end().ctx("end")?;
    let target = cx.host_buffer(64)?;
    queue.execute_with_bindings(&[], &cb, &[BufferBinding::whole(&target)], &[sv(&s, 1)]).ctx("execute")?;
    cx.wait(&s, 1)?;
    ensure_eq!(cx.words(&target)?, vec![5; 16], "slot 0 after the copy");
    let plain = cx.command_buffer(CommandBufferMode::Reusable)?;
    plain.fill(&target, 0, 64, 6u32).ctx("fill")?;
    plain.end().ctx("end")?;
    ensure_eq!(plain.binding_slots(), 0, "slots of a buffer without slots");
    queue.execute_with_bindings(&[], &plain, &[BufferBinding::whole(&fixed)], &[sv(&s, 2)]).ctx("ignored table")?;
    cx.wait(&s, 2)?;
    ensure_eq!(cx.words(&target)?, vec![6; 16], "the plain fill");
    ensure_eq!(cx.words(&fixed)?, vec![5; 16], "the ignored table's buffer");
    Ok(())
}
