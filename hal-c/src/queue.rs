//! Queue operations: each waits on a semaphore list and signals one, and none blocks the caller.

use std::ffi::c_void;

use hal::{Buffer, BufferBinding, CommandBuffer, Error, HostCallFlags, Queue, Readback, Result};

use crate::buffer::{buffer_params, host_bytes, thal_buffer_params_t};
use crate::handle::{self, check_out, get, store, thal_buffer_t, thal_command_buffer_t, thal_queue_t, thal_readback_t};
use crate::semaphore::{semaphore_list, thal_semaphore_list_t, thal_time_t, timeout_of};
use crate::status::{guard, take_status, thal_status_t};

/// A length meaning "to the end of the buffer" in a binding.
pub const THAL_WHOLE_LENGTH: u64 = u64::MAX;

/// Later work on the queue need not wait for the host call to return.
pub const THAL_HOST_CALL_NON_BLOCKING: u32 = 1 << 0;

/// A buffer range: a binding-table entry of `thal_queue_execute_with_bindings`.
#[repr(C)]
pub struct thal_buffer_binding_t {
    /// The buffer.
    pub buffer: *mut thal_buffer_t,
    /// Byte offset of the range.
    pub offset: u64,
    /// Byte length of the range, or `THAL_WHOLE_LENGTH`.
    pub length: u64,
}

/// A host call: runs on a HAL thread once its waits are reached; returns NULL, or a status (which it
/// gives up) that fails the call's signals. It may call any function of this library, including
/// releasing the last handles of its own queue and device.
pub type thal_host_call_fn = Option<unsafe extern "C" fn(user_data: *mut c_void) -> thal_status_t>;

/// A buffer range in HAL form, `THAL_WHOLE_LENGTH` resolved against the buffer.
pub(crate) fn buffer_binding(binding: &thal_buffer_binding_t, arg: impl std::fmt::Display) -> Result<BufferBinding> {
    let buffer = get::<Buffer>(binding.buffer, arg)?;
    let length = match binding.length {
        THAL_WHOLE_LENGTH => buffer.size().saturating_sub(binding.offset),
        length => length,
    };
    Ok(BufferBinding::range(&buffer, binding.offset, length))
}

/// `count` entries of a C array (NULL allowed for 0).
///
/// # Safety
/// `items` has `count` readable entries when `count > 0`.
pub(crate) unsafe fn c_array<'a, T>(items: *const T, count: usize, arg: &str) -> Result<&'a [T]> {
    if count == 0 {
        return Ok(&[]);
    }
    if items.is_null() {
        return Err(Error::invalid_argument(format!("argument '{arg}': NULL with count {count}")));
    }
    // SAFETY: non-NULL with `count` entries by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(items, count) })
}

/// A queue read's readback and the length it will deliver.
pub(crate) struct PendingRead {
    readback: Readback,
    length: u64,
}

/// Runs an ended command buffer (one without binding slots) once `waits` are reached.
///
/// # Safety
/// Handles are ones the caller holds; lists are NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_execute(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    command_buffer: *mut thal_command_buffer_t,
    signals: *const thal_semaphore_list_t,
) -> thal_status_t {
    guard("thal_queue_execute", || {
        // SAFETY: the caller's contract.
        unsafe {
            get::<Queue>(queue, "queue")?.execute(
                &semaphore_list(waits, "waits")?,
                &*get::<CommandBuffer>(command_buffer, "command_buffer")?,
                &semaphore_list(signals, "signals")?,
            )
        }
    })
}

/// Runs a command buffer recorded against binding slots with `bindings[slot]` as each slot's range.
///
/// # Safety
/// Handles are ones the caller holds; lists are NULL or valid; `bindings` has `binding_count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_execute_with_bindings(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    command_buffer: *mut thal_command_buffer_t,
    bindings: *const thal_buffer_binding_t,
    binding_count: usize,
    signals: *const thal_semaphore_list_t,
) -> thal_status_t {
    guard("thal_queue_execute_with_bindings", || {
        // SAFETY: the caller's contract.
        unsafe {
            let table = c_array(bindings, binding_count, "bindings")?
                .iter()
                .enumerate()
                .map(|(i, b)| buffer_binding(b, format_args!("bindings[{i}].buffer")))
                .collect::<Result<Vec<_>>>()?;
            get::<Queue>(queue, "queue")?.execute_with_bindings(
                &semaphore_list(waits, "waits")?,
                &*get::<CommandBuffer>(command_buffer, "command_buffer")?,
                &table,
                &semaphore_list(signals, "signals")?,
            )
        }
    })
}

