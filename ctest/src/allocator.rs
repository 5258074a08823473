//! The allocator: every memory type and usage the device reports, sizes at the edges, and the
//! errors for what it cannot give.

use hal::{BufferParams, BufferUsage, MemoryType, StatusCode};

use crate::check::{CaseResult, Context, expect_code, skip};
use crate::context::Cx;
use crate::{ensure, ensure_eq};

/// Every non-empty combination of the four usage bits.
fn usage_combinations() -> Vec<BufferUsage> {
    let bits = [
        BufferUsage::TRANSFER_SOURCE,
        BufferUsage::TRANSFER_TARGET,
        BufferUsage::DISPATCH_STORAGE,
        BufferUsage::MAPPING,
    ];
    (1u32..16)
        .map(|mask| {
            bits.iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .fold(BufferUsage::empty(), |acc, (_, b)| acc | *b)
        })
        .collect()
}

/// Every memory type the device reports, with every usage combination: allocates when the
/// combination is valid (and maps it when it has `MAPPING`), `InvalidArgument` when it is not.
pub(crate) fn every_memory_type_and_usage(cx: &Cx) -> CaseResult {
    for &memory_type in &cx.device().info().memory_types {
        for usage in usage_combinations() {
            let params = BufferParams::new(memory_type, usage);
            let what = format!("allocate {memory_type:?} with {usage:?}");
            let valid = !usage.contains(BufferUsage::MAPPING) || memory_type.contains(MemoryType::HOST_VISIBLE);
            if !valid {
                expect_code(cx.device().allocate_buffer(params, 256), StatusCode::InvalidArgument, &what)?;
                continue;
            }
            let buffer = cx.device().allocate_buffer(params, 256).ctx(&what)?;
            ensure_eq!(buffer.size(), 256, "{what}: size");
            ensure_eq!(buffer.memory_type(), memory_type, "{what}: memory type");
            ensure_eq!(buffer.usage(), usage, "{what}: usage");
            ensure_eq!(buffer.device(), cx.device().id(), "{what}: device");
            if usage.contains(BufferUsage::MAPPING) {
                buffer.write(250, &[1, 2, 3, 4, 5, 6]).ctx(format!("{what}: write"))?;
                let mut back = [0u8; 6];
                buffer.read(250, &mut back).ctx(format!("{what}: read"))?;
                ensure_eq!(back, [1, 2, 3, 4, 5, 6], "{what}: bytes written then read");
            }
        }
    }
    Ok(())
}

/// An allocation above the largest the device reports is `ResourceExhausted`, and the device goes on.
pub(crate) fn over_max_resource_exhausted(cx: &Cx) -> CaseResult {
    let max = cx.device().info().max_allocation_size;
    if max == u64::MAX {
        return skip("the device reports no largest allocation");
    }
    for &memory_type in &cx.device().info().memory_types {
        let params = BufferParams::new(memory_type, BufferUsage::DEFAULT);
        expect_code(cx.device().allocate_buffer(params, max + 1), StatusCode::ResourceExhausted, "max + 1 bytes")?;
    }
    cx.host_buffer(64).map(drop)
}

/// A huge allocation (`u64::MAX`, half of it) is `ResourceExhausted`, never an abort.
pub(crate) fn huge_resource_exhausted(cx: &Cx) -> CaseResult {
    for size in [u64::MAX, u64::MAX / 2, 1 << 62] {
        expect_code(
            cx.device().allocate_buffer(BufferParams::device_local(), size),
            StatusCode::ResourceExhausted,
            &format!("{size} bytes"),
        )?;
        expect_code(
            cx.device().allocate_buffer(BufferParams::host_visible(), size),
            StatusCode::ResourceExhausted,
            &format!("{size} host-visible bytes"),
        )?;
    }
    let buffer = cx.host_buffer(64)?;
    buffer.write(0, &[9; 64]).ctx("write after refused huge allocations")?;
    Ok(())
}

/// An empty memory type or an empty usage is `InvalidArgument`.
pub(crate) fn empty_params_invalid_argument(cx: &Cx) -> CaseResult {
    let no_type = BufferParams::new(MemoryType::empty(), BufferUsage::DEFAULT);
    expect_code(cx.device().allocate_buffer(no_type, 64), StatusCode::InvalidArgument, "empty memory type")?;
    let no_usage = BufferParams::new(MemoryType::DEVICE_LOCAL, BufferUsage::empty());
    expect_code(cx.device().allocate_buffer(no_usage, 64), StatusCode::InvalidArgument, "empty usage")?;
    Ok(())
}

