//! Queue operations other than execute: fill, update, copy, read and write in queue order with their
//! checks; alloca and dealloca ordering; barriers that join and fork; host calls.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use hal::{BufferBinding, BufferParams, BufferUsage, CommandBufferMode, MemoryType, StatusCode};

use crate::check::{CaseResult, Context, expect_code, expect_same_status};
use crate::context::{Cx, from_bytes, ramp, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

fn cleared(cx: &Cx, size: u64, byte: u8) -> Result<hal::Buffer, crate::CaseError> {
    let buffer = cx.host_buffer(size)?;
    buffer.write(0, &vec![byte; size as usize]).ctx("background write")?;
    Ok(buffer)
}

/// Queue fills with 1-, 2- and 4-byte patterns at unaligned-but-legal offsets.
pub(crate) fn fill_patterns(cx: &Cx) -> CaseResult {
    let buffer = cleared(cx, 32, 0xEE)?;
    let s = cx.sem(0)?;
    let q = cx.queue(0);
    q.fill(&[], &buffer, 1, 3, 0xA1u8, &[sv(&s, 1)]).ctx("1-byte fill")?;
    q.fill(&[sv(&s, 1)], &buffer, 6, 4, 0xB2C3u16, &[sv(&s, 2)]).ctx("2-byte fill")?;
    q.fill(&[sv(&s, 2)], &buffer, 12, 8, 0xD4E5_F607u32, &[sv(&s, 3)]).ctx("4-byte fill")?;
    cx.wait(&s, 3)?;
    let mut expected = vec![0xEE; 32];
    expected[1..4].fill(0xA1);
    expected[6..10].copy_from_slice(&[0xC3, 0xB2, 0xC3, 0xB2]);
    for at in [12, 16] {
        expected[at..at + 4].copy_from_slice(&0xD4E5_F607u32.to_le_bytes());
    }
    ensure_eq!(cx.bytes(&buffer)?, expected, "after three queue fills");
    Ok(())
}

/// Misaligned queue fills are `InvalidArgument`, out-of-range ones `OutOfRange`; nothing signals.
pub(crate) fn fill_refused(cx: &Cx) -> CaseResult {
    let buffer = cleared(cx, 32, 0)?;
    let done = cx.sem(0)?;
    let q = cx.queue(0);
    let signals = [sv(&done, 1)];
    expect_code(q.fill(&[], &buffer, 2, 4, 1u32, &signals), StatusCode::InvalidArgument, "4-byte fill at 2")?;
    expect_code(q.fill(&[], &buffer, 0, 3, 1u16, &signals), StatusCode::InvalidArgument, "2-byte fill of 3 bytes")?;
    expect_code(q.fill(&[], &buffer, 28, 8, 1u32, &signals), StatusCode::OutOfRange, "fill across the end")?;
    cx.still_pending(&done, 1, "after refused fills")?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 32], "buffer after refused fills");
    Ok(())
}

/// A queue update writes its bytes (copied at the call) at any offset.
pub(crate) fn update(cx: &Cx) -> CaseResult {
    let buffer = cleared(cx, 32, 0xEE)?;
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    let mut data = ramp(1, 9);
    cx.queue(0).update(&[sv(&gate, 1)], &buffer, 3, &data, &[sv(&done, 1)]).ctx("update")?;
    let original = data.clone();
    data.fill(0);
    gate.signal(1).ctx("signal")?;
    cx.wait(&done, 1)?;
    let mut expected = vec![0xEE; 32];
    expected[3..12].copy_from_slice(&original);
    ensure_eq!(cx.bytes(&buffer)?, expected, "after an update of 3..12");
    Ok(())
}

/// A queue update outside the buffer is `OutOfRange`.
pub(crate) fn update_refused(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(16)?;
    let done = cx.sem(0)?;
    let result = cx.queue(0).update(&[], &buffer, 12, &[1; 8], &[sv(&done, 1)]);
    expect_code(result, StatusCode::OutOfRange, "update across the end")?;
    cx.still_pending(&done, 1, "after a refused update")
}

/// A queue copy between sub-ranges at odd offsets.
pub(crate) fn copy(cx: &Cx) -> CaseResult {
    let source = cx.host_buffer(64)?;
    source.write(0, &ramp(0x20, 64)).ctx("write")?;
    let target = cleared(cx, 64, 0xEE)?;
    let done = cx.sem(0)?;
    cx.queue(1).copy(&[], &source, 5, &target, 9, 21, &[sv(&done, 1)]).ctx("copy")?;
    cx.wait(&done, 1)?;
    let mut expected = vec![0xEE; 64];
    expected[9..30].copy_from_slice(&ramp(0x25, 21));
    ensure_eq!(cx.bytes(&target)?, expected, "after a copy 5..26 -> 9..30");
    Ok(())
}

/// Overlapping same-buffer copies are `InvalidArgument`; ranges outside are `OutOfRange`.
pub(crate) fn copy_refused(cx: &Cx) -> CaseResult {
    let a = cx.host_buffer(64)?;
    let b = cx.host_buffer(16)?;
    let done = cx.sem(0)?;
    let q = cx.queue(0);
    let signals = [sv(&done, 1)];
    expect_code(q.copy(&[], &a, 0, &a, 8, 16, &signals), StatusCode::InvalidArgument, "overlapping copy")?;
    expect_code(q.copy(&[], &a, 0, &b, 0, 32, &signals), StatusCode::OutOfRange, "copy past the target")?;
    expect_code(q.copy(&[], &b, 8, &a, 0, 16, &signals), StatusCode::OutOfRange, "copy past the source")?;
    cx.still_pending(&done, 1, "after refused copies")
}

