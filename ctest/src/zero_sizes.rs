//! Zero sizes, as IREE defines them: a 0-byte allocation succeeds (and maps, reads and binds as
//! empty), a 0-byte `queue_alloca` and its dealloca run in queue order, and a dispatch with a zero
//! workgroup count is a no-op that is still validated and still honours its submission's waits and
//! signals. (Zero-length fills, updates, copies, writes and reads are in `transfers` and `device`.)

use hal::{BufferBinding, BufferParams, BufferUsage, CommandBufferMode, MemoryType, StatusCode, Timeout};

use crate::check::{CaseResult, Context, expect_code};
use crate::context::{Cx, LONG, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

/// Every memory type allocates 0 bytes; the buffer maps (where host-visible) and reads as empty,
/// takes 0-byte subspans, transfers of 0 bytes and queue reads of 0 bytes, and is a 0-length binding.
pub(crate) fn zero_byte_buffers_allocate_map_read_and_bind(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let mut value = 0;
    for &memory_type in &cx.device().info().memory_types {
        let mut usage = BufferUsage::DEFAULT;
        if memory_type.contains(MemoryType::HOST_VISIBLE) {
            usage |= BufferUsage::MAPPING;
        }
        let what = format!("0 bytes of {memory_type:?}");
        let empty = cx.device().allocate_buffer(BufferParams::new(memory_type, usage), 0).ctx(&what)?;
        ensure_eq!(empty.size(), 0, "{what}: size");
        if memory_type.contains(MemoryType::HOST_VISIBLE) {
            ensure_eq!(empty.map(0, 0).ctx(&what)?.len(), 0, "{what}: mapping length");
            ensure_eq!(empty.read_to_vec().ctx(&what)?, Vec::<u8>::new(), "{what}: bytes");
        }
        expect_code(empty.map(0, 1).map(|_| ()), StatusCode::OutOfRange, &format!("{what}: one byte"))?;
        ensure_eq!(empty.subspan(0, 0).ctx(&what)?.size(), 0, "{what}: subspan");
        // The zero-workgroup dispatch checks the binding, then runs nothing.
        let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
        cb.dispatch(&fill, 0, [0, 1, 1], &[5], &[BufferBinding::whole(&empty)]).ctx(&what)?;
        cb.fill(&empty, 0, 0, 7u32).ctx(&what)?;
        cb.end().ctx(&what)?;
        queue.execute(&[sv(&s, value)], &cb, &[sv(&s, value + 1)]).ctx(&what)?;
        queue.copy(&[sv(&s, value + 1)], &empty, 0, &empty, 0, 0, &[sv(&s, value + 2)]).ctx(&what)?;
        let back = queue.read(&[sv(&s, value + 2)], &empty, 0, 0, &[sv(&s, value + 3)]).ctx(&what)?;
        ensure_eq!(back.wait(Timeout::After(LONG)).ctx(&what)?, Vec::<u8>::new(), "{what}: queue read");
        value += 3;
    }
    cx.wait(&s, value)
}

/// A 0-byte `queue_alloca` returns a 0-byte transient buffer at once; it and its dealloca run in
/// queue order and signal.
pub(crate) fn zero_byte_alloca_and_dealloca(cx: &Cx) -> CaseResult {
    let (queue, gate, s) = (cx.queue(0), cx.sem(0)?, cx.sem(0)?);
    let buffer = queue.alloca(&[sv(&gate, 1)], BufferParams::device_local(), 0, &[sv(&s, 1)]).ctx("alloca of 0")?;
    ensure!(buffer.is_transient() && buffer.size() == 0, "alloca of 0 gave {buffer:?}");
    cx.still_pending(&s, 1, "the 0-byte alloca behind its wait")?;
    gate.signal(1).ctx("release")?;
    queue.fill(&[sv(&s, 1)], &buffer, 0, 0, 0u8, &[sv(&s, 2)]).ctx("0-byte fill")?;
    queue.dealloca(&[sv(&s, 2)], &buffer, &[sv(&s, 3)]).ctx("dealloca")?;
    cx.wait(&s, 3)?;
    expect_code(queue.dealloca(&[], &buffer, &[]), StatusCode::FailedPrecondition, "a second dealloca")?;
    Ok(())
}

/// A command buffer whose one dispatch has a zero workgroup count on any axis executes and
/// signals, running nothing.
pub(crate) fn zero_workgroup_dispatch_signals(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let buffer = cx.host_buffer_u32(&[3; 64])?;
    let done = cx.sem(0)?;
    for (value, grid) in [[0, 1, 1], [1, 0, 1], [1, 1, 0], [0, 0, 0]].into_iter().enumerate() {
        let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
        cb.dispatch(&fill, 0, grid, &[9], &[BufferBinding::whole(&buffer)]).ctx(format!("grid {grid:?}"))?;
        cb.end().ctx("end")?;
        cx.queue(value).execute(&[], &cb, &[sv(&done, value as u64 + 1)]).ctx(format!("execute {grid:?}"))?;
        cx.wait(&done, value as u64 + 1)?;
    }
    ensure!(cx.words(&buffer)?.iter().all(|&w| w == 3), "a zero-workgroup dispatch wrote");
    Ok(())
}

/// A zero-workgroup dispatch held behind an unsignalled wait stays held, then signals after the
/// wait is reached, in order with the work around it on its queue.
pub(crate) fn zero_workgroup_dispatch_held_then_released(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let (queue, gate, s) = (cx.queue(0), cx.sem(0)?, cx.sem(0)?);
    let buffer = cx.host_buffer_u32(&[0; 64])?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.dispatch(&fill, 0, [1, 0, 1], &[9], &[BufferBinding::whole(&buffer)]).ctx("record")?;
    cb.end().ctx("end")?;
    queue.execute(&[sv(&gate, 1)], &cb, &[sv(&s, 1)]).ctx("held execute")?;
    queue.fill(&[sv(&s, 1)], &buffer, 0, 256, 4u32, &[sv(&s, 2)]).ctx("fill after it")?;
    std::thread::sleep(crate::context::SHORT);
    cx.still_pending(&s, 1, "the zero-workgroup dispatch behind its wait")?;
    ensure!(cx.words(&buffer)?.iter().all(|&w| w == 0), "work behind the held dispatch ran");
    gate.signal(1).ctx("release")?;
    cx.wait(&s, 2)?;
    ensure!(cx.words(&buffer)?.iter().all(|&w| w == 4), "the fill after it did not run");
    Ok(())
}

/// Beside real commands, a zero-workgroup dispatch changes nothing: the fills and dispatches around
/// it run, in order; it is still validated (a wrong binding count is refused even with no
/// workgroups).
pub(crate) fn zero_workgroup_dispatch_among_other_commands(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let (a, b) = (cx.host_buffer_u32(&[0; 64])?, cx.host_buffer_u32(&[0; 64])?);
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.fill(&a, 0, 256, 1u32).ctx("fill a")?;
    cb.barrier().ctx("barrier")?;
    cb.dispatch(&fill, 0, [0, 1, 1], &[9], &[BufferBinding::whole(&a)]).ctx("zero-workgroup dispatch on a")?;
    cb.barrier().ctx("barrier")?;
    cb.dispatch(&fill, 0, [1, 1, 1], &[7], &[BufferBinding::whole(&b)]).ctx("dispatch on b")?;
    let wrong = cb.dispatch(&fill, 0, [0, 0, 0], &[9], &[]);
    expect_code(wrong, StatusCode::InvalidArgument, "a zero-workgroup dispatch with no binding")?;
    cb.end().ctx("end")?;
    cx.run(&cb)?;
    ensure!(cx.words(&a)?.iter().all(|&w| w == 1), "a: {:?}", &cx.words(&a)?[..4]);
    ensure!(cx.words(&b)?.iter().all(|&w| w == 7), "b: {:?}", &cx.words(&b)?[..4]);
    Ok(())
}
