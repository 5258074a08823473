//! Typed host data: plain-old-data values (`bytemuck::Pod`: `f32`, `u32`, `[f32; 4]`, your
//! `#[derive(Pod)]` structs) as the bytes a buffer holds, in the host's byte order.
//!
//! The HAL's integer convention: byte sizes and byte offsets into buffers are `u64` (buffers may be
//! larger than the host's address space; every value is checked against the buffer before use);
//! host-side lengths and element indices are `usize`; workgroup counts and sizes are `u32` per axis,
//! as GPUs define them. A typed call (one generic over `T: Pod`) counts in elements of `T`, its
//! offsets included, and converts at the edge: element `n` is at byte `n * size_of::<T>()`.

use bytemuck::Pod;

use crate::error::{Error, Result};

/// `bytes` as values of `T` (copied when their alignment differs); `InvalidArgument` naming `what`
/// when they are not a whole number of `T`s.
pub(crate) fn bytes_to_vec<T: Pod>(bytes: Vec<u8>, what: &str) -> Result<Vec<T>> {
    check_whole_values::<T>(bytes.len() as u64, what)?;
    Ok(bytemuck::pod_collect_to_vec(&bytes))
}

/// `InvalidArgument` naming `what` when `length` bytes are not a whole number of `T`s.
pub(crate) fn check_whole_values<T: Pod>(length: u64, what: &str) -> Result<()> {
    let size = std::mem::size_of::<T>() as u64;
    if size == 0 || !length.is_multiple_of(size) {
        return Err(Error::invalid_argument(format!(
            "{what}: {length} bytes are not a whole number of {size}-byte values ({})",
            std::any::type_name::<T>()
        )));
    }
    Ok(())
}

/// The byte offset of element `first` of `T`s; `OutOfRange` naming `what` when it overflows.
pub(crate) fn element_offset<T: Pod>(first: u64, what: &dyn std::fmt::Display) -> Result<u64> {
    let size = std::mem::size_of::<T>() as u64;
    first.checked_mul(size).ok_or_else(|| {
        Error::out_of_range(format!("{what}: element {first} of {size}-byte values is past any byte offset"))
    })
}

/// `values` as bytes, without a copy.
pub(crate) fn as_bytes<T: Pod>(values: &[T]) -> &[u8] {
    bytemuck::cast_slice(values)
}

/// `values` as bytes, writable, without a copy.
pub(crate) fn as_bytes_mut<T: Pod>(values: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StatusCode;

    #[test]
    fn typed_values_round_trip_through_bytes() {
        let values = [1.5f32, -2.0, 3.25];
        let bytes = as_bytes(&values).to_vec();
        assert_eq!(bytes.len(), 12);
        assert_eq!(bytes_to_vec::<f32>(bytes, "read").unwrap(), values);
    }

    #[test]
    fn a_partial_value_is_refused_naming_the_read() {
        let err = bytes_to_vec::<u32>(vec![0; 6], "read of buffer 3").unwrap_err();
        assert_eq!(err.code(), StatusCode::InvalidArgument);
        assert!(
            err.message().starts_with("read of buffer 3: 6 bytes are not a whole number of 4-byte values"),
            "{err}"
        );
    }
}