/// A queue write puts host bytes at an offset (from a `Vec` and from an `Arc<[u8]>`).
pub(crate) fn write(cx: &Cx) -> CaseResult {
    let buffer = cleared(cx, 64, 0)?;
    let s = cx.sem(0)?;
    cx.queue(0).write(&[], &buffer, 7, ramp(1, 10), &[sv(&s, 1)]).ctx("write from a Vec")?;
    let shared: Arc<[u8]> = Arc::from(ramp(100, 8));
    cx.queue(1).write(&[sv(&s, 1)], &buffer, 40, shared.clone(), &[sv(&s, 2)]).ctx("write from an Arc")?;
    cx.wait(&s, 2)?;
    let mut expected = vec![0; 64];
    expected[7..17].copy_from_slice(&ramp(1, 10));
    expected[40..48].copy_from_slice(&shared);
    ensure_eq!(cx.bytes(&buffer)?, expected, "after two queue writes");
    Ok(())
}

/// Queue writes outside the buffer are `OutOfRange`; without `TRANSFER_TARGET`, `PermissionDenied`.
pub(crate) fn write_refused(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(16)?;
    let read_only = cx.buffer(BufferParams::new(MemoryType::HOST_LOCAL, BufferUsage::TRANSFER_SOURCE), 16)?;
    let done = cx.sem(0)?;
    let q = cx.queue(0);
    expect_code(
        q.write(&[], &buffer, 12, vec![1u8; 8], &[sv(&done, 1)]),
        StatusCode::OutOfRange,
        "write across the end",
    )?;
    expect_code(
        q.write(&[], &read_only, 0, vec![1u8; 4], &[sv(&done, 1)]),
        StatusCode::PermissionDenied,
        "write without TRANSFER_TARGET",
    )?;
    cx.still_pending(&done, 1, "after refused writes")
}

/// A queue read leaves nothing until it completes, then the bytes of its range.
pub(crate) fn read(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    buffer.write(0, &ramp(0, 64)).ctx("write")?;
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    let back = cx.queue(2).read(&[sv(&gate, 1)], &buffer, 13, 20, &[sv(&done, 1)]).ctx("read")?;
    cx.still_pending(&done, 1, "before the gate opens")?;
    ensure!(back.take().is_none(), "a held read already has bytes");
    gate.signal(1).ctx("signal")?;
    cx.wait(&done, 1)?;
    ensure_eq!(back.take(), Some(ramp(13, 20)), "bytes read");
    Ok(())
}

/// Queue reads outside the buffer are `OutOfRange`; without `TRANSFER_SOURCE`, `PermissionDenied`.
pub(crate) fn read_refused(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(16)?;
    let write_only = cx.buffer(BufferParams::new(MemoryType::HOST_LOCAL, BufferUsage::TRANSFER_TARGET), 16)?;
    let done = cx.sem(0)?;
    let q = cx.queue(0);
    expect_code(q.read(&[], &buffer, 8, 9, &[sv(&done, 1)]), StatusCode::OutOfRange, "read across the end")?;
    expect_code(
        q.read(&[], &write_only, 0, 4, &[sv(&done, 1)]),
        StatusCode::PermissionDenied,
        "read without TRANSFER_SOURCE",
    )?;
    cx.still_pending(&done, 1, "after refused reads")
}

/// Write then read back device-local memory, the host never mapping it.
pub(crate) fn write_read_device_local(cx: &Cx) -> CaseResult {
    let buffer = cx.device_buffer(4096)?;
    let s = cx.sem(0)?;
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    cx.queue(0).write(&[], &buffer, 0, data.clone(), &[sv(&s, 1)]).ctx("write")?;
    let back = cx.queue(1).read(&[sv(&s, 1)], &buffer, 0, 4096, &[sv(&s, 2)]).ctx("read")?;
    cx.wait(&s, 2)?;
    ensure!(back.take() == Some(data), "device-local bytes did not round-trip");
    Ok(())
}

/// Every transfer runs on every queue.
pub(crate) fn transfers_on_every_queue(cx: &Cx) -> CaseResult {
    for q in 0..cx.device().queue_count() {
        let (a, b) = (cx.host_buffer(16)?, cx.host_buffer(16)?);
        let s = cx.sem(0)?;
        let queue = cx.queue(q);
        queue.fill(&[], &a, 0, 16, q as u8, &[sv(&s, 1)]).ctx("fill")?;
        queue.update(&[sv(&s, 1)], &a, 0, &[0xFF], &[sv(&s, 2)]).ctx("update")?;
        queue.copy(&[sv(&s, 2)], &a, 0, &b, 0, 16, &[sv(&s, 3)]).ctx("copy")?;
        let back = queue.read(&[sv(&s, 3)], &b, 0, 2, &[sv(&s, 4)]).ctx("read")?;
        cx.wait(&s, 4)?;
        ensure_eq!(back.take(), Some(vec![0xFF, q as u8]), "queue {q}'s first two bytes");
    }
    Ok(())
}

/// Alloca, write, read and dealloca submitted before the gate that starts them, in order through
/// one semaphore; the data round-trips.
pub(crate) fn alloca_dealloca_ordering(cx: &Cx) -> CaseResult {
    let (gate, s) = (cx.sem(0)?, cx.sem(0)?);
    let q = cx.queue(0);
    let buffer = q.alloca(&[sv(&gate, 1)], BufferParams::device_local(), 256, &[sv(&s, 1)]).ctx("alloca")?;
    ensure_eq!(buffer.size(), 256, "alloca size");
    ensure_eq!(buffer.device(), cx.device().id(), "alloca device");
    q.write(&[sv(&s, 1)], &buffer, 0, ramp(5, 256), &[sv(&s, 2)]).ctx("write")?;
    let back = q.read(&[sv(&s, 2)], &buffer, 0, 256, &[sv(&s, 3)]).ctx("read")?;
    q.dealloca(&[sv(&s, 3)], &buffer, &[sv(&s, 4)]).ctx("dealloca")?;
    cx.still_pending(&s, 1, "before the gate opens")?;
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&s, 4)?;
    ensure_eq!(back.take(), Some(ramp(5, 256)), "bytes through the alloca buffer");
    Ok(())
}