/// Fills `length` bytes of `target` from `offset` with a `pattern_length`-byte (1, 2 or 4) pattern.
///
/// # Safety
/// Handles are ones the caller holds; lists are NULL or valid.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn thal_queue_fill(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    target: *mut thal_buffer_t,
    offset: u64,
    length: u64,
    pattern: u32,
    pattern_length: u8,
    signals: *const thal_semaphore_list_t,
) -> thal_status_t {
    guard("thal_queue_fill", || {
        // SAFETY: the caller's contract.
        unsafe {
            get::<Queue>(queue, "queue")?.fill(
                &semaphore_list(waits, "waits")?,
                &*get::<Buffer>(target, "target")?,
                offset,
                length,
                crate::command_buffer::fill_pattern(pattern, pattern_length)?,
                &semaphore_list(signals, "signals")?,
            )
        }
    })
}

/// Writes `length` bytes from the caller's `data` (copied before the call returns) into `target`
/// at `offset`.
///
/// # Safety
/// Handles are ones the caller holds; lists are NULL or valid; `data` has `length` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_update(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    data: *const c_void,
    length: usize,
    target: *mut thal_buffer_t,
    offset: u64,
    signals: *const thal_semaphore_list_t,
) -> thal_status_t {
    guard("thal_queue_update", || {
        // SAFETY: the caller's contract.
        unsafe {
            get::<Queue>(queue, "queue")?.update(
                &semaphore_list(waits, "waits")?,
                &*get::<Buffer>(target, "target")?,
                offset,
                host_bytes(data, length, "data")?,
                &semaphore_list(signals, "signals")?,
            )
        }
    })
}

/// Copies `length` bytes from `source` at `source_offset` to `target` at `target_offset`.
///
/// # Safety
/// Handles are ones the caller holds; lists are NULL or valid.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn thal_queue_copy(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    source: *mut thal_buffer_t,
    source_offset: u64,
    target: *mut thal_buffer_t,
    target_offset: u64,
    length: u64,
    signals: *const thal_semaphore_list_t,
) -> thal_status_t {
    guard("thal_queue_copy", || {
        // SAFETY: the caller's contract.
        unsafe {
            get::<Queue>(queue, "queue")?.copy(
                &semaphore_list(waits, "waits")?,
                &*get::<Buffer>(source, "source")?,
                source_offset,
                &*get::<Buffer>(target, "target")?,
                target_offset,
                length,
                &semaphore_list(signals, "signals")?,
            )
        }
    })
}

/// Reads `length` bytes of `source` from `offset` once `waits` are reached; `*out` is a readback to
/// wait on (`thal_readback_wait` copies the bytes into caller memory). If the read does not run, the
/// readback fails with the status its signals get.
///
/// # Safety
/// Handles are ones the caller holds; lists are NULL or valid; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_read(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    source: *mut thal_buffer_t,
    offset: u64,
    length: u64,
    signals: *const thal_semaphore_list_t,
    out: *mut *mut thal_readback_t,
) -> thal_status_t {
    guard("thal_queue_read", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let readback = get::<Queue>(queue, "queue")?.read(
                &semaphore_list(waits, "waits")?,
                &*get::<Buffer>(source, "source")?,
                offset,
                length,
                &semaphore_list(signals, "signals")?,
            )?;
            store(out, PendingRead { readback, length })?;
        }
        Ok(())
    })
}

/// Allocates a transient buffer of `size` bytes into `*out` (at once, as a handle) whose memory is
/// there once `waits` are reached, when `signals` fire; give it back with `thal_queue_dealloca`.
///
/// # Safety
/// `queue` is a handle the caller holds; `params` is a valid versioned struct; lists are NULL or
/// valid; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_alloca(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    params: *const thal_buffer_params_t,
    size: u64,
    signals: *const thal_semaphore_list_t,
    out: *mut *mut thal_buffer_t,
) -> thal_status_t {
    guard("thal_queue_alloca", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let buffer = get::<Queue>(queue, "queue")?.alloca(
                &semaphore_list(waits, "waits")?,
                buffer_params(params)?,
                size,
                &semaphore_list(signals, "signals")?,
            )?;
            store(out, buffer)?;
        }
        Ok(())
    })
}

/// Frees the memory of a `thal_queue_alloca` buffer once `waits` are reached (the handle stays
/// the caller's to release).
///
/// # Safety
/// Handles are ones the caller holds; lists are NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_dealloca(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    buffer: *mut thal_buffer_t,
    signals: *const thal_semaphore_list_t,
) -> thal_status_t {
    guard("thal_queue_dealloca", || {
        // SAFETY: the caller's contract.
        unsafe {
            get::<Queue>(queue, "queue")?.dealloca(
                &semaphore_list(waits, "waits")?,
                &*get::<Buffer>(buffer, "buffer")?,
                &semaphore_list(signals, "signals")?,
            )
        }
    })
}

