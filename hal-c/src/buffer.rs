//! Buffers: allocation, imported host memory, subspans and host reads and writes.

use std::ffi::c_void;
use std::ptr::NonNull;

use hal::{Buffer, BufferParams, BufferUsage, Device, Error, MemoryType, Result};

use crate::handle::{self, check_out, get, store, thal_buffer_t, thal_device_t, write_value};
use crate::status::{guard, thal_status_t};

/// Fast for the device.
pub const THAL_MEMORY_TYPE_DEVICE_LOCAL: u32 = 1 << 0;
/// The host can map, read and write it.
pub const THAL_MEMORY_TYPE_HOST_VISIBLE: u32 = 1 << 1;
/// Host and device see each other's writes without a flush.
pub const THAL_MEMORY_TYPE_HOST_COHERENT: u32 = 1 << 2;
/// Host reads are cached.
pub const THAL_MEMORY_TYPE_HOST_CACHED: u32 = 1 << 3;

/// Source of copies and reads.
pub const THAL_BUFFER_USAGE_TRANSFER_SOURCE: u32 = 1 << 0;
/// Target of fills, updates, copies and writes.
pub const THAL_BUFFER_USAGE_TRANSFER_TARGET: u32 = 1 << 1;
/// Bound to dispatches.
pub const THAL_BUFFER_USAGE_DISPATCH_STORAGE: u32 = 1 << 2;
/// Read and written by the host (`thal_buffer_read`/`thal_buffer_write`; needs HOST_VISIBLE).
pub const THAL_BUFFER_USAGE_MAPPING: u32 = 1 << 3;

/// How to allocate or import a buffer. Versioned: set `struct_size` to `sizeof(thal_buffer_params_t)`.
#[repr(C)]
pub struct thal_buffer_params_t {
    /// `sizeof(thal_buffer_params_t)` as the caller was compiled.
    pub struct_size: usize,
    /// `THAL_MEMORY_TYPE_*` bits the memory must have.
    pub memory_type: u32,
    /// `THAL_BUFFER_USAGE_*` bits.
    pub usage: u32,
}

/// Called once with its `user_data` when the device no longer uses imported memory.
pub type thal_release_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// Checks the caller's params struct and converts it.
///
/// # Safety
/// `params` is NULL or points to `struct_size` readable bytes.
pub(crate) unsafe fn buffer_params(params: *const thal_buffer_params_t) -> Result<BufferParams> {
    // SAFETY: the caller's contract.
    let params = unsafe { crate::params::versioned(params, "params", "thal_buffer_params_t") }?;
    let memory_type = MemoryType::from_bits(params.memory_type).ok_or_else(|| {
        Error::invalid_argument(format!("params.memory_type {:#x}: unknown bits", params.memory_type))
    })?;
    let usage = BufferUsage::from_bits(params.usage)
        .ok_or_else(|| Error::invalid_argument(format!("params.usage {:#x}: unknown bits", params.usage)))?;
    Ok(BufferParams::new(memory_type, usage))
}

/// Allocates `size` bytes on `device` into `*out`.
///
/// # Safety
/// `device` is a handle the caller holds; `params` is a valid versioned struct; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_buffer_allocate(
    device: *mut thal_device_t,
    params: *const thal_buffer_params_t,
    size: u64,
    out: *mut *mut thal_buffer_t,
) -> thal_status_t {
    guard("thal_buffer_allocate", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let buffer = get::<Device>(device, "device")?.allocate_buffer(buffer_params(params)?, size)?;
            store(out, buffer)?;
        }
        Ok(())
    })
}

/// The caller's release callback and its data, run once when the HAL lets the memory go.
struct Release {
    function: thal_release_fn,
    user_data: *mut c_void,
}

// SAFETY: the header tells the caller that the release callback runs on a HAL thread, with its
// `user_data`; the caller promises both may be used from there.
unsafe impl Send for Release {}

impl Release {
    fn run(self) {
        if let Some(function) = self.function {
            // SAFETY: the caller gave this callback for this data, to be called once.
            unsafe { function(self.user_data) };
        }
    }
}