/// Alloca and dealloca on different queues, the buffer used on a third.
pub(crate) fn alloca_across_queues(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let buffer = cx.queue(0).alloca(&[], BufferParams::device_local(), 64, &[sv(&s, 1)]).ctx("alloca")?;
    cx.queue(1).fill(&[sv(&s, 1)], &buffer, 0, 64, 0x3Cu8, &[sv(&s, 2)]).ctx("fill")?;
    let back = cx.queue(2).read(&[sv(&s, 2)], &buffer, 0, 64, &[sv(&s, 3)]).ctx("read")?;
    cx.queue(3).dealloca(&[sv(&s, 3)], &buffer, &[sv(&s, 4)]).ctx("dealloca")?;
    cx.wait(&s, 4)?;
    ensure_eq!(back.take(), Some(vec![0x3C; 64]), "bytes");
    Ok(())
}

/// An alloca buffer bound to a dispatch.
pub(crate) fn alloca_used_by_dispatch(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::FillU32)?;
    let s = cx.sem(0)?;
    let q = cx.queue(1);
    let buffer = q.alloca(&[], BufferParams::device_local(), 256, &[sv(&s, 1)]).ctx("alloca")?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.dispatch(&exe, 0, [1, 1, 1], &[0x0A110CA], &[BufferBinding::whole(&buffer)]).ctx("dispatch")?;
    cb.end().ctx("end")?;
    q.execute(&[sv(&s, 1)], &cb, &[sv(&s, 2)]).ctx("execute")?;
    let back = q.read(&[sv(&s, 2)], &buffer, 0, 256, &[sv(&s, 3)]).ctx("read")?;
    q.dealloca(&[sv(&s, 3)], &buffer, &[sv(&s, 4)]).ctx("dealloca")?;
    cx.wait(&s, 4)?;
    ensure_eq!(from_bytes(&back.take().unwrap_or_default()), vec![0x0A110CA; 64], "dispatched words");
    Ok(())
}

/// An alloca waits for its waits and returns at once; a huge size is refused at the call (0 bytes is
/// a legal alloca: `zero_sizes::zero_byte_alloca_and_dealloca`).
pub(crate) fn alloca_waits_and_refusals(cx: &Cx) -> CaseResult {
    let (gate, s) = (cx.sem(0)?, cx.sem(0)?);
    let q = cx.queue(0);
    let start = std::time::Instant::now();
    let buffer = q.alloca(&[sv(&gate, 1)], BufferParams::device_local(), 64, &[sv(&s, 1)]).ctx("alloca")?;
    ensure!(start.elapsed() < std::time::Duration::from_secs(1), "alloca blocked the host");
    cx.still_pending(&s, 1, "alloca before its wait")?;
    let huge = q.alloca(&[], BufferParams::device_local(), u64::MAX, &[sv(&s, 9)]);
    expect_code(huge, StatusCode::ResourceExhausted, "alloca of u64::MAX")?;
    gate.signal(1).ctx("signal")?;
    cx.wait(&s, 1)?;
    q.dealloca(&[sv(&s, 1)], &buffer, &[sv(&s, 2)]).ctx("dealloca")?;
    cx.wait(&s, 2)
}

/// A hundred alloca / use / dealloca cycles in one chain.
pub(crate) fn alloca_many_cycles(cx: &Cx) -> CaseResult {
    let s = cx.sem(0)?;
    let mut reads = Vec::new();
    for i in 0..100u64 {
        let q = cx.queue(i as usize);
        let v = 4 * i;
        let buffer = q.alloca(&[sv(&s, v)], BufferParams::device_local(), 4096, &[sv(&s, v + 1)]).ctx("alloca")?;
        q.fill(&[sv(&s, v + 1)], &buffer, 0, 4096, i as u32, &[sv(&s, v + 2)]).ctx("fill")?;
        reads.push(q.read(&[sv(&s, v + 2)], &buffer, 4092, 4, &[sv(&s, v + 3)]).ctx("read")?);
        q.dealloca(&[sv(&s, v + 3)], &buffer, &[sv(&s, v + 4)]).ctx("dealloca")?;
    }
    cx.wait(&s, 400)?;
    for (i, back) in reads.iter().enumerate() {
        ensure_eq!(back.take(), Some((i as u32).to_le_bytes().to_vec()), "cycle {i}'s last word");
    }
    Ok(())
}

/// A barrier joins several waits into one signal.
pub(crate) fn barrier_joins(cx: &Cx) -> CaseResult {
    let waits: Vec<hal::Semaphore> = (0..3).map(|_| cx.sem(0)).collect::<Result<_, _>>()?;
    let joined = cx.sem(0)?;
    let list: Vec<_> = waits.iter().map(|s| sv(s, 1)).collect();
    cx.queue(1).barrier(&list, &[sv(&joined, 1)]).ctx("barrier")?;
    for (i, s) in waits.iter().enumerate() {
        cx.still_pending(&joined, 1, &format!("with {i} of 3 waits reached"))?;
        cx.queue(i).barrier(&[], &[sv(s, 1)]).ctx("signalling barrier")?;
    }
    cx.wait(&joined, 1)
}