/// Signals `signals` once `waits` are reached and the queue's earlier work completed.
///
/// # Safety
/// `queue` is a handle the caller holds; lists are NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_barrier(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    signals: *const thal_semaphore_list_t,
) -> thal_status_t {
    guard("thal_queue_barrier", || {
        // SAFETY: the caller's contract.
        unsafe {
            get::<Queue>(queue, "queue")?
                .barrier(&semaphore_list(waits, "waits")?, &semaphore_list(signals, "signals")?)
        }
    })
}

/// The caller's host call and its data.
struct HostCall {
    function: unsafe extern "C" fn(*mut c_void) -> thal_status_t,
    user_data: *mut c_void,
}

// SAFETY: the header tells the caller that a host call runs on a HAL thread with its `user_data`;
// the caller promises both may be used from there.
unsafe impl Send for HostCall {}

impl HostCall {
    fn run(self) -> Result<()> {
        // SAFETY: the caller gave this function for this data; it returns NULL or a status it gives up.
        unsafe { take_status((self.function)(self.user_data)) }
    }
}

/// Calls `function(user_data)` on a HAL thread once `waits` are reached; its returned status (if
/// not NULL) fails `signals`. With `THAL_HOST_CALL_NON_BLOCKING` in `flags` later work on the queue
/// need not wait for it. If a wait fails, the call does not run (its signals fail instead).
///
/// # Safety
/// `queue` is a handle the caller holds; lists are NULL or valid; `function` may run on another
/// thread with `user_data`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_host_call(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    function: thal_host_call_fn,
    user_data: *mut c_void,
    signals: *const thal_semaphore_list_t,
    flags: u32,
) -> thal_status_t {
    guard("thal_queue_host_call", || {
        let function = function.ok_or_else(|| Error::invalid_argument("argument 'function': a NULL host call"))?;
        let flags = HostCallFlags::from_bits(flags)
            .ok_or_else(|| Error::invalid_argument(format!("host call flags {flags:#x}: unknown bits")))?;
        let call = HostCall { function, user_data };
        // SAFETY: the caller's contract.
        unsafe {
            get::<Queue>(queue, "queue")?.host_call_with(
                &semaphore_list(waits, "waits")?,
                move || call.run(),
                flags,
                &semaphore_list(signals, "signals")?,
            )
        }
    })
}

/// Hands work submitted so far to the device without waiting for it (drivers that batch use it).
///
/// # Safety
/// `queue` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_flush(queue: *mut thal_queue_t) -> thal_status_t {
    guard("thal_queue_flush", || get::<Queue>(queue, "queue")?.flush())
}

/// Blocks until the read's bytes arrive (or `deadline_ns` passes, or the read failed: its status),
/// then copies them into `data`, which must hold exactly the read's length. The bytes are handed
/// over once.
///
/// # Safety
/// `readback` is a handle the caller holds; `data` has `length` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_readback_wait(
    readback: *mut thal_readback_t,
    deadline_ns: thal_time_t,
    data: *mut c_void,
    length: usize,
) -> thal_status_t {
    guard("thal_readback_wait", || {
        let read = get::<PendingRead>(readback, "readback")?;
        if read.length != length as u64 {
            // Refused before waiting, so the bytes stay for a call with the right length.
            return Err(Error::invalid_argument(format!(
                "{:?}: a destination of {length} bytes for a read of {} bytes",
                read.readback, read.length
            )));
        }
        if length > 0 && data.is_null() {
            return Err(Error::invalid_argument(format!("argument 'data': NULL with length {length}")));
        }
        let bytes = read.readback.wait(timeout_of(deadline_ns))?;
        if bytes.len() != length {
            return Err(Error::internal(format!("{:?}: {} bytes arrived, not {length}", read.readback, bytes.len())));
        }
        // SAFETY: `data` has `length` writable bytes by the caller's contract, and `bytes` is that long.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.cast::<u8>(), length) };
        Ok(())
    })
}

/// Adds a reference to `readback`.
///
/// # Safety
/// `readback` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_readback_retain(readback: *mut thal_readback_t) -> thal_status_t {
    guard("thal_readback_retain", || handle::retain::<PendingRead>(readback, "readback"))
}

/// Drops a reference to `readback`. NULL is allowed.
///
/// # Safety
/// `readback` is NULL or a handle the caller holds and gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_readback_release(readback: *mut thal_readback_t) -> thal_status_t {
    if readback.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_readback_release", || handle::release::<PendingRead>(readback, "readback"))
}
