//! Command buffers: recorded once against buffers or binding-table slots, run by `thal_queue_execute*`.

use std::ffi::c_void;

use hal::{
    BindingRef, Buffer, BufferRef, CommandBuffer, CommandBufferMode, Device, Error, Executable, FillPattern, Result,
};

use crate::buffer::host_bytes;
use crate::handle::thal_executable_t;
use crate::handle::{self, check_out, get, get_optional, store, thal_buffer_t, thal_command_buffer_t, thal_device_t};
use crate::queue::{THAL_WHOLE_LENGTH, c_array};
use crate::status::{guard, thal_status_t};

/// Executed at most once.
pub const THAL_COMMAND_BUFFER_MODE_ONE_SHOT: u32 = 0;
/// Executed any number of times.
pub const THAL_COMMAND_BUFFER_MODE_REUSABLE: u32 = 1;

/// A buffer, or (with `buffer` NULL) binding-table slot `slot` of each execute.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct thal_buffer_ref_t {
    /// The buffer, or NULL for a slot.
    pub buffer: *mut thal_buffer_t,
    /// The slot, when `buffer` is NULL.
    pub slot: u32,
}

/// A dispatch binding: `length` bytes from `offset` of a buffer, or (with `buffer` NULL) of slot
/// `slot`'s range. `THAL_WHOLE_LENGTH` means to the end of a buffer (a slot needs a real length).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct thal_binding_ref_t {
    /// The buffer, or NULL for a slot.
    pub buffer: *mut thal_buffer_t,
    /// The slot, when `buffer` is NULL.
    pub slot: u32,
    /// Byte offset.
    pub offset: u64,
    /// Byte length, or `THAL_WHOLE_LENGTH`.
    pub length: u64,
}

/// The HAL form of a buffer reference.
fn buffer_ref(reference: thal_buffer_ref_t, arg: &str) -> Result<BufferRef> {
    Ok(match get_optional::<Buffer>(reference.buffer, arg)? {
        Some(buffer) => BufferRef::from(&*buffer),
        None => BufferRef::slot(reference.slot),
    })
}

/// The HAL form of a dispatch binding.
fn binding_ref(binding: &thal_binding_ref_t, arg: impl std::fmt::Display + Copy) -> Result<BindingRef> {
    match get_optional::<Buffer>(binding.buffer, arg)? {
        Some(buffer) => {
            let length = match binding.length {
                THAL_WHOLE_LENGTH => buffer.size().saturating_sub(binding.offset),
                length => length,
            };
            Ok(BindingRef::from(hal::BufferBinding::range(&buffer, binding.offset, length)))
        }
        None if binding.length == THAL_WHOLE_LENGTH => Err(Error::invalid_argument(format!(
            "{arg}: slot {} bound with THAL_WHOLE_LENGTH: a slot binding needs its length",
            binding.slot
        ))),
        None => Ok(BindingRef::slot(binding.slot, binding.offset, binding.length)),
    }
}

/// The HAL form of a dispatch's bindings.
///
/// # Safety
/// `bindings` is NULL or has `count` entries.
unsafe fn binding_refs(bindings: *const thal_binding_ref_t, count: usize) -> Result<Vec<BindingRef>> {
    // SAFETY: the caller's contract.
    unsafe { c_array(bindings, count, "bindings")? }
        .iter()
        .enumerate()
        .map(|(i, b)| binding_ref(b, format_args!("bindings[{i}]")))
        .collect()
}

/// A new command buffer of `device` in `mode` (`THAL_COMMAND_BUFFER_MODE_*`) into `*out`.
///
/// # Safety
/// `device` is a handle the caller holds; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_command_buffer_create(
    device: *mut thal_device_t,
    mode: u32,
    out: *mut *mut thal_command_buffer_t,
) -> thal_status_t {
    guard("thal_command_buffer_create", || {
        let mode = match mode {
            THAL_COMMAND_BUFFER_MODE_ONE_SHOT => CommandBufferMode::OneShot,
            THAL_COMMAND_BUFFER_MODE_REUSABLE => CommandBufferMode::Reusable,
            other => {
                return Err(Error::invalid_argument(format!("command buffer mode {other}: not ONE_SHOT or REUSABLE")));
            }
        };
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let command_buffer = get::<Device>(device, "device")?.create_command_buffer(mode)?;
            store(out, command_buffer)?;
        }
        Ok(())
    })
}

/// Records a fill of `length` bytes of `target` from `offset` with a 1-, 2- or 4-byte pattern.
///
/// # Safety
/// Handles are ones the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_command_buffer_fill(
    command_buffer: *mut thal_command_buffer_t,
    target: thal_buffer_ref_t,
    offset: u64,
    length: u64,
    pattern: u32,
    pattern_length: u8,
) -> thal_status_t {
    guard("thal_command_buffer_fill", || {
        get::<CommandBuffer>(command_buffer, "command_buffer")?.fill(
            buffer_ref(target, "target")?,
            offset,
            length,
            fill_pattern(pattern, pattern_length)?,
        )
    })
}

/// Records a write of `length` bytes (copied now) from `data` into `target` at `offset`.
///
/// # Safety
/// Handles are ones the caller holds; `data` has `length` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_command_buffer_update(
    command_buffer: *mut thal_command_buffer_t,
    target: thal_buffer_ref_t,
    offset: u64,
    data: *const c_void,
    length: usize,
) -> thal_status_t {
    guard("thal_command_buffer_update", || {
        // SAFETY: the caller's contract.
        unsafe {
            get::<CommandBuffer>(command_buffer, "command_buffer")?.update(
                buffer_ref(target, "target")?,
                offset,
                host_bytes(data, length, "data")?,
            )
        }
    })
}