/// A barrier forks one wait into several signals.
pub(crate) fn barrier_forks(cx: &Cx) -> CaseResult {
    let gate = cx.sem(0)?;
    let forks: Vec<hal::Semaphore> = (0..3).map(|_| cx.sem(0)).collect::<Result<_, _>>()?;
    let list: Vec<_> = forks.iter().enumerate().map(|(i, s)| sv(s, i as u64 + 1)).collect();
    cx.queue(0).barrier(&[sv(&gate, 1)], &list).ctx("barrier")?;
    cx.still_pending(&forks[0], 1, "before the gate")?;
    gate.signal(1).ctx("signal")?;
    for (i, s) in forks.iter().enumerate() {
        cx.wait(s, i as u64 + 1)?;
    }
    Ok(())
}

/// Host calls run in semaphore order, interleaved with device work whose results they see.
pub(crate) fn host_call_in_order(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(4)?;
    let s = cx.sem(0)?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    for i in 0..10u64 {
        let q = cx.queue(i as usize);
        q.fill(&[sv(&s, 2 * i)], &buffer, 0, 4, i as u32 * 10, &[sv(&s, 2 * i + 1)]).ctx("fill")?;
        let (seen, buffer) = (seen.clone(), buffer.clone());
        let call = move || {
            let mut word = [0u8; 4];
            buffer.read(0, &mut word)?;
            seen.lock().unwrap_or_else(|p| p.into_inner()).push((i, u32::from_le_bytes(word)));
            Ok(())
        };
        q.host_call(&[sv(&s, 2 * i + 1)], call, &[sv(&s, 2 * i + 2)]).ctx("host_call")?;
    }
    cx.wait(&s, 20)?;
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let expected: Vec<(u64, u32)> = (0..10).map(|i| (i, i as u32 * 10)).collect();
    ensure_eq!(seen, expected, "(call, word it saw)");
    Ok(())
}

/// A blocking host call held behind another one keeps the work submitted after it waiting, even when
/// that work comes just as the first call returns (the release of the first gate and the second
/// call opening its own race with the submission): the second call still sees the buffer as it was,
/// and the call after the fill sees the fill.
pub(crate) fn host_calls_held_by_one_gate_keep_their_order(cx: &Cx) -> CaseResult {
    let q = cx.queue(0);
    let buffer = cleared(cx, 4, 0)?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reader = |label: &'static str, round: u32| {
        let (seen, buffer) = (seen.clone(), buffer.clone());
        move || {
            let mut word = [0u8; 4];
            buffer.read(0, &mut word)?;
            seen.lock().unwrap_or_else(|p| p.into_inner()).push((label, round, u32::from_le_bytes(word)));
            Ok(())
        }
    };
    let done = cx.sem(0)?;
    let mut expected = Vec::new();
    const ROUNDS: u32 = 200;
    for round in 0..ROUNDS {
        let returning = Arc::new(AtomicU32::new(0));
        let first = {
            let returning = returning.clone();
            move || {
                std::thread::sleep(std::time::Duration::from_micros(300));
                returning.store(1, Ordering::SeqCst);
                Ok(())
            }
        };
        q.host_call(&[], first, &[]).ctx("the first host call")?;
        q.host_call(&[], reader("second", round), &[]).ctx("the second host call, held by the first")?;
        // Submits the fill as the first call returns, at a spread of moments around its release.
        while returning.load(Ordering::SeqCst) == 0 {
            std::hint::spin_loop();
        }
        for _ in 0..(round % 8) * 200 {
            std::hint::spin_loop();
        }
        q.fill(&[], &buffer, 0, 4, round + 1, &[]).ctx("the fill behind both")?;
        q.host_call(&[], reader("after", round), &[sv(&done, u64::from(round) + 1)]).ctx("the call after")?;
        expected.extend([("second", round, round), ("after", round, round + 1)]);
        cx.wait(&done, u64::from(round) + 1)?;
    }
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let wrong: Vec<_> = seen.iter().zip(&expected).filter(|(s, e)| s != e).take(3).collect();
    ensure!(wrong.is_empty() && seen.len() == expected.len(), "(call, round, word it saw) against expected: {wrong:?}");
    Ok(())
}

/// A blocking host call waits for work it submits to its own queue while a later blocking call,
/// submitted from outside, is held by its gate: the later call's gate holds only work behind it.
pub(crate) fn host_call_waits_for_its_own_work_while_a_later_call_is_held(cx: &Cx) -> CaseResult {
    let q = cx.queue(0);
    let buffer = cleared(cx, 8, 0)?;
    let (inner, outer, later, last) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    let submitted_later = hal::Semaphore::new(0);
    let call = {
        let (q, buffer, inner, submitted_later) = (q.clone(), buffer.clone(), inner.clone(), submitted_later.clone());
        move || {
            // Lets the test submit the later call first, so that it is held by this call's gate.
            submitted_later.wait(1, hal::Timeout::After(crate::LONG))?;
            q.fill(&[], &buffer, 0, 4, 0x11u8, &[sv(&inner, 1)])?;
            inner.wait(1, hal::Timeout::After(crate::LONG))
        }
    };
    q.host_call(&[], call, &[sv(&outer, 1)]).ctx("the host call")?;
    let after = {
        let buffer = buffer.clone();
        move || {
            let mut word = [0u8; 4];
            buffer.read(0, &mut word)?;
            ensure_hal(word == [0x11; 4], format!("the later call saw {word:?}, not the first call's fill"))
        }
    };
    q.host_call(&[], after, &[sv(&later, 1)]).ctx("the later host call")?;
    q.fill(&[], &buffer, 4, 4, 0x22u8, &[sv(&last, 1)]).ctx("the fill behind the later call")?;
    submitted_later.signal(1).ctx("let the first call go on")?;
    cx.wait(&outer, 1)?;
    cx.wait(&later, 1)?;
    cx.wait(&last, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, [[0x11; 4], [0x22; 4]].concat(), "bytes of the inner and the last fill");
    Ok(())
}

