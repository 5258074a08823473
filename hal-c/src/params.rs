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
