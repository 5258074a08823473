//! The IREE side of the bridge: the bindings, the shim's functions, and status conversion.

use std::ffi::{c_char, c_void};

pub(crate) use eerie_sys::runtime as sys;
pub(crate) use sys::iree_status_t;

/// What one IREE CPU export asks of a dispatch (see `src/c/shim.c`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ExportInfo {
    pub constant_count: u32,
    pub binding_count: u32,
    pub local_memory_bytes: u32,
}

/// One workgroup's state for an IREE CPU executable (see `src/c/shim.c`).
#[repr(C)]
pub(crate) struct Workgroup {
    pub workgroup_size: [u32; 3],
    pub workgroup_count: [u32; 3],
    pub workgroup_id: [u32; 3],
    pub constants: *const u32,
    pub constant_count: u32,
    pub binding_ptrs: *const *mut c_void,
    pub binding_lengths: *const usize,
    pub binding_count: u32,
    pub local_memory: *mut c_void,
    pub local_memory_size: u32,
    pub max_concurrency: u32,
    pub worker_id: u32,
}

unsafe extern "C" {
    pub(crate) fn thal_iree_resource_initialize(vtable: *const c_void, resource: *mut sys::iree_hal_resource_t);
    pub(crate) fn thal_iree_make_status(
        code: sys::iree_status_code_t,
        message: *const c_char,
        length: usize,
    ) -> iree_status_t;
    pub(crate) fn thal_iree_async_semaphore_layout(
        base: usize,
        frontier_offset: *mut usize,
        total: *mut usize,
    ) -> iree_status_t;
    pub(crate) fn thal_iree_failure_value(status: iree_status_t) -> u64;
    pub(crate) fn thal_iree_semaphore_failure(semaphore: *mut sys::iree_async_semaphore_t) -> iree_status_t;
    pub(crate) fn thal_iree_export_info(
        executable: *mut sys::iree_hal_executable_t,
        ordinal: u32,
        out: *mut ExportInfo,
    ) -> iree_status_t;
    pub(crate) fn thal_iree_export_count(executable: *mut sys::iree_hal_executable_t) -> u32;
    pub(crate) fn thal_iree_run_workgroup(
        executable: *mut sys::iree_hal_executable_t,
        ordinal: u32,
        workgroup: *const Workgroup,
    ) -> iree_status_t;
    pub(crate) fn thal_iree_status_code(status: iree_status_t) -> sys::iree_status_code_t;
    pub(crate) fn thal_iree_status_consume(status: iree_status_t, buffer: *mut c_char, capacity: usize);
    pub(crate) fn thal_iree_status_clone(status: iree_status_t) -> iree_status_t;
    pub(crate) fn thal_iree_system_allocator() -> sys::iree_allocator_t;
    pub(crate) fn thal_iree_file_from_handle(
        device_allocator: *mut sys::iree_hal_allocator_t,
        affinity: sys::iree_hal_queue_affinity_t,
        access: sys::iree_hal_memory_access_t,
        handle: *mut sys::iree_io_file_handle_t,
        proactor: *mut sys::iree_async_proactor_t,
        host_allocator: sys::iree_allocator_t,
        out_file: *mut *mut sys::iree_hal_file_t,
    ) -> iree_status_t;
    pub(crate) fn thal_iree_block_pool_create(host_allocator: sys::iree_allocator_t) -> *mut c_void;
    pub(crate) fn thal_iree_block_pool_destroy(pool: *mut c_void, host_allocator: sys::iree_allocator_t);

    // Exported by IREE's runtime but outside the headers eerie-sys binds.
    pub(crate) fn iree_hal_deferred_command_buffer_create(
        device_allocator: *mut sys::iree_hal_allocator_t,
        mode: sys::iree_hal_command_buffer_mode_t,
        command_categories: sys::iree_hal_command_category_t,
        queue_affinity: sys::iree_hal_queue_affinity_t,
        binding_capacity: usize,
        block_pool: *mut c_void,
        host_allocator: sys::iree_allocator_t,
        out_command_buffer: *mut *mut sys::iree_hal_command_buffer_t,
    ) -> iree_status_t;
    pub(crate) fn iree_hal_deferred_command_buffer_apply(
        command_buffer: *mut sys::iree_hal_command_buffer_t,
        target_command_buffer: *mut sys::iree_hal_command_buffer_t,
        binding_table: sys::iree_hal_buffer_binding_table_t,
    ) -> iree_status_t;
    pub(crate) fn iree_hal_deferred_command_buffer_isa(command_buffer: *mut sys::iree_hal_command_buffer_t) -> bool;
}

/// IREE's status codes (`iree_status_code_t`).
pub(crate) mod code {
    pub const CANCELLED: u32 = 1;
    pub const INVALID_ARGUMENT: u32 = 3;
    pub const DEADLINE_EXCEEDED: u32 = 4;
    pub const NOT_FOUND: u32 = 5;
    pub const PERMISSION_DENIED: u32 = 7;
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    pub const FAILED_PRECONDITION: u32 = 9;
    pub const ABORTED: u32 = 10;
    pub const OUT_OF_RANGE: u32 = 11;
    pub const UNIMPLEMENTED: u32 = 12;
    pub const INTERNAL: u32 = 13;
    pub const UNAVAILABLE: u32 = 14;
    pub const DATA_LOSS: u32 = 15;
    pub const DEFERRED: u32 = 17;
    pub const INCOMPATIBLE: u32 = 18;
}