/// Work held behind a blocking host call also waits for the blocking calls that call submitted to
/// its own queue (they are part of it) before it returned without waiting for them.
pub(crate) fn work_behind_a_host_call_waits_for_the_calls_it_submitted(cx: &Cx) -> CaseResult {
    let q = cx.queue(0);
    let buffer = cleared(cx, 4, 0)?;
    let (submitted, nested_done, last) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    let go = hal::Semaphore::new(0);
    let call = {
        let (q, buffer, go, submitted, nested_done) =
            (q.clone(), buffer.clone(), go.clone(), submitted.clone(), nested_done.clone());
        move || {
            // Returns only once the fill below has been submitted (held by this call's gate).
            go.wait(1, hal::Timeout::After(crate::LONG))?;
            let nested = move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let mut word = [0u8; 4];
                buffer.read(0, &mut word)?;
                ensure_hal(
                    word == [0; 4],
                    format!("the nested call saw {word:?}: the fill behind its caller ran first"),
                )
            };
            q.host_call(&[], nested, &[sv(&nested_done, 1)])?;
            submitted.signal(1)
        }
    };
    q.host_call(&[], call, &[]).ctx("the host call")?;
    q.fill(&[], &buffer, 0, 4, 0x5Au8, &[sv(&last, 1)]).ctx("the fill behind the call")?;
    go.signal(1).ctx("let the call go on")?;
    cx.wait(&submitted, 1)?;
    cx.wait(&nested_done, 1)?;
    cx.wait(&last, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0x5A; 4], "bytes after the fill");
    Ok(())
}

/// Work submitted after a blocking host call, whose waits include all of the call's waits, starts
/// only after the call returned, also when its waits are covered by device work the call still
/// waits for (so it could be issued before the call runs): `reached_first` says whether the call's
/// wait is reached before that work is submitted (the call is then already admitted) or not.
fn work_behind_a_waiting_host_call(cx: &Cx, reached_first: bool) -> CaseResult {
    const BIG: u64 = 32 << 20;
    let q = cx.queue(0);
    let big = cx.device_buffer(BIG)?;
    let small = cx.host_buffer(4)?;
    let (t, done) = (cx.sem(0)?, cx.sem(0)?);
    for round in 0..4u64 {
        let returned = Arc::new(AtomicU32::new(0));
        // Slow device work that the call and the later fill both wait for.
        q.fill(&[], &big, 0, BIG, round as u8, &[sv(&t, round + 1)]).ctx("the slow fill")?;
        let call = {
            let returned = returned.clone();
            move || {
                std::thread::sleep(std::time::Duration::from_millis(10));
                returned.store(1, Ordering::SeqCst);
                Ok(())
            }
        };
        q.host_call(&[sv(&t, round + 1)], call, &[]).ctx("the host call")?;
        if reached_first {
            cx.wait(&t, round + 1)?;
        }
        let later = returned.clone();
        q.fill(&[sv(&t, round + 1)], &small, 0, 4, 7u8, &[sv(&done, round + 1)]).ctx("the fill behind the call")?;
        cx.wait(&done, round + 1)?;
        ensure!(
            later.load(Ordering::SeqCst) == 1,
            "round {round}: the fill behind the host call completed before the call returned"
        );
    }
    Ok(())
}

/// See [`work_behind_a_waiting_host_call`]: the later work is submitted while the call still waits.
pub(crate) fn work_whose_waits_include_a_waiting_host_calls_is_held_behind_it(cx: &Cx) -> CaseResult {
    work_behind_a_waiting_host_call(cx, false)
}

/// See [`work_behind_a_waiting_host_call`]: the later work is submitted once the call's wait is reached.
pub(crate) fn work_submitted_after_a_host_calls_wait_is_reached_is_held_behind_it(cx: &Cx) -> CaseResult {
    work_behind_a_waiting_host_call(cx, true)
}

/// Work submitted after a blocking host call that still waits, whose waits do not include all of
/// the call's, is not held behind it: it may be what signals the call's waits (here the call waits
/// for `a` and `b`, the later fill waits for `a` only and signals `b`).
pub(crate) fn work_that_signals_a_waiting_host_calls_wait_is_not_held_behind_it(cx: &Cx) -> CaseResult {
    let q = cx.queue(0);
    let buffer = cx.host_buffer(4)?;
    let (a, b, done) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    q.host_call(&[sv(&a, 1), sv(&b, 1)], || Ok(()), &[sv(&done, 1)]).ctx("the host call")?;
    q.fill(&[sv(&a, 1)], &buffer, 0, 4, 3u8, &[sv(&b, 1)]).ctx("the fill that signals b")?;
    a.signal(1).ctx("signal a")?;
    cx.wait(&b, 1)?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![3; 4], "bytes after the fill");
    Ok(())
}

