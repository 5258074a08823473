//! The HAL as a C library, with IREE's conventions: opaque handles with thread-safe
//! `thal_*_retain`/`thal_*_release`, a `thal_status_t` that is NULL for OK and otherwise carries an
//! IREE status code and a message, versioned parameter structs (size first), semaphore lists as
//! (semaphore, value) arrays and absolute nanosecond deadlines.
//!
//! Every entry point is a thin call of the Rust API; none lets a panic cross into C (it returns
//! `THAL_STATUS_INTERNAL`). The header `include/thal.h` is generated from this crate by cbindgen
//! (`tests/header.rs` checks that it is current). `docs/c-api.md` describes ownership, threading
//! and callbacks.
#![allow(non_camel_case_types)]

mod buffer;
mod channel;
mod command_buffer;
mod device;
mod device_info;
mod executable;
mod handle;
mod mapping;
mod params;
mod profile;
mod queue;
mod semaphore;
mod status;
mod table;

pub use buffer::*;
pub use channel::*;
pub use command_buffer::*;
pub use device::*;
pub use device_info::*;
pub use executable::*;
pub use handle::{
    thal_buffer_t, thal_channel_t, thal_command_buffer_t, thal_device_info_t, thal_device_t, thal_executable_t,
    thal_mapping_t, thal_queue_t, thal_readback_t, thal_semaphore_t,
};
pub use mapping::*;
pub use profile::*;
pub use queue::*;
pub use semaphore::*;
pub use status::*;

use std::ffi::c_char;

/// The version of the C API: `major << 16 | minor << 8 | patch`; a library whose major differs
/// from the header's `THAL_API_VERSION_MAJOR` is incompatible.
pub const THAL_API_VERSION_MAJOR: u32 = 0;
/// The minor version: new entry points and struct fields at the end.
pub const THAL_API_VERSION_MINOR: u32 = 2;
/// The patch version.
pub const THAL_API_VERSION_PATCH: u32 = 0;

/// The C API version this library implements (`major << 16 | minor << 8 | patch`): compare with
/// the header's `THAL_API_VERSION_*` to detect a library older than the header.
#[unsafe(no_mangle)]
pub extern "C" fn thal_api_version() -> u32 {
    THAL_API_VERSION_MAJOR << 16 | THAL_API_VERSION_MINOR << 8 | THAL_API_VERSION_PATCH
}

/// The library's version as text ("0.1.0", the crate version); static storage.
#[unsafe(no_mangle)]
pub extern "C" fn thal_version_string() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}
