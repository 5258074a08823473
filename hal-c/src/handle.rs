//! Opaque handles: an `Arc` whose first word is a tag naming the kind, so that NULL, released and
//! wrong-kind handles are refused with `INVALID_ARGUMENT` instead of being used.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hal::{Buffer, Channel, CommandBuffer, Device, Error, Executable, Queue, Result, Semaphore};

use crate::device_info::DeviceInfoSnapshot;
use crate::mapping::HostMapping;
use crate::profile::ProfileSnapshot;
use crate::queue::PendingRead;

/// A device (`thal_device_create`).
pub struct thal_device_t {
    _opaque: [u8; 0],
}
/// One queue of a device (`thal_device_queue`).
pub struct thal_queue_t {
    _opaque: [u8; 0],
}
/// A buffer, or a subspan of one (`thal_buffer_allocate`, `thal_buffer_import_host_memory`).
pub struct thal_buffer_t {
    _opaque: [u8; 0],
}
/// A timeline semaphore (`thal_semaphore_create`).
pub struct thal_semaphore_t {
    _opaque: [u8; 0],
}
/// A recorded list of commands (`thal_command_buffer_create`).
pub struct thal_command_buffer_t {
    _opaque: [u8; 0],
}
/// A loaded executable (`thal_executable_load_library`, `thal_executable_load_bytes`).
pub struct thal_executable_t {
    _opaque: [u8; 0],
}
/// The bytes of a queue read, once its signals are reached (`thal_queue_read`).
pub struct thal_readback_t {
    _opaque: [u8; 0],
}

/// A host mapping of part of a buffer (`thal_buffer_map`), ended by `thal_buffer_unmap`.
pub struct thal_mapping_t {
    _opaque: [u8; 0],
}

/// A snapshot of what a device is and offers (`thal_device_query_info`).
pub struct thal_device_info_t {
    _opaque: [u8; 0],
}

/// The records of a profiling session (`thal_device_collect_profile`, `thal_device_end_profiling`).
pub struct thal_profile_t {
    _opaque: [u8; 0],
}

/// One rank's end of a channel, for collectives (`thal_channel_create`).
pub struct thal_channel_t {
    _opaque: [u8; 0],
}

/// The tag a released handle's memory holds while it is being freed (and often after).
const DEAD_TAG: u64 = 0x7468_616c_dead_dead;

/// A HAL object that C holds through a handle of type `C`.
pub(crate) trait Kind: Send + Sync + Sized + 'static {
    /// The opaque C type of its handles.
    type C;
    /// The tag at the start of its handles.
    const TAG: u64;
    /// The C type's name, for messages.
    const NAME: &'static str;
}

macro_rules! kinds {
    ($($rust:ty => $c:ident, $tag:expr;)*) => {
        $(impl Kind for $rust {
            type C = $c;
            const TAG: u64 = $tag;
            const NAME: &'static str = stringify!($c);
        })*
        /// The C type name of the kind tagged `tag`, if any.
        fn kind_name(tag: u64) -> Option<&'static str> {
            $(if tag == $tag { return Some(stringify!($c)); })*
            None
        }
    };
}

kinds! {
    Device => thal_device_t, 0x7468_616c_0000_0001;
    Queue => thal_queue_t, 0x7468_616c_0000_0002;
    Buffer => thal_buffer_t, 0x7468_616c_0000_0003;
    Semaphore => thal_semaphore_t, 0x7468_616c_0000_0004;
    CommandBuffer => thal_command_buffer_t, 0x7468_616c_0000_0005;
    Executable => thal_executable_t, 0x7468_616c_0000_0006;
    PendingRead => thal_readback_t, 0x7468_616c_0000_0007;
    HostMapping => thal_mapping_t, 0x7468_616c_0000_0008;
    DeviceInfoSnapshot => thal_device_info_t, 0x7468_616c_0000_0009;
    ProfileSnapshot => thal_profile_t, 0x7468_616c_0000_000a;
    Channel => thal_channel_t, 0x7468_616c_0000_000b;
}

/// What a handle points to: the tag, then the object.
#[repr(C)]
struct Tagged<T> {
    tag: AtomicU64,
    value: T,
}

impl<T> Drop for Tagged<T> {
    fn drop(&mut self) {
        self.tag.store(DEAD_TAG, Ordering::Relaxed);
    }
}

/// A new handle holding `value`, with one reference for the caller.
pub(crate) fn into_handle<T: Kind>(value: T) -> *mut T::C {
    Arc::into_raw(Arc::new(Tagged { tag: AtomicU64::new(T::TAG), value })) as *mut T::C
}