/// The OK status.
pub(crate) fn ok() -> iree_status_t {
    std::ptr::null_mut()
}

/// A status with `code` and `message`.
pub(crate) fn status(code: u32, message: &str) -> iree_status_t {
    // SAFETY: the shim copies `length` bytes of `message` into the status it allocates.
    unsafe { thal_iree_make_status(code, message.as_ptr().cast(), message.len()) }
}

/// The IREE code of a HAL status code.
pub(crate) fn iree_code(code: hal::StatusCode) -> u32 {
    use hal::StatusCode as C;
    match code {
        C::InvalidArgument => code::INVALID_ARGUMENT,
        C::OutOfRange => code::OUT_OF_RANGE,
        C::FailedPrecondition => code::FAILED_PRECONDITION,
        C::DeadlineExceeded => code::DEADLINE_EXCEEDED,
        C::Aborted => code::ABORTED,
        C::Cancelled => code::CANCELLED,
        C::ResourceExhausted => code::RESOURCE_EXHAUSTED,
        C::Unavailable => code::UNAVAILABLE,
        C::Unimplemented => code::UNIMPLEMENTED,
        C::DataLoss => code::DATA_LOSS,
        C::NotFound => code::NOT_FOUND,
        C::PermissionDenied => code::PERMISSION_DENIED,
        _ => code::INTERNAL,
    }
}

/// The HAL code of an IREE status code (codes the HAL lacks become `Internal`, and the message
/// keeps the IREE name).
pub(crate) fn hal_code(code: u32) -> hal::StatusCode {
    use hal::StatusCode as C;
    match code {
        code::CANCELLED => C::Cancelled,
        code::INVALID_ARGUMENT => C::InvalidArgument,
        code::DEADLINE_EXCEEDED => C::DeadlineExceeded,
        code::NOT_FOUND => C::NotFound,
        code::PERMISSION_DENIED => C::PermissionDenied,
        code::RESOURCE_EXHAUSTED => C::ResourceExhausted,
        code::FAILED_PRECONDITION => C::FailedPrecondition,
        code::ABORTED => C::Aborted,
        code::OUT_OF_RANGE => C::OutOfRange,
        code::UNIMPLEMENTED => C::Unimplemented,
        code::UNAVAILABLE => C::Unavailable,
        code::DATA_LOSS => C::DataLoss,
        _ => C::Internal,
    }
}

/// An IREE status for a HAL error: the same code and message.
pub(crate) fn from_error(error: &hal::Error) -> iree_status_t {
    status(iree_code(error.code()), error.message())
}

/// `Ok` for the OK status, else a HAL error with the status's code and text; gives up `status`.
pub(crate) fn into_result(status: iree_status_t) -> Result<(), hal::Error> {
    if status.is_null() {
        return Ok(());
    }
    // SAFETY: `status` is a live status this function owns; the shim frees it.
    let code = unsafe { thal_iree_status_code(status) };
    let mut text = [0u8; 512];
    // SAFETY: `text` is writable for its length; the shim NUL-terminates and frees the status.
    unsafe { thal_iree_status_consume(status, text.as_mut_ptr().cast(), text.len()) };
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    Err(hal::Error::new(hal_code(code), String::from_utf8_lossy(&text[..end]).into_owned()))
}

/// The status of `result`.
pub(crate) fn from_result(result: Result<(), hal::Error>) -> iree_status_t {
    match result {
        Ok(()) => ok(),
        Err(error) => from_error(&error),
    }
}

/// Writes `result`'s value to `out` and gives the OK status, or gives the error's status.
///
/// # Safety
/// `out` is writable (IREE's output parameters are).
pub(crate) unsafe fn write_out<T>(out: *mut T, result: Result<T, hal::Error>) -> iree_status_t {
    match result {
        Ok(value) => {
            // SAFETY: the caller's contract.
            unsafe { out.write(value) };
            ok()
        }
        Err(error) => from_error(&error),
    }
}

/// An `UNIMPLEMENTED` status saying what is not bridged.
pub(crate) fn unimplemented(what: &str) -> iree_status_t {
    status(code::UNIMPLEMENTED, what)
}

/// An IREE string view of `text` (borrowed: valid while `text` is).
pub(crate) fn view(text: &str) -> sys::iree_string_view_t {
    sys::iree_string_view_t { data: text.as_ptr().cast(), size: text.len() }
}

/// The text of an IREE string view.
///
/// # Safety
/// `view` points at `size` readable bytes for the returned lifetime.
pub(crate) unsafe fn text<'a>(view: sys::iree_string_view_t) -> std::borrow::Cow<'a, str> {
    if view.size == 0 || view.data.is_null() {
        return "".into();
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(view.data.cast::<u8>(), view.size) };
    String::from_utf8_lossy(bytes)
}

/// Runs `f`, turning a panic into an `INTERNAL` status: no unwind crosses into IREE's C.
pub(crate) fn guarded(what: &str, f: impl FnOnce() -> iree_status_t) -> iree_status_t {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(status) => status,
        Err(_) => status(code::INTERNAL, &format!("{what} panicked")),
    }
}