/// Lends `length` bytes at `ptr` (host memory the caller owns) to `device` as a buffer in `*out`;
/// `release(user_data)` runs exactly once, on any thread, when the last handle is released and the
/// last queue operation using the memory has retired, or at once if the import is refused.
/// `release` may be NULL.
///
/// # Safety
/// `ptr` has `length` bytes, readable and writable, valid and untouched by the caller except
/// through the HAL until `release` runs; `device` is a handle the caller holds; `params` is a valid
/// versioned struct; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_buffer_import_host_memory(
    device: *mut thal_device_t,
    params: *const thal_buffer_params_t,
    ptr: *mut c_void,
    length: u64,
    release: thal_release_fn,
    user_data: *mut c_void,
    out: *mut *mut thal_buffer_t,
) -> thal_status_t {
    let release = Release { function: release, user_data };
    guard("thal_buffer_import_host_memory", move || {
        // SAFETY: the caller's contract; checks that fail before the import run the release.
        unsafe {
            let checked = (|| {
                check_out(out, "out")?;
                let device = get::<Device>(device, "device")?;
                let params = buffer_params(params)?;
                let ptr = NonNull::new(ptr.cast::<u8>())
                    .ok_or_else(|| Error::invalid_argument("argument 'ptr': NULL memory to import"))?;
                Ok((device, params, ptr))
            })();
            let (device, params, ptr) = match checked {
                Ok(checked) => checked,
                Err(error) => {
                    release.run();
                    return Err(error);
                }
            };
            let buffer = device.import_host_memory(ptr, length, params, move || release.run())?;
            store(out, buffer)?;
        }
        Ok(())
    })
}

/// A buffer over `length` bytes of `buffer` from `offset` into `*out` (it keeps `buffer` alive).
///
/// # Safety
/// `buffer` is a handle the caller holds; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_buffer_subspan(
    buffer: *mut thal_buffer_t,
    offset: u64,
    length: u64,
    out: *mut *mut thal_buffer_t,
) -> thal_status_t {
    guard("thal_buffer_subspan", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let span = get::<Buffer>(buffer, "buffer")?.subspan(offset, length)?;
            store(out, span)?;
        }
        Ok(())
    })
}

/// Writes the size of `buffer` in bytes to `*size`.
///
/// # Safety
/// `buffer` is a handle the caller holds; `size` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_buffer_size(buffer: *mut thal_buffer_t, size: *mut u64) -> thal_status_t {
    // SAFETY: the caller's contract.
    guard("thal_buffer_size", || unsafe { write_value(size, "size", get::<Buffer>(buffer, "buffer")?.size()) })
}

/// The host's bytes `[data, data + length)` as a slice (an empty one for length 0, NULL allowed then).
///
/// # Safety
/// `data` has `length` readable bytes when `length > 0`.
pub(crate) unsafe fn host_bytes<'a>(data: *const c_void, length: usize, arg: &str) -> Result<&'a [u8]> {
    if length == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(Error::invalid_argument(format!("argument '{arg}': NULL with length {length}")));
    }
    // SAFETY: non-NULL with `length` readable bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), length) })
}

/// Copies `length` bytes from `data` into a host-visible `buffer` at `offset`, from the calling
/// thread (order it after device work with a semaphore wait first).
///
/// # Safety
/// `buffer` is a handle the caller holds; `data` has `length` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_buffer_write(
    buffer: *mut thal_buffer_t,
    offset: u64,
    data: *const c_void,
    length: usize,
) -> thal_status_t {
    guard("thal_buffer_write", || {
        // SAFETY: the caller's contract.
        unsafe { get::<Buffer>(buffer, "buffer")?.write(offset, host_bytes(data, length, "data")?) }
    })
}

/// Copies `length` bytes of a host-visible `buffer` from `offset` into the caller's `data`.
///
/// # Safety
/// `buffer` is a handle the caller holds; `data` has `length` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_buffer_read(
    buffer: *mut thal_buffer_t,
    offset: u64,
    data: *mut c_void,
    length: usize,
) -> thal_status_t {
    guard("thal_buffer_read", || {
        // SAFETY: the caller's contract.
        unsafe {
            let buffer = get::<Buffer>(buffer, "buffer")?;
            if length == 0 {
                return buffer.read(offset, &mut []);
            }
            if data.is_null() {
                return Err(Error::invalid_argument(format!("argument 'data': NULL with length {length}")));
            }
            buffer.read(offset, std::slice::from_raw_parts_mut(data.cast::<u8>(), length))
        }
    })
}

/// Adds a reference to `buffer`.
///
/// # Safety
/// `buffer` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_buffer_retain(buffer: *mut thal_buffer_t) -> thal_status_t {
    guard("thal_buffer_retain", || handle::retain::<Buffer>(buffer, "buffer"))
}

/// Drops a reference to `buffer`; its memory goes once queued work using it retired. NULL is allowed.
///
/// # Safety
/// `buffer` is NULL or a handle the caller holds and gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_buffer_release(buffer: *mut thal_buffer_t) -> thal_status_t {
    if buffer.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_buffer_release", || handle::release::<Buffer>(buffer, "buffer"))
}
