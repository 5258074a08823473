//! Command buffers: recording rules (end, execute, one-shot), fill / update / copy with their
//! alignment and range checks, barriers, and reuse.

use hal::driver::CommandBufferExt;
use hal::{BufferBinding, BufferParams, BufferUsage, CommandBuffer, CommandBufferMode, MemoryType, StatusCode};

use crate::check::{CaseResult, Context, expect_code};
use crate::context::{Cx, from_bytes, ramp, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

/// Records with `record`, ends, executes on queue 0 and waits.
fn run_recorded(cx: &Cx, record: impl FnOnce(&CommandBuffer) -> CaseResult) -> CaseResult {
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    record(&cb)?;
    cb.end().ctx("end")?;
    cx.run(&cb)
}

/// A buffer of `size` bytes filled with `background` through a mapping.
fn background(cx: &Cx, size: u64, byte: u8) -> Result<hal::Buffer, crate::CaseError> {
    let buffer = cx.host_buffer(size)?;
    buffer.write(0, &vec![byte; size as usize]).ctx("background write")?;
    Ok(buffer)
}

/// An empty command buffer ends, executes and signals.
pub(crate) fn empty_command_buffer(cx: &Cx) -> CaseResult {
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    ensure!(!cb.is_ended(), "a new command buffer is ended");
    ensure_eq!(cb.mode(), CommandBufferMode::OneShot, "mode");
    cb.end().ctx("end")?;
    ensure!(cb.is_ended(), "not ended after end()");
    cx.run(&cb)
}

/// Recording anything after `end()` is `FailedPrecondition`.
pub(crate) fn record_after_end_refused(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    let other = cx.host_buffer(64)?;
    let exe = cx.load(Kernel::FillU32)?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.fill(&buffer, 0, 4, 1u32).ctx("fill before end")?;
    cb.end().ctx("end")?;
    let code = StatusCode::FailedPrecondition;
    expect_code(cb.fill(&buffer, 0, 4, 1u32), code, "fill after end")?;
    expect_code(cb.update(&buffer, 0, &[1, 2]), code, "update after end")?;
    expect_code(cb.copy(&buffer, 0, &other, 0, 4), code, "copy after end")?;
    expect_code(cb.dispatch(&exe, 0, [1, 1, 1], &[5], &[BufferBinding::whole(&buffer)]), code, "dispatch after end")?;
    expect_code(cb.barrier(), code, "barrier after end")?;
    ensure_eq!(cb.commands().len(), 1, "commands after refused recordings");
    Ok(())
}

/// A second `end()` is `FailedPrecondition`.
pub(crate) fn end_twice_refused(cx: &Cx) -> CaseResult {
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.end().ctx("first end")?;
    expect_code(cb.end(), StatusCode::FailedPrecondition, "second end")?;
    cx.run(&cb)
}

/// Executing before `end()` is `FailedPrecondition` and signals nothing; after `end()` it runs.
pub(crate) fn execute_before_end_refused(cx: &Cx) -> CaseResult {
    let buffer = background(cx, 16, 0)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.fill(&buffer, 0, 16, 0x33u8).ctx("fill")?;
    let done = cx.sem(0)?;
    expect_code(cx.queue(0).execute(&[], &cb, &[sv(&done, 1)]), StatusCode::FailedPrecondition, "execute before end")?;
    cx.still_pending(&done, 1, "after a refused execute")?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 16], "buffer after a refused execute");
    cb.end().ctx("end")?;
    cx.queue(0).execute(&[], &cb, &[sv(&done, 1)]).ctx("execute after end")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0x33; 16], "buffer after execute");
    Ok(())
}

/// A one-shot command buffer executed a second time is `FailedPrecondition`; nothing is signalled.
pub(crate) fn one_shot_twice_refused(cx: &Cx) -> CaseResult {
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.end().ctx("end")?;
    let done = cx.sem(0)?;
    cx.queue(0).execute(&[], &cb, &[sv(&done, 1)]).ctx("first execute")?;
    cx.wait(&done, 1)?;
    expect_code(cx.queue(0).execute(&[], &cb, &[sv(&done, 2)]), StatusCode::FailedPrecondition, "second execute")?;
    expect_code(cx.queue(1).execute(&[], &cb, &[sv(&done, 2)]), StatusCode::FailedPrecondition, "on another queue")?;
    cx.still_pending(&done, 2, "after refused second executions")?;
    Ok(())
}

