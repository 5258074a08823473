//! Transfers by size and alignment: queue fills and copies from 1-byte buffers to 1 MiB at odd
//! offsets (the bytes around each range untouched), updates, writes, reads and copies large enough
//! to take a driver's staging path, many copies in flight, and zero-length transfers (IREE's no-ops
//! that still honour their waits and signals).

use hal::{Buffer, CommandBufferMode, FillPattern, Semaphore, WaitMode};

use crate::check::{CaseError, CaseResult, Context};
use crate::context::{Cx, LONG, ramp, sv};
use crate::{ensure, ensure_eq};

/// Transfer lengths: every small size, the powers of two around a word, a page and more, and 1 MiB.
const LENGTHS: [u64; 20] =
    [1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 31, 64, 127, 256, 1000, 4096, 4097, 65_536, 65_539, 1 << 20];

/// Bytes of background kept on each side of a guarded range.
const GUARD: u64 = 24;

/// The byte the background is made of.
const BACKGROUND: u8 = 0xEE;

/// Bytes that differ from their neighbours and from any fill pattern here (a multiplicative hash).
fn noise(seed: u32, count: usize) -> Vec<u8> {
    (0..count as u32).map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 24) as u8).collect()
}

/// The fill pattern of width `pattern_len` (1, 2 or 4) in the low bytes of `pattern`.
fn sized_pattern(pattern: u32, pattern_len: u8) -> FillPattern {
    match pattern_len {
        1 => FillPattern::U8(pattern as u8),
        2 => FillPattern::U16(pattern as u16),
        _ => FillPattern::U32(pattern),
    }
}

/// `length` bytes of a `pattern_len`-byte fill pattern (little-endian).
fn pattern_bytes(pattern: u32, pattern_len: u8, length: u64) -> Vec<u8> {
    let unit = &pattern.to_le_bytes()[..usize::from(pattern_len)];
    unit.iter().copied().cycle().take(length as usize).collect()
}

/// A device-local buffer of `size` bytes holding `bytes`, written by a queue write on `queue` that
/// signals `s` to 1.
fn device_buffer_with(cx: &Cx, bytes: Vec<u8>, queue: usize, s: &Semaphore) -> Result<Buffer, CaseError> {
    let buffer = cx.device_buffer(bytes.len() as u64)?;
    cx.queue(queue).write(&[], &buffer, 0, bytes, &[sv(s, 1)]).ctx("background write")?;
    Ok(buffer)
}

/// One transfer of a size class: the buffer it changes, what the whole buffer must hold afterwards,
/// and the semaphore value reached once the transfer is done.
struct Placed {
    what: String,
    target: Buffer,
    expected: Vec<u8>,
    after: (Semaphore, u64),
}

/// Reads every placed buffer back (queue reads across the queues, all in flight) and compares.
fn check_placed(cx: &Cx, placed: &[Placed]) -> CaseResult {
    let mut reads = Vec::with_capacity(placed.len());
    for (i, p) in placed.iter().enumerate() {
        let read = cx.sem(0)?;
        let back = cx
            .queue(i + 2)
            .read(&[sv(&p.after.0, p.after.1)], &p.target, 0, p.target.size(), &[sv(&read, 1)])
            .ctx(format!("read back {}", p.what))?;
        reads.push((read, back));
    }
    for (p, (read, back)) in placed.iter().zip(&reads) {
        cx.wait(read, 1)?;
        let bytes = back.take().ok_or_else(|| format!("{}: the read signalled but left no bytes", p.what))?;
        if bytes != p.expected {
            let first = bytes.iter().zip(&p.expected).position(|(a, b)| a != b).unwrap_or(0);
            return Err(CaseError::Fail(format!(
                "{}: byte {first} of {} is {:#04x}, expected {:#04x} (bytes around the range must stay {BACKGROUND:#04x})",
                p.what,
                bytes.len(),
                bytes.get(first).copied().unwrap_or(0),
                p.expected.get(first).copied().unwrap_or(0)
            )));
        }
    }
    Ok(())
}

