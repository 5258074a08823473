//! The registry of drivers, devices and their queues.

use std::ffi::{CStr, CString, c_char};
use std::sync::OnceLock;

use hal::{Device, Error, Queue, Registry, Result};

use crate::handle::{self, check_out, get, store, thal_device_t, thal_queue_t, write_value};
use crate::status::{guard, thal_status_t};

/// The drivers this library was built with: cpu-sim, cuda with the `cuda` feature and vulkan with
/// the `vulkan` feature.
pub(crate) fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut registry = Registry::new();
        driver_cpu_sim::register(&mut registry);
        #[cfg(feature = "cuda")]
        driver_cuda::register(&mut registry);
        #[cfg(feature = "vulkan")]
        driver_vulkan::register(&mut registry);
        registry
    })
}

/// The registry's driver names as C strings, kept for the life of the process.
fn driver_names() -> &'static [CString] {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    NAMES.get_or_init(|| registry().names().iter().map(|n| crate::status::c_string(n)).collect())
}

/// A string argument: NUL-terminated UTF-8.
///
/// # Safety
/// `text` is NULL or NUL-terminated.
pub(crate) unsafe fn str_arg<'a>(text: *const c_char, arg: &str) -> Result<&'a str> {
    if text.is_null() {
        return Err(Error::invalid_argument(format!("argument '{arg}': a NULL string")));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(text) }
        .to_str()
        .map_err(|e| Error::invalid_argument(format!("argument '{arg}': not UTF-8 ({e})")))
}

/// Copies `text` and a NUL into `buffer` (`capacity` bytes, truncating), and its full length
/// (without the NUL) into `*length` when `length` is not NULL.
///
/// # Safety
/// `buffer` is NULL (with `capacity` 0) or has `capacity` writable bytes; `length` is NULL or writable.
pub(crate) unsafe fn copy_text_out(text: &str, buffer: *mut c_char, capacity: usize, length: *mut usize) {
    if !length.is_null() {
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { length.write(text.len()) };
    }
    if buffer.is_null() || capacity == 0 {
        return;
    }
    let n = text.len().min(capacity - 1);
    // SAFETY: `n + 1 <= capacity` bytes are writable by the caller's contract; the source is `text`.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buffer.cast::<u8>(), n);
        buffer.add(n).write(0);
    }
}

/// Writes the number of drivers built into this library to `*count`.
///
/// # Safety
/// `count` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_driver_count(count: *mut usize) -> thal_status_t {
    // SAFETY: the caller's contract.
    guard("thal_driver_count", || unsafe { write_value(count, "count", driver_names().len()) })
}

/// Writes driver `index`'s name ("cpu-sim", "cuda", "vulkan") to `*name`: static storage, never freed.
///
/// # Safety
/// `name` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_driver_name(index: usize, name: *mut *const c_char) -> thal_status_t {
    guard("thal_driver_name", || {
        let names = driver_names();
        let found = names.get(index).ok_or_else(|| {
            Error::out_of_range(format!("driver index {index}: this library has {} drivers", names.len()))
        })?;
        // SAFETY: the caller's contract.
        unsafe { write_value(name, "name", found.as_ptr()) }
    })
}

/// Writes how many devices driver `name` has here to `*count`, or fails with why it has none
/// (`UNAVAILABLE`: no GPU, no libcuda or Vulkan loader, or no driver of that name).
///
/// # Safety
/// `name` is NUL-terminated; `count` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_driver_device_count(name: *const c_char, count: *mut usize) -> thal_status_t {
    guard("thal_driver_device_count", || {
        // SAFETY: the caller's contract.
        let name = unsafe { str_arg(name, "name") }?;
        registry().driver(name)?;
        let listing = registry().list().into_iter().find(|l| l.name == name);
        let devices = listing.map(|l| l.devices).unwrap_or_else(|| Ok(Vec::new()))?;
        // SAFETY: the caller's contract.
        unsafe { write_value(count, "count", devices.len()) }
    })
}

/// Opens device `ordinal` of driver `driver` ("cpu-sim", "cuda", "vulkan") into `*out` (one reference).
///
/// # Safety
/// `driver` is NUL-terminated; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_create(
    driver: *const c_char,
    ordinal: usize,
    out: *mut *mut thal_device_t,
) -> thal_status_t {
    guard("thal_device_create", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let device = registry().create_device(str_arg(driver, "driver")?, ordinal)?;
            store(out, device)?;
        }
        Ok(())
    })
}

