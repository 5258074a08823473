//! The device report as data: names, limits, memory types, executable kinds and the driver's
//! properties, so that a C program can print what `hal devices` prints.

use std::ffi::{CString, c_char};

use hal::{Device, DeviceInfo, Error, Result};

use crate::handle::{self, check_out, get, store, thal_device_info_t, thal_device_t, write_value};
use crate::status::{c_string, guard, thal_status_t};

/// The device's name as its driver reports it (a GPU's product name).
pub const THAL_DEVICE_INFO_NAME: u32 = 0;
/// The driver's name ("cpu-sim", "cuda", "vulkan").
pub const THAL_DEVICE_INFO_DRIVER: u32 = 1;
/// An id naming the device the same way in every process (a device path may use it).
pub const THAL_DEVICE_INFO_STABLE_ID: u32 = 2;

/// A device's numbers. Versioned: set `struct_size` to `sizeof(thal_device_limits_t)`; the library
/// fills the rest.
#[repr(C)]
pub struct thal_device_limits_t {
    /// `sizeof(thal_device_limits_t)` as the caller was compiled.
    pub struct_size: usize,
    /// Index among the driver's devices.
    pub ordinal: usize,
    /// Number of queues.
    pub queue_count: usize,
    /// Largest single allocation in bytes.
    pub max_allocation_size: u64,
    /// Longest range one dispatch binding may have, in bytes (`UINT64_MAX` where bindings are plain
    /// addresses).
    pub max_binding_length: u64,
    /// Largest workgroup (threads in x*y*z).
    pub max_workgroup_threads: u32,
    /// Largest workgroup size per axis (x, y, z).
    pub max_workgroup_size: [u32; 3],
    /// Largest workgroup count of a dispatch per axis (x, y, z).
    pub max_workgroup_count: [u32; 3],
    /// Entries for `thal_device_info_memory_type`.
    pub memory_type_count: usize,
    /// Entries for `thal_device_info_executable_kind`.
    pub executable_kind_count: usize,
    /// Entries for `thal_device_info_property`.
    pub property_count: usize,
    /// What a dispatch binding's first byte (its buffer's byte 0 plus the offsets) must be a
    /// multiple of; a binding off it is refused when recorded. 1 where bindings are plain addresses.
    pub binding_alignment: u64,
}

/// A snapshot of a device's `DeviceInfo`, with its text as C strings that live as long as it.
pub(crate) struct DeviceInfoSnapshot {
    info: DeviceInfo,
    /// Name, driver and stable id, in `THAL_DEVICE_INFO_*` order.
    texts: [CString; 3],
    executable_kinds: Vec<CString>,
    properties: Vec<(CString, CString)>,
}

impl DeviceInfoSnapshot {
    fn new(info: &DeviceInfo) -> DeviceInfoSnapshot {
        DeviceInfoSnapshot {
            texts: [c_string(&info.name), c_string(&info.driver), c_string(&info.stable_id)],
            executable_kinds: info.executable_kinds.iter().map(|k| c_string(k.name())).collect(),
            properties: info.properties.iter().map(|(k, v)| (c_string(k), c_string(v))).collect(),
            info: info.clone(),
        }
    }
}

/// The entry `index` of one of the snapshot's lists, `OUT_OF_RANGE` naming the list past its end.
fn entry<'a, T>(list: &'a [T], index: usize, what: &str) -> Result<&'a T> {
    list.get(index).ok_or_else(|| Error::out_of_range(format!("{what} index {index}: the device has {}", list.len())))
}

/// Takes a snapshot of what `device` is and offers into `*out` (one reference); the strings it
/// gives out live as long as the snapshot.
///
/// # Safety
/// `device` is a handle the caller holds; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_query_info(
    device: *mut thal_device_t,
    out: *mut *mut thal_device_info_t,
) -> thal_status_t {
    guard("thal_device_query_info", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let snapshot = DeviceInfoSnapshot::new(get::<Device>(device, "device")?.info());
            store(out, snapshot)?;
        }
        Ok(())
    })
}