/// Queue fills of every length class with 1-, 2- and 4-byte patterns, on a buffer of exactly that
/// size and inside a larger one at an odd (pattern-aligned) offset, all in flight across the queues;
/// each buffer is read back whole: the range holds the pattern, the bytes around it the background.
pub(crate) fn fill_size_classes(cx: &Cx) -> CaseResult {
    let mut placed = Vec::new();
    for (i, &length) in LENGTHS.iter().enumerate() {
        for pattern_len in [1u8, 2, 4] {
            if length % u64::from(pattern_len) != 0 {
                continue;
            }
            let pattern = 0xA1B2_C3D4u32.rotate_left(i as u32 * 8 + u32::from(pattern_len));
            // Offsets aligned to the pattern but to nothing larger: 3, 2 and 4 bytes past the guard.
            let inner = match pattern_len {
                1 => 3,
                2 => 2,
                _ => 4,
            };
            for (size, offset) in [(length, 0), (length + 2 * GUARD + inner, GUARD + inner)] {
                let done = cx.sem(0)?;
                let target = device_buffer_with(cx, vec![BACKGROUND; size as usize], i, &done)?;
                cx.queue(i + 1)
                    .fill(
                        &[sv(&done, 1)],
                        &target,
                        offset,
                        length,
                        sized_pattern(pattern, pattern_len),
                        &[sv(&done, 2)],
                    )
                    .ctx(format!("fill of {length} bytes at {offset} with a {pattern_len}-byte pattern"))?;
                let mut expected = vec![BACKGROUND; size as usize];
                expected[offset as usize..(offset + length) as usize].copy_from_slice(&pattern_bytes(
                    pattern,
                    pattern_len,
                    length,
                ));
                let what =
                    format!("fill of {length} bytes at {offset} of a {size}-byte buffer, {pattern_len}-byte pattern");
                placed.push(Placed { what, target, expected, after: (done, 2) });
            }
        }
    }
    check_placed(cx, &placed)
}

/// Queue copies of every length class: between buffers of exactly that size, and between larger
/// buffers at two different odd offsets, all in flight across the queues; the bytes around the
/// target range keep the background.
pub(crate) fn copy_size_classes(cx: &Cx) -> CaseResult {
    let mut placed = Vec::new();
    for (i, &length) in LENGTHS.iter().enumerate() {
        let data = noise(i as u32, length as usize);
        for (source_offset, target_offset, slack) in [(0u64, 0u64, 0u64), (GUARD + 5, GUARD + 3, 2 * GUARD + 5)] {
            let done = cx.sem(0)?;
            let mut source_bytes = vec![0x11; (length + slack) as usize];
            source_bytes[source_offset as usize..(source_offset + length) as usize].copy_from_slice(&data);
            let source = device_buffer_with(cx, source_bytes, i, &done)?;
            let size = length + slack;
            let target = cx.device_buffer(size)?;
            cx.queue(i + 1)
                .write(&[sv(&done, 1)], &target, 0, vec![BACKGROUND; size as usize], &[sv(&done, 2)])
                .ctx("background write")?;
            cx.queue(i + 2)
                .copy(&[sv(&done, 2)], &source, source_offset, &target, target_offset, length, &[sv(&done, 3)])
                .ctx(format!("copy of {length} bytes {source_offset} -> {target_offset}"))?;
            let mut expected = vec![BACKGROUND; size as usize];
            expected[target_offset as usize..(target_offset + length) as usize].copy_from_slice(&data);
            let what =
                format!("copy of {length} bytes from {source_offset} to {target_offset} of a {size}-byte buffer");
            placed.push(Placed { what, target, expected, after: (done, 3) });
        }
    }
    check_placed(cx, &placed)
}