/// Work a blocking host call submits to its own queue is part of the call also when its wait is
/// signalled later from another thread (its place in the queue is the call's, whichever thread
/// resolves the wait): the call may wait for it without a deadlock.
pub(crate) fn work_a_host_call_submits_with_a_later_wait_is_not_held_behind_it(cx: &Cx) -> CaseResult {
    let q = cx.queue(0);
    let buffer = cx.host_buffer(4)?;
    let (inner, done) = (cx.sem(0)?, cx.sem(0)?);
    let call = {
        let (q, buffer, inner) = (q.clone(), buffer.clone(), inner.clone());
        move || {
            let gate = hal::Semaphore::new(0);
            q.fill(&[sv(&gate, 1)], &buffer, 0, 4, 9u8, &[sv(&inner, 1)])?;
            let signaller = {
                let gate = gate.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    gate.signal(1)
                })
            };
            let waited = inner.wait(1, hal::Timeout::After(std::time::Duration::from_secs(5)));
            let signalled =
                signaller.join().unwrap_or_else(|_| Err(hal::Error::internal("the signalling thread panicked")));
            signalled.and(waited)
        }
    };
    q.host_call(&[], call, &[sv(&done, 1)]).ctx("the host call")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![9; 4], "bytes after the call's fill");
    Ok(())
}

/// `Ok` if `holds`, else a failed-precondition error (for checks inside host calls).
fn ensure_hal(holds: bool, what: String) -> hal::Result<()> {
    if holds { Ok(()) } else { Err(hal::Error::new(StatusCode::FailedPrecondition, what)) }
}

/// A host call submitted before its wait is signalled runs once, after it.
pub(crate) fn host_call_wait_before_signal(cx: &Cx) -> CaseResult {
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    let runs = Arc::new(AtomicU32::new(0));
    let counter = runs.clone();
    let call = move || {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(())
    };
    cx.queue(0).host_call(&[sv(&gate, 1)], call, &[sv(&done, 1)]).ctx("host_call")?;
    cx.still_pending(&done, 1, "host call before its wait")?;
    ensure_eq!(runs.load(Ordering::SeqCst), 0, "runs before the signal");
    gate.signal(1).ctx("signal")?;
    cx.wait(&done, 1)?;
    ensure_eq!(runs.load(Ordering::SeqCst), 1, "runs after the signal");
    Ok(())
}

/// A host call's `Err` fails its signals with that status, and work waiting on them.
pub(crate) fn host_call_error_fails_signals(cx: &Cx) -> CaseResult {
    let (s, t, after) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    let buffer = cleared(cx, 8, 0)?;
    let cause = hal::Error::data_loss("ctest: host call failed on purpose");
    let returned = cause.clone();
    cx.queue(0).host_call(&[], move || Err(returned), &[sv(&s, 1), sv(&t, 5)]).ctx("host_call")?;
    cx.queue(1).fill(&[sv(&s, 1)], &buffer, 0, 8, 1u8, &[sv(&after, 1)]).ctx("dependent fill")?;
    for (sem, value) in [(&s, 1), (&t, 5), (&after, 1)] {
        let e = cx.wait_failed(sem, value, StatusCode::DataLoss)?;
        expect_same_status(&e, &cause, &format!("semaphore {}", sem.id()))?;
    }
    std::thread::sleep(crate::SHORT);
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 8], "the dependent fill did not run");
    Ok(())
}

/// A host call may signal a semaphore that releases other queue work.
pub(crate) fn host_call_signals_host_semaphore(cx: &Cx) -> CaseResult {
    let gate = hal::Semaphore::new(0);
    let (started, done) = (cx.sem(0)?, cx.sem(0)?);
    let buffer = cleared(cx, 8, 0)?;
    cx.queue(1).fill(&[sv(&gate, 1)], &buffer, 0, 8, 0x66u8, &[sv(&done, 1)]).ctx("fill held on the gate")?;
    let opener = gate.clone();
    cx.queue(0).host_call(&[], move || opener.signal(1), &[sv(&started, 1)]).ctx("host_call")?;
    cx.wait(&started, 1)?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0x66; 8], "buffer");
    Ok(())
}

/// Memory given back by a dealloca on one queue must not reach an alloca on another queue before
/// that dealloca runs. Queue 0 allocas a buffer, fills it with a pattern, keeps its stream busy
/// (large fills), then reads the buffer and deallocas it, all in stream order; meanwhile queue 1,
/// unordered with queue 0, allocas buffers of the same size and fills them with another byte. If
/// queue 0's memory were handed to queue 1 early, queue 0's read would see queue 1's byte.
pub(crate) fn alloca_reuse_across_queues(cx: &Cx) -> CaseResult {
    const SIZE: u64 = 64 << 10;
    const BUSY: u64 = 16 << 20;
    let busy = cx.device_buffer(BUSY)?;
    let (a, b) = (cx.sem(0)?, cx.sem(0)?);
    let q0 = cx.queue(0);
    let mine = q0.alloca(&[], BufferParams::device_local(), SIZE, &[sv(&a, 1)]).ctx("alloca on queue 0")?;
    q0.fill(&[sv(&a, 1)], &mine, 0, SIZE, 0xA5u8, &[sv(&a, 2)]).ctx("pattern on queue 0")?;
    for i in 0..4u64 {
        q0.fill(&[sv(&a, 2 + i)], &busy, 0, BUSY, i as u8, &[sv(&a, 3 + i)]).ctx("busy fill on queue 0")?;
    }
    let pending = q0.read(&[sv(&a, 6)], &mine, 0, SIZE, &[sv(&a, 7)]).ctx("read on queue 0")?;
    q0.dealloca(&[sv(&a, 7)], &mine, &[sv(&a, 8)]).ctx("dealloca on queue 0")?;
    // Queue 1: allocas of the same size, in no order with queue 0.
    let q1 = cx.queue(1);
    let mut theirs = Vec::new();
    for i in 0..8u64 {
        let buffer = q1.alloca(&[sv(&b, 3 * i)], BufferParams::device_local(), SIZE, &[sv(&b, 3 * i + 1)]);
        let buffer = buffer.ctx(format!("alloca {i} on queue 1"))?;
        q1.fill(&[sv(&b, 3 * i + 1)], &buffer, 0, SIZE, 0x5Au8, &[sv(&b, 3 * i + 2)]).ctx("fill on queue 1")?;
        let back = q1.read(&[sv(&b, 3 * i + 2)], &buffer, 0, SIZE, &[sv(&b, 3 * i + 3)]).ctx("read on queue 1")?;
        theirs.push((buffer, back));
    }
    cx.wait(&b, 24)?;
    cx.wait(&a, 8)?;
    ensure!(
        pending.take() == Some(vec![0xA5; SIZE as usize]),
        "queue 0's alloca buffer was overwritten before its dealloca"
    );
    for (i, (buffer, back)) in theirs.iter().enumerate() {
        ensure!(back.take() == Some(vec![0x5A; SIZE as usize]), "queue 1's alloca buffer {i} lost its bytes");
        let last = 24 + i as u64;
        q1.dealloca(&[sv(&b, last)], buffer, &[sv(&b, last + 1)]).ctx("dealloca on queue 1")?;
    }
    cx.wait(&b, 32)
}

