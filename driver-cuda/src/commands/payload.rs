//! A command buffer's update payloads: every update's bytes uploaded to one device allocation at
//! `end()`, so an update replays as a device-to-device copy in both modes and never reads pageable
//! host memory on the stream.

use std::sync::Arc;

use hal::driver::Command;
use hal::{Error, Result};

use crate::memory::{CudaMemory, MemoryCounter};
use crate::sys::context::Context;
use crate::sys::result;

/// Update bytes, uploaded once, and where each update's start.
pub(super) struct Payload {
    /// None when the buffer has no updates.
    pub(super) memory: Option<CudaMemory>,
    /// Per command: where its update bytes start in `memory` (0 for other commands).
    pub(super) offsets: Vec<u64>,
}

impl Payload {
    pub(super) fn address(&self) -> u64 {
        self.memory.as_ref().map_or(0, hal::driver::BufferBackend::device_address)
    }
}

/// Uploads every update's bytes into one device allocation (synchronously: this is `end()`, and the
/// legacy-stream copy does not wait for the queues' streams).
pub(super) fn upload(context: &Arc<Context>, counter: &Arc<MemoryCounter>, commands: &[Command]) -> Result<Payload> {
    let mut bytes = 0u64;
    let mut offsets = Vec::with_capacity(commands.len());
    for command in commands {
        if let Command::Update { data, .. } = command {
            offsets.push(bytes);
            bytes += (data.len() as u64).next_multiple_of(16);
        } else {
            offsets.push(0);
        }
    }
    if bytes == 0 {
        return Ok(Payload { memory: None, offsets });
    }
    let memory = CudaMemory::device(context, counter, bytes)?;
    // Bound already by `CudaMemory::device`: this only takes the token (one thread-local check).
    let bound = context.bind()?;
    let base = hal::driver::BufferBackend::device_address(&memory);
    for (command, &offset) in commands.iter().zip(&offsets) {
        if let Command::Update { data, .. } = command
            && !data.is_empty()
        {
            // `base + offset` has room for `data.len()` bytes (offsets were laid out from these lengths).
            result::memcpy_htod(&bound, base + offset, data)?;
        }
    }
    // A copy from pageable memory may return before its DMA finished; queue streams do not wait for
    // the legacy stream.
    result::legacy_stream_synchronize(&bound)?;
    Ok(Payload { memory: Some(memory), offsets })
}

/// The device address of update command `index`'s bytes.
pub(crate) fn update_source(payload: u64, offsets: &[u64], index: usize) -> Result<u64> {
    match offsets.get(index) {
        Some(&offset) if payload != 0 => Ok(payload + offset),
        _ => Err(Error::internal(format!("cuda command buffer: update {index} has no uploaded payload"))),
    }
}