/// An execute refused for bad input does not use up a one-shot command buffer.
pub(crate) fn refused_execute_keeps_one_shot(cx: &Cx) -> CaseResult {
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.end().ctx("end")?;
    let done = cx.sem(3)?;
    expect_code(cx.queue(0).execute(&[], &cb, &[sv(&done, 3)]), StatusCode::InvalidArgument, "signal not ahead")?;
    cx.queue(0).execute(&[], &cb, &[sv(&done, 4)]).ctx("execute after a refused one")?;
    cx.wait(&done, 4)
}

/// A reusable command buffer runs every time it is executed (50 chained executions add 50).
pub(crate) fn reusable_executed_many_times(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::MultiEntry)?;
    let add = exe.entry_point("add_u32").ctx("entry point add_u32")?;
    let data = cx.host_buffer_u32(&[0; 64])?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    ensure_eq!(cb.mode(), CommandBufferMode::Reusable, "mode");
    cb.dispatch(&exe, add, [1, 1, 1], &[1], &[BufferBinding::whole(&data)]).ctx("dispatch")?;
    cb.end().ctx("end")?;
    let s = cx.sem(0)?;
    for i in 0..50u64 {
        cx.queue(i as usize).execute(&[sv(&s, i)], &cb, &[sv(&s, i + 1)]).ctx(format!("execute {i}"))?;
    }
    cx.wait(&s, 50)?;
    ensure_eq!(cx.words(&data)?, vec![50; 64], "after 50 executions of +1");
    Ok(())
}

/// The same reusable command buffer in flight on several queues at once.
pub(crate) fn reusable_concurrent_on_queues(cx: &Cx) -> CaseResult {
    let buffer = background(cx, 64, 0)?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.fill(&buffer, 0, 64, 0x5Cu8).ctx("fill")?;
    cb.end().ctx("end")?;
    let gate = cx.sem(0)?;
    let done: Vec<hal::Semaphore> = (0..4).map(|_| cx.sem(0)).collect::<Result<_, _>>()?;
    for (i, s) in done.iter().enumerate() {
        cx.queue(i).execute(&[sv(&gate, 1)], &cb, &[sv(s, 1)]).ctx(format!("execute on queue {i}"))?;
    }
    gate.signal(1).ctx("open the gate")?;
    for s in &done {
        cx.wait(s, 1)?;
    }
    ensure_eq!(cx.bytes(&buffer)?, vec![0x5C; 64], "filled buffer");
    Ok(())
}

/// A 1-byte pattern at an odd offset and length fills exactly that range.
pub(crate) fn fill_1_byte_unaligned(cx: &Cx) -> CaseResult {
    let buffer = background(cx, 16, 0xEE)?;
    run_recorded(cx, |cb| cb.fill(&buffer, 3, 5, 0xABu8).ctx("fill"))?;
    let mut expected = vec![0xEE; 16];
    expected[3..8].fill(0xAB);
    ensure_eq!(cx.bytes(&buffer)?, expected, "after a 1-byte fill of 3..8");
    Ok(())
}

/// A 2-byte pattern at a 2-aligned (not 4-aligned) offset, little-endian.
pub(crate) fn fill_2_byte_unaligned(cx: &Cx) -> CaseResult {
    let buffer = background(cx, 16, 0xEE)?;
    run_recorded(cx, |cb| cb.fill(&buffer, 2, 6, 0xBEEFu16).ctx("fill"))?;
    let mut expected = vec![0xEE; 16];
    expected[2..8].copy_from_slice(&[0xEF, 0xBE, 0xEF, 0xBE, 0xEF, 0xBE]);
    ensure_eq!(cx.bytes(&buffer)?, expected, "after a 2-byte fill of 2..8");
    Ok(())
}

