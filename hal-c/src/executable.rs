//! Executables: a cpu-sim kernel library (the native kernel ABI) or driver-format bytes (PTX, cubin,
//! fatbin for CUDA; SPIR-V for Vulkan).

use std::ffi::{c_char, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use hal::{Device, EntryPointInfo, Error, Executable, ExecutableFormat, ExecutableSource, Result};

use crate::buffer::host_bytes;
use crate::device::str_arg;
use crate::handle::{self, check_out, get, store, thal_device_t, thal_executable_t, write_value};
use crate::queue::c_array;
use crate::status::{guard, thal_status_t};

/// NVIDIA PTX text.
pub const THAL_EXECUTABLE_FORMAT_PTX: u32 = 0;
/// A CUDA cubin.
pub const THAL_EXECUTABLE_FORMAT_CUBIN: u32 = 1;
/// A CUDA fatbin.
pub const THAL_EXECUTABLE_FORMAT_FATBIN: u32 = 2;
/// A SPIR-V module (Vulkan): little-endian 32-bit words, binding `i` at descriptor set 0 binding
/// `i`, the constants one push-constant block of 32-bit words.
pub const THAL_EXECUTABLE_FORMAT_SPIRV: u32 = 3;

/// One entry point of driver-format bytes: its name and ABI (one pointer per binding, then each
/// 32-bit constant).
#[repr(C)]
pub struct thal_entry_point_t {
    /// NUL-terminated name of the kernel in the bytes.
    pub name: *const c_char,
    /// Threads per workgroup in x, y, z.
    pub workgroup_size: [u32; 3],
    /// Buffer bindings a dispatch passes.
    pub binding_count: u32,
    /// 32-bit constants a dispatch passes.
    pub constant_count: u32,
}

/// Driver-format bytes to load. Versioned: set `struct_size` to `sizeof(thal_executable_params_t)`.
#[repr(C)]
pub struct thal_executable_params_t {
    /// `sizeof(thal_executable_params_t)` as the caller was compiled.
    pub struct_size: usize,
    /// `THAL_EXECUTABLE_FORMAT_*`.
    pub format: u32,
    /// The bytes (copied during the call).
    pub data: *const c_void,
    /// Their length.
    pub data_length: usize,
    /// The entry points, in the ordinal order dispatches use.
    pub entry_points: *const thal_entry_point_t,
    /// Their number.
    pub entry_point_count: usize,
}

/// Loads the cpu-sim kernel library at `path` (exporting `hal_cpu_sim_kernel_table`) into `*out`.
/// A library that cannot be opened is `UNAVAILABLE`, one without the table `NOT_FOUND`; both name
/// the path and the loader's reason.
///
/// # Safety
/// `device` is a handle the caller holds; `path` is NUL-terminated; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_executable_load_library(
    device: *mut thal_device_t,
    path: *const c_char,
    out: *mut *mut thal_executable_t,
) -> thal_status_t {
    guard("thal_executable_load_library", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let source = ExecutableSource::SharedLibrary(PathBuf::from(str_arg(path, "path")?));
            let executable = get::<Device>(device, "device")?.load_executable(&source)?;
            store(out, executable)?;
        }
        Ok(())
    })
}

/// The HAL source for the caller's bytes.
///
/// # Safety
/// `params` is a valid versioned struct whose pointers hold their counts.
unsafe fn bytes_source(params: *const thal_executable_params_t) -> Result<ExecutableSource> {
    // SAFETY: the caller's contract.
    let params = unsafe { crate::params::versioned(params, "params", "thal_executable_params_t") }?;
    let format = match params.format {
        THAL_EXECUTABLE_FORMAT_PTX => ExecutableFormat::Ptx,
        THAL_EXECUTABLE_FORMAT_CUBIN => ExecutableFormat::Cubin,
        THAL_EXECUTABLE_FORMAT_FATBIN => ExecutableFormat::Fatbin,
        THAL_EXECUTABLE_FORMAT_SPIRV => ExecutableFormat::Spirv,
        other => return Err(Error::invalid_argument(format!("params.format {other}: not a THAL_EXECUTABLE_FORMAT"))),
    };
    // SAFETY: the caller's contract.
    let (data, entries) = unsafe {
        (
            host_bytes(params.data, params.data_length, "params.data")?,
            c_array(params.entry_points, params.entry_point_count, "params.entry_points")?,
        )
    };
    let entry_points = entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            // SAFETY: the caller's contract.
            let name = unsafe { str_arg(e.name, &format!("params.entry_points[{i}].name")) }?;
            Ok(EntryPointInfo::new(name, e.workgroup_size[0], e.binding_count as usize, e.constant_count as usize)
                .with_workgroup_size(e.workgroup_size))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ExecutableSource::Bytes { format, data: Arc::from(data), entry_points })
}

/// Loads driver-format bytes (PTX, cubin, fatbin: CUDA; SPIR-V: Vulkan) into `*out`; a driver that does not load the
/// format says so (`UNIMPLEMENTED` or `INVALID_ARGUMENT`, naming it).
///
/// # Safety
/// `device` is a handle the caller holds; `params` is a valid versioned struct; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_executable_load_bytes(
    device: *mut thal_device_t,
    params: *const thal_executable_params_t,
    out: *mut *mut thal_executable_t,
) -> thal_status_t {
    guard("thal_executable_load_bytes", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let source = bytes_source(params)?;
            let executable = get::<Device>(device, "device")?.load_executable(&source)?;
            store(out, executable)?;
        }
        Ok(())
    })
}

/// Writes the ordinal of the entry point named `name` to `*ordinal` (`NOT_FOUND` if none).
///
/// # Safety
/// `executable` is a handle the caller holds; `name` is NUL-terminated; `ordinal` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_executable_entry_point(
    executable: *mut thal_executable_t,
    name: *const c_char,
    ordinal: *mut u32,
) -> thal_status_t {
    guard("thal_executable_entry_point", || {
        // SAFETY: the caller's contract.
        unsafe {
            let found = get::<Executable>(executable, "executable")?.entry_point(str_arg(name, "name")?)?;
            write_value(ordinal, "ordinal", found)
        }
    })
}

/// Adds a reference to `executable`.
///
/// # Safety
/// `executable` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_executable_retain(executable: *mut thal_executable_t) -> thal_status_t {
    guard("thal_executable_retain", || handle::retain::<Executable>(executable, "executable"))
}

/// Drops a reference to `executable` (recorded dispatches keep it loaded). NULL is allowed.
///
/// # Safety
/// `executable` is NULL or a handle the caller holds and gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_executable_release(executable: *mut thal_executable_t) -> thal_status_t {
    if executable.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_executable_release", || handle::release::<Executable>(executable, "executable"))
}