/// Opens the device at `path` ("cpu-sim:0", "cuda:1", or a driver's stable id form) into `*out`.
///
/// # Safety
/// `path` is NUL-terminated; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_create_at(path: *const c_char, out: *mut *mut thal_device_t) -> thal_status_t {
    guard("thal_device_create_at", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let device = registry().create_device_at(str_arg(path, "path")?)?;
            store(out, device)?;
        }
        Ok(())
    })
}

/// Adds a reference to `device`.
///
/// # Safety
/// `device` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_retain(device: *mut thal_device_t) -> thal_status_t {
    guard("thal_device_retain", || handle::retain::<Device>(device, "device"))
}

/// Drops a reference to `device`; the last one closes it once its queues' work is done. NULL is
/// allowed.
///
/// # Safety
/// `device` is NULL or a handle the caller holds and gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_release(device: *mut thal_device_t) -> thal_status_t {
    if device.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_device_release", || handle::release::<Device>(device, "device"))
}

/// Writes the number of queues of `device` to `*count`.
///
/// # Safety
/// `device` is a handle the caller holds; `count` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_queue_count(device: *mut thal_device_t, count: *mut usize) -> thal_status_t {
    guard("thal_device_queue_count", || {
        // SAFETY: the caller's contract.
        unsafe { write_value(count, "count", get::<Device>(device, "device")?.queue_count()) }
    })
}

/// Gives back the memory `device` keeps for reuse after the buffers that held it were released
/// (on CUDA, the pinned host memory of host-visible buffers; freeing it waits for the GPU, so call
/// it when the device is idle). Buffers still held are not touched.
///
/// # Safety
/// `device` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_trim(device: *mut thal_device_t) -> thal_status_t {
    guard("thal_device_trim", || get::<Device>(device, "device")?.trim())
}

/// Copies the device's name (NUL-terminated, truncated to `capacity`) into `buffer`, and its full
/// length into `*length` (either may be NULL).
///
/// # Safety
/// `device` is a handle the caller holds; `buffer` has `capacity` writable bytes; `length` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_name(
    device: *mut thal_device_t,
    buffer: *mut c_char,
    capacity: usize,
    length: *mut usize,
) -> thal_status_t {
    guard("thal_device_name", || {
        // SAFETY: the caller's contract.
        unsafe { copy_text_out(&get::<Device>(device, "device")?.info().name, buffer, capacity, length) };
        Ok(())
    })
}

/// Copies the device's report (every pending operation and what it waits for: the text to print when
/// work seems stuck) into `buffer` as `thal_device_name` does.
///
/// # Safety
/// As `thal_device_name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_report(
    device: *mut thal_device_t,
    buffer: *mut c_char,
    capacity: usize,
    length: *mut usize,
) -> thal_status_t {
    guard("thal_device_report", || {
        // SAFETY: the caller's contract.
        unsafe { copy_text_out(&get::<Device>(device, "device")?.report(), buffer, capacity, length) };
        Ok(())
    })
}

/// Opens queue `index` of `device` into `*out` (one reference; it keeps the device alive).
///
/// # Safety
/// `device` is a handle the caller holds; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_queue(
    device: *mut thal_device_t,
    index: usize,
    out: *mut *mut thal_queue_t,
) -> thal_status_t {
    guard("thal_device_queue", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let queue = get::<Device>(device, "device")?.queue(index)?;
            store::<Queue>(out, queue)?;
        }
        Ok(())
    })
}

/// Adds a reference to `queue`.
///
/// # Safety
/// `queue` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_retain(queue: *mut thal_queue_t) -> thal_status_t {
    guard("thal_queue_retain", || handle::retain::<Queue>(queue, "queue"))
}

/// Drops a reference to `queue`. NULL is allowed.
///
/// # Safety
/// `queue` is NULL or a handle the caller holds and gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_release(queue: *mut thal_queue_t) -> thal_status_t {
    if queue.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_queue_release", || handle::release::<Queue>(queue, "queue"))
}