/// A 4-byte pattern at 4-aligned offsets that are not 8- or 16-aligned, little-endian.
pub(crate) fn fill_4_byte_unaligned(cx: &Cx) -> CaseResult {
    let buffer = background(cx, 32, 0xEE)?;
    run_recorded(cx, |cb| {
        cb.fill(&buffer, 4, 12, 0x1234_5678u32).ctx("fill at 4")?;
        cb.fill(&buffer, 20, 8, 0x9ABC_DEF0u32).ctx("fill at 20")?;
        Ok(())
    })?;
    let mut expected = vec![0xEE; 32];
    for at in [4, 8, 12] {
        expected[at..at + 4].copy_from_slice(&0x1234_5678u32.to_le_bytes());
    }
    for at in [20, 24] {
        expected[at..at + 4].copy_from_slice(&0x9ABC_DEF0u32.to_le_bytes());
    }
    ensure_eq!(cx.bytes(&buffer)?, expected, "after 4-byte fills of 4..16 and 20..28");
    Ok(())
}

/// A 1- and a 2-byte pattern are written as their own bytes (little-endian), nothing wider.
pub(crate) fn fill_pattern_low_bytes_only(cx: &Cx) -> CaseResult {
    let buffer = background(cx, 8, 0)?;
    run_recorded(cx, |cb| {
        cb.fill(&buffer, 0, 4, 0x5Au8).ctx("1-byte fill")?;
        cb.fill(&buffer, 4, 4, 0x1234u16).ctx("2-byte fill")?;
        Ok(())
    })?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0x5A, 0x5A, 0x5A, 0x5A, 0x34, 0x12, 0x34, 0x12], "bytes");
    Ok(())
}

/// Offsets not a multiple of the pattern length are `InvalidArgument`.
pub(crate) fn fill_misaligned_offset_refused(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    let code = StatusCode::InvalidArgument;
    expect_code(cb.fill(&buffer, 1, 4, 0xBEEFu16), code, "2-byte pattern at offset 1")?;
    expect_code(cb.fill(&buffer, 2, 4, 0x1234_5678u32), code, "4-byte pattern at offset 2")?;
    expect_code(cb.fill(&buffer, 3, 4, 0x1234_5678u32), code, "4-byte pattern at offset 3")?;
    ensure_eq!(cb.commands().len(), 0, "nothing recorded");
    Ok(())
}

/// Lengths not a multiple of the pattern length are `InvalidArgument`.
pub(crate) fn fill_misaligned_length_refused(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    expect_code(cb.fill(&buffer, 0, 3, 0xBEEFu16), StatusCode::InvalidArgument, "2-byte pattern, length 3")?;
    expect_code(cb.fill(&buffer, 4, 6, 1u32), StatusCode::InvalidArgument, "4-byte pattern, length 6")?;
    Ok(())
}

/// A fill outside the buffer is `OutOfRange`.
pub(crate) fn fill_out_of_range_refused(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    expect_code(cb.fill(&buffer, 60, 8, 1u32), StatusCode::OutOfRange, "fill across the end")?;
    expect_code(cb.fill(&buffer, 64, 4, 1u32), StatusCode::OutOfRange, "fill at the end")?;
    expect_code(
        cb.fill(&buffer, u64::MAX - 3, 4, 1u32),
        StatusCode::OutOfRange,
        "fill where offset + length overflows",
    )?;
    Ok(())
}

/// Fills, updates and copies need the transfer usages (`PermissionDenied`).
pub(crate) fn transfer_usage_refused(cx: &Cx) -> CaseResult {
    let storage_only = cx.buffer(BufferParams::new(MemoryType::DEVICE_LOCAL, BufferUsage::DISPATCH_STORAGE), 64)?;
    let ok = cx.host_buffer(64)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    let code = StatusCode::PermissionDenied;
    expect_code(cb.fill(&storage_only, 0, 4, 1u32), code, "fill of a buffer without TRANSFER_TARGET")?;
    expect_code(cb.update(&storage_only, 0, &[1]), code, "update of a buffer without TRANSFER_TARGET")?;
    expect_code(cb.copy(&storage_only, 0, &ok, 0, 4), code, "copy from a buffer without TRANSFER_SOURCE")?;
    expect_code(cb.copy(&ok, 0, &storage_only, 0, 4), code, "copy to a buffer without TRANSFER_TARGET")?;
    Ok(())
}

