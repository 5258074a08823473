//! Binding tables: a reusable command buffer records its commands against binding slots, and each
//! execute passes the buffers for the slots ([`Queue::execute_with_bindings`]), so a compiler
//! runtime records a function once and runs it on every call with that call's buffers.
//!
//! A recorded command names its buffers by [`BufferRef`]: a buffer now, or slot `n` of the table.
//! Ranges given with a slot are relative to the table entry's range. Commands that name only
//! buffers are checked when recorded, as ever; a command that names a slot is checked again when an
//! execute resolves it against the table (usage, range, alignment, device), before anything runs.
//!
//! [`Queue::execute_with_bindings`]: crate::Queue::execute_with_bindings

use std::sync::Arc;

use crate::buffer::Buffer;
use crate::command_buffer::{BufferBinding, Command};
use crate::error::{Error, Result};

/// A buffer a command names when it is recorded: a buffer, or a slot of the binding table that
/// each execute passes.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum BufferRef {
    /// This buffer, in every execute.
    Buffer(Buffer),
    /// Entry `n` of the execute's binding table.
    Slot(u32),
}

impl BufferRef {
    /// Slot `n` of the binding table.
    pub fn slot(n: u32) -> Self {
        BufferRef::Slot(n)
    }
}

impl From<&Buffer> for BufferRef {
    fn from(buffer: &Buffer) -> Self {
        BufferRef::Buffer(buffer.clone())
    }
}

impl From<Buffer> for BufferRef {
    fn from(buffer: Buffer) -> Self {
        BufferRef::Buffer(buffer)
    }
}

/// A dispatch binding when it is recorded: `length` bytes from `offset` of a buffer, or of a
/// binding-table slot's range.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BindingRef {
    /// The buffer or slot.
    pub buffer: BufferRef,
    /// Byte offset (in the slot's range, for a slot).
    pub offset: u64,
    /// Byte length.
    pub length: u64,
}

impl BindingRef {
    /// `length` bytes from `offset` of slot `slot`'s range.
    pub fn slot(slot: u32, offset: u64, length: u64) -> Self {
        BindingRef { buffer: BufferRef::Slot(slot), offset, length }
    }
}

impl From<BufferBinding> for BindingRef {
    fn from(binding: BufferBinding) -> Self {
        BindingRef { buffer: BufferRef::Buffer(binding.buffer), offset: binding.offset, length: binding.length }
    }
}

impl From<&BufferBinding> for BindingRef {
    fn from(binding: &BufferBinding) -> Self {
        binding.clone().into()
    }
}

/// Makes a recorded command concrete for one execute's table, pushing it onto the execute's
/// commands (where it stays: each move of a command is a 176-byte copy).
pub(crate) type Template = Arc<dyn Fn(&[BufferBinding], &mut Vec<Command>) -> Result<()> + Send + Sync>;

/// A recorded command: concrete, or waiting for a table.
#[derive(Clone)]
pub(crate) enum Recorded {
    /// Names buffers only; checked when recorded.
    Ready(Command),
    /// Names slots below `slots`; checked when resolved.
    Template { template: Template, slots: u32 },
}

impl Recorded {
    /// The table entries it needs (0 for a concrete command).
    pub(crate) fn slots(&self) -> u32 {
        match self {
            Recorded::Ready(_) => 0,
            Recorded::Template { slots, .. } => *slots,
        }
    }
}

/// The slots `refs` need: one past the highest slot named.
pub(crate) fn slots_needed<'a>(refs: impl IntoIterator<Item = &'a BufferRef>) -> u32 {
    refs.into_iter()
        .filter_map(|r| if let BufferRef::Slot(n) = r { Some(n.saturating_add(1)) } else { None })
        .max()
        .unwrap_or(0)
}

/// The buffer and offset in it that `length` bytes from `offset` of `r` name under `table`.
/// `InvalidArgument` for a slot past the table, `OutOfRange` for a range past the slot's.
pub(crate) fn resolve(r: &BufferRef, offset: u64, length: u64, table: &[BufferBinding]) -> Result<(Buffer, u64)> {
    match r {
        BufferRef::Buffer(buffer) => Ok((buffer.clone(), offset)),
        BufferRef::Slot(slot) => {
            let entry = table.get(*slot as usize).ok_or_else(|| {
                Error::invalid_argument(format!("binding slot {slot}: the binding table has {} entries", table.len()))
            })?;
            let end = offset.checked_add(length);
            if end.is_none_or(|end| end > entry.length) {
                return Err(Error::out_of_range(format!(
                    "binding slot {slot}: range [{offset}, +{length}) is outside its {} bytes ({} from {})",
                    entry.length, entry.buffer, entry.offset
                )));
            }
            Ok((entry.buffer.clone(), entry.offset + offset))
        }
    }
}
