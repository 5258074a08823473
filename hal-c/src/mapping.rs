//! Host mappings of buffers: a pointer to a buffer's bytes that stays valid until the mapping is
//! unmapped.

use std::ffi::c_void;

use hal::{Buffer, Mapping};

use crate::handle::{self, check_out, get, store, thal_buffer_t, thal_mapping_t, write_value};
use crate::status::{guard, thal_status_t};

/// A mapped range and the buffer it maps, kept together behind one handle.
pub(crate) struct HostMapping {
    /// Declared first so that it drops before the buffer it borrows.
    mapping: Mapping<'static>,
    /// Boxed so that its address, which `mapping` borrows, never moves.
    _buffer: Box<Buffer>,
    /// The first mapped byte.
    data: *mut u8,
}

// SAFETY: `Mapping` holds a raw pointer into memory that the buffer's driver lets any thread access
// (cpu-sim's and the GPUs' host-visible memory); the HAL shares `Buffer` across threads, and the
// pointer is only handed to C, whose threading rules the header states.
unsafe impl Send for HostMapping {}
// SAFETY: as for `Send`; the Rust side only reads `data` after creation.
unsafe impl Sync for HostMapping {}

impl HostMapping {
    fn new(buffer: &Buffer, offset: u64, length: u64) -> hal::Result<HostMapping> {
        let buffer = Box::new(buffer.clone());
        // SAFETY: the box gives the buffer a fixed address for as long as `HostMapping` lives, and
        // `mapping` is declared before `_buffer`, so it drops first: the borrow never outlives the
        // buffer although its lifetime is written `'static`.
        let borrowed: &'static Buffer = unsafe { &*(&*buffer as *const Buffer) };
        let mut mapping = borrowed.map(offset, length)?;
        // SAFETY: the slice lives only for this line, to take its address; the header makes the
        // caller order queue work on the range against its own accesses through the pointer.
        let data = unsafe { mapping.as_mut_slice() }.as_mut_ptr();
        Ok(HostMapping { mapping, _buffer: buffer, data })
    }
}

/// Maps `length` bytes of `buffer` from `offset` for the host: `*data` points to them until
/// `thal_buffer_unmap(*out)`. The buffer needs `THAL_MEMORY_TYPE_HOST_VISIBLE` memory and
/// `THAL_BUFFER_USAGE_MAPPING` (`PERMISSION_DENIED` otherwise, naming the buffer and what it
/// lacks); a transient buffer without memory now is `FAILED_PRECONDITION`; a range past the end
/// `OUT_OF_RANGE`. The mapping keeps the buffer and its memory alive. Plain loads and stores through
/// `*data` must be ordered against queue work on the same range by the caller (wait on the
/// semaphore the work signals before touching the bytes, and submit work after the stores).
///
/// # Safety
/// `buffer` is a handle the caller holds; `data` and `out` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_buffer_map(
    buffer: *mut thal_buffer_t,
    offset: u64,
    length: u64,
    data: *mut *mut c_void,
    out: *mut *mut thal_mapping_t,
) -> thal_status_t {
    guard("thal_buffer_map", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            check_out(data, "data")?;
            let mapping = HostMapping::new(&*get::<Buffer>(buffer, "buffer")?, offset, length)?;
            data.write(mapping.data.cast());
            store(out, mapping)?;
        }
        Ok(())
    })
}

/// Writes the length of `mapping`'s range in bytes to `*length`.
///
/// # Safety
/// `mapping` is a mapping the caller has not unmapped; `length` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_mapping_length(mapping: *mut thal_mapping_t, length: *mut usize) -> thal_status_t {
    guard("thal_mapping_length", || {
        // SAFETY: the caller's contract.
        unsafe { write_value(length, "length", get::<HostMapping>(mapping, "mapping")?.mapping.len()) }
    })
}

/// Ends `mapping`: its pointer is invalid from here on, and the buffer and memory it kept alive may
/// go. NULL is allowed.
///
/// # Safety
/// `mapping` is NULL or a mapping the caller has not unmapped; it gives it up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_buffer_unmap(mapping: *mut thal_mapping_t) -> thal_status_t {
    if mapping.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_buffer_unmap", || handle::release::<HostMapping>(mapping, "mapping"))
}