/// An update writes its bytes at any byte offset.
pub(crate) fn update_sub_range(cx: &Cx) -> CaseResult {
    let buffer = background(cx, 32, 0xEE)?;
    let data = ramp(1, 11);
    run_recorded(cx, |cb| cb.update(&buffer, 5, &data).ctx("update"))?;
    let mut expected = vec![0xEE; 32];
    expected[5..16].copy_from_slice(&data);
    ensure_eq!(cx.bytes(&buffer)?, expected, "after an update of 5..16");
    Ok(())
}

/// The update's bytes are captured when recorded: changing the source afterwards has no effect.
pub(crate) fn update_captures_data(cx: &Cx) -> CaseResult {
    let buffer = background(cx, 8, 0)?;
    let mut data = vec![7u8; 8];
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.update(&buffer, 0, &data).ctx("update")?;
    data.fill(9);
    cb.end().ctx("end")?;
    cx.run(&cb)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![7; 8], "bytes written");
    ensure_eq!(data, vec![9; 8], "source");
    Ok(())
}

/// An update outside the buffer is `OutOfRange`.
pub(crate) fn update_out_of_range_refused(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(16)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    expect_code(cb.update(&buffer, 10, &[0; 8]), StatusCode::OutOfRange, "update across the end")?;
    expect_code(cb.update(&buffer, 17, &[]), StatusCode::OutOfRange, "empty update past the end")?;
    Ok(())
}

/// A copy of a whole buffer.
pub(crate) fn copy_whole(cx: &Cx) -> CaseResult {
    let source = cx.host_buffer(256)?;
    let target = background(cx, 256, 0)?;
    let data = ramp(9, 256);
    source.write(0, &data).ctx("write source")?;
    run_recorded(cx, |cb| cb.copy(&source, 0, &target, 0, 256).ctx("copy"))?;
    ensure_eq!(cx.bytes(&target)?, data, "copied bytes");
    Ok(())
}

/// A copy between sub-ranges at odd offsets touches exactly the target range.
pub(crate) fn copy_sub_ranges(cx: &Cx) -> CaseResult {
    let source = cx.host_buffer(64)?;
    let target = background(cx, 64, 0xEE)?;
    let data = ramp(0x40, 64);
    source.write(0, &data).ctx("write source")?;
    run_recorded(cx, |cb| cb.copy(&source, 3, &target, 7, 10).ctx("copy"))?;
    let mut expected = vec![0xEE; 64];
    expected[7..17].copy_from_slice(&data[3..13]);
    ensure_eq!(cx.bytes(&target)?, expected, "target after copy 3..13 -> 7..17");
    Ok(())
}

/// A copy between disjoint ranges of the same buffer is allowed.
pub(crate) fn copy_same_buffer_disjoint(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(32)?;
    let data = ramp(1, 32);
    buffer.write(0, &data).ctx("write")?;
    run_recorded(cx, |cb| cb.copy(&buffer, 0, &buffer, 16, 16).ctx("copy 0..16 -> 16..32"))?;
    let mut expected = data.clone();
    expected[16..].copy_from_slice(&data[..16]);
    ensure_eq!(cx.bytes(&buffer)?, expected, "after the copy");
    Ok(())
}

/// A copy between overlapping ranges of one buffer is `InvalidArgument`.
pub(crate) fn copy_same_buffer_overlap_refused(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(32)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    let code = StatusCode::InvalidArgument;
    expect_code(cb.copy(&buffer, 0, &buffer, 8, 16), code, "copy 0..16 -> 8..24")?;
    expect_code(cb.copy(&buffer, 8, &buffer, 0, 16), code, "copy 8..24 -> 0..16")?;
    expect_code(cb.copy(&buffer, 4, &buffer, 4, 4), code, "copy onto itself")?;
    Ok(())
}

