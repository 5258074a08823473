//! Indirect dispatch: the workgroup count is read from a device buffer when the dispatch runs
//! (`CommandBuffer::dispatch_indirect`), whether it is static, written by earlier commands of the
//! same command buffer, or by earlier queue work, even work submitted after the dispatch.

use hal::{BindingRef, BufferBinding, BufferParams, BufferUsage, CommandBuffer, CommandBufferMode, StatusCode};

use crate::check::{CaseError, CaseResult, Context, expect_code};
use crate::context::{Cx, sv, to_bytes};
use crate::kernels::{ELEMENTWISE_WORKGROUP, Kernel};
use crate::{ensure, ensure_eq};

/// Elements of the output buffers: room for 4 workgroups of `fill_u32`.
const ELEMENTS: usize = 4 * ELEMENTWISE_WORKGROUP as usize;

/// What `fill_u32` over `workgroups` x-workgroups leaves in a zeroed output: `value` in the first
/// `workgroups * 64` elements.
fn filled(workgroups: usize, value: u32) -> Vec<u32> {
    (0..ELEMENTS).map(|i| if i < workgroups * ELEMENTWISE_WORKGROUP as usize { value } else { 0 }).collect()
}

/// A reusable command buffer: `fill_u32(out, value)` over the count at `offset` of `count`.
fn indirect_fill(
    cx: &Cx,
    count: &hal::Buffer,
    offset: u64,
    out: &hal::Buffer,
    value: u32,
) -> Result<CommandBuffer, CaseError> {
    let fill = cx.load(Kernel::FillU32)?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.dispatch_indirect(&fill, 0, count, offset, &[value], &[BufferBinding::whole(out)]).ctx("dispatch_indirect")?;
    cb.end().ctx("end")?;
    Ok(cb)
}

/// A count in a buffer (at an offset) sets the grid; changing the bytes between executes of the
/// same command buffer changes it, without recording again.
pub(crate) fn count_read_from_a_buffer_at_each_execute(cx: &Cx) -> CaseResult {
    let count = cx.host_buffer_u32(&[7, 3, 1, 1])?;
    let out = cx.host_buffer(4 * ELEMENTS as u64)?;
    let cb = indirect_fill(cx, &count, 4, &out, 0x11)?;
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    queue.execute(&[], &cb, &[sv(&s, 1)]).ctx("execute")?;
    cx.wait(&s, 1)?;
    ensure_eq!(cx.words(&out)?, filled(3, 0x11), "count [3, 1, 1]");
    count.write_values(1, &[4u32, 1, 1]).ctx("write the count")?;
    out.write(0, &vec![0u8; 4 * ELEMENTS]).ctx("zero out")?;
    queue.execute(&[], &cb, &[sv(&s, 2)]).ctx("execute again")?;
    cx.wait(&s, 2)?;
    ensure_eq!(cx.words(&out)?, filled(4, 0x11), "count [4, 1, 1]");
    Ok(())
}

/// Earlier commands of the same command buffer write the count: an update, and a dispatch (a
/// `fill_u32` of 2s over the count buffer gives [2, 2, 2]; `fill_u32` indexes x only, so the y and
/// z repeats write the same elements).
pub(crate) fn count_written_by_earlier_commands(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let count = cx.device_buffer(4 * ELEMENTWISE_WORKGROUP as u64)?;
    let (by_update, by_dispatch) = (cx.host_buffer(4 * ELEMENTS as u64)?, cx.host_buffer(4 * ELEMENTS as u64)?);
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.update(&count, 0, &to_bytes(&[1, 1, 1])).ctx("update the count")?;
    cb.barrier().ctx("barrier")?;
    cb.dispatch_indirect(&fill, 0, &count, 0, &[5], &[BufferBinding::whole(&by_update)]).ctx("indirect 1")?;
    cb.barrier().ctx("barrier")?;
    cb.dispatch(&fill, 0, [1, 1, 1], &[2], &[BufferBinding::whole(&count)]).ctx("count by dispatch")?;
    cb.barrier().ctx("barrier")?;
    cb.dispatch_indirect(&fill, 0, &count, 0, &[6], &[BufferBinding::whole(&by_dispatch)]).ctx("indirect 2")?;
    cb.end().ctx("end")?;
    let s = cx.sem(0)?;
    cx.queue(0).execute(&[], &cb, &[sv(&s, 1)]).ctx("execute")?;
    cx.wait(&s, 1)?;
    ensure_eq!(cx.words(&by_update)?, filled(1, 5), "count [1, 1, 1] from the update");
    ensure_eq!(cx.words(&by_dispatch)?, filled(2, 6), "count [2, 2, 2] from the dispatch");
    Ok(())
}

/// The execute is submitted first, held behind a semaphore; the count is written by queue work
/// submitted after it (on another queue), which signals the semaphore: the dispatch reads the
/// count as it is when it runs, not when it was submitted.
pub(crate) fn count_written_by_later_submitted_queue_work(cx: &Cx) -> CaseResult {
    let count = cx.device_buffer(12)?;
    let out = cx.host_buffer(4 * ELEMENTS as u64)?;
    let zero = cx.sem(0)?;
    cx.queue(0).fill(&[], &count, 0, 12, 0u32, &[sv(&zero, 1)]).ctx("zero the count")?;
    cx.wait(&zero, 1)?;
    let cb = indirect_fill(cx, &count, 0, &out, 9)?;
    let (written, done) = (cx.sem(0)?, cx.sem(0)?);
    cx.queue(0).execute(&[sv(&written, 1)], &cb, &[sv(&done, 1)]).ctx("held execute")?;
    cx.still_pending(&done, 1, "the execute waiting for its count")?;
    let other = cx.device().queue_count().min(2) - 1;
    cx.queue(other).write_values(&[], &count, 0, &[2u32, 1, 1], &[sv(&written, 1)]).ctx("write the count")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.words(&out)?, filled(2, 9), "count [2, 1, 1] written after the submission");
    Ok(())
}