/// Writes text `field` (`THAL_DEVICE_INFO_NAME`, `_DRIVER`, `_STABLE_ID`) to `*text`: NUL-terminated,
/// valid until `info` is released.
///
/// # Safety
/// `info` is a handle the caller holds; `text` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_info_text(
    info: *mut thal_device_info_t,
    field: u32,
    text: *mut *const c_char,
) -> thal_status_t {
    guard("thal_device_info_text", || {
        let info = get::<DeviceInfoSnapshot>(info, "info")?;
        let found = info.texts.get(field as usize).ok_or_else(|| {
            Error::invalid_argument(format!("argument 'field' {field}: not a THAL_DEVICE_INFO_* text"))
        })?;
        // SAFETY: the caller's contract.
        unsafe { write_value(text, "text", found.as_ptr()) }
    })
}

/// Fills `*limits` with the device's numbers and the lengths of its lists.
///
/// # Safety
/// `info` is a handle the caller holds; `limits` is a versioned struct with `struct_size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_info_limits(
    info: *mut thal_device_info_t,
    limits: *mut thal_device_limits_t,
) -> thal_status_t {
    guard("thal_device_info_limits", || {
        // SAFETY: the caller's contract.
        let (snapshot, limits) = unsafe {
            (
                get::<DeviceInfoSnapshot>(info, "info")?,
                crate::params::versioned_out(limits, "limits", "thal_device_limits_t")?,
            )
        };
        let info = &snapshot.info;
        *limits = thal_device_limits_t {
            struct_size: limits.struct_size,
            ordinal: info.ordinal,
            queue_count: info.queue_count,
            max_allocation_size: info.max_allocation_size,
            max_binding_length: info.max_binding_length,
            max_workgroup_threads: info.max_workgroup_threads,
            max_workgroup_size: info.max_workgroup_size,
            max_workgroup_count: info.max_workgroup_count,
            memory_type_count: info.memory_types.len(),
            executable_kind_count: snapshot.executable_kinds.len(),
            property_count: snapshot.properties.len(),
            binding_alignment: info.binding_alignment,
        };
        Ok(())
    })
}

/// Writes memory type `index` (most preferred first) as `THAL_MEMORY_TYPE_*` bits to `*bits`.
///
/// # Safety
/// `info` is a handle the caller holds; `bits` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_info_memory_type(
    info: *mut thal_device_info_t,
    index: usize,
    bits: *mut u32,
) -> thal_status_t {
    guard("thal_device_info_memory_type", || {
        // SAFETY: the caller's contract.
        unsafe {
            let info = get::<DeviceInfoSnapshot>(info, "info")?;
            write_value(bits, "bits", entry(&info.info.memory_types, index, "memory type")?.bits())
        }
    })
}

/// Writes the name of executable kind `index` (the driver's preferred first: "shared-library",
/// "ptx", "spirv", ...) to `*name`, valid until `info` is released.
///
/// # Safety
/// `info` is a handle the caller holds; `name` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_info_executable_kind(
    info: *mut thal_device_info_t,
    index: usize,
    name: *mut *const c_char,
) -> thal_status_t {
    guard("thal_device_info_executable_kind", || {
        // SAFETY: the caller's contract.
        unsafe {
            let info = get::<DeviceInfoSnapshot>(info, "info")?;
            write_value(name, "name", entry(&info.executable_kinds, index, "executable kind")?.as_ptr())
        }
    })
}

/// Writes driver property `index`'s name and value (compute capability, memory size, ...) to `*key`
/// and `*value`, valid until `info` is released.
///
/// # Safety
/// `info` is a handle the caller holds; `key` and `value` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_info_property(
    info: *mut thal_device_info_t,
    index: usize,
    key: *mut *const c_char,
    value: *mut *const c_char,
) -> thal_status_t {
    guard("thal_device_info_property", || {
        // SAFETY: the caller's contract.
        unsafe {
            let info = get::<DeviceInfoSnapshot>(info, "info")?;
            let (k, v) = entry(&info.properties, index, "property")?;
            write_value(key, "key", k.as_ptr())?;
            write_value(value, "value", v.as_ptr())
        }
    })
}

/// Adds a reference to `info`.
///
/// # Safety
/// `info` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_info_retain(info: *mut thal_device_info_t) -> thal_status_t {
    guard("thal_device_info_retain", || handle::retain::<DeviceInfoSnapshot>(info, "info"))
}

/// Drops a reference to `info`; the last one frees its strings. NULL is allowed.
///
/// # Safety
/// `info` is NULL or a handle the caller holds and gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_info_release(info: *mut thal_device_info_t) -> thal_status_t {
    if info.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_device_info_release", || handle::release::<DeviceInfoSnapshot>(info, "info"))
}