/// A copy with either range outside its buffer is `OutOfRange`.
pub(crate) fn copy_out_of_range_refused(cx: &Cx) -> CaseResult {
    let small = cx.host_buffer(16)?;
    let large = cx.host_buffer(64)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    expect_code(cb.copy(&small, 0, &large, 0, 32), StatusCode::OutOfRange, "source range too long")?;
    expect_code(cb.copy(&large, 0, &small, 8, 16), StatusCode::OutOfRange, "target range too long")?;
    expect_code(cb.copy(&large, u64::MAX, &small, 0, 1), StatusCode::OutOfRange, "source offset overflows")?;
    Ok(())
}

/// Barriers order transfers: fill, copy, then overwrite the source; the copy saw the first fill.
pub(crate) fn barrier_orders_transfers(cx: &Cx) -> CaseResult {
    let a = cx.host_buffer(1 << 16)?;
    let b = cx.host_buffer(1 << 16)?;
    run_recorded(cx, |cb| {
        cb.fill(&a, 0, 1 << 16, 0x11u8).ctx("fill a")?;
        cb.barrier().ctx("barrier")?;
        cb.copy(&a, 0, &b, 0, 1 << 16).ctx("copy a -> b")?;
        cb.barrier().ctx("barrier")?;
        cb.fill(&a, 0, 1 << 16, 0x22u8).ctx("refill a")?;
        cb.update(&b, 0, &[0x33; 4]).ctx("update b")?;
        Ok(())
    })?;
    let mut expected = vec![0x11; 1 << 16];
    expected[..4].fill(0x33);
    ensure!(cx.bytes(&b)? == expected, "b is not the first fill of a with the update on top");
    ensure!(cx.bytes(&a)?.iter().all(|&x| x == 0x22), "a is not the second fill");
    Ok(())
}

/// Recording a buffer of another device is `InvalidArgument`, except in a copy (the `multi_device`
/// area copies between devices).
pub(crate) fn other_device_buffer_refused(cx: &Cx) -> CaseResult {
    let other = cx.other_device()?;
    let foreign = other.allocate_buffer(BufferParams::host_visible(), 64).ctx("allocate on the other device")?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    let code = StatusCode::InvalidArgument;
    expect_code(cb.fill(&foreign, 0, 4, 1u32), code, "fill of a foreign buffer")?;
    expect_code(cb.update(&foreign, 0, &[1]), code, "update of a foreign buffer")?;
    let exe = cx.load(Kernel::FillU32)?;
    expect_code(
        cb.dispatch(&exe, 0, [1, 1, 1], &[1], &[BufferBinding::whole(&foreign)]),
        code,
        "dispatch binding a foreign buffer",
    )?;
    ensure_eq!(cb.commands().len(), 0, "nothing recorded");
    Ok(())
}

/// Executing a command buffer of another device is `InvalidArgument` and signals nothing.
pub(crate) fn other_device_command_buffer_refused(cx: &Cx) -> CaseResult {
    let other = cx.other_device()?;
    let cb = other.create_command_buffer(CommandBufferMode::OneShot).ctx("command buffer on the other device")?;
    cb.end().ctx("end")?;
    let done = cx.sem(0)?;
    expect_code(
        cx.queue(0).execute(&[], &cb, &[sv(&done, 1)]),
        StatusCode::InvalidArgument,
        "execute of a foreign command buffer",
    )?;
    cx.still_pending(&done, 1, "after a refused execute")?;
    Ok(())
}

/// A large (8 MiB) fill writes every word, seen once the signal is reached.
pub(crate) fn large_fill(cx: &Cx) -> CaseResult {
    let size = 8u64 << 20;
    let buffer = cx.host_buffer(size)?;
    run_recorded(cx, |cb| cb.fill(&buffer, 0, size, 0xA5A5_0F0Fu32).ctx("fill"))?;
    let words = from_bytes(&cx.bytes(&buffer)?);
    let bad = words.iter().position(|&w| w != 0xA5A5_0F0F);
    ensure!(bad.is_none(), "word {bad:?} of the 8 MiB fill is wrong");
    Ok(())
}