/// The same classes recorded in one command buffer: fills and copies of every length at odd
/// offsets, each into its own buffer, executed once; the bytes around each range are untouched.
pub(crate) fn command_buffer_size_classes(cx: &Cx) -> CaseResult {
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    // Backgrounds and sources are written in order on queue 0 before the command buffer runs.
    let (ready, executed) = (cx.sem(0)?, cx.sem(0)?);
    let mut step = 0;
    let mut write = |bytes: Vec<u8>, target: &Buffer| -> CaseResult {
        let waits = [sv(&ready, step)];
        cx.queue(0).write(&waits, target, 0, bytes, &[sv(&ready, step + 1)]).ctx("write before the command buffer")?;
        step += 1;
        Ok(())
    };
    let mut placed = Vec::new();
    for (i, &length) in LENGTHS.iter().enumerate() {
        let size = length + 2 * GUARD + 7;
        let (fill_target, copy_target, source) =
            (cx.device_buffer(size)?, cx.device_buffer(size)?, cx.device_buffer(length)?);
        let data = noise(100 + i as u32, length as usize);
        write(vec![BACKGROUND; size as usize], &fill_target)?;
        write(vec![BACKGROUND; size as usize], &copy_target)?;
        write(data.clone(), &source)?;
        let (offset, pattern_len) = if length % 2 == 0 { (GUARD + 2, 2u8) } else { (GUARD + 7, 1u8) };
        cb.fill(&fill_target, offset, length, sized_pattern(0x5A6B, pattern_len))
            .ctx(format!("record fill of {length} bytes"))?;
        cb.copy(&source, 0, &copy_target, GUARD + 7, length).ctx(format!("record copy of {length} bytes"))?;
        let mut filled = vec![BACKGROUND; size as usize];
        filled[offset as usize..(offset + length) as usize].copy_from_slice(&pattern_bytes(
            0x5A6B,
            pattern_len,
            length,
        ));
        let mut copied = vec![BACKGROUND; size as usize];
        copied[(GUARD + 7) as usize..(GUARD + 7 + length) as usize].copy_from_slice(&data);
        placed.push(Placed {
            what: format!("recorded fill of {length} bytes at {offset}, {pattern_len}-byte pattern"),
            target: fill_target,
            expected: filled,
            after: (executed.clone(), 1),
        });
        placed.push(Placed {
            what: format!("recorded copy of {length} bytes to {}", GUARD + 7),
            target: copy_target,
            expected: copied,
            after: (executed.clone(), 1),
        });
    }
    cb.end().ctx("end")?;
    cx.queue(1).execute(&[sv(&ready, step)], &cb, &[sv(&executed, 1)]).ctx("execute")?;
    check_placed(cx, &placed)
}

/// Large enough for a driver's staging path (CUDA stages queue updates, writes and reads through
/// pinned blocks): a queue update of 128 KiB + 37 bytes at an odd offset, a queue write and read of
/// 256 KiB, and queue copies of 256 KiB between host-visible and device-local memory at odd offsets.
pub(crate) fn staging_sized_transfers(cx: &Cx) -> CaseResult {
    const UPDATE: usize = (128 << 10) + 37;
    const BIG: usize = 256 << 10;
    let s = cx.sem(0)?;
    // Update of 128 KiB + 37 at offset 19 of a device-local buffer with a background.
    let updated = cx.device_buffer(UPDATE as u64 + 64)?;
    let update_data = noise(7, UPDATE);
    let q = cx.queue(0);
    q.fill(&[], &updated, 0, updated.size(), BACKGROUND, &[sv(&s, 1)]).ctx("background fill")?;
    q.update(&[sv(&s, 1)], &updated, 19, &update_data, &[sv(&s, 2)]).ctx("update of 128 KiB + 37")?;
    let updated_back = cx.queue(1).read(&[sv(&s, 2)], &updated, 0, updated.size(), &[sv(&s, 3)]).ctx("read")?;
    // Write 256 KiB to device-local memory, read it back.
    let written = cx.device_buffer(BIG as u64 + 16)?;
    let write_data = noise(11, BIG);
    cx.queue(2).write(&[sv(&s, 3)], &written, 5, write_data.clone(), &[sv(&s, 4)]).ctx("write of 256 KiB")?;
    let written_back = cx.queue(3).read(&[sv(&s, 4)], &written, 5, BIG as u64, &[sv(&s, 5)]).ctx("read of 256 KiB")?;
    // Copy 256 KiB host-visible -> device-local -> host-visible, at odd offsets.
    let host_source = cx.host_buffer(BIG as u64 + 32)?;
    let copy_data = noise(13, BIG);
    host_source.write(3, &copy_data).ctx("source through a mapping")?;
    let middle = cx.device_buffer(BIG as u64 + 32)?;
    let host_target = cx.host_buffer(BIG as u64 + 32)?;
    host_target.write(0, &vec![BACKGROUND; BIG + 32]).ctx("background through a mapping")?;
    cx.queue(0).copy(&[sv(&s, 5)], &host_source, 3, &middle, 9, BIG as u64, &[sv(&s, 6)]).ctx("copy to device")?;
    cx.queue(1).copy(&[sv(&s, 6)], &middle, 9, &host_target, 1, BIG as u64, &[sv(&s, 7)]).ctx("copy to host")?;
    cx.wait(&s, 7)?;
    let mut expected = vec![BACKGROUND; UPDATE + 64];
    expected[19..19 + UPDATE].copy_from_slice(&update_data);
    ensure!(updated_back.take() == Some(expected), "the 128 KiB + 37 update did not land exactly at 19");
    ensure!(written_back.take() == Some(write_data), "the 256 KiB write did not read back");
    let mut expected = vec![BACKGROUND; BIG + 32];
    expected[1..1 + BIG].copy_from_slice(&copy_data);
    ensure!(cx.bytes(&host_target)? == expected, "the 256 KiB copies host -> device -> host did not round-trip");
    Ok(())
}

