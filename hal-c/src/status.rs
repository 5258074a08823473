//! `thal_status_t`: NULL for OK, otherwise an owned object with an IREE status code and a message.

use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use hal::{Error, StatusCode};

/// IREE's status-code numbers (`iree_status_code_t`); `thal_status_code` returns one of these.
pub type thal_status_code_t = u32;

/// Success (a NULL status).
pub const THAL_STATUS_OK: thal_status_code_t = 0;
/// The operation was cancelled.
pub const THAL_STATUS_CANCELLED: thal_status_code_t = 1;
/// An error with no better code.
pub const THAL_STATUS_UNKNOWN: thal_status_code_t = 2;
/// An argument can never be valid (includes NULL, dead and wrong-kind handles).
pub const THAL_STATUS_INVALID_ARGUMENT: thal_status_code_t = 3;
/// A wait's deadline passed first.
pub const THAL_STATUS_DEADLINE_EXCEEDED: thal_status_code_t = 4;
/// A named thing was not found.
pub const THAL_STATUS_NOT_FOUND: thal_status_code_t = 5;
/// The thing already exists.
pub const THAL_STATUS_ALREADY_EXISTS: thal_status_code_t = 6;
/// Not allowed on this object.
pub const THAL_STATUS_PERMISSION_DENIED: thal_status_code_t = 7;
/// Out of memory or another bounded resource.
pub const THAL_STATUS_RESOURCE_EXHAUSTED: thal_status_code_t = 8;
/// The object is in the wrong state for the call.
pub const THAL_STATUS_FAILED_PRECONDITION: thal_status_code_t = 9;
/// Aborted, typically by a device fault or a failed dependency.
pub const THAL_STATUS_ABORTED: thal_status_code_t = 10;
/// A value is outside its valid range.
pub const THAL_STATUS_OUT_OF_RANGE: thal_status_code_t = 11;
/// Not implemented by this driver.
pub const THAL_STATUS_UNIMPLEMENTED: thal_status_code_t = 12;
/// A bug inside the library (a contained panic, a broken invariant).
pub const THAL_STATUS_INTERNAL: thal_status_code_t = 13;
/// The driver, device or library is not there.
pub const THAL_STATUS_UNAVAILABLE: thal_status_code_t = 14;
/// Data was lost or corrupted.
pub const THAL_STATUS_DATA_LOSS: thal_status_code_t = 15;
/// Not authenticated.
pub const THAL_STATUS_UNAUTHENTICATED: thal_status_code_t = 16;
/// Deferred.
pub const THAL_STATUS_DEFERRED: thal_status_code_t = 17;
/// Incompatible.
pub const THAL_STATUS_INCOMPATIBLE: thal_status_code_t = 18;

/// A failure: its code and its one-line message. Owned by whoever received it; free it with
/// `thal_status_free` (or hand it to a call documented as taking it).
pub struct thal_status_s {
    code: thal_status_code_t,
    message: CString,
}

/// A status: NULL means OK; anything else is a `thal_status_s` the receiver owns.
pub type thal_status_t = *mut thal_status_s;

/// IREE's names of the status codes, indexed by number.
const CODE_NAMES: [&CStr; 19] = [
    c"OK",
    c"CANCELLED",
    c"UNKNOWN",
    c"INVALID_ARGUMENT",
    c"DEADLINE_EXCEEDED",
    c"NOT_FOUND",
    c"ALREADY_EXISTS",
    c"PERMISSION_DENIED",
    c"RESOURCE_EXHAUSTED",
    c"FAILED_PRECONDITION",
    c"ABORTED",
    c"OUT_OF_RANGE",
    c"UNIMPLEMENTED",
    c"INTERNAL",
    c"UNAVAILABLE",
    c"DATA_LOSS",
    c"UNAUTHENTICATED",
    c"DEFERRED",
    c"INCOMPATIBLE",
];

/// The status-code name IREE prints for `code` ("UNKNOWN" for numbers past the table).
fn code_name(code: thal_status_code_t) -> &'static CStr {
    CODE_NAMES.get(code as usize).copied().unwrap_or(c"UNKNOWN")
}

/// The IREE number of a HAL status code (codes added to the HAL later read as UNKNOWN).
pub(crate) fn code_of(code: StatusCode) -> thal_status_code_t {
    match code {
        StatusCode::Cancelled => THAL_STATUS_CANCELLED,
        StatusCode::InvalidArgument => THAL_STATUS_INVALID_ARGUMENT,
        StatusCode::DeadlineExceeded => THAL_STATUS_DEADLINE_EXCEEDED,
        StatusCode::NotFound => THAL_STATUS_NOT_FOUND,
        StatusCode::PermissionDenied => THAL_STATUS_PERMISSION_DENIED,
        StatusCode::ResourceExhausted => THAL_STATUS_RESOURCE_EXHAUSTED,
        StatusCode::FailedPrecondition => THAL_STATUS_FAILED_PRECONDITION,
        StatusCode::Aborted => THAL_STATUS_ABORTED,
        StatusCode::OutOfRange => THAL_STATUS_OUT_OF_RANGE,
        StatusCode::Unimplemented => THAL_STATUS_UNIMPLEMENTED,
        StatusCode::Internal => THAL_STATUS_INTERNAL,
        StatusCode::Unavailable => THAL_STATUS_UNAVAILABLE,
        StatusCode::DataLoss => THAL_STATUS_DATA_LOSS,
        _ => THAL_STATUS_UNKNOWN,
    }
}