/// The device's memory limit, when it reports one (`memory_limit` in its properties).
fn memory_limit(cx: &Cx) -> Option<u64> {
    let info = cx.device().info();
    info.properties.iter().find(|(name, _)| name == "memory_limit").and_then(|(_, value)| value.parse().ok())
}

/// Under memory pressure an alloca ordered after a dealloca gets the memory that dealloca gave
/// back. Each alloca takes just over half of the device's memory limit, so no two fit at once;
/// three alloca / fill / read / dealloca rounds on alternating queues, each alloca waiting on the
/// previous dealloca's signal, are all submitted behind a gate before any runs, then complete.
pub(crate) fn alloca_waits_for_dealloca_under_pressure(cx: &Cx) -> CaseResult {
    const MOST: u64 = 1 << 30;
    let Some(limit) = memory_limit(cx) else {
        return crate::check::skip("the device reports no memory_limit: it cannot be put under memory pressure");
    };
    if limit > MOST {
        return crate::check::skip(format!(
            "the device's memory limit ({limit} bytes) is above {MOST} bytes: too large to fill in a fast case"
        ));
    }
    let size = limit / 2 + 1;
    if size > cx.device().info().max_allocation_size {
        return crate::check::skip("half the memory limit is above the largest allocation");
    }
    let (gate, s) = (cx.sem(0)?, cx.sem(0)?);
    let mut reads = Vec::new();
    for round in 0..3u64 {
        let q = cx.queue(round as usize);
        let v = 4 * round;
        let waits = [sv(&gate, 1), sv(&s, v)];
        let buffer = q.alloca(&waits, BufferParams::device_local(), size, &[sv(&s, v + 1)]).ctx("alloca")?;
        q.fill(&[sv(&s, v + 1)], &buffer, size - 4096, 4096, round as u8 + 1, &[sv(&s, v + 2)]).ctx("fill")?;
        reads.push(q.read(&[sv(&s, v + 2)], &buffer, size - 16, 16, &[sv(&s, v + 3)]).ctx("read")?);
        q.dealloca(&[sv(&s, v + 3)], &buffer, &[sv(&s, v + 4)]).ctx("dealloca")?;
    }
    cx.still_pending(&s, 1, "before the gate opens")?;
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&s, 12)?;
    for (round, back) in reads.iter().enumerate() {
        ensure_eq!(back.take(), Some(vec![round as u8 + 1; 16]), "round {round}'s bytes");
    }
    cx.note(format!("3 allocas of {size} bytes under a limit of {limit}"));
    Ok(())
}

/// A host call that hands its work to a thread of its own, which signals a semaphore later: the
/// host call returns at once and its queue keeps going (later work on it completes while the
/// semaphore is still unsignalled); when the thread signals, host waiters and queue work waiting
/// on that semaphore wake.
pub(crate) fn host_call_signals_later_from_thread(cx: &Cx) -> CaseResult {
    let (later, called, after, woken) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    let go = hal::Semaphore::new(0);
    let buffer = cleared(cx, 16, 0)?;
    let spawned: Arc<Mutex<Option<std::thread::JoinHandle<hal::Result<()>>>>> = Arc::new(Mutex::new(None));
    let call = {
        let (later, go, spawned) = (later.clone(), go.clone(), spawned.clone());
        move || {
            let handle = std::thread::spawn(move || {
                go.wait(1, hal::Timeout::After(crate::LONG))?;
                later.signal(1)
            });
            *spawned.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
            Ok(())
        }
    };
    let q0 = cx.queue(0);
    q0.host_call(&[], call, &[sv(&called, 1)]).ctx("host_call")?;
    q0.fill(&[sv(&called, 1)], &buffer, 0, 8, 0x11u8, &[sv(&after, 1)]).ctx("work after the host call")?;
    cx.queue(1).fill(&[sv(&later, 1)], &buffer, 8, 8, 0x22u8, &[sv(&woken, 1)]).ctx("work waiting on the thread")?;
    let waiter = {
        let later = later.clone();
        std::thread::spawn(move || later.wait(1, hal::Timeout::After(crate::LONG)))
    };
    cx.wait(&called, 1)?;
    cx.wait(&after, 1)?;
    cx.still_pending(&later, 1, "the semaphore the thread signals")?;
    ensure!(!waiter.is_finished(), "a host waiter on the thread's semaphore returned early");
    cx.still_pending(&woken, 1, "queue work waiting on the thread's semaphore")?;
    go.signal(1).ctx("let the thread signal")?;
    waiter.join().map_err(|_| "the host waiter panicked")?.ctx("host waiter on the thread's semaphore")?;
    cx.wait(&woken, 1)?;
    let handle = spawned.lock().unwrap_or_else(|p| p.into_inner()).take();
    let handle = handle.ok_or("the host call did not record its thread")?;
    handle.join().map_err(|_| "the signalling thread panicked")?.ctx("the thread's signal")?;
    let mut expected = vec![0x11; 8];
    expected.extend([0x22; 8]);
    ensure_eq!(cx.bytes(&buffer)?, expected, "bytes of the work before and after the thread's signal");
    Ok(())
}