/// 64 copies in flight at once across the queues, for 64 rounds; each round's source bytes differ
/// and every target region is checked after each round.
pub(crate) fn copies_in_flight(cx: &Cx) -> CaseResult {
    const COPIES: u64 = 64;
    const ROUNDS: u32 = 64;
    const CHUNK: u64 = 1024;
    let queues = cx.device().queue_count().max(1);
    let source = cx.host_buffer(COPIES * CHUNK)?;
    let target = cx.host_buffer(COPIES * CHUNK)?;
    let sems: Vec<Semaphore> = (0..queues).map(|_| cx.sem(0)).collect::<Result<_, _>>()?;
    let mut counts = vec![0u64; queues];
    for round in 0..ROUNDS {
        let data = noise(round * 977, (COPIES * CHUNK) as usize);
        source.write(0, &data).ctx("source through a mapping")?;
        for copy in 0..COPIES {
            let q = copy as usize % queues;
            // Copy k moves chunk k to slot (k * 5 + round) mod 64, so every round's layout differs.
            let slot = (copy * 5 + u64::from(round)) % COPIES;
            let signal = [sv(&sems[q], counts[q] + 1)];
            cx.queue(q)
                .copy(&[], &source, copy * CHUNK, &target, slot * CHUNK, CHUNK, &signal)
                .ctx(format!("round {round} copy {copy}"))?;
            counts[q] += 1;
        }
        let list: Vec<_> = sems.iter().zip(&counts).map(|(s, &n)| sv(s, n)).collect();
        hal::wait_semaphores(WaitMode::All, &list, hal::Timeout::After(LONG))
            .map_err(|e| format!("round {round}: waiting for 64 copies: {e}\n{}", cx.device().report()))?;
        let got = cx.bytes(&target)?;
        for copy in 0..COPIES {
            let slot = (copy * 5 + u64::from(round)) % COPIES;
            let (from, to) = ((copy * CHUNK) as usize, (slot * CHUNK) as usize);
            ensure!(
                got[to..to + CHUNK as usize] == data[from..from + CHUNK as usize],
                "round {round}: copy {copy} (chunk {copy} -> slot {slot}) holds other bytes"
            );
        }
    }
    Ok(())
}

/// What a zero-length transfer did: refused at the call, or accepted.
fn zero_length(what: &str, result: hal::Result<()>, refused: &mut Vec<String>) {
    if let Err(e) = result {
        refused.push(format!("{what}: {e}"));
    }
}

