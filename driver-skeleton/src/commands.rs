//! What the operations do to buffer memory: fills, updates, copies, reads and writes, one command
//! at a time, and a command buffer's commands in order. Every access goes through
//! [`hal::driver::shared_memory`], since the host (a mapping) may touch the same bytes at the same
//! time.

use hal::driver::{BufferExt, Command, CommandBufferExt, HostView, PreparedCommands, shared_memory};
use hal::{Buffer, CommandBuffer, Error, Result};

/// A command buffer as the skeleton replays it: its recorded commands, run in order at each
/// execute. Nothing to prepare, so nothing is kept.
pub(crate) struct Recorded;

impl PreparedCommands for Recorded {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Runs `command_buffer`'s commands in order.
pub(crate) fn execute(command_buffer: &CommandBuffer) -> Result<()> {
    command_buffer.commands().iter().try_for_each(run)
}

/// Runs one command.
pub(crate) fn run(command: &Command) -> Result<()> {
    match command {
        Command::Fill { target, offset, length, pattern, pattern_len } => {
            command.validate_transfer()?;
            fill(target, *offset, *length, *pattern, usize::from(*pattern_len))
        }
        Command::Update { target, offset, data } => {
            command.validate_transfer()?;
            write(target, *offset, data)
        }
        Command::Copy { source, source_offset, target, target_offset, length } => {
            command.validate_transfer()?;
            let src = HostRange::of(source, *source_offset, *length)?;
            let dst = HostRange::of(target, *target_offset, *length)?;
            // SAFETY: both ranges are `length` bytes inside their buffers' memory (checked by
            // `HostRange::of`), kept allocated by their views; racing accesses are atomic.
            unsafe { shared_memory::copy(src.ptr, dst.ptr, *length as usize) };
            Ok(())
        }
        Command::Barrier => Ok(()),
        Command::Dispatch { .. } | Command::DispatchIndirect { .. } => {
            // Unreachable through the HAL: the skeleton loads no executable to record one with.
            Err(Error::unimplemented(format!("{}: no kernels", crate::DRIVER_NAME)))
        }
        Command::Collective { .. } => Err(Error::unimplemented(format!("{}: no collectives", crate::DRIVER_NAME))),
    }
}

/// Fills `length` bytes of `target` at `offset` with the low `pattern_len` bytes of `pattern`
/// (little-endian), a chunk at a time.
fn fill(target: &Buffer, offset: u64, length: u64, pattern: u32, pattern_len: usize) -> Result<()> {
    let dst = HostRange::of(target, offset, length)?;
    // A multiple of every pattern length, so each chunk starts with the pattern's first byte.
    let bytes = pattern.to_le_bytes();
    let chunk: Vec<u8> = (0..4096).map(|at| bytes[at % pattern_len]).collect();
    let mut filled = 0;
    while filled < length as usize {
        let n = (length as usize - filled).min(chunk.len());
        // SAFETY: `filled + n <= length` bytes of the checked range, kept allocated by its view;
        // racing accesses are atomic, as this one is.
        unsafe { shared_memory::store(dst.ptr.add(filled), &chunk[..n]) };
        filled += n;
    }
    Ok(())
}

/// Copies `data` into `target` at `offset`.
pub(crate) fn write(target: &Buffer, offset: u64, data: &[u8]) -> Result<()> {
    let dst = HostRange::of(target, offset, data.len() as u64)?;
    // SAFETY: `dst` addresses `data.len()` bytes of `target`'s memory (checked), kept allocated by
    // its view; racing accesses are atomic, as this one is.
    unsafe { shared_memory::store(dst.ptr, data) };
    Ok(())
}

/// Copies `length` bytes of `source` at `offset` out.
pub(crate) fn read(source: &Buffer, offset: u64, length: u64) -> Result<Vec<u8>> {
    let src = HostRange::of(source, offset, length)?;
    let mut out = vec![0u8; length as usize];
    // SAFETY: `src` addresses `length` bytes of `source`'s memory (checked), kept allocated by its
    // view; racing accesses are atomic, as this one is.
    unsafe { shared_memory::load(src.ptr, &mut out) };
    Ok(out)
}

/// The host address of `[offset, offset + length)` of a buffer, valid while the view lives.
struct HostRange<'a> {
    ptr: *mut u8,
    _view: HostView<'a>,
}

impl<'a> HostRange<'a> {
    fn of(buffer: &'a Buffer, offset: u64, length: u64) -> Result<Self> {
        buffer.check_range(offset, length)?;
        let view = buffer.backend().host_view().ok_or_else(|| {
            Error::failed_precondition(format!(
                "{buffer}: has no memory (a transient buffer outside its queue_alloca and queue_dealloca)"
            ))
        })?;
        // SAFETY: `offset + length <= size` (checked above), a buffer lies inside its backend's
        // memory (`memory_offset + size <= backend size`), and the view addresses all of it, so the
        // sum stays inside the allocation.
        let ptr = unsafe { view.ptr().as_ptr().add((buffer.memory_offset() + offset) as usize) };
        Ok(HostRange { ptr, _view: view })
    }
}
