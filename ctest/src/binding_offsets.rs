//! What a dispatch binding reaches: a 0-byte binding reaches no byte of its buffer on any driver,
//! and a binding whose first byte is off the device's binding alignment
//! (`DeviceInfo::binding_alignment`) is refused at the call that names it (the dispatch's record,
//! or the execute that gives a binding-table slot its buffer), never later through a semaphore.

use hal::{BindingRef, BufferBinding, CommandBufferMode, StatusCode, Timeout};

use crate::check::{CaseResult, Context, expect_code};
use crate::context::{Cx, LONG, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

const PATTERN: u32 = 0xa5a5_a5a5;

/// A fill kernel dispatched through 0-byte bindings (a range of 0 bytes, and a 0-byte subspan) in
/// the middle of a buffer: the dispatch completes or fails its signal, and no byte of the buffer
/// changes.
pub(crate) fn zero_length_binding_reaches_no_byte_of_its_buffer(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let at = cx.device().info().binding_alignment.max(256);
    let buffer = cx.host_buffer_u32(&vec![PATTERN; at as usize])?;
    let empty_subspan = buffer.subspan(2 * at, 0).ctx("a 0-byte subspan")?;
    for (what, binding) in [
        ("a 0-byte range", BufferBinding::range(&buffer, at, 0)),
        ("a 0-byte subspan", BufferBinding::whole(&empty_subspan)),
    ] {
        // A semaphore each: a driver that bounds every access fails the dispatch (cpu-sim).
        let s = cx.sem(0)?;
        let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
        cb.dispatch(&fill, 0, [1, 1, 1], &[7], &[binding]).ctx(what)?;
        cb.end().ctx("end")?;
        cx.queue(0).execute(&[], &cb, &[sv(&s, 1)]).ctx(what)?;
        let finished = s.wait(1, Timeout::After(LONG));
        ensure!(
            !matches!(&finished, Err(e) if e.code() == StatusCode::DeadlineExceeded),
            "{what}: the dispatch did not finish: {finished:?}"
        );
        check_untouched(cx, &buffer, what)?;
    }
    Ok(())
}

fn check_untouched(cx: &Cx, buffer: &hal::Buffer, what: &str) -> CaseResult {
    let words = cx.words(buffer)?;
    let changed = words.iter().position(|&w| w != PATTERN);
    ensure!(changed.is_none(), "{what}: word {changed:?} of the buffer changed: {words:x?}");
    Ok(())
}

/// Offsets off the device's binding alignment, directly, through a subspan that starts off it, in
/// reusable command buffers and in a binding-table slot: each refused at its call with
/// `InvalidArgument` naming the alignment, and the command buffer or queue goes on as if the call
/// had not been made. On a device whose alignment is 1, every offset records.
pub(crate) fn binding_offset_off_the_alignment_refused_at_the_call(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let align = cx.device().info().binding_alignment;
    ensure!(align >= 1 && align.is_power_of_two(), "binding alignment {align} is not a power of two");
    let buffer = cx.host_buffer_u32(&vec![0; align.max(256) as usize])?;
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    if align == 1 {
        cx.note("the device's binding alignment is 1: every offset is aligned");
        let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
        cb.dispatch(&fill, 0, [1, 1, 1], &[7], &[BufferBinding::range(&buffer, 1, 256)]).ctx("offset 1")?;
        return Ok(());
    }
    let half = align / 2;
    let what = |e: &hal::Error| e.message().contains("binding alignment") && e.message().contains(&align.to_string());
    for mode in [CommandBufferMode::OneShot, CommandBufferMode::Reusable] {
        let cb = cx.command_buffer(mode)?;
        for (offset, whose) in [(half, "an offset"), (align + half, "an offset past the first multiple")] {
            let e = expect_code(
                cb.dispatch(&fill, 0, [1, 1, 1], &[7], &[BufferBinding::range(&buffer, offset, 256)]),
                StatusCode::InvalidArgument,
                &format!("{whose} ({offset}) in a {mode:?} command buffer"),
            )?;
            ensure!(what(&e), "the message does not name the alignment {align}: {e}");
        }
        let off = buffer.subspan(half, 512).ctx("a subspan starting off the alignment")?;
        let e = expect_code(
            cb.dispatch(&fill, 0, [1, 1, 1], &[7], &[BufferBinding::whole(&off)]),
            StatusCode::InvalidArgument,
            &format!("a subspan at {half} in a {mode:?} command buffer"),
        )?;
        ensure!(what(&e), "the message does not name the alignment {align}: {e}");
        let aligned = buffer.subspan(align, 512).ctx("an aligned subspan")?;
        cb.dispatch(&fill, 0, [1, 1, 1], &[9], &[BufferBinding::whole(&aligned)]).ctx("the aligned dispatch")?;
        cb.end().ctx("end")?;
        cx.run(&cb)?;
    }
    ensure_eq!(cx.words(&buffer)?[(align / 4) as usize], 9, "the aligned dispatch after the refusals");
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.dispatch_refs(&fill, 0, [1, 1, 1], &[11], &[BindingRef::slot(0, 0, 256)]).ctx("a dispatch on slot 0")?;
    cb.end().ctx("end")?;
    let misaligned = [BufferBinding::range(&buffer, half, 512)];
    let e = expect_code(
        queue.execute_with_bindings(&[], &cb, &misaligned, &[sv(&s, 1)]),
        StatusCode::InvalidArgument,
        "a table entry off the alignment",
    )?;
    ensure!(what(&e), "the message does not name the alignment {align}: {e}");
    ensure_eq!(s.query().ctx("query")?, 0, "the refused execute's signal");
    let aligned = [BufferBinding::range(&buffer, 2 * align, 512)];
    queue.execute_with_bindings(&[], &cb, &aligned, &[sv(&s, 1)]).ctx("the aligned execute")?;
    cx.wait(&s, 1)?;
    ensure_eq!(cx.words(&buffer)?[(2 * align / 4) as usize], 11, "the aligned execute after the refusal");
    Ok(())
}