/// `MAPPING` usage on memory that is not `HOST_VISIBLE` is `InvalidArgument`.
pub(crate) fn mapping_needs_host_visible(cx: &Cx) -> CaseResult {
    let params = BufferParams::new(MemoryType::DEVICE_LOCAL, BufferUsage::MAPPING);
    expect_code(cx.device().allocate_buffer(params, 64), StatusCode::InvalidArgument, "DEVICE_LOCAL with MAPPING")?;
    Ok(())
}

/// A memory type no offered type contains is `InvalidArgument`.
pub(crate) fn unoffered_memory_type_invalid_argument(cx: &Cx) -> CaseResult {
    let everything = MemoryType::all();
    if cx.offers(everything) {
        return skip("the device offers a memory type with every property");
    }
    let params = BufferParams::new(everything, BufferUsage::DEFAULT);
    expect_code(cx.device().allocate_buffer(params, 64), StatusCode::InvalidArgument, "an unoffered memory type")?;
    Ok(())
}

/// Odd sizes (1, 3, 4097 bytes) are allocated at exactly that size and are usable to the last byte.
pub(crate) fn odd_sizes(cx: &Cx) -> CaseResult {
    for size in [1u64, 3, 4097] {
        let buffer = cx.host_buffer(size)?;
        ensure_eq!(buffer.size(), size, "size");
        buffer.write(size - 1, &[0x5A]).ctx("write of the last byte")?;
        let mut last = [0u8];
        buffer.read(size - 1, &mut last).ctx("read of the last byte")?;
        ensure_eq!(last[0], 0x5A, "last byte of a {size}-byte buffer");
    }
    Ok(())
}

/// A thousand small buffers: distinct ids, each keeps its own bytes.
pub(crate) fn many_small_buffers(cx: &Cx) -> CaseResult {
    let mut buffers = Vec::with_capacity(1000);
    for i in 0..1000u32 {
        let buffer = cx.host_buffer(16)?;
        buffer.write(0, &i.to_le_bytes()).ctx("write")?;
        buffers.push(buffer);
    }
    let mut ids: Vec<u64> = buffers.iter().map(|b| b.id()).collect();
    ids.sort_unstable();
    ids.dedup();
    ensure_eq!(ids.len(), 1000, "distinct buffer ids");
    for (i, buffer) in buffers.iter().enumerate() {
        let mut word = [0u8; 4];
        buffer.read(0, &mut word).ctx("read")?;
        ensure_eq!(u32::from_le_bytes(word), i as u32, "buffer {i}'s word");
    }
    Ok(())
}

/// Clones of a buffer are the same memory; distinct buffers are not.
pub(crate) fn buffer_identity(cx: &Cx) -> CaseResult {
    let a = cx.host_buffer(8)?;
    let b = cx.host_buffer(8)?;
    let clone = a.clone();
    ensure!(clone.same_as(&a) && !a.same_as(&b), "same_as is wrong");
    clone.write(0, &[7; 8]).ctx("write through the clone")?;
    ensure_eq!(cx.bytes(&a)?, vec![7; 8], "bytes seen through the original");
    ensure_eq!(cx.bytes(&b)?.len(), 8, "other buffer");
    Ok(())
}

/// A large buffer (64 MiB, or the largest allocation if smaller) is allocated and usable at both ends.
pub(crate) fn large_buffer(cx: &Cx) -> CaseResult {
    let size = (64u64 << 20).min(cx.device().info().max_allocation_size);
    let buffer = cx.host_buffer(size)?;
    buffer.write(0, &[1; 16]).ctx("write at the start")?;
    buffer.write(size - 16, &[2; 16]).ctx("write at the end")?;
    let mut end = [0u8; 16];
    buffer.read(size - 16, &mut end).ctx("read at the end")?;
    ensure_eq!(end, [2; 16], "last 16 bytes");
    Ok(())
}

/// Memory is given back: allocating and dropping the largest allocation (capped at 256 MiB) 16
/// times does not exhaust the device.
pub(crate) fn memory_is_released(cx: &Cx) -> CaseResult {
    let size = (256u64 << 20).min(cx.device().info().max_allocation_size);
    for round in 0..16 {
        let buffer = cx.device_buffer(size).map_err(|e| format!("round {round}: {e}"))?;
        drop(buffer);
    }
    Ok(())
}
