//! Buffer mapping: host reads and writes of whole buffers and sub-ranges, range checks, and which
//! buffers may be mapped at all.

use hal::{BufferParams, BufferUsage, MemoryType, StatusCode};

use crate::check::{CaseResult, Context, expect_code, skip};
use crate::context::{Cx, ramp, sv};
use crate::{ensure, ensure_eq};

/// Bytes written to the whole buffer read back the same.
pub(crate) fn write_read_whole(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(256)?;
    let data = ramp(3, 256);
    buffer.write(0, &data).ctx("write")?;
    ensure_eq!(cx.bytes(&buffer)?, data, "bytes read back");
    Ok(())
}

/// A sub-range write changes exactly that range.
pub(crate) fn sub_range_write_read(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    buffer.write(0, &[0xEE; 64]).ctx("initial write")?;
    buffer.write(13, &[1, 2, 3, 4, 5, 6, 7]).ctx("sub-range write")?;
    let mut expected = vec![0xEE; 64];
    expected[13..20].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7]);
    ensure_eq!(cx.bytes(&buffer)?, expected, "buffer after a write at 13..20");
    let mut middle = [0u8; 5];
    buffer.read(14, &mut middle).ctx("sub-range read")?;
    ensure_eq!(middle, [2, 3, 4, 5, 6], "read of 14..19");
    Ok(())
}

/// A mapping of a sub-range addresses from the range's start and has its length.
pub(crate) fn map_sub_range(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(128)?;
    buffer.write(0, &[0x11; 128]).ctx("background write")?;
    {
        let mut mapping = buffer.map(32, 16).ctx("map(32, 16)")?;
        ensure_eq!(mapping.len(), 16, "mapping length");
        ensure!(!mapping.is_empty(), "a 16-byte mapping is empty");
        mapping.write(0, &[0xAA; 16]).ctx("mapping write")?;
        mapping.write(15, &[0xBB]).ctx("mapping write of its last byte")?;
        let mut back = [0u8; 2];
        mapping.read(14, &mut back).ctx("mapping read")?;
        ensure_eq!(back, [0xAA, 0xBB], "mapping read of 14..16");
    }
    let mut expected = vec![0x11; 128];
    expected[32..47].fill(0xAA);
    expected[47] = 0xBB;
    ensure_eq!(cx.bytes(&buffer)?, expected, "buffer after writes through map(32, 16)");
    Ok(())
}

/// Access past a mapping's end is `OutOfRange`, and writes nothing.
pub(crate) fn mapping_access_out_of_range(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    buffer.write(0, &[0; 64]).ctx("clear")?;
    {
        let mut mapping = buffer.map(16, 16).ctx("map(16, 16)")?;
        expect_code(mapping.write(14, &[1; 4]), StatusCode::OutOfRange, "mapping write across its end")?;
        expect_code(mapping.write(16, &[1]), StatusCode::OutOfRange, "mapping write at its end")?;
        expect_code(mapping.write(usize::MAX, &[1]), StatusCode::OutOfRange, "mapping write at usize::MAX")?;
        let mut out = [0u8; 4];
        expect_code(mapping.read(13, &mut out), StatusCode::OutOfRange, "mapping read across its end")?;
    }
    ensure_eq!(cx.bytes(&buffer)?, vec![0; 64], "bytes after refused writes");
    Ok(())
}

/// Mapping a range outside the buffer is `OutOfRange`, also when offset + length overflows.
pub(crate) fn map_out_of_range(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    expect_code(buffer.map(60, 8).map(|m| m.len()), StatusCode::OutOfRange, "map(60, 8) of 64 bytes")?;
    expect_code(buffer.map(65, 0).map(|m| m.len()), StatusCode::OutOfRange, "map(65, 0) of 64 bytes")?;
    expect_code(buffer.map(u64::MAX, 2).map(|m| m.len()), StatusCode::OutOfRange, "map(u64::MAX, 2)")?;
    expect_code(buffer.map(0, 65).map(|m| m.len()), StatusCode::OutOfRange, "map(0, 65) of 64 bytes")?;
    Ok(())
}

