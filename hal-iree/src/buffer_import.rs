//! IREE buffers as HAL buffers, for queue operations.
//!
//! A buffer of this driver's allocator (`buffer`) is a HAL buffer already: the operation uses it as
//! it is. Any other IREE buffer the host can map (a heap buffer wrapped by the application, say) is
//! imported: the host memory of its allocation becomes a HAL buffer of the device for the life of
//! the operation; the import keeps a reference to the IREE buffer and its mapping, released when the
//! HAL is done with it.

use std::ptr::NonNull;

use crate::ffi::{self, sys};

/// An IREE buffer range, imported: the HAL buffer and where the range starts in it.
pub(crate) struct Imported {
    pub buffer: hal::Buffer,
    pub offset: u64,
    pub length: u64,
}

/// A retained IREE buffer and its persistent mapping, given back when dropped.
struct Held {
    buffer: *mut sys::iree_hal_buffer_t,
    mapping: sys::iree_hal_buffer_mapping_t,
}
// SAFETY: IREE buffers are reference counted and thread-safe; the mapping of a heap buffer is a
// plain pointer range that stays valid while the buffer lives.
unsafe impl Send for Held {}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: `mapping` was made by `iree_hal_buffer_map_range` and `buffer` retained by `import`.
        unsafe {
            let _ = ffi::into_result(sys::iree_hal_buffer_unmap_range(&mut self.mapping));
            sys::iree_hal_buffer_release(self.buffer);
        }
    }
}

/// `length` bytes of `buffer` from `offset` (`u64::MAX`: to the end), imported into `device`'s HAL
/// device. `None` for an empty range (nothing to touch).
///
/// # Safety
/// `buffer` is a live IREE buffer the caller holds for the call.
pub(crate) unsafe fn import(
    device: &crate::device::Device,
    buffer: *mut sys::iree_hal_buffer_t,
    offset: u64,
    length: u64,
) -> Result<Option<Imported>, hal::Error> {
    if buffer.is_null() {
        return Err(hal::Error::invalid_argument(
            "a NULL buffer reference (a binding-table slot that was not resolved)",
        ));
    }
    // SAFETY: the caller's contract; these read fields of a live buffer.
    let (allocated, base_offset, byte_length) = unsafe {
        (
            sys::iree_hal_buffer_allocated_buffer(buffer),
            sys::iree_hal_buffer_byte_offset(buffer) as u64,
            sys::iree_hal_buffer_byte_length(buffer) as u64,
        )
    };
    if offset > byte_length {
        return Err(hal::Error::out_of_range(format!("offset {offset} in a buffer of {byte_length} bytes")));
    }
    let length = if length == u64::MAX { byte_length - offset } else { length };
    if length > byte_length - offset {
        return Err(hal::Error::out_of_range(format!(
            "{length} bytes at offset {offset} in a buffer of {byte_length} bytes"
        )));
    }
    if length == 0 {
        return Ok(None);
    }
    // SAFETY: `allocated` lives as long as `buffer`.
    if let Some(ours) = unsafe { crate::buffer::cast(allocated) } {
        let hal = ours.for_queue(device.hal())?;
        return Ok(Some(Imported { buffer: hal, offset: base_offset + offset, length }));
    }
    // SAFETY: `allocated` lives as long as `buffer`.
    let allocation_size = unsafe { sys::iree_hal_buffer_allocation_size(allocated) };
    let mut mapping = sys::iree_hal_buffer_mapping_t::default();
    // SAFETY: `mapping` is writable; heap buffers map persistently.
    ffi::into_result(unsafe {
        sys::iree_hal_buffer_map_range(
            allocated,
            sys::iree_hal_mapping_mode_bits_t_IREE_HAL_MAPPING_MODE_PERSISTENT,
            sys::iree_hal_memory_access_bits_t_IREE_HAL_MEMORY_ACCESS_ANY as u16,
            0,
            allocation_size,
            &mut mapping,
        )
    })
    .map_err(|e| e.context("mapping an IREE buffer for the device"))?;
    // SAFETY: the retain is given back by `Held`'s drop.
    unsafe { sys::iree_hal_buffer_retain(allocated) };
    let held = Held { buffer: allocated, mapping };
    let Some(ptr) = NonNull::new(held.mapping.contents.data) else {
        return Err(hal::Error::internal("an IREE buffer mapped to a NULL address"));
    };
    let mapped = held.mapping.contents.data_length as u64;
    // SAFETY: `ptr..ptr + mapped` is the allocation's host memory, valid until `held` (moved into
    // the release, run when the HAL lets go of the import) unmaps and releases it. Device work on
    // it is ordered by IREE's semaphores, as for any buffer IREE hands to a device.
    let imported =
        unsafe { device.hal().import_host_memory(ptr, mapped, hal::BufferParams::host_visible(), move || drop(held)) }?;
    Ok(Some(Imported { buffer: imported, offset: base_offset + offset, length }))
}