/// Checks that `handle` (argument `arg`, formatted only for a message) is a live `T` handle.
///
/// # Safety
/// `handle` is NULL or points to at least 8 readable bytes (any handle of this library does).
unsafe fn check<T: Kind>(handle: *const T::C, arg: impl Display) -> Result<*const Tagged<T>> {
    if handle.is_null() {
        return Err(Error::invalid_argument(format!("argument '{arg}': a NULL {}", T::NAME)));
    }
    if !(handle as usize).is_multiple_of(align_of::<Tagged<T>>()) {
        return Err(Error::invalid_argument(format!("argument '{arg}' at {handle:p} is not a {}", T::NAME)));
    }
    // SAFETY: every handle starts with the tag word (`Tagged` is `repr(C)`), and the caller promises
    // the pointer is readable; only the tag is read before it is known to be a `T`.
    let tag = unsafe { &*(handle as *const AtomicU64) }.load(Ordering::Relaxed);
    if tag == T::TAG {
        return Ok(handle as *const Tagged<T>);
    }
    let what = match kind_name(tag) {
        Some(other) => format!("a {other}"),
        None if tag == DEAD_TAG => "a released handle".to_owned(),
        None => "not a handle of this library".to_owned(),
    };
    Err(Error::invalid_argument(format!("argument '{arg}' at {handle:p} is {what}, not a {}", T::NAME)))
}

/// The object behind `handle`, borrowed for the call.
///
/// # Safety
/// `handle` is NULL or a pointer the caller got from this library and still holds a reference to
/// (or at least 8 readable bytes, which are then refused).
pub(crate) unsafe fn get<'a, T: Kind>(handle: *const T::C, arg: impl Display) -> Result<&'a T> {
    // SAFETY: the caller's contract; `check` returns only pointers tagged as a live `T`.
    unsafe { check::<T>(handle, arg).map(|tagged| &(*tagged).value) }
}

/// `get` for an optional argument: NULL is `None`.
///
/// # Safety
/// As `get`.
pub(crate) unsafe fn get_optional<'a, T: Kind>(handle: *const T::C, arg: impl Display) -> Result<Option<&'a T>> {
    if handle.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    unsafe { get::<T>(handle, arg) }.map(Some)
}

/// Adds a reference to `handle`.
///
/// # Safety
/// As `get`.
pub(crate) unsafe fn retain<T: Kind>(handle: *const T::C) -> Result<()> {
    // SAFETY: the caller's contract; the pointer came from `Arc::into_raw` of a `Tagged<T>`.
    unsafe {
        let tagged = check::<T>(handle, "handle")?;
        Arc::increment_strong_count(tagged);
    }
    Ok(())
}

/// Drops one reference to `handle`; the last one frees the object.
///
/// # Safety
/// As `get`; the caller gives up the reference it releases.
pub(crate) unsafe fn release<T: Kind>(handle: *const T::C) -> Result<()> {
    // SAFETY: the caller's contract; the pointer came from `Arc::into_raw` of a `Tagged<T>` and the
    // caller owns the reference given back here.
    unsafe {
        let tagged = check::<T>(handle, "handle")?;
        Arc::decrement_strong_count(tagged);
    }
    Ok(())
}

/// Stores a new handle for `value` in `*out`.
///
/// # Safety
/// `out` was checked non-NULL by `check_out` and is writable.
pub(crate) unsafe fn store<T: Kind>(out: *mut *mut T::C, value: T) {
    // SAFETY: the caller's contract.
    unsafe { out.write(into_handle(value)) };
}

/// Refuses a NULL out-pointer, and clears a valid one (so that a failure leaves NULL there).
///
/// # Safety
/// `out` is NULL or writable.
pub(crate) unsafe fn check_out<P>(out: *mut *mut P, arg: &str) -> Result<()> {
    if out.is_null() {
        return Err(Error::invalid_argument(format!("argument '{arg}': a NULL out-pointer")));
    }
    // SAFETY: non-NULL and writable by the caller's contract.
    unsafe { out.write(std::ptr::null_mut()) };
    Ok(())
}

/// Refuses a NULL pointer to a plain value the call writes (`*out`).
///
/// # Safety
/// `out` is NULL or writable.
pub(crate) unsafe fn write_value<V>(out: *mut V, arg: &str, value: V) -> Result<()> {
    if out.is_null() {
        return Err(Error::invalid_argument(format!("argument '{arg}': a NULL out-pointer")));
    }
    // SAFETY: non-NULL and writable by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}