/// `Buffer::write`/`read` outside the buffer are `OutOfRange` and change nothing.
pub(crate) fn buffer_read_write_out_of_range(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(32)?;
    buffer.write(0, &[4; 32]).ctx("fill")?;
    expect_code(buffer.write(32, &[1]), StatusCode::OutOfRange, "write at the end")?;
    expect_code(buffer.write(30, &[1; 3]), StatusCode::OutOfRange, "write across the end")?;
    let mut out = [0u8; 8];
    expect_code(buffer.read(28, &mut out), StatusCode::OutOfRange, "read across the end")?;
    ensure_eq!(cx.bytes(&buffer)?, vec![4; 32], "bytes after refused writes");
    Ok(())
}

/// An empty mapping at the very end is allowed.
pub(crate) fn map_empty_at_end(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(32)?;
    let mapping = buffer.map(32, 0).ctx("map(32, 0)")?;
    ensure!(mapping.is_empty(), "map(32, 0) is not empty");
    Ok(())
}

/// A buffer whose memory is DEVICE_LOCAL only cannot be mapped (`PermissionDenied`).
pub(crate) fn map_device_local_refused(cx: &Cx) -> CaseResult {
    if !cx.device().info().memory_types.contains(&MemoryType::DEVICE_LOCAL) {
        return skip("the device offers no DEVICE_LOCAL-only memory type");
    }
    let buffer = cx.device_buffer(64)?;
    expect_code(buffer.map(0, 64).map(|m| m.len()), StatusCode::PermissionDenied, "map of a DEVICE_LOCAL buffer")?;
    expect_code(buffer.write(0, &[1]), StatusCode::PermissionDenied, "write to a DEVICE_LOCAL buffer")?;
    expect_code(buffer.read_to_vec(), StatusCode::PermissionDenied, "read of a DEVICE_LOCAL buffer")?;
    Ok(())
}

/// Host-visible memory allocated without `MAPPING` usage cannot be mapped (`PermissionDenied`).
pub(crate) fn map_without_mapping_usage_refused(cx: &Cx) -> CaseResult {
    let params = BufferParams::new(MemoryType::HOST_LOCAL, BufferUsage::DEFAULT);
    let buffer = cx.buffer(params, 64)?;
    expect_code(buffer.map(0, 64).map(|m| m.len()), StatusCode::PermissionDenied, "map without MAPPING usage")?;
    Ok(())
}

/// Every HOST_VISIBLE memory type maps, and bytes round-trip at odd offsets and lengths.
pub(crate) fn every_host_visible_type_maps(cx: &Cx) -> CaseResult {
    let types: Vec<MemoryType> =
        cx.device().info().memory_types.iter().copied().filter(|t| t.contains(MemoryType::HOST_VISIBLE)).collect();
    for memory_type in types {
        let params = BufferParams::new(memory_type, BufferUsage::DEFAULT | BufferUsage::MAPPING);
        let buffer = cx.buffer(params, 97)?;
        for (offset, len) in [(0usize, 97usize), (1, 5), (7, 13), (96, 1)] {
            let data = ramp(offset as u8 + 40, len);
            buffer.write(offset as u64, &data).ctx(format!("{memory_type:?}: write {offset}+{len}"))?;
            let mut back = vec![0u8; len];
            buffer.read(offset as u64, &mut back).ctx(format!("{memory_type:?}: read {offset}+{len}"))?;
            ensure_eq!(back, data, "{memory_type:?}: bytes at {offset}+{len}");
        }
    }
    Ok(())
}

