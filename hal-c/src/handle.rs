//! Opaque handles: integers naming a slot of their kind's table and its generation (`crate::table`),
//! so that NULL, released, stale, wrong-kind and forged handles are refused with `INVALID_ARGUMENT`
//! instead of being used. The C types point to nothing; only their values matter.

use std::fmt::Display;
use std::sync::Arc;

use hal::{Buffer, Channel, CommandBuffer, Device, Error, Executable, Queue, Result, Semaphore};

use crate::device_info::DeviceInfoSnapshot;
use crate::mapping::HostMapping;
use crate::profile::ProfileSnapshot;
use crate::queue::PendingRead;
use crate::table::{Refused, Table};

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

/// A HAL object that C holds through a handle of type `C`.
pub(crate) trait Kind: Send + Sync + Sized + 'static {
    /// The opaque C type of its handles.
    type C;
    /// The table of its handles.
    fn table() -> &'static Table<Self>;
}

macro_rules! kinds {
    ($($rust:ty => $c:ident, $kind:literal;)*) => {
        $(impl Kind for $rust {
            type C = $c;
            fn table() -> &'static Table<Self> {
                static TABLE: Table<$rust> = Table::new($kind, stringify!($c));
                &TABLE
            }
        })*
        /// What `value` is as a handle of kind `kind`: "a thal_buffer_t" or "a released
        /// thal_buffer_t"; `None` if no kind is `kind` or no handle of it ever had this value.
        fn describe(kind: u8, value: usize) -> Option<String> {
            $(if kind == $kind {
                let table = <$rust as Kind>::table();
                return match table.check(value) {
                    Ok(()) => Some(format!("a {}", table.name())),
                    Err(Refused::Released) => Some(format!("a released {}", table.name())),
                    Err(_) => None,
                };
            })*
            None
        }
    };
}

kinds! {
    Device => thal_device_t, 1;
    Queue => thal_queue_t, 2;
    Buffer => thal_buffer_t, 3;
    Semaphore => thal_semaphore_t, 4;
    CommandBuffer => thal_command_buffer_t, 5;
    Executable => thal_executable_t, 6;
    PendingRead => thal_readback_t, 7;
    HostMapping => thal_mapping_t, 8;
    DeviceInfoSnapshot => thal_device_info_t, 9;
    ProfileSnapshot => thal_profile_t, 10;
    Channel => thal_channel_t, 11;
}

/// What a value no handle ever had is, for a message expecting a `name`.
fn never_a_handle(name: &str) -> String {
    format!("never a handle of this library; a {name} was expected")
}

/// The error for `handle` (argument `arg`) refused by `T`'s table as `refused`.
fn refusal<T: Kind>(handle: *const T::C, arg: impl Display, refused: Refused) -> Error {
    let name = T::table().name();
    let value = handle.addr();
    if value == 0 {
        return Error::invalid_argument(format!("argument '{arg}': a NULL {name}"));
    }
    let what = match refused {
        Refused::TooManyReferences => {
            return Error::resource_exhausted(format!("argument '{arg}' ({value:#x}): too many references"));
        }
        Refused::Released => format!("a released {name}"),
        Refused::OtherKind(kind) => match describe(kind, value) {
            Some(other) => format!("{other}, not a {name}"),
            None => never_a_handle(name),
        },
        Refused::NeverMade => never_a_handle(name),
    };
    Error::invalid_argument(format!("argument '{arg}' ({value:#x}) is {what}"))
}

/// The object behind `handle`, kept alive for the call by the returned clone (even if another
/// thread releases the handle meanwhile).
pub(crate) fn get<T: Kind>(handle: *const T::C, arg: impl Display) -> Result<Arc<T>> {
    T::table().get(handle.addr()).map_err(|refused| refusal::<T>(handle, arg, refused))
}

/// `get` for an optional argument: NULL is `None`.
pub(crate) fn get_optional<T: Kind>(handle: *const T::C, arg: impl Display) -> Result<Option<Arc<T>>> {
    if handle.is_null() {
        return Ok(None);
    }
    get::<T>(handle, arg).map(Some)
}

/// Adds a reference to `handle` (argument `arg`).
pub(crate) fn retain<T: Kind>(handle: *const T::C, arg: &str) -> Result<()> {
    T::table().retain(handle.addr()).map_err(|refused| refusal::<T>(handle, arg, refused))
}

/// Drops one reference to `handle` (argument `arg`); the last one ends the handle and drops the
/// table's hold on the object (calls still using it keep it until they return).
pub(crate) fn release<T: Kind>(handle: *const T::C, arg: &str) -> Result<()> {
    T::table().release(handle.addr()).map_err(|refused| refusal::<T>(handle, arg, refused))
}

/// Stores a new handle for `value`, with one reference for the caller, in `*out`.
///
/// # Safety
/// `out` was checked non-NULL by `check_out` and is writable.
pub(crate) unsafe fn store<T: Kind>(out: *mut *mut T::C, value: T) -> Result<()> {
    let handle = T::table().insert(Arc::new(value))?;
    // SAFETY: the caller's contract. The handle is an integer, never dereferenced.
    unsafe { out.write(std::ptr::without_provenance_mut(handle)) };
    Ok(())
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