/// The HAL error a C status becomes when it enters the HAL (a host call's result, a semaphore
/// failure). IREE codes the HAL lacks map to the nearest HAL code and keep their name in the message.
pub(crate) fn error_from_code(code: thal_status_code_t, message: &str) -> Error {
    let hal_code = StatusCode::ALL.into_iter().find(|c| code_of(*c) == code);
    match hal_code {
        Some(hal_code) => Error::new(hal_code, message),
        None => {
            let nearest = match code {
                THAL_STATUS_ALREADY_EXISTS => StatusCode::FailedPrecondition,
                THAL_STATUS_UNAUTHENTICATED => StatusCode::PermissionDenied,
                THAL_STATUS_DEFERRED => StatusCode::Unavailable,
                THAL_STATUS_INCOMPATIBLE => StatusCode::Unimplemented,
                _ => StatusCode::Internal,
            };
            Error::new(nearest, format!("{}: {message}", code_name(code).to_string_lossy()))
        }
    }
}

/// A C string of `text` (a NUL inside, which a HAL message never has, becomes a space).
pub(crate) fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

/// A new status for `error` (the caller owns it).
pub(crate) fn status_from(error: &Error) -> thal_status_t {
    Box::into_raw(Box::new(thal_status_s { code: code_of(error.code()), message: c_string(error.message()) }))
}

/// Runs an entry point's body: its error becomes a status, and a panic becomes `INTERNAL` naming the
/// entry point instead of unwinding into C.
pub(crate) fn guard(entry: &str, body: impl FnOnce() -> hal::Result<()>) -> thal_status_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(error)) => status_from(&error),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            status_from(&Error::internal(format!("{entry}: panicked: {what}")))
        }
    }
}

/// Runs a body that returns a plain value, containing a panic (the value is then `fallback`).
pub(crate) fn guard_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// The status's code; `THAL_STATUS_OK` for NULL.
///
/// # Safety
/// `status` is NULL or a live status from this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_status_code(status: thal_status_t) -> thal_status_code_t {
    // SAFETY: the caller passes NULL or a live status.
    match unsafe { status.as_ref() } {
        None => THAL_STATUS_OK,
        Some(s) => s.code,
    }
}

/// The status's message, NUL-terminated UTF-8, valid until the status is freed; "" for NULL.
///
/// # Safety
/// `status` is NULL or a live status from this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_status_message(status: thal_status_t) -> *const c_char {
    // SAFETY: the caller passes NULL or a live status.
    match unsafe { status.as_ref() } {
        None => c"".as_ptr(),
        Some(s) => s.message.as_ptr(),
    }
}

/// The name of a status code ("ABORTED"); static storage. Unknown numbers read "UNKNOWN".
#[unsafe(no_mangle)]
pub extern "C" fn thal_status_code_name(code: thal_status_code_t) -> *const c_char {
    code_name(code).as_ptr()
}

/// Frees a status; NULL is allowed (and does nothing).
///
/// # Safety
/// `status` is NULL or a live status from this library, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_status_free(status: thal_status_t) {
    if !status.is_null() {
        // SAFETY: a non-NULL status came from `Box::into_raw` and is freed once, by the caller's contract.
        guard_value((), || drop(unsafe { Box::from_raw(status) }));
    }
}

/// A copy of `status` the caller owns (NULL for NULL): to keep a failure beyond the call that gave it.
///
/// # Safety
/// `status` is NULL or a live status from this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_status_clone(status: thal_status_t) -> thal_status_t {
    // SAFETY: the caller passes NULL or a live status.
    match unsafe { status.as_ref() } {
        None => std::ptr::null_mut(),
        Some(s) => guard_value(std::ptr::null_mut(), || {
            Box::into_raw(Box::new(thal_status_s { code: s.code, message: s.message.clone() }))
        }),
    }
}

/// A new status with `code` and `message` (NUL-terminated UTF-8; NULL reads as ""), for host calls
/// and `thal_semaphore_fail`. `THAL_STATUS_OK` gives NULL.
///
/// # Safety
/// `message` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_status_make(code: thal_status_code_t, message: *const c_char) -> thal_status_t {
    if code == THAL_STATUS_OK {
        return std::ptr::null_mut();
    }
    let text = if message.is_null() {
        String::new()
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned()
    };
    guard_value(std::ptr::null_mut(), || Box::into_raw(Box::new(thal_status_s { code, message: c_string(&text) })))
}

/// Takes a status out of C's hands as a HAL error (NULL is `Ok`).
///
/// # Safety
/// `status` is NULL or a live status from this library; it is consumed.
pub(crate) unsafe fn take_status(status: thal_status_t) -> hal::Result<()> {
    if status.is_null() {
        return Ok(());
    }
    // SAFETY: a non-NULL status came from `Box::into_raw`; the caller hands over its ownership.
    let owned = unsafe { Box::from_raw(status) };
    Err(error_from_code(owned.code, &owned.message.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_an_entry_point_becomes_internal_naming_it() {
        let status = guard("thal_example", || panic!("broken invariant"));
        // SAFETY: `guard` returned a live status, freed once below.
        unsafe {
            assert_eq!(thal_status_code(status), THAL_STATUS_INTERNAL);
            let message = std::ffi::CStr::from_ptr(thal_status_message(status)).to_str().unwrap();
            assert_eq!(message, "thal_example: panicked: broken invariant");
            thal_status_free(status);
        }
    }

    #[test]
    fn every_hal_code_keeps_its_number_through_a_c_status() {
        for code in StatusCode::ALL {
            let number = code_of(code);
            assert_ne!(number, THAL_STATUS_UNKNOWN, "{code} has an IREE number");
            assert_eq!(code_name(number).to_str().unwrap(), code.as_str());
            assert_eq!(error_from_code(number, "m").code(), code);
        }
    }
}
