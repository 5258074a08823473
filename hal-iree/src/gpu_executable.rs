//! IREE's view of an executable whose exports run as HAL executables (IREE's CUDA and Vulkan
//! formats, see `cuda_executable` and `vulkan_executable`): names, counts and workgroup sizes for
//! IREE's queries, the HAL executables and entry points for dispatches.

use std::sync::Arc;

use crate::executable::LoadedExport;
use crate::ffi::{self, code, iree_status_t, sys};

/// An IREE executable loaded as HAL executables: IREE's view (names, counts, workgroup sizes) and
/// the HAL executables that run it.
#[repr(C)]
pub(crate) struct GpuExecutable {
    resource: sys::iree_hal_resource_t,
    names: Vec<String>,
    pub(crate) exports: Arc<[LoadedExport]>,
}

static VTABLE: sys::iree_hal_executable_vtable_t = sys::iree_hal_executable_vtable_t {
    destroy: Some(destroy),
    function_count: Some(function_count),
    function_info: Some(function_info),
    function_parameters: Some(function_parameters),
    lookup_function_by_name: Some(lookup_function_by_name),
    lookup_global_by_name: Some(lookup_global_by_name),
};

/// The IREE executable of `exports`, looked up by `names` (one per export, in order).
pub(crate) fn create(names: Vec<String>, exports: Vec<LoadedExport>) -> *mut sys::iree_hal_executable_t {
    let executable = Box::into_raw(Box::new(GpuExecutable {
        resource: sys::iree_hal_resource_t::default(),
        names,
        exports: exports.into(),
    }));
    // SAFETY: a fresh allocation; this sets its reference count and vtable.
    unsafe { ffi::thal_iree_resource_initialize((&raw const VTABLE).cast(), &raw mut (*executable).resource) };
    executable.cast()
}

/// This module's executable behind `executable`, if it is one.
///
/// # Safety
/// `executable` is a live IREE executable.
pub(crate) unsafe fn downcast<'a>(executable: *mut sys::iree_hal_executable_t) -> Option<&'a GpuExecutable> {
    // SAFETY: every IREE executable starts with its resource header.
    let vtable = unsafe { (*executable.cast::<sys::iree_hal_resource_t>()).vtable };
    // SAFETY: the vtable is ours, so the executable is a `GpuExecutable`.
    (vtable == (&raw const VTABLE).cast()).then(|| unsafe { &*executable.cast::<GpuExecutable>() })
}

/// # Safety
/// IREE calls the vtable with a live executable `create` made.
unsafe fn cast<'a>(executable: *mut sys::iree_hal_executable_t) -> &'a GpuExecutable {
    // SAFETY: the caller's contract.
    unsafe { &*executable.cast::<GpuExecutable>() }
}

unsafe extern "C" fn destroy(executable: *mut sys::iree_hal_executable_t) {
    // SAFETY: IREE calls this once, with the last reference.
    drop(unsafe { Box::from_raw(executable.cast::<GpuExecutable>()) });
}

unsafe extern "C" fn function_count(executable: *mut sys::iree_hal_executable_t) -> sys::iree_host_size_t {
    // SAFETY: a live executable of ours.
    unsafe { cast(executable) }.exports.len()
}

unsafe extern "C" fn function_info(
    executable: *mut sys::iree_hal_executable_t,
    function: sys::iree_hal_executable_function_t,
    out: *mut sys::iree_hal_executable_function_info_t,
) -> iree_status_t {
    // SAFETY: a live executable of ours.
    let executable = unsafe { cast(executable) };
    let Some(export) = executable.exports.get(function.value as usize) else {
        return ffi::status(
            code::OUT_OF_RANGE,
            &format!("function {} of an executable with {}", function.value, executable.exports.len()),
        );
    };
    let info = sys::iree_hal_executable_function_info_t {
        // The name lives as long as the executable, as IREE expects.
        name: ffi::view(&executable.names[function.value as usize]),
        constant_count: export.constant_count as u16,
        binding_count: export.binding_count as u16,
        workgroup_size: export.workgroup_size,
        ..Default::default()
    };
    // SAFETY: writable, per IREE's contract.
    unsafe { *out = info };
    ffi::ok()
}

unsafe extern "C" fn function_parameters(
    _executable: *mut sys::iree_hal_executable_t,
    _function: sys::iree_hal_executable_function_t,
    _capacity: sys::iree_host_size_t,
    _out: *mut sys::iree_hal_executable_function_parameter_t,
) -> iree_status_t {
    // IREE's own CUDA driver does not reflect parameters either (its format carries no metadata).
    ffi::unimplemented("parameter reflection of GPU executables (their formats carry no parameter metadata)")
}

unsafe extern "C" fn lookup_function_by_name(
    executable: *mut sys::iree_hal_executable_t,
    name: sys::iree_string_view_t,
    out: *mut sys::iree_hal_executable_function_t,
) -> iree_status_t {
    // SAFETY: a live executable of ours and a valid view.
    let (executable, name) = unsafe { (cast(executable), ffi::text(name)) };
    match executable.names.iter().position(|n| *n == name) {
        Some(index) => {
            // SAFETY: writable, per IREE's contract.
            unsafe { *out = sys::iree_hal_executable_function_t { value: index as u64 } };
            ffi::ok()
        }
        None => ffi::status(code::NOT_FOUND, &format!("function '{name}' not found in the executable")),
    }
}

unsafe extern "C" fn lookup_global_by_name(
    _executable: *mut sys::iree_hal_executable_t,
    _name: sys::iree_string_view_t,
    _affinity: sys::iree_hal_queue_affinity_t,
    _out: *mut *mut sys::iree_hal_buffer_t,
) -> iree_status_t {
    ffi::unimplemented("executable globals are not bridged (the HAL has no API for a module's global variables)")
}