/// The recorded commands are visible once ended, in order.
pub(crate) fn recorded_commands_listed(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.fill(&buffer, 0, 4, 1u32).ctx("fill")?;
    cb.barrier().ctx("barrier")?;
    cb.update(&buffer, 8, &[1, 2]).ctx("update")?;
    ensure_eq!(cb.commands().len(), 0, "commands() while recording");
    cb.end().ctx("end")?;
    let commands = cb.commands();
    ensure_eq!(commands.len(), 3, "commands() after end");
    ensure!(matches!(commands[1], hal::driver::Command::Barrier), "second command is {:?}", commands[1]);
    cx.run(&cb)
}

/// Transfers on device-local buffers: update, copy between them, read back with a queue read.
pub(crate) fn device_local_transfers(cx: &Cx) -> CaseResult {
    let a = cx.device_buffer(64)?;
    let b = cx.device_buffer(64)?;
    let data = ramp(0x80, 64);
    run_recorded(cx, |cb| {
        cb.fill(&b, 0, 64, 0u8).ctx("clear b")?;
        cb.update(&a, 0, &data).ctx("update a")?;
        cb.barrier().ctx("barrier")?;
        cb.copy(&a, 16, &b, 8, 32).ctx("copy a -> b")?;
        Ok(())
    })?;
    let mut expected = vec![0; 64];
    expected[8..40].copy_from_slice(&data[16..48]);
    ensure_eq!(cx.queue_read(&b, 0, 64)?, expected, "b read back");
    Ok(())
}

/// Fill, update and copy recorded in a command buffer on transient (`queue_alloca`) buffers:
/// recorded while the allocas are still held (no memory yet), executed on another queue once they
/// ran, read back on a third, deallocated on a fourth; the bytes around each range are untouched.
pub(crate) fn transfers_on_transient_buffers(cx: &Cx) -> CaseResult {
    let (gate, s) = (cx.sem(0)?, cx.sem(0)?);
    let params = BufferParams::device_local();
    let a = cx.queue(0).alloca(&[sv(&gate, 1)], params, 256, &[sv(&s, 1)]).ctx("alloca a")?;
    let b = cx.queue(0).alloca(&[sv(&s, 1)], params, 256, &[sv(&s, 2)]).ctx("alloca b")?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.fill(&a, 0, 256, 0xEEEE_EEEEu32).ctx("fill a")?;
    cb.fill(&b, 0, 256, 0x77u8).ctx("fill b")?;
    cb.barrier().ctx("barrier")?;
    cb.fill(&a, 6, 10, 0xC1C2u16).ctx("fill a sub-range")?;
    cb.update(&a, 17, &ramp(1, 13)).ctx("update a")?;
    cb.barrier().ctx("barrier")?;
    cb.copy(&a, 5, &b, 99, 40).ctx("copy a -> b")?;
    cb.end().ctx("end")?;
    cx.queue(1).execute(&[sv(&s, 2)], &cb, &[sv(&s, 3)]).ctx("execute")?;
    let back_a = cx.queue(2).read(&[sv(&s, 3)], &a, 0, 256, &[sv(&s, 4)]).ctx("read a")?;
    let back_b = cx.queue(2).read(&[sv(&s, 4)], &b, 0, 256, &[sv(&s, 5)]).ctx("read b")?;
    cx.queue(3).dealloca(&[sv(&s, 5)], &a, &[sv(&s, 6)]).ctx("dealloca a")?;
    cx.queue(3).dealloca(&[sv(&s, 6)], &b, &[sv(&s, 7)]).ctx("dealloca b")?;
    cx.still_pending(&s, 1, "before the gate opens")?;
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&s, 7)?;
    let mut expected_a = vec![0xEE; 256];
    expected_a[6..16].copy_from_slice(&[0xC2, 0xC1, 0xC2, 0xC1, 0xC2, 0xC1, 0xC2, 0xC1, 0xC2, 0xC1]);
    expected_a[17..30].copy_from_slice(&ramp(1, 13));
    let mut expected_b = vec![0x77; 256];
    expected_b[99..139].copy_from_slice(&expected_a[5..45]);
    ensure_eq!(back_a.take(), Some(expected_a), "transient buffer a");
    ensure_eq!(back_b.take(), Some(expected_b), "transient buffer b");
    Ok(())
}