/// A count with a zero runs nothing and signals; a count past the device's limits fails the
/// execute's signal with `OutOfRange` (found when it runs), and the queue goes on with later work.
pub(crate) fn zero_and_oversized_counts(cx: &Cx) -> CaseResult {
    let limits = cx.device().info().max_workgroup_count;
    let out = cx.host_buffer(4 * ELEMENTS as u64)?;
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let zero = cx.host_buffer_u32(&[2, 0, 1])?;
    let cb = indirect_fill(cx, &zero, 0, &out, 3)?;
    queue.execute(&[], &cb, &[sv(&s, 1)]).ctx("zero count")?;
    cx.wait(&s, 1)?;
    ensure_eq!(cx.words(&out)?, filled(0, 3), "a zero count wrote");
    let oversized = cx.host_buffer_u32(&[1, limits[1].saturating_add(1).max(limits[1]), 1])?;
    ensure!(limits[1] < u32::MAX, "the device's y limit is u32::MAX: no count exceeds it");
    let cb = indirect_fill(cx, &oversized, 0, &out, 4)?;
    let failed = cx.sem(0)?;
    queue.execute(&[], &cb, &[sv(&failed, 1)]).ctx("oversized count")?;
    let e = cx.wait_failed(&failed, 1, StatusCode::OutOfRange)?;
    ensure!(e.message().contains("workgroup count"), "the failure does not name the count: {e}");
    ensure_eq!(cx.words(&out)?, filled(0, 3), "an oversized count wrote");
    // The queue is not held: later work runs.
    queue.fill(&[], &out, 0, 4, 8u32, &[sv(&s, 2)]).ctx("later fill")?;
    cx.wait(&s, 2)?;
    ensure_eq!(cx.words(&out)?[0], 8, "the fill after the failed execute");
    Ok(())
}

/// The count may come from a binding-table slot, and its range and usage are checked at record
/// time for buffers and at execute for slots: an offset that is not a multiple of 4 is
/// `InvalidArgument`, 12 bytes past the buffer `OutOfRange`, a buffer without `DISPATCH_STORAGE`
/// usage `PermissionDenied`.
pub(crate) fn count_checked_and_taken_from_a_slot(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let count = cx.host_buffer_u32(&[0, 2, 1, 1])?;
    let out = cx.host_buffer(4 * ELEMENTS as u64)?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    let binding = [BufferBinding::whole(&out)];
    expect_code(cb.dispatch_indirect(&fill, 0, &count, 2, &[1], &binding), StatusCode::InvalidArgument, "offset 2")?;
    expect_code(cb.dispatch_indirect(&fill, 0, &count, 8, &[1], &binding), StatusCode::OutOfRange, "past the end")?;
    let unusable = cx.buffer(BufferParams::new(hal::MemoryType::HOST_LOCAL, BufferUsage::TRANSFER), 16)?;
    expect_code(cb.dispatch_indirect(&fill, 0, &unusable, 0, &[1], &binding), StatusCode::PermissionDenied, "usage")?;
    cb.dispatch_indirect_refs(
        &fill,
        0,
        hal::BufferRef::slot(1),
        4,
        &[7],
        &[BindingRef::slot(0, 0, 4 * ELEMENTS as u64)],
    )
    .ctx("dispatch_indirect_refs")?;
    cb.end().ctx("end")?;
    ensure_eq!(cb.binding_slots(), 2, "slots");
    let s = cx.sem(0)?;
    let table = [BufferBinding::whole(&out), BufferBinding::whole(&count)];
    cx.queue(0).execute_with_bindings(&[], &cb, &table, &[sv(&s, 1)]).ctx("execute")?;
    cx.wait(&s, 1)?;
    ensure_eq!(cx.words(&out)?, filled(2, 7), "count [2, 1, 1] from slot 1");
    let short = [BufferBinding::whole(&out), BufferBinding::range(&count, 0, 8)];
    expect_code(
        cx.queue(0).execute_with_bindings(&[], &cb, &short, &[sv(&s, 2)]),
        StatusCode::OutOfRange,
        "slot too short",
    )?;
    Ok(())
}

/// Chains of 300 and then 3,000 executes of an indirect dispatch whose count is in device memory,
/// each execute waiting for the one before: more than the slots a queue keeps for counts in flight,
/// and long enough that the stream, held at each dispatch until its launch, runs far behind the
/// submitting thread. Every chain completes and the last fill is there (on CUDA with host-callback
/// completion a pending host function can hold the side stream's launches, which the driver must
/// not wait behind).
pub(crate) fn long_chains_of_indirect_dispatches_complete(cx: &Cx) -> CaseResult {
    let count = cx.device_buffer(12)?;
    let out = cx.host_buffer(4 * ELEMENTS as u64)?;
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    queue.write(&[], &count, 0, to_bytes(&[1u32, 1, 1]), &[sv(&s, 1)]).ctx("write the count")?;
    let cb = indirect_fill(cx, &count, 0, &out, 0x5a)?;
    let mut value = 1;
    for chain in [300, 3000] {
        for _ in 0..chain {
            queue.execute(&[sv(&s, value)], &cb, &[sv(&s, value + 1)]).ctx("execute")?;
            value += 1;
        }
        cx.wait(&s, value)?;
    }
    ensure_eq!(cx.words(&out)?, filled(1, 0x5a), "after the chains of indirect dispatches");
    Ok(())
}