/// Bytes written through a mapping are what the device copies.
pub(crate) fn host_writes_visible_to_device(cx: &Cx) -> CaseResult {
    let source = cx.host_buffer(64)?;
    let target = cx.host_buffer(64)?;
    let data = ramp(100, 64);
    source.write(0, &data).ctx("write")?;
    let done = cx.sem(0)?;
    cx.queue(0).copy(&[], &source, 0, &target, 0, 64, &[sv(&done, 1)]).ctx("queue copy")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&target)?, data, "copied bytes");
    Ok(())
}

/// Bytes the device writes are read through a mapping once the signal is reached.
pub(crate) fn device_writes_visible_to_host(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(4096)?;
    let done = cx.sem(0)?;
    cx.queue(0).fill(&[], &buffer, 0, 4096, 0xC0FF_EE00u32, &[sv(&done, 1)]).ctx("queue fill")?;
    cx.wait(&done, 1)?;
    let words = cx.words(&buffer)?;
    ensure!(words.iter().all(|&w| w == 0xC0FF_EE00), "filled words: {:x?}", &words[..4]);
    Ok(())
}

/// Mappings of two disjoint ranges of one buffer may live at once.
pub(crate) fn two_mappings_at_once(cx: &Cx) -> CaseResult {
    let buffer = cx.host_buffer(64)?;
    {
        let mut low = buffer.map(0, 32).ctx("map low half")?;
        let mut high = buffer.map(32, 32).ctx("map high half")?;
        low.write(0, &[1; 32]).ctx("write low")?;
        high.write(0, &[2; 32]).ctx("write high")?;
    }
    let bytes = cx.bytes(&buffer)?;
    ensure!(bytes[..32].iter().all(|&b| b == 1) && bytes[32..].iter().all(|&b| b == 2), "halves: {bytes:?}");
    Ok(())
}

/// A mapping taken before a transient buffer's dealloca stays usable: the memory it maps stays
/// allocated while it lives. What starts after the dealloca (a new mapping, host reads and writes,
/// queue work) fails with `FailedPrecondition` naming the buffer; a second dealloca is refused so at
/// the call.
pub(crate) fn stale_mapping_after_dealloca(cx: &Cx) -> CaseResult {
    let q = cx.queue(0);
    let s = cx.sem(0)?;
    let buffer = q.alloca(&[], BufferParams::host_visible(), 256, &[sv(&s, 1)]).ctx("alloca")?;
    cx.wait(&s, 1)?;
    let mut mapping = buffer.map(0, 256).ctx("map before the dealloca")?;
    mapping.write(0, &[0x5A; 256]).ctx("write before the dealloca")?;
    q.dealloca(&[], &buffer, &[sv(&s, 2)]).ctx("dealloca")?;
    cx.wait(&s, 2)?;
    mapping.write(0, &[1, 2, 3]).ctx("write through the stale mapping")?;
    let mut back = [0u8; 4];
    mapping.read(0, &mut back).ctx("read through the stale mapping")?;
    ensure_eq!(back, [1, 2, 3, 0x5A], "bytes through the stale mapping");
    drop(mapping);

    let names_buffer = |e: hal::Error, what: &str| -> CaseResult {
        ensure!(e.message().contains(&format!("buffer {}", buffer.id())), "{what}: '{e}' does not name the buffer");
        Ok(())
    };
    let precondition = StatusCode::FailedPrecondition;
    names_buffer(expect_code(buffer.map(0, 4).map(|_| ()), precondition, "map after the dealloca")?, "map")?;
    names_buffer(expect_code(buffer.write(0, &[1]), precondition, "write after the dealloca")?, "write")?;
    names_buffer(expect_code(buffer.read_to_vec(), precondition, "read after the dealloca")?, "read")?;
    let fill = cx.sem(0)?;
    q.fill(&[], &buffer, 0, 256, 7u8, &[sv(&fill, 1)]).ctx("fill after the dealloca")?;
    names_buffer(cx.wait_failed(&fill, 1, precondition)?, "fill")?;
    let again = cx.sem(0)?;
    names_buffer(expect_code(q.dealloca(&[], &buffer, &[sv(&again, 1)]), precondition, "second dealloca")?, "dealloca")
}