/// Checks `error` names `what` (e.g. "buffer 7").
fn names(error: &hal::Error, what: &str) -> CaseResult {
    ensure!(error.message().contains(what), "the error does not name {what}: {error}");
    Ok(())
}

/// A dealloca of a buffer that did not come from `queue_alloca` is refused at the call
/// (`InvalidArgument` naming the buffer), not failed later through its signals; the buffer stays
/// usable and nothing signals.
pub(crate) fn dealloca_of_a_non_transient_buffer_refused(cx: &Cx) -> CaseResult {
    let buffer = cleared(cx, 64, 0x11)?;
    let done = cx.sem(0)?;
    let q = cx.queue(0);
    let e = expect_code(q.dealloca(&[], &buffer, &[sv(&done, 1)]), StatusCode::InvalidArgument, "dealloca")?;
    names(&e, &format!("buffer {}", buffer.id()))?;
    ensure!(!buffer.is_transient(), "allocate_buffer gave a transient buffer");
    cx.still_pending(&done, 1, "the signal of the refused dealloca")?;
    q.fill(&[], &buffer, 0, 64, 0x22u8, &[sv(&done, 1)]).ctx("fill after the refused dealloca")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&buffer)?, vec![0x22; 64], "the buffer after the refused dealloca");
    Ok(())
}

/// A dealloca whose wait fails does not run and releases nothing: its signal fails with the wait's
/// status, the buffer stays usable, and a later dealloca of it is accepted and runs. Both a wait
/// already failed at the call and one that fails while the dealloca is held.
pub(crate) fn a_dealloca_whose_wait_failed_releases_nothing(cx: &Cx) -> CaseResult {
    let q = cx.queue(0);
    for fails_later in [false, true] {
        let (s, gate, failed) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
        let held = q.alloca(&[], BufferParams::device_local(), 64, &[sv(&s, 1)]).ctx("alloca")?;
        q.fill(&[sv(&s, 1)], &held, 0, 64, 0x5Au8, &[sv(&s, 2)]).ctx("fill")?;
        if !fails_later {
            gate.fail(hal::Error::aborted("the dealloca's wait failed"));
        }
        q.dealloca(&[sv(&gate, 1), sv(&s, 2)], &held, &[sv(&failed, 1)]).ctx("dealloca behind the gate")?;
        if fails_later {
            gate.fail(hal::Error::aborted("the dealloca's wait failed"));
        }
        let e = cx.wait_failed(&failed, 1, StatusCode::Aborted)?;
        ensure!(e.message().contains("the dealloca's wait failed"), "the failure does not carry the wait's: {e}");
        let out = cx.host_buffer_u32(&[0; 16])?;
        q.fill(&[], &held, 0, 64, 0xA5u8, &[sv(&s, 3)]).ctx("fill after the failed dealloca")?;
        q.copy(&[sv(&s, 3)], &held, 0, &out, 0, 64, &[sv(&s, 4)]).ctx("copy after the failed dealloca")?;
        cx.wait(&s, 4)?;
        ensure_eq!(
            cx.bytes(&out)?,
            vec![0xA5; 64],
            "the buffer after a failed dealloca (wait failed later: {fails_later})"
        );
        q.dealloca(&[], &held, &[sv(&s, 5)]).ctx("dealloca after the failed one")?;
        cx.wait(&s, 5)?;
    }
    Ok(())
}

/// A second dealloca of the same transient buffer is refused at the call (`FailedPrecondition`
/// naming the buffer), whether the first has run or is still held; a dealloca refused for another
/// reason (a bad signal) claims nothing, so a correct one follows it.
pub(crate) fn dealloca_twice_refused(cx: &Cx) -> CaseResult {
    let (gate, s) = (cx.sem(0)?, cx.sem(0)?);
    let q = cx.queue(0);
    let held = q.alloca(&[], BufferParams::device_local(), 64, &[sv(&s, 1)]).ctx("alloca")?;
    ensure!(held.is_transient(), "queue_alloca gave a buffer that is not transient");
    expect_code(q.dealloca(&[], &held, &[sv(&s, 0)]), StatusCode::InvalidArgument, "dealloca signalling 0")?;
    q.dealloca(&[sv(&gate, 1), sv(&s, 1)], &held, &[sv(&s, 2)]).ctx("dealloca held by the gate")?;
    let e = expect_code(q.dealloca(&[], &held, &[sv(&s, 9)]), StatusCode::FailedPrecondition, "second dealloca")?;
    names(&e, &format!("buffer {}", held.id()))?;
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&s, 2)?;
    let e =
        expect_code(q.dealloca(&[], &held, &[sv(&s, 3)]), StatusCode::FailedPrecondition, "dealloca after one ran")?;
    names(&e, &format!("buffer {}", held.id()))?;
    cx.still_pending(&s, 3, "the signal of the refused dealloca")?;
    // The refused deallocas signalled nothing, so the timeline goes on from 2.
    q.barrier(&[], &[sv(&s, 3)]).ctx("barrier")?;
    cx.wait(&s, 3)
}
