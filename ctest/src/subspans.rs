//! Subspans: `Buffer::subspan(offset, length)` is a buffer over part of another, usable wherever a
//! buffer is (mapping, transfers, reads, dispatch bindings), with offsets relative to its own
//! start, keeping its parent alive.

use hal::{BufferBinding, BufferParams, CommandBufferMode, StatusCode, Timeout};

use crate::check::{CaseResult, Context, expect_code};
use crate::context::{Cx, LONG, ramp, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

/// A subspan maps, reads and writes relative to its start; subspans of subspans compose; ranges
/// past its end are `OutOfRange`, wherever they would still fit the parent.
pub(crate) fn subspan_maps_relative_to_its_start(cx: &Cx) -> CaseResult {
    let parent = cx.host_buffer(64)?;
    parent.write(0, &ramp(0, 64)).ctx("fill the parent")?;
    let middle = parent.subspan(16, 32).ctx("subspan(16, 32)")?;
    ensure_eq!(middle.size(), 32, "subspan size");
    ensure_eq!(cx.bytes(&middle)?, ramp(16, 32), "subspan bytes");
    let inner = middle.subspan(8, 8).ctx("subspan(8, 8) of the subspan")?;
    ensure_eq!(cx.bytes(&inner)?, ramp(24, 8), "nested subspan bytes");
    inner.write(0, &[0xEE; 8]).ctx("write through the nested subspan")?;
    let mut expected = ramp(0, 64);
    expected[24..32].fill(0xEE);
    ensure_eq!(cx.bytes(&parent)?, expected, "parent after the nested write");
    expect_code(middle.subspan(24, 16).map(|_| ()), StatusCode::OutOfRange, "subspan past the end")?;
    expect_code(middle.map(24, 16).map(|_| ()), StatusCode::OutOfRange, "map past the subspan's end")?;
    expect_code(middle.write(30, &[0; 4]), StatusCode::OutOfRange, "write past the subspan's end")?;
    ensure!(middle.parent().is_some_and(|p| p.same_as(&parent)), "the subspan does not name its parent");
    Ok(())
}

/// Queue fills, updates, copies and reads on subspans of device memory touch exactly their ranges.
pub(crate) fn subspan_transfers_touch_only_their_range(cx: &Cx) -> CaseResult {
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let memory = cx.device_buffer(256)?;
    let (a, b, c) =
        (memory.subspan(0, 64).ctx("a")?, memory.subspan(64, 64).ctx("b")?, memory.subspan(192, 64).ctx("c")?);
    queue.fill(&[], &memory, 0, 256, 0u32, &[sv(&s, 1)]).ctx("clear")?;
    queue.fill(&[sv(&s, 1)], &a, 4, 8, 0x1111_1111u32, &[sv(&s, 2)]).ctx("fill a")?;
    queue.update(&[sv(&s, 2)], &b, 60, &[7, 7, 7, 7], &[sv(&s, 3)]).ctx("update b")?;
    queue.copy(&[sv(&s, 3)], &a, 0, &c, 32, 16, &[sv(&s, 4)]).ctx("copy a to c")?;
    let back = queue.read(&[sv(&s, 4)], &c, 32, 16, &[]).ctx("read c")?.wait(Timeout::After(LONG)).ctx("wait")?;
    ensure_eq!(back, [[0u8; 4], [0x11; 4], [0x11; 4], [0; 4]].concat(), "read of the copy's target");
    let all = cx.queue_read(&memory, 0, 256)?;
    let mut expected = vec![0u8; 256];
    expected[4..12].fill(0x11);
    expected[124..128].fill(7);
    expected[224..240].copy_from_slice(&back);
    ensure_eq!(all, expected, "the whole memory");
    Ok(())
}

/// A subspan bound to a dispatch is the kernel's whole binding: elements outside it stay.
pub(crate) fn subspan_as_dispatch_binding(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let memory = cx.host_buffer_u32(&[1; 256])?;
    let window = memory.subspan(64 * 4, 64 * 4).ctx("subspan of 64 words")?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.dispatch(&fill, 0, [1, 1, 1], &[9], &[BufferBinding::whole(&window)]).ctx("dispatch on the subspan")?;
    cb.end().ctx("end")?;
    cx.run(&cb)?;
    let words = cx.words(&memory)?;
    ensure!(words[..64].iter().all(|&w| w == 1), "words before the subspan changed");
    ensure!(words[64..128].iter().all(|&w| w == 9), "the subspan was not filled: {:?}", &words[64..72]);
    ensure!(words[128..].iter().all(|&w| w == 1), "words after the subspan changed");
    Ok(())
}

/// A subspan keeps its parent's memory alive after the parent's last handle drops.
pub(crate) fn subspan_keeps_its_parent_alive(cx: &Cx) -> CaseResult {
    let parent = cx.host_buffer(32)?;
    parent.write(0, &ramp(100, 32)).ctx("fill")?;
    let tail = parent.subspan(16, 16).ctx("subspan")?;
    drop(parent);
    ensure_eq!(cx.bytes(&tail)?, ramp(116, 16), "bytes after the parent handle dropped");
    ensure_eq!(cx.queue_read(&tail, 0, 16)?, ramp(116, 16), "queue read after the parent handle dropped");
    Ok(())
}

/// Copies between subspans of one memory are refused when their bytes overlap in memory, and run
/// when they do not.
pub(crate) fn overlapping_subspan_copies_refused(cx: &Cx) -> CaseResult {
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let memory = cx.host_buffer(64)?;
    memory.write(0, &ramp(0, 64)).ctx("fill")?;
    let (low, high) = (memory.subspan(0, 32).ctx("low")?, memory.subspan(16, 48).ctx("high")?);
    let e = expect_code(queue.copy(&[], &low, 16, &high, 0, 16, &[]), StatusCode::InvalidArgument, "overlap")?;
    ensure!(e.message().contains("overlap"), "the error does not say why: {e}");
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    expect_code(cb.copy(&memory, 20, &high, 0, 8), StatusCode::InvalidArgument, "recorded overlap with the parent")?;
    queue.copy(&[], &low, 0, &high, 16, 16, &[sv(&s, 1)]).ctx("disjoint copy")?;
    cx.wait(&s, 1)?;
    let mut expected = ramp(0, 64);
    expected.copy_within(0..16, 32);
    ensure_eq!(cx.bytes(&memory)?, expected, "after the disjoint copy");
    Ok(())
}

/// A subspan of a transient buffer has memory while its parent does; only the parent is given to
/// `dealloca` (a subspan is refused at the call).
pub(crate) fn subspan_of_a_transient_buffer(cx: &Cx) -> CaseResult {
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let transient = queue.alloca(&[], BufferParams::device_local(), 128, &[sv(&s, 1)]).ctx("alloca")?;
    let half = transient.subspan(64, 64).ctx("subspan")?;
    queue.fill(&[sv(&s, 1)], &half, 0, 64, 0x5Au8, &[sv(&s, 2)]).ctx("fill the subspan")?;
    let back = queue.read(&[sv(&s, 2)], &half, 0, 64, &[sv(&s, 3)]).ctx("read the subspan")?;
    let e = expect_code(queue.dealloca(&[sv(&s, 3)], &half, &[]), StatusCode::InvalidArgument, "dealloca subspan")?;
    ensure!(e.message().contains("subspan"), "the error does not say why: {e}");
    queue.dealloca(&[sv(&s, 3)], &transient, &[sv(&s, 4)]).ctx("dealloca the parent")?;
    cx.wait(&s, 4)?;
    ensure_eq!(back.wait(Timeout::After(LONG)).ctx("readback")?, vec![0x5A; 64], "the subspan's bytes");
    Ok(())
}
