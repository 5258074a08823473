//! Versioned parameter structs: each starts with its size as the caller compiled it, so fields can
//! be added at the end without breaking callers built against an older header.

use hal::{Error, Result};

/// The caller's struct, checked to be at least as large as this library's version of it.
///
/// # Safety
/// `params` is NULL or points to a struct whose first field is its `usize` size and which has that
/// many readable bytes.
pub(crate) unsafe fn versioned<'a, P>(params: *const P, arg: &str, type_name: &str) -> Result<&'a P> {
    if params.is_null() {
        return Err(Error::invalid_argument(format!("argument '{arg}': a NULL {type_name}")));
    }
    // SAFETY: every versioned struct starts with its `usize` size; the caller's contract.
    let size = unsafe { params.cast::<usize>().read() };
    if size < size_of::<P>() {
        return Err(Error::invalid_argument(format!(
            "argument '{arg}': {type_name}.struct_size is {size}, this library needs {} (set it to sizeof({type_name}))",
            size_of::<P>()
        )));
    }
    // SAFETY: at least `size_of::<P>()` bytes are readable, by the size just checked.
    Ok(unsafe { &*params })
}

/// The caller's struct for the library to fill, checked as `versioned` checks one it reads; only
/// this library's fields are written, so a caller built against a newer header keeps its extras.
///
/// # Safety
/// `params` is NULL or points to a struct whose first field is its `usize` size and which has that
/// many writable bytes.
pub(crate) unsafe fn versioned_out<'a, P>(params: *mut P, arg: &str, type_name: &str) -> Result<&'a mut P> {
    // SAFETY: the caller's contract, which covers `versioned`'s.
    unsafe { versioned(params.cast_const(), arg, type_name) }?;
    // SAFETY: non-NULL with at least `size_of::<P>()` writable bytes, as just checked.
    Ok(unsafe { &mut *params })
}