/// Records a copy of `length` bytes from `source` at `source_offset` to `target` at `target_offset`.
///
/// # Safety
/// Handles are ones the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_command_buffer_copy(
    command_buffer: *mut thal_command_buffer_t,
    source: thal_buffer_ref_t,
    source_offset: u64,
    target: thal_buffer_ref_t,
    target_offset: u64,
    length: u64,
) -> thal_status_t {
    guard("thal_command_buffer_copy", || {
        get::<CommandBuffer>(command_buffer, "command_buffer")?.copy(
            buffer_ref(source, "source")?,
            source_offset,
            buffer_ref(target, "target")?,
            target_offset,
            length,
        )
    })
}

/// Records a dispatch of entry point `entry_point` of `executable` over `workgroups` (x, y, z), with
/// `constant_count` 32-bit constants and `binding_count` bindings.
///
/// # Safety
/// Handles are ones the caller holds; `workgroups` has 3 entries; the arrays hold their counts.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn thal_command_buffer_dispatch(
    command_buffer: *mut thal_command_buffer_t,
    executable: *mut thal_executable_t,
    entry_point: u32,
    workgroups: *const u32,
    constants: *const u32,
    constant_count: usize,
    bindings: *const thal_binding_ref_t,
    binding_count: usize,
) -> thal_status_t {
    guard("thal_command_buffer_dispatch", || {
        // SAFETY: the caller's contract.
        unsafe {
            let grid = c_array(workgroups, 3, "workgroups")?;
            let bindings = binding_refs(bindings, binding_count)?;
            get::<CommandBuffer>(command_buffer, "command_buffer")?.dispatch_refs(
                &*get::<Executable>(executable, "executable")?,
                entry_point,
                [grid[0], grid[1], grid[2]],
                c_array(constants, constant_count, "constants")?,
                &bindings,
            )
        }
    })
}

/// Records a dispatch as `thal_command_buffer_dispatch` does, taking its workgroup count from three
/// `uint32_t`s at `count_offset` of `count` (a buffer or a binding-table slot) when it runs.
///
/// # Safety
/// Handles are ones the caller holds; the arrays hold their counts.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn thal_command_buffer_dispatch_indirect(
    command_buffer: *mut thal_command_buffer_t,
    executable: *mut thal_executable_t,
    entry_point: u32,
    count: thal_buffer_ref_t,
    count_offset: u64,
    constants: *const u32,
    constant_count: usize,
    bindings: *const thal_binding_ref_t,
    binding_count: usize,
) -> thal_status_t {
    guard("thal_command_buffer_dispatch_indirect", || {
        // SAFETY: the caller's contract.
        unsafe {
            let bindings = binding_refs(bindings, binding_count)?;
            get::<CommandBuffer>(command_buffer, "command_buffer")?.dispatch_indirect_refs(
                &*get::<Executable>(executable, "executable")?,
                entry_point,
                buffer_ref(count, "count")?,
                count_offset,
                c_array(constants, constant_count, "constants")?,
                &bindings,
            )
        }
    })
}

/// Records an execution barrier: commands after it start after the commands before it completed.
///
/// # Safety
/// `command_buffer` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_command_buffer_barrier(command_buffer: *mut thal_command_buffer_t) -> thal_status_t {
    guard("thal_command_buffer_barrier", || get::<CommandBuffer>(command_buffer, "command_buffer")?.barrier())
}

/// Ends recording; the command buffer is immutable afterwards and can be executed.
///
/// # Safety
/// `command_buffer` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_command_buffer_end(command_buffer: *mut thal_command_buffer_t) -> thal_status_t {
    guard("thal_command_buffer_end", || get::<CommandBuffer>(command_buffer, "command_buffer")?.end())
}

/// Adds a reference to `command_buffer`.
///
/// # Safety
/// `command_buffer` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_command_buffer_retain(command_buffer: *mut thal_command_buffer_t) -> thal_status_t {
    guard("thal_command_buffer_retain", || handle::retain::<CommandBuffer>(command_buffer, "command_buffer"))
}

/// Drops a reference to `command_buffer` (executes in flight keep what they need). NULL is allowed.
///
/// # Safety
/// `command_buffer` is NULL or a handle the caller holds and gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_command_buffer_release(command_buffer: *mut thal_command_buffer_t) -> thal_status_t {
    if command_buffer.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_command_buffer_release", || handle::release::<CommandBuffer>(command_buffer, "command_buffer"))
}

/// The C calls' (pattern, pattern length) pair as the HAL's [`FillPattern`]: a length of 1, 2 or 4
/// bytes, and no bits set above it.
pub(crate) fn fill_pattern(pattern: u32, pattern_length: u8) -> Result<FillPattern> {
    let fits = |width: u32| u64::from(pattern) < 1u64 << (8 * width);
    match pattern_length {
        1 if fits(1) => Ok(FillPattern::U8(pattern as u8)),
        2 if fits(2) => Ok(FillPattern::U16(pattern as u16)),
        4 => Ok(FillPattern::U32(pattern)),
        1 | 2 => Err(Error::invalid_argument(format!(
            "fill pattern {pattern:#x}: wider than its pattern_length of {pattern_length} byte(s)"
        ))),
        other => Err(Error::invalid_argument(format!("fill pattern_length {other}: must be 1, 2 or 4"))),
    }
}