/// Zero-length fill, update, copy, write and read (at the start, inside, and at the end of a buffer)
/// are no-ops that still honour waits and signals (IREE): accepted, held until their wait, then
/// signalled; no byte changes; a read yields no bytes. Command buffers take zero-length fills,
/// updates and copies as no-ops too.
pub(crate) fn zero_length_transfers(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(16)?;
    let other = cx.host_buffer(16)?;
    buffer.write(0, &ramp(1, 16)).ctx("write")?;
    other.write(0, &ramp(100, 16)).ctx("write")?;
    let gate = cx.sem(0)?;
    let mut refused = Vec::new();
    let mut signals = Vec::new();
    let mut reads = Vec::new();
    for (i, offset) in [0u64, 7, 16].into_iter().enumerate() {
        let q = cx.queue(i);
        let s: Vec<Semaphore> = (0..5).map(|_| cx.sem(0)).collect::<Result<_, _>>()?;
        let w = [sv(&gate, 1)];
        zero_length(
            &format!("fill of 0 bytes at {offset}"),
            q.fill(&w, &buffer, offset, 0, 0xFFu8, &[sv(&s[0], 1)]),
            &mut refused,
        );
        zero_length(
            &format!("update of 0 bytes at {offset}"),
            q.update(&w, &buffer, offset, &[], &[sv(&s[1], 1)]),
            &mut refused,
        );
        zero_length(
            &format!("copy of 0 bytes at {offset}"),
            q.copy(&w, &other, offset, &buffer, offset, 0, &[sv(&s[2], 1)]),
            &mut refused,
        );
        zero_length(
            &format!("write of 0 bytes at {offset}"),
            q.write(&w, &buffer, offset, Vec::new(), &[sv(&s[3], 1)]),
            &mut refused,
        );
        match q.read(&w, &buffer, offset, 0, &[sv(&s[4], 1)]) {
            Ok(back) => reads.push((offset, back)),
            Err(e) => refused.push(format!("read of 0 bytes at {offset}: {e}")),
        }
        signals.extend(s);
    }
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    zero_length("recorded fill of 0 bytes", cb.fill(&buffer, 4, 0, 0xFFu32), &mut refused);
    zero_length("recorded update of 0 bytes", cb.update(&buffer, 5, &[]), &mut refused);
    zero_length("recorded copy of 0 bytes", cb.copy(&other, 3, &buffer, 3, 0), &mut refused);
    cb.end().ctx("end")?;
    let executed = cx.sem(0)?;
    cx.queue(3).execute(&[sv(&gate, 1)], &cb, &[sv(&executed, 1)]).ctx("execute of zero-length commands")?;
    // Accepted ones must wait for the gate.
    cx.still_pending(&executed, 1, "zero-length commands before their wait")?;
    for s in &signals {
        if s.query().ctx("query")? != 0 {
            return Err(format!("a zero-length transfer signalled semaphore {} before its wait", s.id()).into());
        }
    }
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&executed, 1)?;
    ensure!(
        refused.is_empty(),
        "zero-length transfers must be accepted as no-ops (IREE); refused: {}",
        refused.join("; ")
    );
    for s in &signals {
        cx.wait(s, 1)?;
    }
    for (offset, back) in reads {
        ensure_eq!(back.take(), Some(Vec::new()), "a zero-length read at {offset}");
    }
    ensure_eq!(cx.bytes(&buffer)?, ramp(1, 16), "buffer after zero-length transfers");
    ensure_eq!(cx.bytes(&other)?, ramp(100, 16), "source after zero-length copies");
    Ok(())
}

/// Transfers that touch only host-visible memory (a queue copy between two such buffers, a write
/// into one, a read of one, a command buffer copying between them) submitted behind a long kernel
/// return at once: a submission never waits for the device, whatever memory it moves between.
/// Each lands once the kernel is done, in order.
pub(crate) fn host_memory_transfers_never_block_the_submitter(cx: &Cx) -> CaseResult {
    const SLEEP_US: u32 = 400_000;
    let sleep = cx.load(crate::kernels::Kernel::Sleep)?;
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let (a, b, c) = (cx.host_buffer_u32(&[1, 2, 3, 4])?, cx.host_buffer(16)?, cx.host_buffer(16)?);
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.copy(&b, 0, &c, 0, 16).ctx("record a copy")?;
    cb.end().ctx("end")?;
    let slow = cx.command_buffer(CommandBufferMode::OneShot)?;
    slow.dispatch(&sleep, 0, [1, 1, 1], &[SLEEP_US], &[]).ctx("record the sleep")?;
    slow.end().ctx("end")?;
    queue.execute(&[], &slow, &[sv(&s, 1)]).ctx("the long kernel")?;
    let start = std::time::Instant::now();
    queue.copy(&[sv(&s, 1)], &a, 0, &b, 0, 16, &[sv(&s, 2)]).ctx("copy host to host")?;
    let copied = start.elapsed();
    queue.execute(&[sv(&s, 2)], &cb, &[sv(&s, 3)]).ctx("execute the host copy")?;
    let executed = start.elapsed();
    queue.write_values(&[sv(&s, 3)], &a, 0, &[9u32], &[sv(&s, 4)]).ctx("write into host memory")?;
    let written = start.elapsed();
    let read = queue.read(&[sv(&s, 4)], &a, 0, 8, &[sv(&s, 5)]).ctx("read of host memory")?;
    let submitted = start.elapsed();
    let bound = std::time::Duration::from_micros(u64::from(SLEEP_US) / 4);
    ensure!(
        submitted < bound,
        "submissions behind a {SLEEP_US} us kernel took {submitted:?} (copy {copied:?}, execute {executed:?}, \
         write {written:?}): a call waited for the device"
    );
    cx.wait(&s, 5)?;
    ensure_eq!(cx.words(&c)?, vec![1, 2, 3, 4], "the command buffer's copy after the queue copy");
    ensure_eq!(read.wait_as::<u32>(hal::Timeout::After(LONG)).ctx("the read")?, vec![9, 2], "the read after the write");
    Ok(())
}
